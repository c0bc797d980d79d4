"""Checks for the course notebooks.

In a notebook:   from autograder import check, reveal
                 check("scaled_dot_product_attention", scaled_dot_product_attention)
                 reveal("scaled_dot_product_attention")   # stuck: the reference solution, explained
On the command line: python -m autograder --help
"""
from autograder.api import CheckFailed, check
from autograder.reveal import reveal

__all__ = ["check", "reveal", "CheckFailed"]
