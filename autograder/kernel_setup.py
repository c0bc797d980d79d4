"""Imported by grading kernels (see nbgrader_config.py): show warnings on stdout.

nbgrader scores a test cell 0 if it writes to stderr, and a warning is not a
mistake. Errors still reach the cell as errors.
"""
import sys
import warnings


def _show_on_stdout(message, category, filename, lineno, file=None, line=None):
    print(f"warning: {category.__name__}: {message}", file=sys.stdout)


warnings.showwarning = _show_on_stdout
