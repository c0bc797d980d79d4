"""The notebooks' text as a scholar's: each ends with its sources and cites each of them where it is used, and
every number its markdown states is computed or asserted by one of its code cells, or quoted from a source it
names (a paper or post of its Sources, or the course's own record of measurements in docs/).

What counts as a number: any figure in a markdown cell but single digits, the headings' numbering, notebook
numbers ("notebook 05", "(04)"), the registry's difficulty and time (written by the release), the years of a
citation, and the Sources cell itself. A number matches a code cell when a literal of the same value is in its
code (comments left out); "88 %" matches 0.88 too, and LaTeX's 10^{-5} and 3.6 \\cdot 10^{-3} are read as 1e-5
and 3.6e-3. The course's own record is quoted by a link to docs/NAME.md in the same sentence (written
https://github.com/seqcourse/seqcourse/blob/main/docs/NAME.md, so that it opens from Colab too), whose text
holds the number as the sentence writes it.
"""
import io
import re
import tokenize

import nbformat
import pytest

from conftest import ASSIGNMENTS, ROOT

SOURCES = re.compile(r"^## Sources\s*$", re.M)
ENTRY = re.compile(r"^- \*\*(?P<key>[^*]+?)\*\*\.? (?P<rest>.+)$", re.M)
YEAR = r"(?:1[89]\d\d|20\d\d)[a-z]?"
SURNAME = r"(?:[A-Z][\w'’-]+|d['’][A-Z][\w'-]+|van [A-Z][\w-]+)"
# Vaswani et al. (2017) · (Vaswani et al., 2017) · Hochreiter & Schmidhuber 1997 · Luong, Pham and Manning (2015)
CITATION = re.compile(rf"(?P<names>{SURNAME}(?: et al\.|(?:,? {SURNAME})*,? (?:&|and) {SURNAME})?)(?:['’]s)?,? \(?(?P<year>{YEAR})\)?")
MONTHS = {"January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December", "In", "Since", "From", "Until", "Before", "After", "By", "The", "Of", "To", "And"}
NUMBER = re.compile(r"(?<![\w.\\^_{-])(\d{1,3}(?:(?:,|\u202f|\u2009| |\\,)\d{3})+|\d+(?:\.\d+)?(?:e-?\d+)?)(?![\w])(?:\s?(%))?")
REPOSITORY = "https://github.com/seqcourse/seqcourse/blob/main/"  # where a notebook opened on Colab finds docs/
DOC_LINK = re.compile(r"\]\((?:\.\./)*docs/(?P<doc>[A-Z][\w-]*\.md)(?:#[\w-]*)?\)")


def notebook(name):
    return nbformat.read(ROOT / "solutions" / name / f"{name}.ipynb", as_version=4)


def sources_cell(nb):
    cells = [c for c in nb.cells if c.cell_type == "markdown" and SOURCES.search(c.source)]
    return cells[0] if len(cells) == 1 else None


def keys(entry_key):
    """'Vaswani et al. 2017' -> its comparable form; 'Bahdanau, Cho & Bengio 2015' -> 'Bahdanau 2015' too."""
    flat = normal(entry_key)
    first, year = flat.split()[0].rstrip(","), flat.split()[-1]
    return {flat, f"{first} {year}"}


def normal(text):
    """A citation as plain words: no parentheses or commas, 'and' as '&'."""
    text = re.sub(r"[(),]", "", text.replace("’", "'"))
    text = re.sub(r"'s\b", "", text)
    return re.sub(r"\s+", " ", text.replace(" and ", " & ")).strip()


def cited(text):
    """The citations in `text`, each as `normal` writes it, and as 'Firstauthor year'."""
    found = set()
    for m in CITATION.finditer(text):
        names = m["names"]
        if names.split()[0] in MONTHS:
            continue
        found |= {normal(f"{names} {m['year']}"), f"{normal(names).split()[0]} {m['year']}"}
    return found


def body(nb):
    return [c.source for c in nb.cells if c.cell_type == "markdown" and not SOURCES.search(c.source)]


def code_values(nb):
    """The values of every numeric literal in the notebook's code cells, comments left out."""
    values = set()
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        source = "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!")))
        try:
            tokens = [t for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type != tokenize.COMMENT]
            text = " ".join(t.string for t in tokens)
        except (tokenize.TokenError, IndentationError, SyntaxError):
            text = re.sub(r"#.*", "", source)
        for m in re.finditer(r"(?<![\w.])(\d[\d_]*(?:\.\d+)?(?:[eE]-?\d+)?|\.\d+)(?![\w])", text):
            values.add(float(m.group(1).replace("_", "")))
    return values


