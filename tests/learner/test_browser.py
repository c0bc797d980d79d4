"""The course as a learner meets it: JupyterLab in a real browser.

JupyterLab is started on a temporary copy of the course exactly as `make lab`
(student) and `make lab-instructor` start it (`python -m autograder.lab`), and
driven in headless Chromium, the one from the system's packages (Debian:
`apt-get install chromium`), through Playwright; nothing is downloaded. The
tests run cells with JupyterLab's own Run-menu commands and read the results
from the page. Screenshots go to test-artifacts/browser/.

Without Chromium these tests are skipped; `make test-browser` sets
COURSE_BROWSER_TEST=required, which turns the skip into a failure.
"""
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import nbformat
import pytest

from autograder import registry
from autograder.hub import proxy
from conftest import ASSIGNMENTS, ROOT

pytestmark = pytest.mark.slow

NOTEBOOK = "05_self_attention"  # small and fast: six exercises, no training
ARTIFACTS = ROOT / "test-artifacts" / "browser"
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
REQUIRED = os.environ.get("COURSE_BROWSER_TEST") == "required"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--no-first-run"]
RUN_TIMEOUT_S = 300  # one notebook's run, cells included

if not CHROMIUM and not REQUIRED:
    pytest.skip("Chromium is not installed (Debian: apt-get install chromium); make test-browser requires it",
                allow_module_level=True)
if NOTEBOOK not in ASSIGNMENTS and not REQUIRED:
    pytest.skip(f"COURSE_ASSIGNMENTS leaves out {NOTEBOOK}", allow_module_level=True)

# Each cell as the page shows it: its prompt and outputs from its node; its source from its model,
# since JupyterLab may not have built the editor of a cell far below the fold yet.
CELLS_JS = """() => window.jupyterapp.shell.currentWidget.content.widgets.map(w => ({
  code: w.model.type === 'code',
  prompt: ((w.node.querySelector('.jp-InputArea-prompt') || {}).textContent || '').trim(),
  source: w.model.sharedModel.getSource(),
  output: Array.from(w.node.querySelectorAll('.jp-OutputArea-output')).map(o => o.textContent).join('\\n'),
}))"""

# Run > Run All Cells. JupyterLab stops at a cell that raises (a failing check
# does); a student then runs on from the next cell, and so does this, with
# Run > Run Selected Cell and All Below, until the last cell has run.
RUN_ALL_JS = """async ([timeoutMs]) => {
  const app = window.jupyterapp, nb = app.shell.currentWidget.content;
  const run = async (command) => {
    let timer;
    const timeout = new Promise((_, reject) => { timer = setTimeout(() => reject(new Error('cells still running after ' + timeoutMs + ' ms')), timeoutMs); });
    try { return await Promise.race([app.commands.execute(command), timeout]); } finally { clearTimeout(timer); }
  };
  const ran = () => nb.widgets.some(c => c.model.type === 'code' && c.model.executionCount !== null);
  let rounds = 1;
  let ok = await run('notebook:run-all-cells');
  if (!ok && !ran()) {  // just after a kernel starts, JupyterLab can answer false before any cell has run
    await new Promise(resolve => setTimeout(resolve, 1000));
    ok = await run('notebook:run-all-cells');
  }
  while (!ok) {
    let last = -1;
    nb.widgets.forEach((c, i) => { if (c.model.type === 'code' && c.model.executionCount !== null) last = i; });
    if (last < 0 || last + 1 >= nb.widgets.length) break;
    nb.activeCellIndex = last + 1;
    rounds += 1;
    ok = await run('notebook:run-all-below');
  }
  return rounds;
}"""

KERNEL_READY_JS = """() => {
  if (document.querySelector('.jp-Dialog')) return 'dialog';
  // the toolbar can say idle before a session exists: ask the notebook's own session
  const context = window.jupyterapp.shell.currentWidget?.sessionContext;
  const kernel = context?.session?.kernel;
  return kernel && kernel.connectionStatus === 'connected' && kernel.status === 'idle'
      && context.kernelDisplayName.includes('Python 3') ? 'ready' : false;
}"""


