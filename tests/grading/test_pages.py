"""What nbgrader prints from the gradebook is text on every page (autograder.grading.pages.escaping), and every formgrader
response carries a policy that trusts nbgrader's template files only (autograder.grading.pages.policy).

A hostile student id (a folder's name: `x<img src=x onerror=...>`) and hostile comments (a check's failing
reason carries a learner's exception message; an instructor types comments) are planted in a course's
gradebook as `nbgrader db student add` would let them in. The feedback page is written by nbgrader's
generate_feedback with the course's nbgrader_config.py; the formgrader's pages are served by a real
Jupyter server with the instructor's configuration, on 127.0.0.1. The assertions read the bytes served."""
import base64
import hashlib
import html
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from html.parser import HTMLParser

import nbformat
import pytest
from jinja2 import Environment, FileSystemLoader
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from autograder.course import sqlite_url
from autograder.grading.pages import policy, escaping
from autograder.hub import proxy
from conftest import ROOT

ASSIGNMENT, NOTEBOOK, HONEST = "a1", "nb", "ada"
HOSTILE_ID = "x<img src=x onerror=alert(1)>"
HOSTILE_COMMENT = ('<img src=https://example.invalid/x onerror=alert(2)> <meta http-equiv="refresh" content="0;url=https://evil.invalid"> '
                   '<script>alert(3)</script> [x](javascript:alert(4))\n# Score: 12 / 12')
# the inline event handlers nbgrader 0.9's templates write, word for word (formgrade_macros, manage_students, ...)
TEMPLATE_HANDLERS = {"createStudentModal();", "createAssignmentModal();", "toggleAllNames()", "toggle_name(true);", "toggle_name(false);"}
PATH = f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"  # nbgrader's Gradebook runs `alembic` from the PATH


def _sha(text):
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def _cell(cell, **nbgrader):
    cell.metadata["nbgrader"] = {"schema_version": 3, "locked": False, "solution": False, "grade": False, **nbgrader}
    return cell


