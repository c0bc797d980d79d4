"""notebooks/ and examples/ are exactly what `python -m autograder release` generates."""
import json

import nbformat
import pytest

from autograder.release import demo_submissions
from conftest import ASSIGNMENTS, ROOT

pytestmark = pytest.mark.slow


def canonical(path):
    nb = nbformat.read(path, as_version=4)
    return json.dumps(nb, sort_keys=True, indent=1)


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_notebooks_are_generated_from_solutions(released, name):
    committed = ROOT / "notebooks" / name / f"{name}.ipynb"
    assert committed.is_file(), "run `python -m autograder release`"
    assert canonical(committed) == canonical(released / name / f"{name}.ipynb"), (
        f"notebooks/{name} differs from what the release command generates; run `python -m autograder release`"
    )


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_example_submissions_are_up_to_date(released, name):
    for student, nb in demo_submissions(ROOT, name, released / name / f"{name}.ipynb").items():
        path = ROOT / "examples" / "submitted" / student / name / f"{name}.ipynb"
        assert path.is_file() and canonical(path) == json.dumps(nb, sort_keys=True, indent=1), (
            f"{path} is stale; run `python -m autograder release`"
        )