class Lab:
    """A JupyterLab server, started by `python -m autograder.lab ROLE FOLDER` as the Makefile does."""

    def __init__(self, role, course, folder, home):
        self.role, self.token, self.port = role, secrets.token_hex(16), proxy.free_ports(1)[0]
        self.url = f"http://127.0.0.1:{self.port}"
        home.mkdir(parents=True, exist_ok=True)
        # The user's own Jupyter folders stay out of it; in the private config folder,
        # JupyterLab's news announcements are off (they would reach for the internet).
        (home / "config" / "labconfig").mkdir(parents=True, exist_ok=True)
        (home / "config" / "labconfig" / "page_config.json").write_text(
            json.dumps({"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}}))
        env = dict(os.environ, PYTHONUNBUFFERED="1", JUPYTER_CONFIG_DIR=str(home / "config"),
                   JUPYTER_RUNTIME_DIR=str(home / "runtime"), JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"),
                   JUPYTERLAB_SETTINGS_DIR=str(home / "settings"), IPYTHONDIR=str(home / "ipython"))
        env.pop("JUPYTER_CONFIG_PATH", None)
        env.pop("NBGRADER_EXECUTION", None)
        self.log = home / "server.log"
        cmd = [sys.executable, "-m", "autograder.lab", role, str(folder), "--no-browser",
               "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0",
               f"--IdentityProvider.token={self.token}",
               "--LabApp.expose_app_in_browser=True"]  # window.jupyterapp: the Run menu's commands, awaitable
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(cmd, cwd=course, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def wait(self, timeout=180):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"the {self.role} JupyterLab exited:\n{self.log.read_text()[-3000:]}")
            if self.status("/api/status") == 200:
                return self
            time.sleep(0.5)
        pytest.fail(f"the {self.role} JupyterLab did not answer in {timeout} s:\n{self.log.read_text()[-3000:]}")

    def status(self, path):
        """HTTP status of GET path (redirects not followed)."""
        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args, **kwargs):
                return None
        opener = urllib.request.build_opener(NoRedirect)
        try:
            with opener.open(f"{self.url}{path}?token={self.token}", timeout=10) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code
        except OSError:
            return None

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # the server shuts its kernels down
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A temporary copy of the course, with a small notebook whose cell shows a progress bar."""
    dest = tmp_path_factory.mktemp("browser") / "course"
    shutil.copytree(ROOT, dest, ignore=shutil.ignore_patterns(
        ".git", ".venv", "__pycache__", "*.egg-info", ".pytest_cache", "test-artifacts", "gradebook.db", "build"))
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}})
    nb.cells = [nbformat.v4.new_code_cell('from tqdm.auto import tqdm\n\nfor step in tqdm(range(3), desc="training"):\n    pass')]
    nbformat.write(nb, dest / "notebooks" / "progress.ipynb")
    return dest


@pytest.fixture(scope="module")
def labs(course, tmp_path_factory):
    if not CHROMIUM:
        pytest.fail("Chromium is not installed (Debian: apt-get install chromium)")
    home = tmp_path_factory.mktemp("jupyter")
    started = {
        "student": Lab("student", course, course / "notebooks", home / "student"),
        "instructor": Lab("instructor", course, course, home / "instructor"),
    }
    try:
        for lab in started.values():  # both start at once; wait for each
            lab.wait()
        yield started
    finally:
        for lab in started.values():
            lab.stop()


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("Playwright is missing: pip install -e '.[browser]' (make install does)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def pages(labs, browser):
    """One JupyterLab page per role, loaded once."""
    out = {}
    for role, lab in labs.items():
        page = browser.new_context(viewport={"width": 1400, "height": 2000}).new_page()  # a context more pages can share
        page.set_default_timeout(120_000)
        page.goto(f"{lab.url}/lab?reset&token={lab.token}")
        page.wait_for_selector("#jp-main-dock-panel")
        page.wait_for_function("() => window.jupyterapp && window.jupyterapp.started")
        out[role] = page
    yield out
    for page in out.values():
        page.context.close()


def open_notebook(page, path):
    """Open `path` (relative to the server's folder) and wait for its kernel; no dialog may ask for one."""
    opened = page.evaluate("""async (path) => {
      const widget = await window.jupyterapp.commands.execute('docmanager:open', {path});
      await widget.context.ready;
      return window.jupyterapp.shell.currentWidget.context.path;
    }""", path)
    assert opened == path
    state = page.wait_for_function(KERNEL_READY_JS).json_value()
    assert state == "ready", f"opening {path} asked for a kernel: {page.locator('.jp-Dialog').inner_text()}"
    # an idle kernel whose websocket is up may still not answer: wait for one round trip
    connection = page.evaluate("""async () => {
      const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
      await kernel.requestKernelInfo();
      return kernel.connectionStatus;
    }""")
    assert connection == "connected", connection


def run_all(page):
    rounds = page.evaluate(RUN_ALL_JS, [RUN_TIMEOUT_S * 1000])
    return page.evaluate(CELLS_JS), rounds


def check_cells(cells, name):
    """{exercise: the check cell} for notebook `name`."""
    found = {}
    for ex in registry.for_notebook(name):
        matches = [c for c in cells if c["code"] and c["source"].strip() == f'check("{ex.name}", {ex.name})']
        assert len(matches) == 1, f"the page shows {len(matches)} check cells for {ex.name}"
        found[ex.name] = matches[0]
    return found


def screenshot(page, filename, capsys, scroll_to=None):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    if scroll_to is not None:
        page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell").nth(scroll_to).evaluate(
            "c => c.scrollIntoView({block: 'start'})")
        page.wait_for_timeout(300)
    path = ARTIFACTS / filename
    page.screenshot(path=str(path))
    with capsys.disabled():
        print(f"\n  screenshot: {path}")
    return path


def menu_items(page, menu):
    """The visible items of a menu-bar menu, opened by a click."""
    page.locator(".lm-MenuBar-itemLabel", has_text=menu).click()
    page.wait_for_selector(".lm-Menu")
    return page.locator(".lm-Menu .lm-Menu-item:not(.lm-mod-hidden) .lm-Menu-itemLabel").all_inner_texts()


def close_menu(page):
    page.keyboard.press("Escape")


def sidebar_titles(page):
    return page.locator(".jp-SideBar .lm-TabBar-tab").evaluate_all("tabs => tabs.map(t => t.title || t.textContent)")


def test_released_notebook_reports_not_implemented(pages, capsys):
    page = pages["student"]
    open_notebook(page, f"{NOTEBOOK}/{NOTEBOOK}.ipynb")
    cells, _ = run_all(page)
    code = [c for c in cells if c["code"]]
    assert code and all(c["prompt"] not in ("[ ]:", "[*]:") for c in code), "some cells never ran"
    checks = check_cells(cells, NOTEBOOK)
    for name, cell in checks.items():
        assert f"✘ {name} is not implemented yet" in cell["output"], f"{name}'s check shows: {cell['output']!r}"
    first = next(i for i, c in enumerate(cells) if c["source"].startswith("check("))
    screenshot(page, f"released-{NOTEBOOK}.png", capsys, scroll_to=max(first - 3, 0))


def test_solution_notebook_passes_every_check(pages, capsys):
    page = pages["instructor"]
    open_notebook(page, f"solutions/{NOTEBOOK}/{NOTEBOOK}.ipynb")
    cells, rounds = run_all(page)
    assert rounds == 1, "a cell of the solution notebook raised: " + "\n".join(
        c["output"][-500:] for c in cells if "Traceback" in c["output"] or "Error" in c["output"])
    checks = check_cells(cells, NOTEBOOK)
    for ex in registry.for_notebook(NOTEBOOK):
        out = checks[ex.name]["output"]
        assert f"✔ {ex.name}: {ex.points:g}/{ex.points:g} points" in out, f"{ex.name}'s check shows: {out!r}"
    first = next(i for i, c in enumerate(cells) if c["source"].startswith("check("))
    screenshot(page, f"solution-{NOTEBOOK}.png", capsys, scroll_to=max(first - 3, 0))


def test_student_lab_has_no_instructor_tools(labs, pages, capsys):
    page = pages["student"]
    items = menu_items(page, "Nbgrader")
    screenshot(page, "lab-student.png", capsys)
    close_menu(page)
    assert items == ["Assignment List"], items
    assert not [t for t in sidebar_titles(page) if "Create Assignment" in t]
    assert labs["student"].status("/formgrader") == 404


def test_instructor_lab_has_the_instructor_tools(labs, pages, capsys):
    page = pages["instructor"]
    items = menu_items(page, "Nbgrader")
    screenshot(page, "lab-instructor.png", capsys)
    close_menu(page)
    assert {"Assignment List", "Course List", "Formgrader", "Create assignment"} <= set(items), items
    assert [t for t in sidebar_titles(page) if "Create Assignment" in t]
    assert labs["instructor"].status("/formgrader") in (200, 302)


def test_progress_bars_render_in_jupyterlab(pages, capsys):
    page = pages["student"]
    open_notebook(page, "progress.ipynb")
    run_all(page)
    bar = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea .widget-hprogress .progress-bar")
    bar.wait_for()
    text = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea .widget-hbox").first.text_content()
    assert "training" in text and "3/3" in text, text
    screenshot(page, "progress-bar.png", capsys)


@pytest.fixture(scope="module")
def graded_class(course):
    """The demo's three students of one notebook, graded by `grade` in the course folder itself."""
    from autograder.grading.grade import Grader

    for student in ("ada_complete", "ben_blank", "cy_two_mistakes"):
        shutil.copytree(ROOT / "examples" / "submitted" / student / NOTEBOOK, course / "submitted" / student / NOTEBOOK)
    Grader(course, root=course, log=lambda *a: None).run(jobs=2, progress=False)
    return scores(course)


def scores(course):
    """Each student's score for the notebook, from the gradebook (which `grade` and plain nbgrader both write)."""
    from nbgrader.api import Gradebook

    from autograder.course import sqlite_url

    with Gradebook(sqlite_url(course / "gradebook.db")) as gb:
        return {s.student.id: s.score for s in gb.assignment_submissions(NOTEBOOK)}


def test_the_formgrader_shows_the_grades_of_grade(labs, pages, graded_class, capsys):
    lab, page = labs["instructor"], pages["instructor"]
    assert graded_class["ada_complete"] > graded_class["cy_two_mistakes"] > graded_class["ben_blank"] == 0
    page.goto(f"{lab.url}/formgrader/gradebook/{NOTEBOOK}/{NOTEBOOK}?token={lab.token}")
    for student in graded_class:  # the names are there, hidden until the instructor reveals them
        page.wait_for_selector(f"text={student}", state="attached")
    rows = [" ".join(r.split()) for r in page.locator("tbody tr").all_text_contents()]
    for student, score in graded_class.items():
        row = next((r for r in rows if student in r), "")
        assert row.startswith("Submission #") and f"{student}{score:g} / {sum(ex.points for ex in registry.for_notebook(NOTEBOOK)):g}" in row, (student, row)
    page.get_by_text("Show All Names").click()
    page.set_viewport_size({"width": 1400, "height": 500})
    screenshot(page, "formgrader-grades.png", capsys)
    page.set_viewport_size({"width": 1400, "height": 2000})
    page.goto(f"{lab.url}/lab?token={lab.token}")  # back to JupyterLab for the other tests
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.started")


# ---------------------------------------------------------------- nothing a student wrote runs in the viewer's browser
# Each payload, if it ran, would mark the page, open a dialog, and write a file through the Jupyter
# server's contents API with the viewer's session: the instructor's, in the formgrader.


def payload(tag):
    return ("window.__pwned=(window.__pwned||[]).concat(['%s']);try{alert('%s')}catch(e){}"
            "try{var x=(document.cookie.match(/_xsrf=([^;]+)/)||[])[1];fetch('/api/contents/pwned-%s.txt',{method:'PUT',"
            "headers:{'Content-Type':'application/json','X-XSRFToken':x?decodeURIComponent(x):''},"
            "body:JSON.stringify({type:'file',format:'text',content:'pwned'})})}catch(e){}") % (tag, tag, tag)


def _b64(text):
    import base64

    return base64.b64encode(text.encode()).decode()


# what the learner's code displays (a code cell's outputs), one class of payload a submission
DISPLAYED = {
    "scripts": [
        "from IPython.display import Javascript, display\ndisplay(Javascript({P!r}))",
        "from IPython.display import display\ndisplay({{'application/javascript': {P!r}, 'text/plain': 'js'}}, raw=True)",
        "from IPython.display import HTML, display\ndisplay(HTML('<script>' + {P!r} + '</script>'))",
        "from IPython.display import SVG, display\ndisplay(SVG('<svg xmlns=\"http://www.w3.org/2000/svg\"><script>' + {P!r} + '</script></svg>'))",
        "from IPython.display import display\ndisplay({{'text/html': '<svg><script>' + {P!r} + '</script></svg>'}}, raw=True)",
    ],
    "handlers": [
        "from IPython.display import HTML, display\ndisplay(HTML('<img src=\"x\" onerror=\"' + {P!r} + '\">'))",
        "from IPython.display import HTML, display\ndisplay(HTML('<details open ontoggle=\"' + {P!r} + '\"><summary>s</summary></details>'))",
        "from IPython.display import HTML, display\ndisplay(HTML('<svg onload=\"' + {P!r} + '\"></svg><body onload=\"' + {P!r} + '\">'))",
        "from IPython.display import Markdown, display\ndisplay(Markdown('<img src=\"y\" onerror=\"' + {P!r} + '\">'))",
        "from IPython.display import display\ndisplay({{'image/png': 'x\" onerror=\"' + {P!r} + '\" a=\"', 'text/plain': 'png'}}, raw=True)",
        "from IPython.display import display\ndisplay({{'image/png': 'iVBORw0KGgo='}}, metadata={{'image/png': {{'width': '1 onerror=' + {P!r}}}}}, raw=True)",
    ],
    "urls": [
        "from IPython.display import HTML, display\ndisplay(HTML('<a id=\"pwn-link\" href=\"javascript:' + {P!r} + '\">click</a>'))",
        "from IPython.display import HTML, display\ndisplay(HTML('<meta http-equiv=\"refresh\" content=\"0;url=javascript:' + {P!r} + '\">'))",
        "from IPython.display import Latex, display\ndisplay(Latex(r'$\\href{{javascript:' + {P!r} + '}}{{x}}$'))",
        "from IPython.display import HTML, display\ndisplay(HTML('<form action=\"/api/contents/pwned-form.txt\" method=\"post\"><input autofocus onfocus=\"' + {P!r} + '\"><button>b</button></form>'))",
        "from IPython.display import Markdown, display\ndisplay(Markdown('<form method=\"post\"><button id=\"pwn-submit\" formaction=\"/api/contents/pwned-formaction.txt\">go</button></form>'))",
        "from IPython.display import HTML, display\ndisplay(HTML('<meta http-equiv=\"Content-Security-Policy\" content=\"script-src * \\'unsafe-inline\\'\"><meta http-equiv=\"set-cookie\" content=\"_xsrf=pwned\">'))",
    ],
    # the learner's code also runs in the check cells: a `check` of their own displays there, and still calls the real one
    "in checks": [
        "from IPython.display import HTML, display\n_check = check\ndef check(*args, **kwargs):\n    display(HTML('<img src=\"c\" onerror=\"' + {P!r} + '\">'))\n    display({{'application/javascript': {P!r}}}, raw=True)\n    return _check(*args, **kwargs)",
    ],
    "frames": [
        "from IPython.display import HTML, display\ndisplay(HTML('<iframe srcdoc=\"&lt;script&gt;' + {P!r} + '&lt;/script&gt;\"></iframe>'))",
        "from IPython.display import HTML, display\ndisplay(HTML('<iframe src=\"javascript:' + {P!r} + '\"></iframe>'))",
        "from IPython.display import HTML, display\ndisplay(HTML('<object data=\"data:text/html;base64,' + {B!r} + '\"></object><embed src=\"data:text/html;base64,' + {B!r} + '\">'))",
    ],
}
# what the student writes: markdown cells of their own, a raw cell, metadata
WRITTEN = [
    ("markdown", "<script>{P}</script>"),
    ("markdown", "<img src=\"z\" onerror=\"{P}\">"),
    ("markdown", "[click me](javascript:{P})"),
    ("markdown", "<svg><script>{P}</script></svg><iframe srcdoc=\"&lt;script&gt;{P}&lt;/script&gt;\"></iframe>"),
    ("raw", "<script>{P}</script>"),
]
# two planted students a way of grading: every kind of displayed payload in one, every written one in the other
# (each payload's tag names its kind, so a failure says which ran)
PLANTED = {"mallory_displays": "displays", "mallory_writes": "written"}


def planted_notebook(kind, student):
    from autograder.release import fill_submission

    rel = nbformat.read(ROOT / "notebooks" / NOTEBOOK / f"{NOTEBOOK}.ipynb", as_version=4)
    sol = nbformat.read(ROOT / "solutions" / NOTEBOOK / f"{NOTEBOOK}.ipynb", as_version=4)
    nb = fill_submission(rel, sol)
    cells = []
    kinds = list(DISPLAYED) if kind == "displays" else [kind] if kind in DISPLAYED else []
    for i, (which, code) in enumerate((k, c) for k in kinds for c in DISPLAYED[k]):
        tag = f"{student}-{which.replace(' ', '_')}-{i}"
        cells.append(nbformat.v4.new_code_cell(code.format(P=payload(tag), B=_b64(f"<script>{payload(tag)}</script>"))))
    if kind == "written":
        for i, (cell_type, text) in enumerate(WRITTEN):
            text = text.format(P=payload(f"{student}-w{i}"))
            if cell_type == "raw":
                cells.append(nbformat.v4.new_raw_cell(text, metadata={"raw_mimetype": "text/html", "format": "text/html"}))
            else:
                cells.append(nbformat.v4.new_markdown_cell(text))
        # a cell tag may hold no comma (nbformat's schema)
        tagged = nbformat.v4.new_code_cell("1 + 1", metadata={"tags": ['x" onmouseover="window.__pwned=[\'tags\']" y="', "z'><img src=x onerror=alert(1)>"]})
        cells.append(tagged)
        nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}, "version_major": 2, "version_minor": 0,
                                                                               "</script><script>" + payload(f"{student}-meta") + "</script>": 1}}
    at = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == "check_attention_scores")
    nb.cells[at + 1:at + 1] = cells
    return nb


