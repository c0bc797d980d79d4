"""The course as a static site (`make site`, autograder/release/site.py), as a reader meets it.

The site is built once, from the complete student's notebooks that the shared course
(conftest.graded_course) has already autograded: nothing is executed again. Every page is
there with every figure, and no exercise's solution code is in any page. Then headless
Chromium opens every page, as tests/learner/test_browser.py drives it, with screenshots in
test-artifacts/browser/site-*.png.
"""
import base64
import hashlib
import html
import re

import nbformat
import pytest

from autograder import registry
from autograder.release import site
from conftest import ASSIGNMENTS, COMPLETE, ROOT

# sphinx-book-theme 1.4 uses an attribute that Sphinx 9 deprecates: not ours to fix
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::PendingDeprecationWarning:sphinx_book_theme")]

SOLUTION = re.compile(r"^[ \t]*### BEGIN SOLUTION\n(.*?)^[ \t]*### END SOLUTION", re.S | re.M)


def normalised(text):
    return " ".join(text.split())


def page_text(path):
    """The text a page shows: tags stripped (a code block's spans join again), entities decoded."""
    source = re.sub(r"<(script|style)\b.*?</\1>", " ", path.read_text(encoding="utf-8"), flags=re.S)
    return normalised(html.unescape(re.sub(r"<[^>]+>", "", source)))


def solution_lines(name, released):
    """{exercise: the distinctive lines of its solution}: the lines between the markers of its solution cell
    in solutions/, at least 25 characters, not comments, and not anywhere in the released notebook (its stubs,
    markdown and other code, which the page shows rightly; inline code's backticks left out, as on the page)."""
    solution = nbformat.read(ROOT / "solutions" / name / f"{name}.ipynb", as_version=4)
    sources = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in solution.cells}
    stub = nbformat.read(released / name / f"{name}.ipynb", as_version=4)
    shown = normalised("\n".join(c.source for c in stub.cells).replace("`", ""))
    found = {}
    for ex in registry.for_notebook(name):
        lines = [normalised(line) for region in SOLUTION.findall(sources[ex.name]) for line in region.splitlines()]
        found[ex.name] = [line for line in lines if len(line) >= 25 and not line.startswith("#") and line not in shown]
    return found


def leaks(page, name, released):
    text = page_text(page)
    return {ex: hits for ex, lines in solution_lines(name, released).items() if (hits := [l for l in lines if l in text])}


def executed(graded_course):
    return graded_course["course"] / "autograded" / COMPLETE


@pytest.fixture(scope="module")
def built(graded_course, released, tmp_path_factory):
    out = tmp_path_factory.mktemp("site") / "html"
    index = site.build(ROOT, executed=executed(graded_course), out=out, released=released, names=ASSIGNMENTS)
    assert index == out / "index.html" and index.is_file()
    return out


def test_the_index_lists_every_notebook_in_order(built, graded_course):
    text = (built / "index.html").read_text(encoding="utf-8")
    assert site.TITLE in html.unescape(text)
    links = [ln for ln in re.findall(r'href="([0-9]{2}_\w+)\.html"', text) if ln in ASSIGNMENTS]
    assert list(dict.fromkeys(links)) == ASSIGNMENTS
    for name in ASSIGNMENTS:
        nb = nbformat.read(executed(graded_course) / name / f"{name}.ipynb", as_version=4)
        markdown = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
        heading = re.search(r"^# (.+)$", markdown, flags=re.M).group(1)
        assert heading in page_text(built / "index.html"), heading


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_every_figure_is_on_the_page(built, graded_course, name):
    nb = nbformat.read(executed(graded_course) / name / f"{name}.ipynb", as_version=4)
    figures = {hashlib.sha256(base64.b64decode(out["data"]["image/png"])).hexdigest()
               for cell in nb.cells for out in cell.get("outputs", []) if "image/png" in out.get("data", {})}
    assert figures, f"{name} has no figure"
    sources = re.findall(r'<img [^>]*src="([^"]+)"', (built / f"{name}.html").read_text(encoding="utf-8"))
    local = [built / src for src in sources if not src.startswith(("http:", "https:", "data:"))]
    assert all(path.is_file() for path in local), [p for p in local if not p.is_file()]
    shown = {hashlib.sha256(path.read_bytes()).hexdigest() for path in local}
    assert figures <= shown, f"{len(figures - shown)} of {name}'s {len(figures)} figures are not on its page"


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_no_solution_code_on_the_page(built, released, name):
    assert any(solution_lines(name, released).values()), f"{name}: no distinctive solution line to look for"
    assert leaks(built / f"{name}.html", name, released) == {}


