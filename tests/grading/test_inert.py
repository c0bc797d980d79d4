"""What a student produced is inert where it is viewed (autograder.grading.pages.inert) and the pages that show
it forbid scripts their templates did not write (autograder.grading.pages.policy). The browser proves it end to
end (tests/learner/test_browser.py); these say which piece keeps which payload out, without one."""
import base64
from html.parser import HTMLParser

import nbformat
import pytest
from nbconvert import HTMLExporter
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output, new_raw_cell

from autograder.grading.pages import policy
from autograder.grading.pages.inert import RESULT_MIME, _as_text, clean_html, inert, inert_output

JS = "alert(1)"
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(40)).decode()

# what could run in a browser, as a displayed output: {mime: value}
DISPLAYED = {
    "javascript": {"application/javascript": JS},
    "script": {"text/html": f"<script>{JS}</script>"},
    "script in svg": {"image/svg+xml": f"<svg xmlns='http://www.w3.org/2000/svg'><script>{JS}</script></svg>"},
    "svg in html": {"text/html": f"<svg><script>{JS}</script><a href='javascript:{JS}'>x</a></svg>"},
    "onerror": {"text/html": f"<img src=x onerror='{JS}'>"},
    "ontoggle": {"text/html": f"<details open ontoggle='{JS}'>"},
    "onload in markdown": {"text/markdown": f"<body onload='{JS}'>*hi*"},
    "javascript url": {"text/html": f"<a href='javascript:{JS}'>click</a>"},
    "javascript url in markdown": {"text/markdown": f"[click](javascript:{JS})"},
    "meta refresh": {"text/html": f"<meta http-equiv='refresh' content='0;url=javascript:{JS}'>"},
    "iframe": {"text/html": f"<iframe srcdoc='<script>{JS}</script>'></iframe>"},
    "object and embed": {"text/html": "<object data='data:text/html,<script>1</script>'></object><embed src='x.swf'>"},
    "form": {"text/html": f"<form action='/api/contents/x' method=post><input autofocus onfocus='{JS}'></form>"},
    "data: page": {"text/html": "<a href='data:text/html;base64,PHNjcmlwdD4='>x</a><img src='data:text/html,<script>1</script>'>"},
    "style": {"text/html": "<div style='background:url(javascript:alert(1))'>x</div><style>*{}</style><link rel=stylesheet href=x>"},
    "base": {"text/html": "<base href='https://evil.example/'>"},
    "widget": {"application/vnd.jupyter.widget-view+json": {"model_id": "x", "version_major": 2}},
    "latex href": {"text/latex": f"$\\href{{javascript:{JS}}}{{x}}$"},
    "png that breaks out": {"image/png": f'x" onerror="{JS}" a="'},
}
DANGEROUS_TAGS = {"script", "iframe", "frame", "object", "embed", "form", "meta", "base", "link", "style", "svg", "math"}


class _Live(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.found = []

    def handle_starttag(self, tag, attrs):
        if tag in DANGEROUS_TAGS:
            self.found.append(tag)
        for name, value in attrs:
            value = (value or "").strip().lower()
            if name.startswith("on") or name == "style" or value.startswith(("javascript:", "data:text", "vbscript:")):
                self.found.append(f"{tag}[{name}={value[:30]}]")


class LIVE:
    """What in an HTML page could run, found by parsing it as a browser would (escaped text is text)."""

    @staticmethod
    def search(html):
        parser = _Live()
        parser.feed(html)
        return parser.found


def rendered(nb):
    """The notebook as nbconvert's HTMLExporter (the formgrader's and the feedback's) writes its cells."""
    html = HTMLExporter(template_name="classic").from_notebook_node(nb)[0]
    return html[html.index('id="notebook-container"'):]


def student_notebook(*cells):
    return new_notebook(cells=list(cells), metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})


@pytest.mark.parametrize("kind", DISPLAYED)
def test_no_output_that_could_run_survives(kind):
    cell = new_code_cell("x", outputs=[new_output("display_data", data={**DISPLAYED[kind], "text/plain": "shown"})])
    nb = inert(student_notebook(cell))
    assert not LIVE.search(rendered(nb)), rendered(nb)
    bare = new_code_cell("x", outputs=[new_output("display_data", data=DISPLAYED[kind])])
    assert not LIVE.search(rendered(inert(student_notebook(bare))))  # without a plain-text twin too