# A check's failing case says what the learner's code raised: its message becomes the automatic comment on the
# exercise, in the formgrader and on the feedback page. This one forges a heading, a picture and a refresh that
# would reach the listener (well under the 200 characters a reason keeps of a message).
RAISES = "mallory_raises"


def hostile_message(port):
    return (f"<h1>Score: 12 / 12</h1><img src=http://127.0.0.1:{port}/img onerror=\"window.__pwned=['comment']\">"
            f"<meta http-equiv=refresh content=\"0;url=http://127.0.0.1:{port}/refresh\">")


def hostile_id(port):
    """A folder's name (no slash: the refresh's backslashes are slashes to a browser) that would run and navigate if printed as HTML."""
    return f"x<img src=x onerror=\"window.__pwned=['id']\"><meta http-equiv=refresh content=\"0;url=http:\\\\127.0.0.1:{port}\\id\">"


@pytest.fixture(scope="module")
def listener():
    """An HTTP server on 127.0.0.1 that records every request: a payload that ran, or a refresh followed, reaches it."""
    heard = []

    class Record(BaseHTTPRequestHandler):
        def do_GET(self):
            heard.append(self.path)
            self.send_response(204)
            self.end_headers()

        do_POST = do_GET

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Record)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield SimpleNamespace(port=server.server_address[1], heard=heard)
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def planted(course, graded_class, listener):
    """The planted submissions, graded by `grade` (students mallory_*) and by plain `nbgrader autograde` and
    `generate_feedback` (students mallory_*_plain), with an honest student beside them, in the lab's course."""
    from autograder.grading.grade import Grader
    from autograder.release import fill_submission

    def write(student, nb):
        path = course / "submitted" / student / NOTEBOOK / f"{NOTEBOOK}.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(nb, path)

    for student, kind in PLANTED.items():
        write(student, planted_notebook(kind, student))
    rel, sol = (nbformat.read(ROOT / folder / NOTEBOOK / f"{NOTEBOOK}.ipynb", as_version=4) for folder in ("notebooks", "solutions"))
    raises = f"def causal_mask(T, device=None):\n    raise ValueError({hostile_message(listener.port)!r})"
    write(RAISES, fill_submission(rel, sol, {"causal_mask": raises}))
    Grader(course, root=course, log=lambda *a: None).run(jobs=2, progress=False)
    env = dict(os.environ, PATH=f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}")
    for student, kind in PLANTED.items():
        write(f"{student}_plain", planted_notebook(kind, f"{student}_plain"))
    for command in ("autograde", "generate_feedback"):  # nbgrader's own glob: every mallory_*_plain at once
        done = subprocess.run([sys.executable, "-m", "nbgrader", command, NOTEBOOK, "--student", "mallory_*_plain"],
                              cwd=course, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return scores(course)


# what the page holds that could run: scripts, handlers, javascript: URLs, frames, forms
LIVE_JS = """() => {
  const found = [];
  const root = document.querySelector('#notebook-container') || document.body;
  for (const el of root.querySelectorAll('*')) {
    const name = el.tagName.toLowerCase();
    if (['script', 'iframe', 'object', 'embed', 'form', 'frame', 'frameset', 'base', 'meta', 'link'].includes(name)) found.push(name);
    for (const a of el.attributes) {
      if (a.name.startsWith('on')) found.push(name + '[' + a.name + ']');
      if (/^\\s*javascript:/i.test(a.value)) found.push(name + '[' + a.name + '=javascript:]');
      if (/^\\s*data:text/i.test(a.value)) found.push(name + '[' + a.name + '=data:text]');
    }
  }
  return found;
}"""


# the comment's forged score: in a heading, or anywhere outside the notebook (the page's own header, its navigation)
FORGED = "Score: 12 / 12"
FORGED_JS = """(text) => {
  const found = [], notebook = document.querySelector('#notebook-container');
  for (const h of document.querySelectorAll('h1, h2, h3, h4, h5, h6'))
    if (h.textContent.includes(text)) found.push('heading: ' + h.textContent.trim().slice(0, 80));
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode())
    if (walker.currentNode.nodeValue.includes(text) && !(notebook && notebook.contains(walker.currentNode)))
      found.push('outside the notebook: ' + walker.currentNode.nodeValue.trim().slice(0, 80));
  return found;
}"""


def visit(context, url, course, shot=None, focus=None):
    """Load `url` in a fresh page of `context` (the instructor's, logged in to JupyterLab); return what ran there:
    dialogs, marks, requests for the contents API, files written, and what on the page could still run; where the page
    ended up, its text, and a forged score where only the page's own could be. `focus`: what a screenshot shows."""
    page = context.new_page()
    page.set_viewport_size({"width": 1300, "height": 1600})
    seen = {"dialogs": [], "requests": [], "blocked": []}
    page.on("console", lambda m: seen["blocked"].append(m.text) if "Content Security Policy" in m.text else None)
    page.on("dialog", lambda d: (seen["dialogs"].append(d.message), d.dismiss()))
    page.on("request", lambda r: seen["requests"].append(r.url) if "/api/contents/pwned" in r.url else None)
    page.goto(url)
    page.wait_for_load_state("load")
    page.wait_for_timeout(1000)  # a payload's handlers and timers have their chance
    for bait in ("#pwn-link", "#pwn-submit"):  # what a curious instructor might click
        link = page.locator(bait)
        if link.count():
            link.first.click(timeout=5000, no_wait_after=True)
            page.wait_for_timeout(500)
    seen["marks"] = page.evaluate("() => window.__pwned || []")
    seen["live"] = page.evaluate(LIVE_JS)
    seen["files"] = sorted(p.name for p in course.rglob("pwned-*"))
    seen["pictures"] = page.locator("img[src^='data:image/png']").count()
    seen["url"], seen["text"] = page.url, page.evaluate("() => document.body.textContent")
    seen["forged"] = page.evaluate(FORGED_JS, FORGED)
    if shot:
        if focus and page.locator(focus).count():  # the screenshot shows it
            page.locator(focus).first.evaluate("e => e.scrollIntoView({block: 'center'})")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / shot), full_page=False)
    page.close()
    return seen


