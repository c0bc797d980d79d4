"""Who a submission belongs to: a student id is a name of a strict form, or nothing is graded under it.

An id comes from a folder's name (submitted/<id>/, the exchange's <id>+<assignment>+...) or a Unix
account, so a student chose its bytes. Only ids of `PATTERN` are taken: they cannot be HTML, a path,
an option or a glob, and so are safe in a page, a CSV, a log and nbgrader's own arguments. Anything
else is refused by name (`refusal`), shown only as `intake.shown` prints it.
"""
from __future__ import annotations

import re
from pathlib import Path

from autograder.grading.intake import shown

PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
RULE = "a student id is 1 to 64 letters, digits, '_', '.' or '-', not starting with '.' or '-'"


def valid(student_id) -> bool:
    return isinstance(student_id, str) and PATTERN.fullmatch(student_id) is not None


def refusal(student_id) -> str:
    """'' for a valid id; else why it is refused, with the id shown safely."""
    if valid(student_id):
        return ""
    return f"the student id {shown(student_id)} is not graded: {RULE}"


def guard():
    """Have plain `nbgrader autograde` and `generate_feedback` leave out a folder whose name is no student id:
    nothing of it is graded, put in the gradebook or shown, and the log says why."""
    from nbgrader.converters.autograde import Autograde
    from nbgrader.converters.generate_feedback import GenerateFeedback

    for converter in (Autograde, GenerateFeedback):
        if converter.__dict__.get("_ids_guarded"):
            continue
        init_notebooks = converter.init_notebooks

        def guarded(self, init_notebooks=init_notebooks):
            init_notebooks(self)
            for path in list(self.assignments):  # .../<student_id>/<assignment_id>, nbgrader's layout
                student = Path(path).parent.name
                if not valid(student):
                    self.log.warning("%s", refusal(student))
                    del self.assignments[path]

        converter.init_notebooks, converter._ids_guarded = guarded, True