def test_the_payloads_would_run_without_it():
    """The control: the same outputs rendered as nbconvert does by default keep what could run."""
    for kind, data in DISPLAYED.items():
        if kind in ("widget", "latex href", "png that breaks out", "script in svg"):
            continue  # (these need the page's own scripts, or a browser, to show what they do)
        cell = new_code_cell("x", outputs=[new_output("display_data", data=data)])
        assert LIVE.search(rendered(student_notebook(cell))), kind


def test_what_teaching_needs_is_kept():
    table = "<table><thead><tr><th>a</th></tr></thead><tbody><tr><td colspan='2'>1</td></tr></tbody></table>"
    outputs = [new_output("stream", name="stdout", text="loss 1.23\n"),
               new_output("display_data", data={"image/png": PNG, "text/plain": "<Figure>"}, metadata={"image/png": {"width": 300, "height": "1 onerror=x"}}),
               new_output("execute_result", data={"text/html": table, "text/plain": "df"}, execution_count=3),
               new_output("error", ename="ValueError", evalue="shapes differ", traceback=["Traceback", "ValueError: shapes differ"])]
    nb = inert(student_notebook(new_code_cell("x", outputs=outputs)))
    kept = nb.cells[0].outputs
    assert kept[0].text == "loss 1.23\n"
    assert kept[1].data["image/png"] == PNG and kept[1].metadata == {"image/png": {"width": 300}}
    assert "<td colspan=\"2\">1</td>" in kept[2].data["text/html"] and kept[2].execution_count == 3
    assert kept[3].ename == "ValueError" and kept[3].traceback[-1] == "ValueError: shapes differ"
    page = rendered(nb)
    assert f"data:image/png;base64,{PNG}" in page and "shapes differ" in page
    nbformat.validate(nb)


def test_svg_is_shown_as_a_picture_where_its_script_cannot_run():
    svg = "<svg xmlns='http://www.w3.org/2000/svg'><circle r='4'/><script>alert(1)</script></svg>"
    out = inert_output(new_output("display_data", data={"image/svg+xml": svg}))
    img = out.data["text/html"]
    assert img.startswith('<img src="data:image/svg+xml;base64,') and base64.b64decode(img.split(",")[1].split('"')[0]).decode() == svg


def test_the_check_result_is_kept_only_where_the_grader_wrote_it():
    result = new_output("display_data", data={RESULT_MIME: "blob", "text/plain": "✔ 4/4"})
    grade_cell = new_code_cell("check()", outputs=[result], metadata={"nbgrader": {"grade": True, "locked": True, "solution": False, "grade_id": "check_x", "points": 4}})
    student_cell = new_code_cell("forge()", outputs=[result])
    nb = inert(student_notebook(grade_cell, student_cell))
    assert RESULT_MIME in nb.cells[0].outputs[0].data
    assert RESULT_MIME not in nb.cells[1].outputs[0].data and nb.cells[1].outputs[0].data["text/plain"] == "✔ 4/4"


def test_markdown_a_student_wrote_is_shown_as_text_and_the_courses_own_as_written():
    ours = "## 1. Queries\n<details><summary>Hint</summary>Use `@`.</details>"
    theirs = f"<img src=x onerror='{JS}'> [c](javascript:{JS})"
    nb = inert(student_notebook(new_markdown_cell(ours), new_markdown_cell(theirs), new_markdown_cell("```\n" + theirs + "\n````")),
               course_markdown=frozenset({ours}))
    assert nb.cells[0].source == ours
    page = rendered(nb)
    assert "<summary>Hint</summary>" in page and not LIVE.search(page), page
    assert "onerror" in page  # as text: the student's words are shown, not run


