"""A Content-Security-Policy on every page that shows a submission: defence in depth behind autograder.grading.inert.

Feedback pages (nbgrader's GenerateFeedback, guarded from nbgrader_config.py by `guard_feedback`)
carry it in a <meta> tag; the formgrader's submission pages get it as a header from the server
extension this module also is (jupyter-config/instructor names it). Neither page may run an inline
script or an event handler that its own template did not write: the template's few are allowed
by their hashes, taken from the page outside the notebook, where the student's cells are.

What nbgrader's own pages need, and so get:
- the formgrader: its scripts from the server ('self'), its inline scripts and its two onclick
  handlers (by hash; 'unsafe-hashes' for the handlers), 'unsafe-eval' (underscore's templates and
  MathJax 2 compile code), requests to the server (saving grades and comments), MathJax from cdnjs,
  and pictures from https: pages (the lessons' badges);
- a feedback page: MathJax from cdnjs with 'unsafe-eval' (it evaluates its own configuration),
  its inline styles, its stylesheet's fonts, and pictures (data: and https:); nothing else, not even a request.
"""
from __future__ import annotations

import base64
import hashlib
import re

MATHJAX = "https://cdnjs.cloudflare.com/ajax/libs/mathjax/"
CDN = "https://cdnjs.cloudflare.com"
SCRIPT = re.compile(r"<script\b([^>]*)>(.*?)</script>", re.S | re.I)
HANDLER = re.compile(r"""\son[a-z]+\s*=\s*(?:"([^"]*)"|'([^']*)')""", re.I)
NOTEBOOK = re.compile(r'<div[^>]*\bid="notebook-container"', re.I)


def _hash(text):
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def _own(html):
    """The page outside the notebook: what nbgrader's template wrote (the notebook's cells come after)."""
    found = NOTEBOOK.search(html)
    return html if found is None else html[:found.start()]


def formgrader_policy(html):
    own = _own(html)
    scripts = {_hash(body) for attrs, body in SCRIPT.findall(own) if "src=" not in attrs.lower() and body.strip()}
    handlers = {_hash(a or b) for a, b in HANDLER.findall(own)}
    script_src = " ".join(["'self'", "'unsafe-eval'", *sorted(scripts), *(["'unsafe-hashes'", *sorted(handlers)] if handlers else []), MATHJAX])
    return (f"default-src 'self'; script-src {script_src}; style-src 'self' 'unsafe-inline' {CDN}; img-src 'self' data: https:; "
            f"font-src 'self' data: {CDN}; connect-src 'self'; frame-src 'none'; object-src 'none'; base-uri 'self'; form-action 'self'")


FEEDBACK_POLICY = (f"default-src 'none'; script-src {MATHJAX} 'unsafe-eval'; style-src 'unsafe-inline' {CDN}; img-src data: https:; "
                   f"font-src 'self' data: {CDN}; base-uri 'none'; form-action 'none'")


def with_policy(html, policy=FEEDBACK_POLICY):
    """A page with the policy as the first thing in its head, before anything it could govern."""
    meta = f'<meta http-equiv="Content-Security-Policy" content="{policy}">'
    head = re.search(r"<head[^>]*>", html, re.I)
    return html[:head.end()] + "\n" + meta + html[head.end():] if head else meta + html


def guard_feedback():
    """Have nbgrader's GenerateFeedback write every page with the feedback policy."""
    from nbgrader.converters.generate_feedback import GenerateFeedback

    if getattr(GenerateFeedback, "_csp_guarded", False):
        return
    write = GenerateFeedback.write_single_notebook

    def guarded(self, output, resources):
        return write(self, with_policy(output), resources)

    GenerateFeedback.write_single_notebook, GenerateFeedback._csp_guarded = guarded, True


# ---------------------------------------------------------------- the formgrader, a Jupyter server extension


def _jupyter_server_extension_points():
    return [{"module": "autograder.grading.csp"}]


def _load_jupyter_server_extension(serverapp):
    """Every page the formgrader renders from a notebook gets its policy as a header."""
    from nbgrader.server_extensions.formgrader.handlers import SubmissionHandler
    from tornado.web import RequestHandler

    if getattr(SubmissionHandler, "_csp_guarded", False):
        return

    def write(self, chunk):
        if isinstance(chunk, (str, bytes)):
            text = chunk.decode(errors="replace") if isinstance(chunk, bytes) else chunk
            if "<html" in text[:2000].lower():
                self.set_header("Content-Security-Policy", formgrader_policy(text))
        return RequestHandler.write(self, chunk)

    SubmissionHandler.write, SubmissionHandler._csp_guarded = write, True
    serverapp.log.info("autograder: a Content-Security-Policy on the formgrader's submission pages")
