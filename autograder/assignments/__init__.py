"""Checks for each notebook: cases, partial-credit parts and the catalog of known mistakes.

Module `aNN_name.py` holds the exercises of notebook `NN_name` in EXERCISES
(the reference, its cases, points and parts). Beside it, `aNN_name.toml` holds
the known mistakes: a table per exercise, a line per mistake, in the order the
grader tries them. A mistake is the sentence the learner reads and an edit of
the reference's source:

    [attention_scores]
    unscaled = { says = "you forgot to divide by sqrt(d_k); ...", swap = [" / math.sqrt(d_k)", ""] }

`swap = [old, new]` replaces `old`, which must occur exactly once in the
reference (add `every = true` to replace each occurrence), and
`swap = [[old, new], [old, new]]` applies several replacements in order
(autograder.mutants). A mistake that no small edit expresses names a function
written in the module instead, `written = "function_name"`, with a comment
there that says why.
"""
