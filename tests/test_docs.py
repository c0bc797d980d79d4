"""The maintainer's documents: every file they name is in the repository, so that a clone has it."""
import os
import re
import subprocess

import pytest

from conftest import ROOT

DOCS = ["README.md", "CONTRIBUTING.md", "docs/COURSE.md", "docs/CLASS.md", "docs/GRADING.md", "docs/MEASURED.md",
        "docs/MEASURED-TRAINING.md", "docs/MEASURED-GRADING.md", "docs/MEASURED-THREADS.md", "docs/MEASURED-MISTAKES.md"]
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
CODE = re.compile(r"`([^`\s]+)`")
ANCHORED = re.compile(r"\]\(([^)\s#]*)#([^)\s]+)\)")  # [text](path#anchor), or (#anchor) in the same document
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


def anchors(doc):
    """The anchors GitHub gives a markdown document's headings: lower case, punctuation and code marks dropped,
    spaces made hyphens, a repeated heading numbered (-1, -2, ...)."""
    seen, out = {}, set()
    fenced = False
    for line in (ROOT / doc).read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if fenced or not re.match(r"#{1,6} ", line):
            continue
        slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        out.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return out


@pytest.mark.parametrize("doc", DOCS)
def test_every_anchor_a_document_links_to_is_a_heading(doc):
    text = (ROOT / doc).read_text(encoding="utf-8")
    broken = []
    for path, anchor in ANCHORED.findall(text):
        if re.match(r"[a-z]+:", path):
            continue
        target = os.path.normpath(os.path.join(os.path.dirname(doc), path)) if path else doc
        if target.endswith(".md") and target in FILES and anchor not in anchors(target):
            broken.append(f"{path}#{anchor}")
    assert not broken, f"{doc} links to headings its targets lack: {broken}"


def test_what_links_to_the_readme_finds_its_heading():
    """Every tracked markdown document's link to a heading of the README (docs/, deploy/, CONTRIBUTING.md)."""
    have = anchors("README.md")
    broken = []
    for doc in sorted(f for f in FILES if f.endswith(".md") and (ROOT / f).is_file()):
        text = (ROOT / doc).read_text(encoding="utf-8")
        for path, anchor in ANCHORED.findall(text):
            target = os.path.normpath(os.path.join(os.path.dirname(doc), path)) if path else doc
            if target == "README.md" and anchor not in have:
                broken.append(f"{doc}: {path}#{anchor}")
    assert not broken, broken
