"""Checks for each notebook: cases, partial-credit parts and the catalog of known mistakes.

Module `aNN_name` holds the exercises of notebook `NN_name` in EXERCISES.
"""
