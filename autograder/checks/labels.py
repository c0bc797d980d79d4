"""Right but on one kind of case: a word of the public cases' labels that every failed case has and no passed
case has ("mask", "float64", "T=1")."""
from __future__ import annotations

import re


def only_on(results):
    """ "right on every case but those with a mask": a word of the public cases' labels ("mask", "float64",
    "T=1") that every failed case has and no passed case has, or ''."""
    public = [r for r in results if not r.case.hidden]
    failed = [r for r in public if not r.ok]
    passed = [r for r in public if r.ok]
    if not failed or not passed or len(failed) < len(results) - len(passed):  # a hidden case failed: say nothing of it
        return ""

    def words(label):
        return {w.strip() for w in re.split(r"[,:(]", label) if w.strip() and not re.fullmatch(r"\w+=\d*[2-9]\d*", w.strip())}

    common = set.intersection(*(words(r.case.label) for r in failed)) - set.union(*(words(r.case.label) for r in passed))
    if len(common) != 1:
        return ""
    return f"Your code is right on every case but those labelled with {common.pop()!r}."
