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


def by_rank(results):
    """ "right where the inputs have 3 axes, wrong where they have 4": every passed public case's tensors have
    n axes at most and every failed one's n + 1 (a leading axis more, as a head axis adds), or ''."""
    public = [r for r in results if not r.case.hidden]
    failed = [r for r in public if not r.ok]
    passed = [r for r in public if r.ok]
    if not failed or not passed or len(failed) < len(results) - len(passed) or any(r.case.raises for r in public):
        return ""
    ranks = {id(r): max((t.ndim for t in _tensors(r.case.make())), default=None) for r in public}
    ok, bad = {ranks[id(r)] for r in passed}, {ranks[id(r)] for r in failed}
    if None in ok | bad or len(ok) != 1 or bad != {min(ok) + 1}:
        return ""
    n = ok.pop()
    return (f"Your code is right on every case whose inputs have {n} axes and wrong on every case with {n + 1}: an axis "
            f"numbered from the front (dim=1, transpose(1, 2)) is another axis once a leading one is added; "
            f"numbered from the end (dim=-2, transpose(-2, -1)) it stays the same.")


def _tensors(call):
    return [x for x in list(call.args) + list(call.kwargs.values()) if hasattr(x, "ndim") and hasattr(x, "shape")]
