"""Mistakes nobody catalogued: generic mutations of every exercise's reference (tests/generic_mutations.py),
each checked as a learner's code is. A wrong name is worse than none: there are none; and most are named.
Course-wide (about 10 s for all ten notebooks): the share named is the course's, not one notebook's."""
from generic_mutations import markdown, table

from autograder import registry


def test_generic_mutations_are_named_and_never_named_wrongly():
    counts, rows = table(sorted({ex.notebook for ex in registry.all_exercises()}))
    print("\n" + markdown(counts))
    wrong = [(name, kind, said) for name, kind, verdict, said in rows if verdict == "wrong"]
    assert not wrong, wrong
    assert all(c["named"] + c["silent"] for c in counts.values()), "every notebook has mutations that change its outputs"
    named = sum(c["named"] for c in counts.values())
    assert named >= 0.8 * len(rows), markdown(counts)
