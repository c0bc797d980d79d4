"""A Content-Security-Policy on every page that shows a submission: defence in depth behind
autograder.grading.pages.inert (what a student's code displayed) and autograder.grading.pages.escaping (what nbgrader
prints from the gradebook: ids, names, paths, comments).

Feedback pages (nbgrader's GenerateFeedback, guarded from nbgrader_config.py by `guard_feedback`)
carry it in a <meta> tag, the only http-equiv they keep; every response of the formgrader gets it as
a header from the server extension this module also is (jupyter-config/instructor names it). It sits
above autograder.grading.pages.escaping, which makes each response's nonce and marks the templates' scripts with it,
and installs both: the policy and the pages' escaping.

Neither page runs a script its templates did not write. The trust comes from nbgrader's template
files, never from the page being served (a student's id, comment or cell could have written any part
of it): on the formgrader, each <script> tag written in nbgrader's template files carries a nonce
made for that one response (autograder.grading.pages.escaping puts it there), and its few inline event
handlers are allowed by the hashes of their text as those files spell it.

What nbgrader's own pages need, and so get:
- the formgrader: its scripts (by the nonce: from the server, inline ones too), its template's onclick
  handlers (by hash, with 'unsafe-hashes'), 'unsafe-eval' (underscore's templates and MathJax 2
  compile code), requests to the server (saving grades and comments), MathJax from cdnjs, and
  pictures from https: pages (the lessons' badges);
- a feedback page: MathJax from cdnjs with 'unsafe-eval' (it evaluates its own configuration),
  its inline styles, its stylesheet's fonts, and embedded pictures (data: only, so that opening the
  page tells no server who read it); nothing else, not even a request.
"""
from __future__ import annotations

import base64
import functools
import hashlib
import html as html_lib
import re
from html.parser import HTMLParser

from jupyter_server.utils import url_path_join
from nbgrader.converters.generate_feedback import GenerateFeedback

from autograder.grading.pages import escaping

MATHJAX = "https://cdnjs.cloudflare.com/ajax/libs/mathjax/"
CDN = "https://cdnjs.cloudflare.com"
HANDLER = re.compile(r"""\son[a-z]+\s*=\s*(?:"([^"]*)"|'([^']*)')""", re.I)


def _hash(text):
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


@functools.lru_cache(maxsize=1)
def template_handler_hashes():
    """The hashes of the inline event handlers written in nbgrader's template files (onClick="createStudentModal();"
    and a few more), as the browser reads them; a handler whose text the template fills in is not among them."""
    found = set()
    for path in sorted(escaping.nbgrader_templates().rglob("*")):
        if path.suffix in (".tpl", ".j2") and path.is_file():
            for a, b in HANDLER.findall(path.read_text()):
                if "{{" not in a + b and "{%" not in a + b:
                    found.add(_hash(html_lib.unescape(a or b)))
    return tuple(sorted(found))


def formgrader_policy(nonce_value):
    """The formgrader's policy for a response whose template's script tags carry `nonce_value`."""
    handlers = template_handler_hashes()
    script_src = " ".join([f"'nonce-{nonce_value}'", "'unsafe-eval'", *(["'unsafe-hashes'", *handlers] if handlers else []), MATHJAX])
    return (f"default-src 'self'; script-src {script_src}; style-src 'self' 'unsafe-inline' {CDN}; img-src 'self' data: https:; "
            f"font-src 'self' data: {CDN}; connect-src 'self'; frame-src 'none'; object-src 'none'; base-uri 'self'; "
            f"form-action 'self'; frame-ancestors 'self'")


FEEDBACK_POLICY = (f"default-src 'none'; script-src {MATHJAX} 'unsafe-eval'; style-src 'unsafe-inline' {CDN}; img-src data:; "
                   f"font-src 'self' data: {CDN}; base-uri 'none'; form-action 'none'")


class _Tags(HTMLParser):
    """The start tags of a page that `wanted(tag, attrs)` picks, found as a browser's tokenizer finds them (quoted
    values or not, any case, a '>' inside a quoted value), each with where it is and its text."""

    def __init__(self, wanted):
        super().__init__(convert_charrefs=False)
        self.wanted, self.found = wanted, []

    def handle_starttag(self, tag, attrs):
        attrs = {name: value or "" for name, value in attrs}
        if self.wanted(tag, attrs):
            self.found.append((self.getpos(), self.get_starttag_text(), tag, attrs))


