"""pytest plugin for `python -m autograder check`: one test per graded cell of an executed notebook."""
import json

import pytest


class GradedCellFailed(Exception):
    pass


def pytest_collect_file(file_path, parent):
    if file_path.name.endswith(".results.json"):
        return NotebookResults.from_parent(parent, path=file_path)


class NotebookResults(pytest.File):
    def collect(self):
        data = json.loads(self.path.read_text())
        for row in data["rows"]:
            yield GradedCell.from_parent(self, name=row["exercise"], row=row)


class GradedCell(pytest.Item):
    def __init__(self, *, row, **kwargs):
        super().__init__(**kwargs)
        self.row = row

    def runtest(self):
        r = self.row
        if r["status"] != "passed":
            raise GradedCellFailed(f"{round(r['score'], 2):g}/{r['points']:g} points, {r['status']}: {r['reason']}")

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, GradedCellFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, f"{self.path.name.removesuffix('.results.json')}::{self.name}"