def submission_ids(lab):
    url = f"{lab.url}/formgrader/api/submitted_notebooks/{NOTEBOOK}/{NOTEBOOK}?token={lab.token}"
    with urllib.request.urlopen(url, timeout=30) as r:
        return {s["student"]: s["id"] for s in json.loads(r.read())}


@pytest.mark.parametrize("student", [s + plain for s in PLANTED for plain in ("", "_plain")])
def test_nothing_a_student_planted_runs_in_the_formgrader_or_the_feedback(labs, pages, planted, course, student):
    lab, context = labs["instructor"], pages["instructor"].context
    assert planted[student] == sum(ex.points for ex in registry.for_notebook(NOTEBOOK))  # their code is right
    feedback = f"feedback/{student}/{NOTEBOOK}/{NOTEBOOK}.html"
    pages = {"formgrader": f"{lab.url}/formgrader/submissions/{submission_ids(lab)[student]}/?token={lab.token}",
             "feedback, served": f"{lab.url}/files/{feedback}?token={lab.token}",
             "feedback, a file": (course / feedback).as_uri()}
    for where, url in pages.items():
        seen = visit(context, url, course)
        assert (seen["dialogs"], seen["marks"], seen["requests"], seen["files"], seen["live"]) == ([], [], [], [], []), (where, seen)
        assert seen["pictures"] >= 2, (where, seen)  # the notebook's own figures are kept


