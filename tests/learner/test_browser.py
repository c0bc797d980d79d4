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
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import nbformat
import pytest

from autograder import registry
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


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    """A JupyterLab server, started by `python -m autograder.lab ROLE FOLDER` as the Makefile does."""

    def __init__(self, role, course, folder, home):
        self.role, self.token, self.port = role, secrets.token_hex(16), _free_port()
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
        page = browser.new_page(viewport={"width": 1400, "height": 2000})
        page.set_default_timeout(120_000)
        page.goto(f"{lab.url}/lab?reset&token={lab.token}")
        page.wait_for_selector("#jp-main-dock-panel")
        page.wait_for_function("() => window.jupyterapp && window.jupyterapp.started")
        out[role] = page
    yield out
    for page in out.values():
        page.close()


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
    from autograder.grading.grade import Grader, read_grades

    for student in ("ada_complete", "ben_blank", "cy_two_mistakes"):
        shutil.copytree(ROOT / "examples" / "submitted" / student / NOTEBOOK, course / "submitted" / student / NOTEBOOK)
    Grader(course, root=course, log=lambda *a: None).run(jobs=2, progress=False)
    return {g["student_id"]: float(g["score"]) for g in read_grades(course) if g["assignment"] == NOTEBOOK}


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