def _plant(course):
    """A gradebook with one assignment, an honest student and the hostile one, each with a hostile automatic comment
    (a check's reason) and a hostile manual one (the formgrader's), and their autograded notebooks."""
    from nbgrader.api import Gradebook

    with Gradebook(sqlite_url(course / "gradebook.db")) as gb:
        gb.add_assignment(ASSIGNMENT)
        gb.add_notebook(NOTEBOOK, ASSIGNMENT)
        for name in ("answer_x", "answer_y"):
            gb.add_solution_cell(name, NOTEBOOK, ASSIGNMENT)
        gb.add_grade_cell("answer_x", NOTEBOOK, ASSIGNMENT, max_score=4, cell_type="code")
        gb.add_grade_cell("check_x", NOTEBOOK, ASSIGNMENT, max_score=8, cell_type="code")
        for student in (HONEST, HOSTILE_ID):
            gb.add_student(student)
            gb.add_submission(ASSIGNMENT, student)
            gb.find_comment("answer_x", NOTEBOOK, ASSIGNMENT, student).auto_comment = HOSTILE_COMMENT
            gb.find_comment("answer_y", NOTEBOOK, ASSIGNMENT, student).manual_comment = HOSTILE_COMMENT.replace("alert", "confirm")
            gb.find_grade("check_x", NOTEBOOK, ASSIGNMENT, student).auto_score = 8
        gb.db.commit()
    nb = new_notebook(cells=[_cell(new_code_cell("x = 1"), solution=True, grade=True, grade_id="answer_x", points=4),
                             _cell(new_code_cell("check()"), grade=True, locked=True, grade_id="check_x", points=8),
                             _cell(new_markdown_cell("my answer"), solution=True, grade_id="answer_y")],
                      metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    for student in (HONEST, HOSTILE_ID):
        (course / "autograded" / student / ASSIGNMENT).mkdir(parents=True)
        nbformat.write(nb, course / "autograded" / student / ASSIGNMENT / f"{NOTEBOOK}.ipynb")


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    course = tmp_path_factory.mktemp("pages") / "course"
    course.mkdir()
    (course / "nbgrader_config.py").write_bytes((ROOT / "nbgrader_config.py").read_bytes())
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", PATH)
        _plant(course)
    done = subprocess.run([sys.executable, "-m", "nbgrader", "generate_feedback", ASSIGNMENT, "--student", HONEST],
                          cwd=course, env=dict(os.environ, PATH=PATH), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return course


class Server:
    """A Jupyter server on the course with the instructor's configuration (the formgrader and our extension)."""

    def __init__(self, course, home):
        self.token, port = secrets.token_hex(16), proxy.free_ports(1)[0]
        self.url = f"http://127.0.0.1:{port}"
        env = dict(os.environ, PATH=PATH, JUPYTER_CONFIG_PATH=str(ROOT / "jupyter-config" / "instructor"), JUPYTER_CONFIG_DIR=str(home / "config"),
                   JUPYTER_RUNTIME_DIR=str(home / "runtime"), JUPYTER_DATA_DIR=str(home / "data"), IPYTHONDIR=str(home / "ipython"))
        self.log = home / "server.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "jupyter_server", "--no-browser", "--ServerApp.ip=127.0.0.1",
                                          f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--ServerApp.root_dir={course}",
                                          f"--IdentityProvider.token={self.token}", *(["--allow-root"] if os.geteuid() == 0 else [])],
                                         cwd=course, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 120
        while self.get("/api/status")[0] != 200:
            assert self.proc.poll() is None and time.monotonic() < deadline, self.log.read_text()[-3000:]
            time.sleep(0.3)

    def get(self, path):
        """(status, headers, body) of GET path, redirects not followed."""
        class Stay(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args, **kwargs):
                return None
        sep = "&" if "?" in path else "?"
        try:
            with urllib.request.build_opener(Stay).open(f"{self.url}{path}{sep}token={self.token}", timeout=30) as r:
                return r.status, r.headers, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read()
        except OSError:
            return None, {}, b""

    def stop(self):
        os.killpg(self.proc.pid, signal.SIGKILL)  # it started no kernel, and writes nothing the tests read
        self.proc.wait()


@pytest.fixture(scope="module")
def server(course, tmp_path_factory):
    started = Server(course, tmp_path_factory.mktemp("jupyter"))
    yield started
    started.stop()


def _quoted(text):
    return urllib.parse.quote(text, safe="")


def submission_id(server, student):
    status, _, body = server.get(f"/formgrader/api/submitted_notebooks/{ASSIGNMENT}/{NOTEBOOK}")
    assert status == 200, body[:500]
    return next(s["id"] for s in json.loads(body) if s["student"] == student)


class _Tags(HTMLParser):
    """Every start tag of a page with its attributes, and the text of its headings, as a browser's tokenizer reads them."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.headings, self._in = [], [], None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if re.fullmatch(r"h[1-6]", tag):
            self._in = tag
            self.headings.append("")

    def handle_endtag(self, tag):
        if tag == self._in:
            self._in = None

    def handle_data(self, data):
        if self._in:
            self.headings[-1] += data


def parsed(page):
    found = _Tags()
    found.feed(page.decode() if isinstance(page, bytes) else page)
    return found


def is_mathjax(attrs):
    """MathJax's two script tags (nbconvert's macro): its loader from the CDN, and its configuration, which no browser runs."""
    return attrs.get("src", "").startswith(policy.MATHJAX) or attrs.get("type") == "text/x-mathjax-config"


def nonce_of(headers):
    return re.search(r"'nonce-([^']+)'", headers["Content-Security-Policy"]).group(1)


# ---------------------------------------------------------------- feedback


def test_a_feedback_page_shows_every_comment_as_text(course):
    page = (course / "feedback" / HONEST / ASSIGNMENT / f"{NOTEBOOK}.html").read_bytes()
    for word in (b"alert", b"confirm"):  # the automatic comment and the instructor's
        shown = html.escape(HOSTILE_COMMENT.replace("alert", word.decode())).replace("\n", "<br>\n").encode()
        assert shown in page  # every character of it, as text
        assert b"<img src=https://example.invalid/x onerror=" + word not in page and b"<script>" + word not in page
        assert b'href="javascript:' + word not in page
    found = parsed(page)
    ours = {"http-equiv": "Content-Security-Policy", "content": policy.FEEDBACK_POLICY}
    assert [a for t, a in found.tags if t == "meta" and "http-equiv" in a] == [ours]
    assert not [a for t, a in found.tags if t == "img"]
    assert not [a for t, a in found.tags if t == "script" and not is_mathjax(a)]
    assert not [h for h in found.headings if "12 / 12" in h] and [h for h in found.headings if "(Score: 8.0 / 12.0)" in h]


def test_the_feedback_policy_allows_embedded_pictures_only_and_the_page_holds_no_other():
    img_src = next(d.split()[1:] for d in policy.FEEDBACK_POLICY.split(";") if d.split()[0] == "img-src")
    assert img_src == ["data:"]
    embedded = '<img src="data:image/png;base64,AA==">'
    page = f'<a href="https://colab.example"><IMG alt="Open in &quot;Colab&quot;" src=https://colab.example/badge.svg></a>{embedded}'
    assert policy.replace_tags(page, policy.FETCHED_PICTURE) == f'<a href="https://colab.example">Open in &quot;Colab&quot;</a>{embedded}'


def test_nbgrader_alone_would_render_the_comment_as_html():
    """The control: nbgrader's feedback template passes a comment through markdown, raw HTML and javascript: links kept."""
    from nbconvert.filters.markdown import markdown2html_mistune

    rendered = markdown2html_mistune(HOSTILE_COMMENT)
    assert "<img src=https://example.invalid/x onerror=alert(2)>" in rendered and 'href="javascript:alert(4)"' in rendered
    assert [h for h in parsed(rendered).headings if "Score: 12 / 12" in h]


