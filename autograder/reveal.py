"""`reveal("name")`: the reference solution of one exercise, for a self-learner who is stuck.

It prints the reference's code and then its key lines: each line that a
catalogued mistake changes, with the sentence that names that mistake, so the
learner sees why the line is written as it is. It prints and never writes into
the learner's cell. In a class's student distribution the reference is not
shipped, and reveal says so; under grading it does nothing.
"""
from __future__ import annotations

from autograder import record, registry

NOT_SHIPPED = ("reveal: the solutions are not part of this course's student distribution. "
               "Open the hints above the exercise, or ask your instructor.")


def reveal(name):
    """Print the reference solution of exercise `name` with its key lines explained."""
    if record.grading():
        return None
    if not registry.has_catalogs():
        print(NOT_SHIPPED)
        return None
    print(text(registry.get(name)))
    return None


def text(exercise):
    """What reveal prints for an Exercise."""
    from autograder.mutants import source_of

    reference = getattr(exercise.reference, "__wrapped__", exercise.reference)
    source = source_of(reference).rstrip()
    lines = [f"Revealed: the reference solution of {exercise.name} ({reference.__module__}).",
             "Read it, then close it and write your own: the check tells you when yours is right.", "", source]
    notes = key_lines(source, exercise.mistakes)
    if notes:
        lines += ["", "Key lines, and what goes wrong without them:"]
        code = source.splitlines()
        for number in sorted(notes):
            lines.append(f"  line {number + 1}: {code[number].strip()}")
            lines += [f"    - {says}" for says in notes[number]]
    return "\n".join(lines)


def key_lines(source, mistakes):
    """{line index: [sentences]} for the lines of `source` that the mistakes' edits change."""
    notes = {}
    for mistake in mistakes:
        for old, _new, _every in getattr(mistake.edit, "steps", ())[:1]:  # where the mistake starts
            at = source.find(old)
            if at < 0:
                continue
            number = source.count("\n", 0, at) + (old[:len(old) - len(old.lstrip("\n "))].count("\n"))
            if mistake.says not in notes.setdefault(number, []):
                notes[number].append(mistake.says)
    return notes
