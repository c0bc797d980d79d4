"""What a student produced is inert wherever an instructor or a student views it.

The formgrader and the feedback page show an autograded notebook as HTML (nbconvert's
HTMLExporter), which passes a cell's outputs and markdown through as they are. Every output
there comes from the learner's code (test cells run it too), and every markdown cell that
nbgrader did not lock from the source may have been written by the student. `inert(nb)`
makes all of it harmless to the page that renders it:

- outputs keep only kinds that cannot run: plain text, PNG, JPEG and GIF pictures (their
  base64 checked), HTML cleaned by nh3 to tables, text and pictures (and kept from MathJax),
  markdown shown as that HTML, SVG shown as a picture (<img>, where its scripts never run), LaTeX and JSON as text;
  JavaScript, widgets and anything else are replaced by a line saying what was left out;
  an output's metadata keeps numeric width and height only;
- markdown the student could have written (any markdown cell that is not, word for word, one of
  the course's own in the assignment's source notebook) is shown as its source text, raw cells
  are not rendered, and such cells lose their attachments and metadata; the notebook keeps only
  its kernel's and language's names.

`Inert`, the nbgrader preprocessor, does this to every autograded notebook (nbgrader_config.py,
after nbgrader has saved its grades), and again wherever nbconvert's HTMLExporter renders one (the
formgrader's submission pages and generate_feedback's pages); what nbgrader itself prints around
the notebook (ids, paths, comments) is escaped by autograder.grading.pages.escaping, and a Content-Security-Policy
on both pages stands behind them (autograder.grading.pages.policy).
"""
from __future__ import annotations

import base64
import functools
import json
import re
from pathlib import Path

import nbformat
import nh3
from nbconvert.filters.markdown import markdown2html_mistune
from nbformat.v4 import new_output

from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import NbGraderPreprocessor

TAGS = {"a", "abbr", "b", "blockquote", "br", "caption", "code", "col", "colgroup", "dd", "del", "details", "div", "dl",
        "dt", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "ins", "kbd", "li", "ol", "p", "pre", "q", "s",
        "samp", "small", "span", "strong", "sub", "summary", "sup", "table", "tbody", "td", "tfoot", "th", "thead", "tr",
        "tt", "u", "ul", "var"}
ATTRIBUTES = {"*": {"title", "align"}, "a": {"href"}, "img": {"src", "alt", "width", "height"},
              "td": {"colspan", "rowspan"}, "th": {"colspan", "rowspan"}, "ol": {"start"}}
PICTURES = ("image/png", "image/jpeg", "image/gif")
RESULT_MIME = "application/vnd.seqcourse.check+json"  # what the grader wrote into a check cell (autograder.api)
BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*")
NAME = re.compile(r"[A-Za-z0-9_.+\- ]{0,80}")
PLAIN = re.compile(r"[^<>\"'&`]{0,200}")  # text with nothing that could leave an attribute or start a tag
ID = re.compile(r"[A-Za-z0-9_\-]{1,80}")  # nbgrader's ids, which its pages put into attributes


def clean_html(html):
    """HTML reduced to text, tables, lists, links to http(s) pages and embedded pictures: no script, no
    event handler, no style, no frame, no form."""
    return nh3.clean(str(html), tags=TAGS, attributes=ATTRIBUTES, url_schemes={"http", "https", "data"},
                     attribute_filter=_attribute, strip_comments=True, link_rel="noopener noreferrer nofollow")


def no_math(html):
    """HTML that MathJax leaves alone (its ignore class, in versions 2 and 3): TeX such as \\href{javascript:...}
    would otherwise become a live link after the cleaning."""
    return f'<div class="tex2jax_ignore">{html}</div>'


def _attribute(tag, attribute, value):
    if tag == "img" and attribute == "src" and not value.lower().startswith("data:"):
        return None  # a picture from elsewhere would tell its server who looked at the page, and when
    if attribute in ("src", "href") and value.lower().startswith("data:"):
        # a picture may be embedded; no other data: URL (a page, a script) may be
        kind = value[5:].split(";", 1)[0].split(",", 1)[0].lower()
        return value if tag == "img" and kind in ("image/png", "image/jpeg", "image/gif", "image/svg+xml") else None
    if attribute in ("width", "height", "colspan", "rowspan", "start"):
        return value if value.strip().isdigit() else None
    return value


def inert_output(output, trusted_results=False):
    """The output as it may be shown: see the module's docstring."""
    kind = output.get("output_type")
    if kind == "stream":
        return new_output("stream", name="stderr" if output.get("name") == "stderr" else "stdout", text=str(output.get("text", "")))
    if kind == "error":
        return new_output("error", ename=str(output.get("ename", "")), evalue=str(output.get("evalue", "")),
                          traceback=[str(line) for line in output.get("traceback", [])][:200])
    if kind not in ("display_data", "execute_result"):
        return new_output("stream", name="stdout", text=f"[an output of kind {_shown(kind)} is not shown]\n")
    data, left_out = {}, []
    for mime, value in dict(output.get("data", {})).items():
        shown = _shown_data(mime, value, trusted_results)
        if shown is None:
            left_out.append(mime)
        else:
            data.update(shown)
    if not data:
        data = {"text/plain": f"[not shown here, since it could run in the browser: {', '.join(map(_shown, left_out)) or 'nothing'}]"}
    metadata = {mime: {k: v for k, v in dict(m).items() if k in ("width", "height") and isinstance(v, int) and not isinstance(v, bool)}
                for mime, m in dict(output.get("metadata", {})).items() if mime in PICTURES and isinstance(m, dict)}
    if kind == "execute_result":
        count = output.get("execution_count")
        return new_output("execute_result", data=data, metadata=metadata, execution_count=count if isinstance(count, int) else None)
    return new_output("display_data", data=data, metadata=metadata)