def test_the_payloads_run_when_nothing_stops_them(pages, course, tmp_path):
    """The control: the same notebooks executed and rendered by plain nbconvert, with neither the course's cleaning nor
    its policy, run a payload of every kind in this very harness (so the tests above could fail)."""
    from nbclient import NotebookClient
    from nbconvert import HTMLExporter

    for kind in [*DISPLAYED, "written"]:  # one kind at a time: each must run on its own
        nb = planted_notebook(kind, f"control_{kind.replace(' ', '_')}")
        nb.cells = [nbformat.v4.new_code_cell("def check(*args, **kwargs): pass"),
                    *(c for c in nb.cells if "__pwned" in c.source or c.cell_type != "code"), nbformat.v4.new_code_cell("check()")]
        NotebookClient(nb, timeout=120, kernel_name="python3").execute()
        page = tmp_path / f"control_{kind.replace(' ', '_')}.html"
        page.write_text(HTMLExporter().from_notebook_node(nb)[0])
        seen = visit(pages["instructor"].context, page.as_uri(), course)
        assert seen["marks"] or seen["dialogs"], (kind, seen)
        assert seen["live"], (kind, seen)


def test_the_formgrader_and_the_feedback_make_inert_a_notebook_autograded_without_the_course_config(labs, pages, planted, course):
    """An autograded notebook that still holds every payload (graded before this course version, or by hand):
    the renderer of the formgrader and of nbgrader's generate_feedback makes it inert."""
    lab, student = labs["instructor"], "mallory_displays"
    autograded = course / "autograded" / student / NOTEBOOK / f"{NOTEBOOK}.ipynb"
    feedback = course / "feedback" / student / NOTEBOOK / f"{NOTEBOOK}.html"
    kept, kept_feedback = autograded.read_bytes(), feedback.read_bytes()
    raw = planted_notebook("displays", student)
    try:
        from nbclient import NotebookClient

        NotebookClient(raw, timeout=120, kernel_name="python3").execute()  # the outputs, as a grader without Inert keeps them
        assert any("onerror" in json.dumps(c.get("outputs", [])) for c in raw.cells)
        nbformat.write(raw, autograded)
        env = dict(os.environ, PATH=f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}")
        done = subprocess.run([sys.executable, "-m", "nbgrader", "generate_feedback", NOTEBOOK, "--student", student, "--force"],
                              cwd=course, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        for where, url in {"formgrader": f"{lab.url}/formgrader/submissions/{submission_ids(lab)[student]}/?token={lab.token}",
                           "feedback": feedback.as_uri()}.items():
            seen = visit(pages["instructor"].context, url, course)
            assert (seen["dialogs"], seen["marks"], seen["requests"], seen["files"], seen["live"]) == ([], [], [], [], []), (where, seen)
    finally:
        autograded.write_bytes(kept)
        feedback.write_bytes(kept_feedback)


def test_an_honest_submission_looks_as_before_and_the_formgrader_still_works(labs, pages, planted, course, capsys):
    from nbgrader.api import Gradebook

    from autograder.course import sqlite_url

    lab, student = labs["instructor"], "ada_complete"
    context = pages["instructor"].context
    page = context.new_page()
    page.set_viewport_size({"width": 1300, "height": 1600})
    blocked, console = [], []
    page.on("console", lambda m: blocked.append(m.text) if "Content Security Policy" in m.text else None)
    page.on("console", lambda m: console.append(m.text))
    page.on("pageerror", lambda e: console.append(str(e)))
    page.on("requestfailed", lambda r: console.append("failed: " + r.url))
    page.goto(f"{lab.url}/formgrader/submissions/{submission_ids(lab)[student]}/?token={lab.token}")
    page.wait_for_selector("textarea.comment")
    # (formgrader.loaded waits for MathJax from a CDN, out of reach here; grades and comments are what grading needs)
    try:
        page.wait_for_function("() => window.formgrader && formgrader.comments && formgrader.comments.loaded && formgrader.grades.loaded")
    except Exception:
        raise AssertionError(f"the formgrader did not load its grades and comments: {console}")
    assert page.locator("img[src^='data:image/png']").count() >= 2  # the notebook's figures
    assert page.get_by_text("✔ scaled_dot_product_attention: 4/4 points").count() == 1
    comment = page.locator("textarea.comment").first
    cell = comment.get_attribute("id").removesuffix("-comment")
    comment.fill("Well done: a clear implementation.")
    with page.expect_response(lambda r: "/api/comment/" in r.url and r.request.method == "PUT", timeout=15000) as saving:
        comment.evaluate("t => t.dispatchEvent(new Event('change', {bubbles: true}))")
    assert saving.value.ok, saving.value.status
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "formgrader-honest-submission.png"))
    page.close()
    with Gradebook(sqlite_url(course / "gradebook.db")) as gb:
        saved = gb.find_comment(cell, NOTEBOOK, NOTEBOOK, student).manual_comment
    assert saved == "Well done: a clear implementation.", "the formgrader did not save a comment under its policy"
    assert blocked == [], blocked  # nbgrader's own scripts all ran
    seen = visit(context, f"{lab.url}/files/feedback/{student}/{NOTEBOOK}/{NOTEBOOK}.html?token={lab.token}", course,
                 shot="feedback-honest-submission.png")
    assert seen["dialogs"] == [] and seen["marks"] == [] and seen["blocked"] == [], seen
    assert seen["pictures"] >= 2  # the figures are still in the feedback
    with capsys.disabled():
        print(f"\n  screenshots: {ARTIFACTS / 'formgrader-honest-submission.png'}, {ARTIFACTS / 'feedback-honest-submission.png'}")


