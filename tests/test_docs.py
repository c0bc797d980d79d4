"""The maintainer's documents: every file they name is in the repository, so that a clone has it."""
import os
import re
import subprocess

import pytest

from conftest import ROOT

DOCS = ["README.md", "CONTRIBUTING.md", "docs/COURSE.md", "docs/CLASS.md"]
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
CODE = re.compile(r"`([^`\s]+)`")
# what a clone has: git's files (and those not yet added, but not the ignored: .venv/, what tests and grading write)
FILES = set(subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split("\n"))
FOLDERS = {f.split("/")[0] for f in FILES if "/" in f}


def named(doc):
    """The paths a document names: its relative links, its markdown documents in code font, and the paths in
    code font that start at one of the repository's folders (without a placeholder: NN_name, <topic>, *)."""
    text = (ROOT / doc).read_text(encoding="utf-8")
    links = [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]
    code = [t for t in CODE.findall(text) if t.endswith(".md") or (t.split("/")[0] in FOLDERS and not re.search(r"NN|<|\*", t))]
    return [p.rstrip("/") for p in links + code]


def in_clone(path):
    return path in FILES or any(f.startswith(path + "/") for f in FILES)


@pytest.mark.parametrize("doc", DOCS)
def test_every_file_a_document_names_is_in_the_repository(doc):
    assert doc in FILES
    missing = [p for p in named(doc) if not in_clone(p) and not in_clone(os.path.normpath(os.path.join(os.path.dirname(doc), p)))]
    assert not missing, f"{doc} names what a clone of the repository lacks: {missing}"


def test_contributing_points_to_the_specification():
    assert "docs/COURSE.md" in named("CONTRIBUTING.md")
