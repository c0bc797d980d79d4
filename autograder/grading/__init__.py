"""The grader's side: grading a class with nbgrader, on the instructor's machine.

`grade` runs nbgrader autograde on every submission, whose kernel starts in a
bubblewrap `sandbox` that shows only the student side of its notebook
(`views`); `nbgrader_ext` holds the preprocessors nbgrader_config.py names;
`verdict` compares what the sandbox sent back with the reference and writes
the score; `gradebook` merges the results into nbgrader's gradebook; `demo`
grades the example submissions. Nothing here ships to students or enters the
sandbox.
"""