# ---------------------------------------------------------------- what nbgrader itself prints is text
# A student id and a comment are printed by nbgrader's own templates, outside the notebook that Inert makes inert:
# the doors refuse such an id before grading, so it is put into the gradebook directly, as `nbgrader db student add`
# would; the comment is what `grade` wrote for RAISES's failing check.


@pytest.fixture(scope="module")
def hostile(course, planted, listener):
    """The hostile id in the gradebook, with a copy of RAISES's submission and its comment."""
    from nbgrader.api import Gradebook

    from autograder.course import sqlite_url

    student = hostile_id(listener.port)
    shutil.copytree(course / "autograded" / RAISES, course / "autograded" / student)
    with Gradebook(sqlite_url(course / "gradebook.db")) as gb:
        gb.add_student(student)
        gb.add_submission(NOTEBOOK, student)
        reason = gb.find_comment("causal_mask", NOTEBOOK, NOTEBOOK, RAISES).auto_comment
        assert hostile_message(listener.port) in reason  # the check's reason carries the learner's message whole
        gb.find_comment("causal_mask", NOTEBOOK, NOTEBOOK, student).auto_comment = reason
        gb.db.commit()
    return student


def test_a_hostile_student_id_and_comment_are_text_on_the_instructor_s_pages(labs, pages, hostile, course, listener, capsys):
    lab, context = labs["instructor"], pages["instructor"].context
    ids, quoted = submission_ids(lab), urllib.parse.quote(hostile, safe="")
    paths = {"manage-students": "/formgrader/manage_students", "student": f"/formgrader/manage_students/{quoted}",
             "student-assignment": f"/formgrader/manage_students/{quoted}/{NOTEBOOK}",
             "gradebook": f"/formgrader/gradebook/{NOTEBOOK}/{NOTEBOOK}", "submission": f"/formgrader/submissions/{ids[hostile]}/",
             "comment-submission": f"/formgrader/submissions/{ids[RAISES]}/", "feedback": f"/files/feedback/{RAISES}/{NOTEBOOK}/{NOTEBOOK}.html"}
    for what, path in paths.items():
        url = f"{lab.url}{path}?token={lab.token}"
        seen = visit(context, url, course, shot=f"hostile-{what}.png", focus=".panel-footer, #causal_mask-comment")
        ran = (seen["dialogs"], seen["marks"], seen["requests"], seen["files"], seen["blocked"], listener.heard)
        assert ran == ([], [], [], [], [], []), (what, seen, listener.heard)
        assert urllib.parse.unquote(seen["url"]) == urllib.parse.unquote(url), (what, seen["url"])  # no refresh took it elsewhere
        assert seen["forged"] == [], (what, seen["forged"])
        if what in ("manage-students", "student", "student-assignment", "submission"):
            assert hostile in seen["text"], (what, seen["text"][:2000])  # shown, as text
        if what in ("submission", "comment-submission", "feedback"):
            assert seen["live"] == [], (what, seen["live"])
    feedback = visit(context, (course / paths["feedback"].removeprefix("/files/")).as_uri(), course)
    assert (feedback["marks"], feedback["live"], feedback["forged"], listener.heard) == ([], [], [], [])
    assert hostile_message(listener.port) in feedback["text"]  # the whole comment, as text
    with capsys.disabled():
        print(f"\n  screenshots: {ARTIFACTS}/hostile-*.png")


def test_the_formgrader_s_student_pages_still_work(labs, pages, graded_class):
    """nbgrader's scripts fill in its student pages under the policy: an assignment, then the notebook with its score."""
    lab, context = labs["instructor"], pages["instructor"].context
    full = sum(ex.points for ex in registry.for_notebook(NOTEBOOK))
    for path, expected in (("/formgrader/manage_students/ada_complete", NOTEBOOK),
                           (f"/formgrader/manage_students/ada_complete/{NOTEBOOK}", f"{graded_class['ada_complete']:g} / {full:g}")):
        page = context.new_page()
        blocked = []
        page.on("console", lambda m: blocked.append(m.text) if "Content Security Policy" in m.text else None)
        page.goto(f"{lab.url}{path}?token={lab.token}")
        page.wait_for_selector(f"#main-table >> text={expected}")  # filled in by nbgrader's scripts, from its API
        page.close()
        assert blocked == [], (path, blocked)