def stated_numbers(text):
    """(value, is_percent, sentence) of every number `text` states, but those the module's docstring leaves out."""
    text = re.sub(rf"\]\({re.escape(REPOSITORY)}(docs/[\w-]+\.md)(?:#[\w-]*)?\)", r"](\1)", text)
    text = re.sub(r"\]\(https?://[^)]*\)|https?://\S+", "]", text)  # addresses are no claims
    text = re.sub(r"^#+ [\d.]+\s", "# ", text, flags=re.M)  # headings' numbering
    text = re.sub(r"Exercise \d+|\b\d{1,2}\.\d{1,2}\.\d{4}\b", "", text)  # and dates: 3.4.2021
    text = re.sub(r"\(difficulty [●○ ]+, about \d+ minutes\)|^\|[^\n]*\| \d+ min \|$", "", text, flags=re.M)
    text = re.sub(r"[Nn]otebooks? \d\d(?:(?:,? (?:and|or|to)|,|–|-) ?\d\d)*|(?<![\d.])\b0\d(?:[–-]\d\d)?\b", "", text)
    text = re.sub(r"(\d+(?:\.\d+)?)\s*(?:\\cdot|\\times|×|·)\s*10\^\{?(-?\d+)\}?", r"\1e\2", text)
    text = re.sub(r"(?<![\d.])10\^\{?(-?\d+)\}?", r"1e\1", text)
    text = re.sub(r"\b(?:ISO|UTF|Python|PyTorch|torch|CUDA|nbgrader|JupyterLab|GPT)[ -]?\d+(?:\.\d+)*", "", text)
    found = []
    for sentence in re.split(r"(?<!et al\.)(?<=[.!?:;])\s+(?=[A-Z*_`$(|\[])|\n(?=\s*(?:[-*|]|\d+\.)\s)|\n\n", text):
        without = CITATION.sub(lambda m: "" if m["names"].split()[0] not in MONTHS else m[0], sentence)
        for m in NUMBER.finditer(without):
            raw = re.sub(r"[,\u202f\u2009 ]|\\,", "", m.group(1))
            value = float(raw)
            if re.fullmatch(r"\d", raw):
                continue
            found.append((value, m.group(2) == "%", m.group(1), sentence))
    return found


def close(a, b):
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_each_notebook_ends_with_its_sources_and_cites_each_where_it_is_used(name):
    nb = notebook(name)
    cell = sources_cell(nb)
    assert cell is not None, f"{name}: no markdown cell headed '## Sources' (one, and only one)"
    last = [c for c in nb.cells if c.cell_type == "markdown"][-1]
    assert last is cell, f"{name}: the Sources cell is not the notebook's last markdown cell"
    entries = list(ENTRY.finditer(cell.source))
    assert len(entries) >= 2, f"{name}: its Sources list fewer than two entries ('- **Author et al. 2017**. Title. Where. URL')"
    text = "\n".join(body(nb))
    used = cited(text)
    listed = set()
    for e in entries:
        assert re.search(rf"\b{YEAR}$", e["key"].strip()), f"{name}: the key {e['key']!r} does not end with its year"
        assert "http" in e["rest"], f"{name}: {e['key']} has no address a reader can follow"
        forms = keys(e["key"])
        listed |= forms
        assert forms & used or any(f in normal(text) for f in forms), \
            f"{name}: {e['key']} is in the Sources but cited nowhere in the text where its idea or example is used"
    stray = {c for c in used if len(c.split()) == 2 and c not in listed}  # 'Firstauthor year': listed holds that form too
    assert not stray, f"{name}: cited in the text, missing from its Sources: {sorted(stray)}"


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_every_number_in_the_text_is_computed_asserted_or_quoted(name):
    nb = notebook(name)
    cell = sources_cell(nb)
    listed = set()
    for e in ENTRY.finditer(cell.source if cell else ""):
        listed |= keys(e["key"])
    values = code_values(nb)
    unexplained = []
    for text in body(nb):
        for value, percent, raw, sentence in stated_numbers(text):
            if any(close(value, v) for v in values) or (percent and any(close(value / 100, v) for v in values)):
                continue
            if cited(sentence) & listed:
                continue
            docs = [m["doc"] for m in DOC_LINK.finditer(sentence)]
            quoted = re.compile(rf"(?<![\w.,]){re.escape(raw)}(?![\w]|[.,]\d)")  # the figure whole, not part of another
            if any(quoted.search((ROOT / "docs" / d).read_text()) for d in docs if (ROOT / "docs" / d).is_file()):
                continue
            unexplained.append(f"{raw}{' %' if percent else ''}  in: {sentence.strip()[:160]}")
    assert not unexplained, (f"{name}: numbers stated in the text that no code cell computes or asserts and no source "
                             "is quoted for:\n  " + "\n  ".join(unexplained))