def _shown_data(mime, value, trusted_results):
    """{mime: value} to keep for one representation, or None to leave it out."""
    text = value if isinstance(value, str) else "".join(value) if isinstance(value, list) and all(isinstance(v, str) for v in value) else None
    if mime == RESULT_MIME:
        return {mime: value} if trusted_results else None
    if mime == "text/plain" and text is not None:
        return {mime: text}
    if mime in PICTURES and text is not None and BASE64.fullmatch(text):
        return {mime: text}
    if mime == "text/html" and text is not None:
        return {mime: no_math(clean_html(text))}
    if mime == "text/markdown" and text is not None:
        return {"text/html": no_math(clean_html(markdown2html_mistune(text)))}
    if mime == "image/svg+xml" and text is not None:
        encoded = base64.b64encode(text.encode()).decode()
        return {"text/html": clean_html(f'<img src="data:image/svg+xml;base64,{encoded}" alt="a picture (SVG)">')}
    if mime in ("text/latex", "application/json") and value is not None:
        return {"text/plain": text if text is not None else json.dumps(value, indent=1)[:100_000]}
    return None


def inert(nb, course_markdown=frozenset()):
    """Make every output of `nb`, and every cell nbgrader did not lock from the source, inert (in place);
    a markdown cell whose text is in `course_markdown` (the course's own) is rendered as it is."""
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        locked = bool(meta.get("locked")) and not meta.get("solution")  # nbgrader put its source back from the gradebook
        if cell.get("cell_type") == "code":
            check = bool(meta.get("grade")) and locked
            cell.outputs = [inert_output(o, trusted_results=check) for o in cell.get("outputs", [])]
            if not isinstance(cell.get("execution_count"), int):
                cell.execution_count = None
        if not locked:
            meta = {k: v for k, v in meta.items() if isinstance(v, (bool, int, float)) or isinstance(v, str) and ID.fullmatch(v)}
            cell.metadata = {"nbgrader": meta} if meta else {}
            cell.pop("attachments", None)
            if cell.get("cell_type") == "markdown" and cell.get("source", "") not in course_markdown:
                cell.source = _as_text(cell.get("source", ""))
            elif cell.get("cell_type") == "raw":
                cell.source = ""
    keep = {}
    for key, required in (("kernelspec", {"name": "python3", "display_name": "Python 3"}), ("language_info", {"name": "python"})):
        if isinstance(nb.metadata.get(key), dict):
            plain = {k: v for k, v in nb.metadata[key].items() if isinstance(v, str) and PLAIN.fullmatch(v)}
            keep[key] = {**plain, **{k: v for k, v in required.items() if k not in plain}}  # what nbformat requires stays valid
    nb.metadata = type(nb.metadata)(keep)
    return nb


def _as_text(source):
    """Markdown shown as its source: a fenced block longer than any run of backticks in it (a text that is
    already such a block, as a notebook made inert before holds, stays as it is)."""
    fenced = re.fullmatch(r"(`{3,})text\n(.*)\n\1", source, re.S)
    if fenced and _longest_run(fenced[2]) < len(fenced[1]):
        return source
    fence = "`" * max(3, _longest_run(source) + 1)
    return f"{fence}text\n{source}\n{fence}"


def _longest_run(text):
    return max((len(run) for run in re.findall(r"`+", text)), default=0)


def course_markdown(config, assignment, notebook):
    """The markdown cells of the assignment's source notebook (nbgrader's CourseDirectory), as texts."""
    if not (isinstance(assignment, str) and isinstance(notebook, str) and ID.fullmatch(assignment) and ID.fullmatch(notebook)):
        return frozenset()
    coursedir = CourseDirectory(config=config)
    path = Path(coursedir.format_path(coursedir.source_directory, ".", assignment)) / f"{notebook}.ipynb"
    try:
        stat = path.stat()
    except OSError:
        return frozenset()
    return _markdown_of(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=32)
def _markdown_of(path, mtime_ns, size):
    source = nbformat.read(path, as_version=4)
    return frozenset(c.source for c in source.cells if c.cell_type == "markdown")


def _shown(kind):
    text = str(kind)
    return text if NAME.fullmatch(text) else repr(text[:40])


class Inert(NbGraderPreprocessor):
    """nbgrader's preprocessor for `inert`: in the autograding, after the grades are saved, and in HTMLExporter (formgrader, feedback)."""

    def preprocess(self, nb, resources):
        ours = resources.get("nbgrader", {})  # nbgrader's converters; the formgrader's page passes its own keys
        assignment, notebook = ours.get("assignment", resources.get("assignment_id")), ours.get("notebook", resources.get("notebook_id"))
        return inert(nb, course_markdown(self.config, assignment, notebook)), resources