def test_a_fence_cannot_be_closed_from_inside_and_a_second_pass_keeps_the_text():
    for text in ("```\n<script>1</script>\n```", "````text\nx\n````", "a ````` b", "```text\n<script>1</script>\n```"):
        once = _as_text(text)
        assert _as_text(once) == once
        assert not LIVE.search(rendered(student_notebook(new_markdown_cell(once))))
    nb = student_notebook(new_markdown_cell("<script>1</script>"), new_code_cell("x", outputs=[new_output("display_data", data=DISPLAYED["onerror"])]))
    once = inert(nb)
    twice = inert(nbformat.reads(nbformat.writes(once), as_version=4))  # as the feedback does, after the autograding
    assert twice.cells[0].source == once.cells[0].source and not LIVE.search(rendered(twice))


def test_raw_cells_attachments_and_metadata_a_student_wrote_are_dropped():
    raw = new_raw_cell(f"<script>{JS}</script>", metadata={"format": "text/html"})
    md = new_markdown_cell("![x](attachment:a.svg)", metadata={"tags": ['x" onmouseover="1'], "nbgrader": {"grade_id": 'a"><script>', "solution": True}})
    md["attachments"] = {"a.svg": {"image/svg+xml": f"<svg><script>{JS}</script></svg>"}}
    nb = student_notebook(raw, md)
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"</script><script>alert(1)</script>": 1}}
    nb.metadata["kernelspec"]["display_name"] = "</title><script>alert(1)</script>"
    nb = inert(nb)
    assert nb.cells[0].source == "" and "attachments" not in nb.cells[1]
    assert nb.cells[1].metadata == {"nbgrader": {"solution": True}}
    assert set(nb.metadata) == {"kernelspec"} and nb.metadata["kernelspec"]["display_name"] == "Python 3"
    assert not LIVE.search(HTMLExporter(template_name="classic").from_notebook_node(nb)[0].split("</head>", 1)[1])


def test_clean_html_keeps_pictures_and_links_to_pages_only():
    assert clean_html(f'<a href="https://pytorch.org">t</a>') == '<a href="https://pytorch.org" rel="noopener noreferrer nofollow">t</a>'
    assert clean_html(f'<img src="data:image/png;base64,{PNG}" width="30">') == f'<img src="data:image/png;base64,{PNG}" width="30">'
    assert clean_html('<img src="data:image/png;base64,x" width="30 onerror=1">') == '<img src="data:image/png;base64,x">'


# ---------------------------------------------------------------- the policy


def test_the_formgrader_policy_trusts_the_response_s_nonce_and_nbgrader_s_template_handlers_only():
    """Nothing of the page being served decides what runs: a planted handler's hash is never allowed."""
    header = policy.formgrader_policy("n0nce")
    script_src = next(p for p in header.split(";") if p.strip().startswith("script-src"))
    assert "'nonce-n0nce'" in script_src and policy._hash("toggle_name(true);") in script_src
    assert policy._hash("alert(1)") not in script_src and policy._hash("alert(2)") not in script_src
    assert "'unsafe-inline'" not in script_src and "'self'" not in script_src
    assert "frame-src 'none'" in header and "object-src 'none'" in header


def test_a_feedback_page_carries_its_policy_before_anything_it_governs():
    page = policy.with_policy("<!DOCTYPE html><html><head><script>1</script></head><body></body></html>")
    head = page.split("<head>", 1)[1]
    assert head.lstrip().startswith('<meta http-equiv="Content-Security-Policy"')
    assert "script-src " in policy.FEEDBACK_POLICY and "'unsafe-inline'" not in policy.FEEDBACK_POLICY.split("style-src")[0]
    assert "connect-src" not in policy.FEEDBACK_POLICY and "default-src 'none'" in policy.FEEDBACK_POLICY  # no requests at all
    assert "img-src data:;" in policy.FEEDBACK_POLICY  # not even for a picture: opening the page tells no server who read it


def test_mathjax_never_typesets_what_the_learner_displayed():
    """TeX's \\href{javascript:...} would become a live link once MathJax ran over a cleaned output."""
    out = inert_output(new_output("display_data", data={"text/html": "<p>$\\href{javascript:alert(1)}{x}$</p>",
                                                        "text/markdown": "$x$"}))
    assert out.data["text/html"].startswith('<div class="tex2jax_ignore">')


def test_a_displayed_picture_comes_from_the_page_itself_never_from_a_server():
    assert clean_html('<img src="https://tracker.example/p.png?who=instructor" alt="x">') == '<img alt="x">'