def test_every_http_equiv_is_removed_however_it_is_written():
    page = ("<html><head><meta charset='utf-8'></head><body><META content=a\"b HTTP-EQUIV=refresh> <meta content=\"a>b\" "
            "http-equiv='refresh'><meta/http-equiv=set-cookie/>text</body></html>")
    kept = policy.with_policy(page)
    assert [a for t, a in parsed(kept).tags if t == "meta"] == [{"http-equiv": "Content-Security-Policy", "content": policy.FEEDBACK_POLICY},
                                                                {"charset": "utf-8"}]
    assert kept.endswith("<body> text</body></html>")


# ---------------------------------------------------------------- the formgrader


def test_nbgrader_alone_would_print_the_id_as_html():
    """The control: nbgrader's own Jinja environment writes the id into the page as it is."""
    from nbgrader.server_extensions.formgrader import handlers

    env = Environment(loader=FileSystemLoader([handlers.template_path]))
    assert HOSTILE_ID in env.get_template("manage_students_assignments.tpl").render(student_id=HOSTILE_ID, base_url="")


def formgrader_pages(server):
    """{name: path} of the formgrader's pages that print the hostile id, its path or its comment (and its configuration's)."""
    sid, student = submission_id(server, HOSTILE_ID), _quoted(HOSTILE_ID)
    return {"manage_students": "/formgrader/manage_students", "a student": f"/formgrader/manage_students/{student}",
            "a student's assignment": f"/formgrader/manage_students/{student}/{ASSIGNMENT}",
            "gradebook": "/formgrader/gradebook", "an assignment's notebooks": f"/formgrader/gradebook/{ASSIGNMENT}",
            "a notebook's submissions": f"/formgrader/gradebook/{ASSIGNMENT}/{NOTEBOOK}",
            "manage_submissions": f"/formgrader/manage_submissions/{ASSIGNMENT}", "a submission": f"/formgrader/submissions/{sid}/",
            "manage_assignments": "/formgrader/manage_assignments"}