def test_a_page_with_its_solutions_shows_them(graded_course, released, tmp_path, monkeypatch):
    """The check above can fail: the same build, but with the solution cells left as they are."""
    name = ASSIGNMENTS[0]
    monkeypatch.setattr(site, "hide_solutions", lambda nb, stub, name: nb)
    site.build(ROOT, executed=executed(graded_course), out=tmp_path, released=released, names=[name])
    found = leaks(tmp_path / f"{name}.html", name, released)
    assert set(found) == {ex for ex, lines in solution_lines(name, released).items() if lines}, found


def test_a_missing_notebook_says_where_it_should_be(tmp_path, released):
    with pytest.raises(site.CourseError, match=rf"no executed notebook {re.escape(str(tmp_path))}.*autograder grade"):
        site.build(ROOT, executed=tmp_path, out=tmp_path / "html", released=released, names=ASSIGNMENTS[:1])


# ---------------------------------------------------------------- in a browser

# Every <img> of the site's own, as loaded: [src, loaded].
IMAGES_JS = """() => Array.from(document.images).filter(i => i.src.startsWith('file:'))
    .map(i => [i.getAttribute('src'), i.complete && i.naturalWidth > 0])"""


@pytest.fixture(scope="module")
def browser():
    """Chromium as test_browser.py starts it (importing it skips, as it does, where Chromium is missing)."""
    import test_browser
    from playwright.sync_api import sync_playwright

    if not test_browser.CHROMIUM:
        pytest.fail("Chromium is not installed (Debian: apt-get install chromium)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=test_browser.CHROMIUM, args=test_browser.CHROMIUM_FLAGS)
        yield b
        b.close()


def test_every_page_loads_in_a_browser(built, browser, capsys):
    from test_browser import screenshot

    page = browser.new_page(viewport={"width": 1300, "height": 1000})
    # Offline and the same each time: nothing from the internet (MathJax, the Colab badge) loads.
    page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:") else route.abort())
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error"  # but the loads refused above
            and not m.location.get("url", "").startswith(("http:", "https:")) else None)
    for name in ["index"] + ASSIGNMENTS:
        page.goto((built / f"{name}.html").as_uri())
        images = page.evaluate(IMAGES_JS)
        assert all(loaded for _, loaded in images), (name, [src for src, ok in images if not ok])
        assert errors == [], (name, errors)
        if name == "index":
            assert page.title().startswith(site.TITLE)
            screenshot(page, "site-index.png", capsys)
            continue
        assert images, f"{name}: no figure"
        assert page.title().startswith(page.locator("h1").first.inner_text().strip("#¶ \n"))
        hints = page.locator("details")
        assert hints.count() and not page.locator("details[open]").count(), f"{name}: the hints are not collapsed"
        assert not hints.first.locator("p").first.is_visible()
        assert page.locator(f'a[href*="colab.research.google.com"][href*="{name}"]').count(), f"{name}: no Colab badge"
        if name == "08_training_a_transformer":
            page.locator("img[src^='_images']").first.scroll_into_view_if_needed()
            screenshot(page, f"site-{name}.png", capsys)
    page.close()
