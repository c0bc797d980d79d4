"""The course's own files, kept as grading found them.

A grading kernel runs the learner's code with the grader's rights, so a submission
could rewrite the checks (autograder/), the references (solutions_lib/), the
configuration, or drop a `.pth` file into site-packages that runs at the start of
the next Python process, such as the clean room. The grading worker takes a
`Snapshot` before grading and calls `restore()` after each step that ran learner
code: whatever changed is put back, whatever is new is removed, and the
submission that did it gets no credit.
"""
from __future__ import annotations

import shutil
import site
from pathlib import Path

# Files that run code in every Python process that sees this site-packages folder.
STARTUP_FILES = ("*.pth", "sitecustomize.py", "usercustomize.py")


def _packages():
    import autograder
    import solutions_lib

    return [Path(autograder.__file__).parent, Path(solutions_lib.__file__).parent]


def _watched(root):
    """(folder, pattern) pairs in which any changed, new or deleted file counts."""
    root = Path(root)
    pairs = [(root, "nbgrader_config.py"), (root / "solutions", "**/*.ipynb")]
    pairs += [(package, "**/*.py") for package in _packages()]
    pairs += [(Path(folder), pattern) for folder in site.getsitepackages() + [site.getusersitepackages()]
              for pattern in STARTUP_FILES]
    return pairs


def _files(root):
    return {path for folder, pattern in _watched(root) for path in folder.glob(pattern) if path.is_file()}


class Snapshot:
    def __init__(self, root):
        self.root = root
        self.files = {path: path.read_bytes() for path in _files(root)}

    def restore(self):
        """Undo every change since the snapshot; returns the paths that had changed."""
        changed = []
        for path, content in self.files.items():
            try:
                same = path.read_bytes() == content
            except OSError:
                same = False
            if not same:
                changed.append(path)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(content)
        for path in _files(self.root) - set(self.files):
            changed.append(path)
            path.unlink()
        for package in _packages():  # compiled copies could be forged to match a source: Python rebuilds them
            for cache in package.rglob("__pycache__"):
                shutil.rmtree(cache, ignore_errors=True)
        return sorted(str(p) for p in changed)