def test_the_formgrader_prints_ids_and_paths_as_text(server):
    shown = html.escape(HOSTILE_ID).encode()
    for name, path in formgrader_pages(server).items():
        status, headers, page = server.get(path)
        assert status == 200, (name, status, page[-1000:])
        assert HOSTILE_ID.encode() not in page and b"<img src=x" not in page, name
        if name in ("a student", "a student's assignment", "a submission"):  # the pages that print the id
            assert shown in page, name
        nonce = nonce_of(headers)
        for tag, attrs in parsed(page).tags:
            assert {v for a, v in attrs.items() if a.startswith("on")} <= TEMPLATE_HANDLERS, (name, tag, attrs)
            if tag == "script":  # nbgrader's own, each with this response's nonce; MathJax's from its CDN
                assert attrs.get("nonce") == nonce or is_mathjax(attrs), (name, attrs)
    status, _, page = server.get(f"/formgrader/api/student/{_quoted(HOSTILE_ID)}")
    assert status == 200 and json.loads(page)["id"] == HOSTILE_ID  # the gradebook holds the id as it is: the pages escape it


def test_a_hostile_id_in_the_url_is_text_too(server):
    """A link the instructor is lured to open: the id in the URL is never in the gradebook, the page prints it all the same."""
    status, _, page = server.get(f"/formgrader/manage_students/{_quoted('<script>alert(5)</script>')}/{_quoted('<svg onload=alert(6)>')}")
    assert status == 200 and b"<script>alert(5)" not in page and b"<svg onload" not in page
    assert b"&lt;script&gt;alert(5)&lt;/script&gt;" in page and b"&lt;svg onload=alert(6)&gt;" in page


def _sample(pattern):
    """A path for one of nbgrader's formgrader routes, every group filled in."""
    from nbgrader.server_extensions.formgrader import handlers

    path = pattern.replace(handlers._navigation_regex, "next")
    path = re.sub(r"\(\?P<\w+>\[\^/\]\+\)|\(\[\^/\]\+\)", ASSIGNMENT, path)
    return path.replace("(.*)", "x.ipynb").replace("/?", "")


def test_every_formgrader_response_carries_a_policy_that_trusts_only_nbgrader_s_templates(server):
    from nbgrader.server_extensions.formgrader import apihandlers, handlers

    for text in TEMPLATE_HANDLERS:  # the oracle: handlers as nbgrader's template files spell them
        assert any(f'"{text}"' in p.read_text() for p in escaping.nbgrader_templates().rglob("*.*")), text
    allowed = {_sha(t) for t in TEMPLATE_HANDLERS}
    paths = [_sample(route[0]) for route in handlers.default_handlers + apihandlers.default_handlers]
    paths += ["/formgrader/static/js/utils.js", "/formgrader/fonts/x", "/formgrader/no_such_page", *formgrader_pages(server).values()]
    nonces = set()
    for path in paths:
        status, headers, _ = server.get(path)
        policy = headers.get("Content-Security-Policy", "")
        assert status and policy.startswith("default-src 'self'; script-src 'nonce-"), (path, status, policy)
        script_src = next(d.split()[1:] for d in policy.split(";") if d.split()[0] == "script-src")
        assert {s for s in script_src if s.startswith("'sha")} == allowed, (path, script_src)
        assert "'unsafe-inline'" not in script_src and "'self'" not in script_src and "*" not in script_src, (path, script_src)
        assert _sha("alert(1)") not in policy and "frame-ancestors 'self'" in policy
        nonces.add(nonce_of(headers))
    assert len(nonces) == len(paths)  # one a response


def test_only_nbgrader_s_template_files_get_the_nonce():
    """nbconvert's templates write a cell's JavaScript output into a <script> tag of theirs: that tag gets no nonce."""
    from nbgrader.server_extensions.formgrader import handlers

    from jupyter_core.paths import jupyter_path

    loader = escaping.NonceLoader(FileSystemLoader([handlers.template_path, *jupyter_path("nbconvert", "templates")]), "n")
    env = Environment(loader=loader)
    own = loader.get_source(env, "formgrade/formgrade_macros.html.j2")[0]
    assert own.count("<script") == own.count('<script nonce="{{ n }}"') > 0
    theirs = loader.get_source(env, "classic/base.html.j2")[0]
    assert "<script" in theirs and "nonce" not in theirs
