"""Checks for the course notebooks.

In a notebook:   from autograder import check
                 check("scaled_dot_product_attention", scaled_dot_product_attention)
On the command line: python -m autograder --help
"""
from autograder.api import CheckFailed, check

__all__ = ["check", "CheckFailed"]
