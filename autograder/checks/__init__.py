"""The check machinery: run a learner's code and the reference on the same fresh inputs, compare what they
computed, and say what differs. Nothing here knows about notebooks or nbgrader.

Its rooms, each importing only those above it in this list:

    cases       what an exercise, a case, a mistake and an outcome are
    running     calling code on a case, under a time limit, with the reference's weights
    travel      outcomes and inputs as plain data (out of the grading sandbox, into the student distribution)
    comparing   the learner's outcome against the reference's: the first difference, in one sentence
    docstrings  the shapes a docstring gives ("x: (B, T, d)"), for naming axes
    catalogue   diagnosing by the catalogue: the known mistake that computes what the learner's code did
    variants    diagnosing by changed inputs: the reference with a weight transposed, a bias left out
    edits       diagnosing by edits of the reference's own source: the one edit that computes the learner's outputs
    scalars     a number off by one argument step, or its formula grouped another way
    structure   a module with a residual, a sublayer or a norm left out or moved
    sizes       a size read from another named axis (T_k where d_k belongs)
    labels      right on every case but one kind
    raised      where the learner's code raised, with the shapes its line names
    relations   diagnosing by relation: the reference's output transposed, shifted, scaled, normalised
    driver      the check of one exercise, all of it put together (`check_exercise`)
    charging    one mistake charged once: an exercise judged on the reference's answers for a wrong one it uses
"""
