"""What nbgrader prints on a page from the gradebook, a path or a URL is text, and only its own templates' scripts run.

A student id is a folder's or an account's name, so a student chose its bytes (`x<img src=x onerror=...>`
is a valid folder name); a comment holds the reason a check failed, a learner's exception message among
it; an instructor types comments in the formgrader. nbgrader's pages print all of them as HTML: its
formgrader's Jinja environment does not escape, its submission page is an nbconvert template, and its
feedback template renders comments as markdown with raw HTML, after our `Inert` has run. The doors
refuse bad ids before grading (autograder.grading.ids); this keeps the pages safe if one got into the
gradebook all the same (`nbgrader db student add`), or into a URL the instructor is lured to open.

- The formgrader's own pages (manage_students, gradebook, manage_assignments, errors) render with
  autoescape: none of nbgrader's templates prints HTML from a value on purpose.
- Its submission page (nbconvert's HTMLExporter with nbgrader's formgrade template, which cannot
  autoescape: it inserts the notebook's rendered cells) gets the values it prints (student id, names,
  notebook path, ids) escaped before it renders.
- On both, each <script> tag written in nbgrader's template files carries the response's nonce
  (`NonceLoader`), which autograder.grading.pages.policy's header allows; nothing a value or a cell adds has it.
- A feedback page: `FeedbackText` runs after nbgrader's GetGrades has put the gradebook into the notebook,
  escapes what the template prints (notebook name, cell ids) and stands in for each comment with a token
  the template renders as a word; `with_comments` then puts the comment there as escaped text.
"""
from __future__ import annotations

import functools
import html
import re
import secrets
from pathlib import Path

from jinja2 import BaseLoader, Environment
from nbconvert.exporters import HTMLExporter
from nbgrader.preprocessors import NbGraderPreprocessor
from nbgrader.server_extensions.formgrader import handlers
from nbgrader.server_extensions.formgrader.base import BaseHandler

SCRIPT_TAG = re.compile(r"<script\b(?![^>]*\bnonce=)", re.I)
COMMENTS = "autograder_comments"  # resources key: {token: the comment as HTML}


@functools.lru_cache(maxsize=1)
def nbgrader_templates():
    """The folder of nbgrader's formgrader and feedback templates: the only files whose scripts the policy trusts."""
    return Path(handlers.template_path).resolve()


def nonce(request):
    """The nonce of one response (made on first use, kept on its request): the header and the template's script tags share it."""
    value = getattr(request, "_autograder_csp_nonce", None)
    if value is None:
        value = request._autograder_csp_nonce = secrets.token_urlsafe(18)
    return value


class NonceLoader(BaseLoader):
    """A loader whose templates from nbgrader's own files have `nonce="{{ <expression> }}"` on every <script> tag they
    write; other templates (nbconvert's, which write cells' outputs into their script tags) are loaded as they are."""

    def __init__(self, loader, expression):
        self.loader, self.expression = loader, expression

    def get_source(self, environment, template):
        source, filename, uptodate = self.loader.get_source(environment, template)
        if filename and Path(filename).resolve().is_relative_to(nbgrader_templates()):
            source = SCRIPT_TAG.sub(f'<script nonce="{{{{ {self.expression} }}}}"', source)
        return source, filename, uptodate

    def list_templates(self):
        return self.loader.list_templates()


class FormgradeExporter(HTMLExporter):
    """The HTMLExporter of the formgrader's submission page, its nbgrader templates' scripts marked with
    `resources["csp_nonce"]`."""

    def _create_environment(self):
        environment = super()._create_environment()
        environment.loader = NonceLoader(environment.loader, "resources.csp_nonce")
        return environment


def escaped(values):
    """`values` with each string HTML-escaped (quotes too: some go into attributes); numbers and the rest as they are."""
    return {k: html.escape(v) if isinstance(v, str) else v for k, v in dict(values or {}).items()}


class _PageExporter:
    """What a formgrader handler gets as `self.exporter`: the submission page for this request, rendered with its
    nonce and with the values nbgrader passes the template escaped."""

    def __init__(self, handler):
        self.handler = handler

    def from_filename(self, filename, resources=None, **kwargs):
        settings = self.handler.settings
        if "autograder_exporter" not in settings:
            settings["autograder_exporter"] = FormgradeExporter(config=settings["nbgrader_exporter"].config)
        resources = {**escaped(resources), "csp_nonce": nonce(self.handler.request)}
        return settings["autograder_exporter"].from_filename(filename, resources=resources, **kwargs)


def _render(self, name, **ns):
    """nbgrader's BaseHandler.render, with autoescape and this response's nonce on the template's script tags."""
    if "autograder_jinja2_env" not in self.settings:
        loader = NonceLoader(self.settings["nbgrader_jinja2_env"].loader, "csp_nonce")
        self.settings["autograder_jinja2_env"] = Environment(loader=loader, autoescape=True)
    template = self.settings["autograder_jinja2_env"].get_template(name)
    return template.render(**ns, csp_nonce=nonce(self.request))


def guard_formgrader():
    """Have every formgrader handler render through `_render` and `_PageExporter` (nbgrader's BaseHandler, which all of
    them extend). Class-level, so that it holds whichever server extension Jupyter loads first."""
    if getattr(BaseHandler, "_autograder_guarded", False):
        return
    BaseHandler.render = _render
    BaseHandler.exporter = property(_PageExporter)
    BaseHandler._autograder_guarded = True


# ---------------------------------------------------------------- feedback pages


def comment_html(text):
    """A comment as the page shows it: its text, line breaks kept, out of MathJax's reach (TeX such as
    \\href{javascript:...} would otherwise become a live link)."""
    return f'<span class="tex2jax_ignore">{html.escape(text).replace(chr(10), "<br>" + chr(10))}</span>'


class FeedbackText(NbGraderPreprocessor):
    """After GetGrades (policy.guard_feedback puts it last in GenerateFeedback): every string nbgrader's feedback
    template prints is escaped, and each comment is a token that `with_comments` replaces."""

    def preprocess(self, nb, resources):
        comments = resources.setdefault(COMMENTS, {})
        for cell in nb.cells:
            meta = cell.get("metadata", {}).get("nbgrader")
            if isinstance(meta, dict):
                for key, value in list(meta.items()):
                    if key == "comment" and isinstance(value, str) and value:
                        meta[key] = token = "autogradercomment" + secrets.token_hex(16)  # markdown renders it as a word
                        comments[token] = comment_html(value)
                    elif isinstance(value, str):
                        meta[key] = html.escape(value)
        ours = resources.get("nbgrader", {})
        if isinstance(ours.get("notebook"), str):  # its title and heading; the file's name comes from unique_key
            ours["notebook"] = html.escape(ours["notebook"])
        return nb, resources


def with_comments(page, resources):
    """The feedback page with each comment's token replaced by the comment as escaped text."""
    for token, shown in dict(resources.get(COMMENTS, {})).items():
        page = page.replace(token, shown)
    return page