def replace_tags(html, *rules):
    """The page with each start tag that a rule (wanted(tag, attrs), replacement(attrs)) picks replaced by its
    replacement, the first rule that picks it; in one reading of the page, however many rules."""
    parser = _Tags(lambda tag, attrs: any(wanted(tag, attrs) for wanted, _ in rules))
    parser.feed(html)
    parser.close()
    starts = [0, *(m.end() for m in re.finditer(r"\n", html))]
    for (line, column), text, tag, attrs in reversed(parser.found):
        at = starts[line - 1] + column
        replacement = next(replace for wanted, replace in rules if wanted(tag, attrs))
        html = html[:at] + replacement(attrs) + html[at + len(text):]
    return html


# a <meta http-equiv>: a refresh (which no policy governs) would take its reader elsewhere
HTTP_EQUIV = (lambda tag, attrs: tag == "meta" and "http-equiv" in attrs, lambda attrs: "")
# a picture the page would fetch from elsewhere (the lessons' Colab badge), shown as its alt text: the feedback
# policy would block it, with a broken picture and a complaint in the console
FETCHED_PICTURE = (lambda tag, attrs: tag == "img" and not attrs.get("src", "").strip().lower().startswith("data:"),
                   lambda attrs: html_lib.escape(attrs.get("alt", "")))


def with_policy(html, policy=FEEDBACK_POLICY, also=()):
    """A page with the policy as the first thing in its head, before anything it could govern, and as its only
    http-equiv: a refresh, a cookie or a second policy is removed wherever it is. `also`: more rules of
    replace_tags, applied in the same reading of the page."""
    html = replace_tags(html, HTTP_EQUIV, *also)
    meta = f'<meta http-equiv="Content-Security-Policy" content="{policy}">'
    head = re.search(r"<head[^>]*>", html, re.I)
    return html[:head.end()] + "\n" + meta + html[head.end():] if head else meta + html


def guard_feedback():
    """Have nbgrader's GenerateFeedback show every string nbgrader puts on a page as text (escaping.FeedbackText, after
    GetGrades has added the gradebook's comments) and write every page with the feedback policy."""
    if getattr(GenerateFeedback, "_csp_guarded", False):
        return
    init, write = GenerateFeedback.__init__, GenerateFeedback.write_single_notebook

    def guarded_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if escaping.FeedbackText not in self.preprocessors:  # last, whatever the configuration lists
            self.preprocessors = [*self.preprocessors, escaping.FeedbackText]

    def guarded_write(self, output, resources):
        return write(self, with_policy(escaping.with_comments(output, resources), also=[FETCHED_PICTURE]), resources)

    GenerateFeedback.__init__, GenerateFeedback.write_single_notebook = guarded_init, guarded_write
    GenerateFeedback._csp_guarded = True


# ---------------------------------------------------------------- the formgrader, a Jupyter server extension


class FormgraderPolicy:
    """Tornado's output transform for every response under the formgrader's URL (its pages, its API, its
    static files, its error pages): the formgrader policy as the Content-Security-Policy header,
    in place of Jupyter's own, with the nonce the response's template rendered with."""

    def __init__(self, request, prefix):
        self.request, self.prefix = request, prefix

    def transform_first_chunk(self, status_code, headers, chunk, finishing):
        path = self.request.path
        if path == self.prefix or path.startswith(self.prefix + "/"):
            headers["Content-Security-Policy"] = formgrader_policy(escaping.nonce(self.request))
        return status_code, headers, chunk

    def transform_chunk(self, chunk, finishing):
        return chunk


def _jupyter_server_extension_points():
    return [{"module": "autograder.grading.pages.policy"}]


def _load_jupyter_server_extension(serverapp):
    """Every formgrader response gets its policy; its pages escape what they print and mark their own scripts."""
    webapp = serverapp.web_app
    if not any(getattr(t, "func", None) is FormgraderPolicy for t in webapp.transforms):
        prefix = url_path_join(webapp.settings.get("base_url", "/"), "formgrader")
        webapp.add_transform(functools.partial(FormgraderPolicy, prefix=prefix))
    escaping.guard_formgrader()
    serverapp.log.info("autograder: the formgrader escapes what it prints, and every response carries a Content-Security-Policy")
