"""A class through a real JupyterHub, as `make hub` starts it (python -m autograder.hub), driven in Chromium.

Real Unix accounts (an instructor, two students), each user's server started by the hub as that account in its
role's environment (the students': the student distribution only), each on an origin of its own, a student's behind
her wall (her own disk, private /tmp and /dev/shm, cgroup limits on CPU, memory and processes), nbgrader's exchange
made by `make hub`, the hub's groups read by nbgrader's JupyterHubAuthPlugin. `make hub` runs from a checkout only
root may read. The instructor releases notebook 05 through the formgrader; the students log in at the hub's login
page and fetch and submit it in JupyterLab's Assignment List, one complete, one hostile (scripts in outputs and
cells, links to a classmate's home and to a page of her own server); the instructor collects, grades with `grade`
typed in a JupyterLab terminal and with the formgrader's autograde button, looks at both in the formgrader, and
releases feedback, which each student fetches in the Assignment List.

Then the hostile student attacks, from her own terminal (a JupyterLab terminal of her server, as her Unix account),
as issue 47 found a student could on the class `make hub` used to make: a page her server serves run in the
instructor's browser (the instructor clicks the link in her submission), the exchange taken before the instructor
releases, the instructor's checkout read, the machine's processes exhausted, /dev/shm and /tmp filled past her
memory and kept after her server stops, processes left running after it, the disk filled. Each fails, and the
honest classmate's work is unchanged. Ctrl-C stops the hub and every server. Screenshots go to test-artifacts/hub/.
"""
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest
import requests

from autograder import registry
from autograder.grading.grade import read_problems
from autograder.hub import bounds, cgroups, classroom, client, proxy, wall
from autograder.hub.__main__ import CONFIG
from autograder.hub.classroom import COURSE, EXCHANGE_MODES
from autograder.release import fill_submission
from conftest import ROOT, clone

if os.geteuid() != 0 or not shutil.which("useradd"):
    pytest.skip("a class's hub needs root, to make Unix accounts and start servers as them", allow_module_level=True)
if not shutil.which("npm"):
    pytest.skip("the hub's proxy comes from the npm registry: npm is not installed", allow_module_level=True)
sys.path.insert(0, str(ROOT / "tests" / "learner"))
from test_browser import CHROMIUM, CHROMIUM_FLAGS, LIVE_JS, payload  # noqa: E402 (skips this file without Chromium)

import websocket  # noqa: E402 (websocket-client, which JupyterLab's terminals are tested with here)

pytestmark = pytest.mark.slow
NAME = "05_self_attention"
FULL = sum(ex.points for ex in registry.for_notebook(NAME))
ARTIFACTS = ROOT / "test-artifacts" / "hub"
WAIT_MS = 180_000  # a server's start, a fetch, a submit: seconds on a quiet machine, more beside other tests
MEM, PIDS, DISK = 2 * 2**30, 256, 128 * 2**20  # each student's, small enough to reach in a test
TMPFS = MEM // 4  # each of her /tmp, /var/tmp and /dev/shm (autograder.hub.wall.tmpfs_bytes)


class Hub:
    """`python -m autograder.hub` for a class of two, on a free port, in folders of its own, from a private checkout."""

    def __init__(self, top, checkout):
        self.top, self.port, self.checkout = top, proxy.free_ports(1)[0], checkout
        self.url = f"http://localhost:{self.port}"
        self.log = top / "hub.log"
        self.state = top / "state"
        self.prefix = f"h{os.getpid()}-"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, cwd=checkout)
        deadline = time.monotonic() + 900  # the first start installs two environments
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"make hub exited {self.proc.returncode}:\n{self.log.read_text()[-4000:]}")
            try:
                if requests.get(f"{self.url}/hub/login", timeout=5).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            time.sleep(1)
        else:
            self.proc.kill()  # its hub gets SIGTERM (autograder.hub.__main__.stop_with_parent)
            self.proc.wait()
            pytest.fail(f"the hub did not answer:\n{self.log.read_text()[-4000:]}")
        self.room = classroom.Classroom.load(self.state)

    def command(self, *extra):
        return list(map(str, [sys.executable, "-m", "autograder.hub", "--state", self.state, "--prefix", self.prefix,
                              "--students", "2", "--home-base", self.top / "home", "--port", self.port, "--cpu", "1",
                              "--mem", MEM, "--pids", PIDS, "--disk", DISK, *extra]))

    def server(self, user):
        return client.server_url(user, self.port)

    def token(self, user):
        """An API token for `user`, made on the command line as the hub's administrator makes one: a student may
        make none herself (autograder/hub/bounds.py), and the test drives her server with it."""
        env = os.environ | {"SEQCOURSE_HUB_STATE": str(self.state)}
        done = subprocess.run([sys.executable, "-m", "jupyterhub", "token", "-f", str(CONFIG), user], env=env,
                              cwd=self.state / "hub", capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout.split()[-1]

    def proxy_pid(self):
        return int(self.room.proxy_pid_file.read_text())

    def stop(self):
        """Ctrl-C, as a person stops it; what is left of the class's processes and cgroups afterwards."""
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # the hub, whose parent it was, gets SIGTERM (autograder.hub.__main__.stop_with_parent)
            self.proc.wait()
        proxies = subprocess.run(["pgrep", "-a", "-f", str(self.room.proxy)], capture_output=True, text=True).stdout
        return processes_of(self.room.users) + proxies, cgroups_left()


def processes_of(users):
    return subprocess.run(["pgrep", "-a", "-u", ",".join(users)], capture_output=True, text=True).stdout


def cgroups_left():
    return [p.name for c in cgroups.V1_CONTROLLERS for p in Path("/sys/fs/cgroup", c).glob(f"{cgroups.PREFIX}*")]


class User:
    """A user's session at the hub (requests), with an API token of their own for their server."""

    def __init__(self, hub, name):
        self.hub, self.name, self.s = hub, name, client.session()
        self.s.get(f"{hub.url}/hub/login")
        r = self.s.post(f"{hub.url}/hub/login", data={"username": name, "password": hub.room.passwords[name],
                                                      "_xsrf": self.s.cookies.get("_xsrf", path="/hub/")})
        assert r.ok, r.text[:500]
        if hub.room.role(name) == "instructor":  # the instructor may make tokens; a student may not
            r = self.s.post(f"{hub.url}/hub/api/users/{name}/tokens", json={"note": "test"}, headers=self.xsrf())
            assert r.ok, r.text[:500]
            self.token = r.json()["token"]
        else:
            self.token = hub.token(name)
        self.start()

    def xsrf(self):
        return {"X-XSRFToken": self.s.cookies.get("_xsrf", path="/hub/")}

    def start(self):
        self.s.post(f"{self.hub.url}/hub/api/users/{self.name}/server", headers=self.auth())
        for _ in range(WAIT_MS // 1000):
            if self.get("api/status").status_code == 200:
                return
            time.sleep(1)
        pytest.fail(f"{self.name}'s server did not start:\n{self.hub.log.read_text()[-4000:]}")

    def stop(self):
        """The server stopped through the hub's API, as the hub's home page's Stop button does."""
        r = self.s.delete(f"{self.hub.url}/hub/api/users/{self.name}/server", headers=self.auth())
        assert r.status_code in (202, 204), r.text[:500]
        for _ in range(120):
            if self.s.get(f"{self.hub.url}/hub/api/users/{self.name}", headers=self.auth()).json()["servers"] == {}:
                return
            time.sleep(0.5)
        pytest.fail(f"{self.name}'s server did not stop")

    def auth(self):
        return {"Authorization": f"token {self.token}"}

    def get(self, path, user=None):
        return self.s.get(self.hub.server(user or self.name) + path, headers=self.auth(), allow_redirects=False)

    def post(self, path):
        r = self.s.post(self.hub.server(self.name) + path, headers=self.auth(), timeout=600)
        assert r.ok and r.json().get("success", True), r.text[-3000:]
        return r.json()

    def put_notebook(self, path, nb):
        self.put(path, {"type": "notebook", "format": "json", "content": json.loads(nbformat.writes(nb))})

    def put_file(self, path, text):
        self.put(path, {"type": "file", "format": "text", "content": text})

    def put(self, path, model):
        r = self.s.put(self.hub.server(self.name) + f"api/contents/{path}", headers=self.auth(), json=model)
        assert r.ok, r.text[:500]

    def notebook(self, path):
        r = self.get(f"api/contents/{path}")
        assert r.ok, r.text[:500]
        return nbformat.from_dict(r.json()["content"])

    def terminal(self):
        return Terminal(self)

    def tokens(self):
        return [t["id"] for t in self.s.get(f"{self.hub.url}/hub/api/users/{self.name}/tokens", headers=self.auth()).json()["api_tokens"]]


ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\r")


class Terminal:
    """A JupyterLab terminal of the user's server, typed into as a person does: what runs there runs as their Unix
    account, in their server's world (for a student, behind her wall), with the shell the class configured. Each
    command connects anew, as a page reopened does: the server closes a connection left without pings."""

    def __init__(self, user):
        r = user.s.post(user.hub.server(user.name) + "api/terminals", headers=user.auth())
        assert r.ok, r.text[:500]
        self.url = user.hub.server(user.name).replace("http://", "ws://") + f"terminals/websocket/{r.json()['name']}"
        self.token, self.typed = user.token, 0

    def run(self, command, timeout=WAIT_MS / 1000):
        """`command`'s output and exit status, typed on one line."""
        self.typed += 1
        end = f"__END{self.typed}__"
        ws = websocket.create_connection(self.url, header=[f"Authorization: token {self.token}"], timeout=5)
        try:
            ws.send(json.dumps(["stdin", f'{command}; echo "{end[:4]}""{end[4:]}$?"\r']))
            text, deadline = "", time.monotonic() + timeout
            while time.monotonic() < deadline:
                try:
                    kind, *rest = json.loads(ws.recv())
                except websocket.WebSocketTimeoutException:
                    continue
                if kind == "stdout":
                    text += rest[0]
                    clean = ANSI.sub("", text)
                    done = re.search(re.escape(end) + r"(\d+)", clean)
                    if done:
                        typed = max(0, clean.find(end[4:] + "$?"))  # the line typed, echoed: the output starts after it
                        return clean[clean.find("\n", typed) + 1:done.start()], int(done.group(1))
        finally:
            ws.close()
        pytest.fail(f"the terminal did not finish {command!r} in {timeout} s:\n{ANSI.sub('', text)[-3000:]}")


def log_in(browser, hub, user):
    """The hub's login page, as a person fills it; returns the page on the user's JupyterLab."""
    page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto(f"{hub.url}/hub/login")
    page.fill("input[name=username]", user)
    page.fill("input[name=password]", hub.room.passwords[user])
    page.click("[type=submit]")
    page.wait_for_url(f"http://{user}.localhost:{hub.port}/user/{user}/lab**")
    page.wait_for_selector(".lm-MenuBar-itemLabel")
    return page


def assignment_list(page):
    page.locator(".lm-MenuBar-itemLabel", has_text="Nbgrader").click()
    page.locator(".lm-Menu-itemLabel", has_text="Assignment List").click()
    page.wait_for_selector("#released_assignments_list, .assignment-list, #fetched_assignments_list")


def press(page, section, button):
    """Click `button` in the assignment's row of the Assignment List's `section`, after a refresh."""
    page.locator("#refresh_assignments_list").click()
    page.locator(f"#{section} .list_item", has_text=NAME).locator("button", has_text=button).first.click()


def shot(page, name):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name))


def until(ready, what):
    """Wait for `ready()` (the file system catching up with a click), at most WAIT_MS."""
    deadline = time.monotonic() + WAIT_MS / 1000
    while not ready():
        if time.monotonic() > deadline:
            pytest.fail(f"waited {WAIT_MS // 1000} s for {what}")
        time.sleep(0.5)


HEATMAP = "heatmap.html"
# files she hands in beside her notebook, each named so that a Python started in that folder would run it: were any to
# run as the instructor, it would leave its mark in the machine's /tmp (the instructor's to write, not hers)
PLANTED = ("ipykernel_launcher.py", "torch.py", "sitecustomize.py")
MARK = f"/tmp/seqcourse-hub-planted-{os.getpid()}-"
# in the grading sandbox (issue 57's second attack): four children, each holding 1 GiB at once, the likeliest killed first
MEMORY_ATTACK = """import os, time
children = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        with open('/proc/self/oom_score_adj', 'w') as f:
            f.write('1000')
        block = b'\\1' * 2**30
        time.sleep(10)
        os._exit(0)
    children.append(pid)
held = sum(os.waitpid(pid, 0)[1] == 0 for pid in children)
print(f'children that held 1 GiB: {held} of 4')
"""


def planted(name):
    return (f"open({(MARK + name)!r}, 'w').write(__import__('getpass').getuser())\n"
            + ("import runpy; runpy.run_module('ipykernel', run_name='__main__')\n" if name == "ipykernel_launcher.py" else ""))


def hostile_notebook(released, solution, classmate_home, her_page):
    """The complete notebook, plus a script in an output, a handler in a markdown cell, a link to a classmate's work,
    and a cell that displays a link to a page of her own server."""
    nb = fill_submission(released, solution)
    nb.cells.append(nbformat.v4.new_markdown_cell(f"<img src=x onerror=\"{payload('hub-md')}\"> "
                                                  f"[their work](file://{classmate_home}/{NAME}/{NAME}.ipynb)"))
    # a link in what her code displays: the formgrader keeps it clickable (autograder.grading.pages.inert)
    nb.cells.append(nbformat.v4.new_code_cell("from IPython.display import HTML, display\n"
                                              f"display(HTML('<a href=\"{her_page}\">see my attention heatmap</a>'))"))
    code = nbformat.v4.new_code_cell("1")
    code.outputs = [nbformat.v4.new_output("display_data", {"text/html": f"<script>{payload('hub-out')}</script>",
                                                            "text/plain": "x"})]
    nb.cells.append(code)
    nb.cells.append(nbformat.v4.new_code_cell(MEMORY_ATTACK))
    for cell in nb.cells:  # and what it wrote in its exercises is all wrong: 0 points
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = "raise ValueError('no')"
    return nb


# A page that takes over whoever opens it when it runs in the hub's origin (issue 47's first attack): it reads the
# instructor's xsrf token from the hub's token page, makes an API token with all of the instructor's scopes, and
# with it opens a terminal on the instructor's server. Returns how far it got.
TAKEOVER_JS = """async ([hub, teacher]) => {
  const got = {};
  try {
    const page = await fetch(hub + '/hub/token', {mode: 'no-cors', credentials: 'include'});
    got.page = page.type;
    got.xsrf = ((await page.text()).match(/xsrf_token: "([^"]+)"/) || [])[1] || null;
  } catch (e) { got.page = 'refused: ' + e; got.xsrf = null; }
  try {
    const made = await fetch(hub + '/hub/api/users/' + teacher + '/tokens', {method: 'POST', credentials: 'include',
      headers: {'Content-Type': 'application/json', 'X-XSRFToken': got.xsrf || ''}, body: JSON.stringify({note: 'pwned'})});
    got.token_status = made.status;
    got.token = (await made.json()).token || null;
  } catch (e) { got.token_status = 'refused: ' + e; got.token = null; }
  // and cookie tossing: cookies for the hub's host, which would stand in for the instructor's own
  document.cookie = '_xsrf=tossed; domain=localhost; path=/hub/';
  document.cookie = 'jupyterhub-session-id=tossed; domain=localhost; path=/';
  got.cookies = document.cookie;
  return got;
}"""


@pytest.fixture(scope="module")
def term():
    from playwright.sync_api import sync_playwright

    resolve = client.resolve_loopback()
    top = Path(tempfile.mkdtemp(prefix="seqcourse-hub-"))
    os.chmod(top, 0o755)  # the accounts pass through it to their homes and the environments
    private = Path(tempfile.mkdtemp(prefix="seqcourse-checkout-"))  # 0700: the checkout `make hub` runs from
    hub, seen = None, {}
    try:
        checkout = clone(private / "seqcourse")
        subprocess.run(["git", "init", "-q"], cwd=checkout, check=True)  # make hub copies the files git would
        hub = Hub(top, checkout)
        room = hub.room
        ada, mallory = room.students
        seen["exchange_at_start"] = exchange_owners(room)
        seen["printed"] = hub.log.read_text()
        teacher = User(hub, room.instructor)
        teacher.post(f"formgrader/api/assignment/{NAME}/assign")
        seen["release"] = teacher.post(f"formgrader/api/assignment/{NAME}/release")["log"]
        seen["inbound_mode"] = oct((room.exchange / COURSE / "inbound").stat().st_mode & 0o7777)
        students = {who: User(hub, who) for who in room.students}
        her_page = hub.server(mallory) + f"static/{HEATMAP}"
        solution = nbformat.read(ROOT / "solutions" / NAME / f"{NAME}.ipynb", as_version=4)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
            pages = {who: log_in(browser, hub, who) for who in room.students}
            for who, page in pages.items():  # fetch in the Assignment List
                assignment_list(page)
                press(page, "released_assignments_list", "Fetch")
                page.locator("#fetched_assignments_list .list_item", has_text=NAME).first.wait_for()
            shot(pages[ada], "student-assignment-list.png")
            released = students[ada].notebook(f"{NAME}/{NAME}.ipynb")
            students[ada].put_notebook(f"{NAME}/{NAME}.ipynb", fill_submission(released, solution))
            students[mallory].put_notebook(f"{NAME}/{NAME}.ipynb", hostile_notebook(released, solution, room.home(ada), her_page))
            for name in PLANTED:
                students[mallory].put_file(f"{NAME}/{name}", planted(name))
            for who, page in pages.items():  # submit in the Assignment List
                press(page, "fetched_assignments_list", "Submit")
                page.locator("#submitted_assignments_list .list_item", has_text=NAME).first.wait_for()

            # 2. the exchange, from her terminal: what nbgrader's exchange used to let any student do before a release
            shell = students[mallory].terminal()
            course = room.exchange / COURSE
            seen["exchange_attack"] = shell.run(
                f"mkdir {course}/outbound/06_multi_head_attention; touch {course}/outbound/{NAME}/evil.py; "
                f"cp ~/{NAME}/{NAME}.ipynb {course}/outbound/{NAME}/{NAME}.ipynb; ls {course}/inbound; "
                f"mkdir -p {room.exchange}/{COURSE}2/outbound && echo 'a course of her own, in her memory only'")
            seen["exchange_after"] = exchange_owners(room)

            # the instructor: collect in the formgrader, `grade` typed in a JupyterLab terminal, the formgrader's button
            seen["collect"] = teacher.post(f"formgrader/api/assignment/{NAME}/collect")["log"]
            desk = teacher.terminal()
            seen["instructor_tools"] = desk.run("which nbgrader python; nbgrader --version")
            seen["grade"] = desk.run("python -m autograder grade . --jobs 1 --no-progress", timeout=900)
            seen["scores"] = {s["student"]: s["score"] for s in teacher.get(f"formgrader/api/submissions/{NAME}").json()}
            ids = {s["student"]: s["id"] for s in teacher.get(f"formgrader/api/submitted_notebooks/{NAME}/{NAME}").json()}
            tpage = log_in(browser, hub, room.instructor)
            formgrader = hub.server(room.instructor) + "formgrader/"
            tpage.goto(formgrader + f"manage_submissions/{NAME}")
            tpage.wait_for_selector("table")
            tpage.locator("tr", has_text=ada).locator(".autograde a").click()  # the formgrader's own autograde button
            tpage.wait_for_selector("#success-modal, #error-modal")
            seen["autograde_button"] = tpage.locator(".modal-title").first.text_content()
            tpage.goto(formgrader + f"manage_submissions/{NAME}")
            tpage.wait_for_selector("table")
            tpage.wait_for_timeout(1000)
            seen["rescored"] = {s["student"]: s["score"] for s in teacher.get(f"formgrader/api/submissions/{NAME}").json()}
            shot(tpage, "instructor-formgrader.png")
            seen["formgrader_text"] = tpage.evaluate("() => document.body.textContent")
            seen["hostile_page"] = visit(tpage, formgrader + f"submissions/{ids[mallory]}/")

            # issue 57, first: what she handed in beside her notebook, the instructor opening it in JupyterLab
            submitted, autograded = (room.course_dir / kind / mallory / NAME for kind in ("submitted", "autograded"))
            seen["handed_in"] = (sorted(os.listdir(submitted)), sorted(os.listdir(autograded)))
            seen["opened"] = open_in_lab(tpage, hub, room, f"submitted/{mallory}/{NAME}/{NAME}.ipynb", "instructor-opens-submission.png")
            teacher_pw = pwd.getpwnam(room.instructor)
            for name in PLANTED:  # and beside it by hand, as an instructor who copied a submission in would
                (submitted / name).write_text(planted(name))
                os.chown(submitted / name, teacher_pw.pw_uid, teacher_pw.pw_gid)
            seen["opened_planted"] = open_in_lab(tpage, hub, room, f"submitted/{mallory}/{NAME}/{NAME}.ipynb",
                                                 "instructor-opens-planted-submission.png")
            for name in PLANTED:
                (submitted / name).unlink()
            seen["planted_ran"] = [name for name in PLANTED if os.path.exists(MARK + name)]
            # issue 57, second: her children's memory in grading's sandbox, under the instructor's account
            graded = nbformat.read(autograded / f"{NAME}.ipynb", as_version=4)
            seen["memory_attack"] = "".join(o.get("text", "") for c in graded.cells if c.cell_type == "code"
                                            and "children that held" in c.source for o in c.get("outputs", []))
            seen["instructor_groups"] = her_groups(room.instructor)

            # 1. a page of her server, in the instructor's browser: her configuration would serve it to anyone
            shell.run(f"mkdir -p ~/.jupyter ~/www && echo \"c.ServerApp.extra_static_paths = ['$HOME/www']\" > "
                      f"~/.jupyter/jupyter_server_config.py && echo '<title>heatmap</title><p>my heatmap' > ~/www/{HEATMAP}")
            students[mallory].stop()
            students[mallory].start()  # her server, started again, reads whatever configuration it reads
            pages[mallory].reload()
            pages[mallory].wait_for_selector(".lm-MenuBar-itemLabel")
            assignment_list(pages[mallory])
            shell = students[mallory].terminal()
            tokens_before = teacher.tokens()
            seen["click"] = click_her_link(tpage, hub, room, ids[mallory])
            seen["tokens_added"] = sorted(set(teacher.tokens()) - set(tokens_before))
            # the same script in the hub's own origin (a control): it does take over, so its failure above is the wall's
            control = tpage.context.new_page()
            control.goto(f"{hub.url}/hub/home")
            seen["control"] = control.evaluate(TAKEOVER_JS, [hub.url, room.instructor])
            if seen["control"].get("token"):
                teacher.s.delete(f"{hub.url}/hub/api/users/{room.instructor}/tokens/"
                                 + sorted(set(teacher.tokens()) - set(tokens_before))[0], headers=teacher.auth())

            # mallory submits again, then adds to her entry in her inbound (hers: she may write in it) a link to the
            # instructor's solutions; the formgrader's collect takes the newer submission, and refuses it
            inbound = room.volumes.inbound(mallory)
            entries = lambda: [e for e in os.listdir(inbound) if e.startswith(f"{mallory}+{NAME}+")]  # noqa: E731
            press(pages[mallory], "fetched_assignments_list", "Submit")
            until(lambda: len(entries()) == 2, "mallory's second submission in her inbound")
            entry = max(entries(), key=lambda e: (inbound / e).stat().st_ctime)
            seen["link"] = shell.run(f"ln -s {room.course_dir / 'solutions' / NAME / f'{NAME}.ipynb'} "
                                     f"'{course / 'inbound' / entry / 'answers.ipynb'}'")
            seen["recollect"] = teacher.post(f"formgrader/api/assignment/{NAME}/collect")["log"]
            seen["regrade"] = desk.run("python -m autograder grade . --jobs 1 --no-progress", timeout=900)
            seen["rescores"] = {s["student"]: s["score"] for s in teacher.get(f"formgrader/api/submissions/{NAME}").json()}

            # feedback, released in the formgrader and fetched in each student's Assignment List
            teacher.post(f"formgrader/api/assignment/{NAME}/generate_feedback")
            teacher.post(f"formgrader/api/assignment/{NAME}/release_feedback")

            def fetched(who):
                return sorted(str(p.relative_to(room.home(who))) for p in (room.home(who) / NAME / "feedback").rglob("*.html"))
            for who, page in pages.items():
                press(page, "submitted_assignments_list", "Fetch Feedback")
                until(lambda: fetched(who), f"{who}'s feedback in their home")
            seen["feedback"] = {who: fetched(who) for who in room.students}
            seen["feedback_text"] = {who: "".join((room.home(who) / f).read_text() for f in seen["feedback"][who])
                                     for who in room.students}

            # as a student: the instructor's formgrader, in the browser and with their own token; their own has none
            denied = pages[mallory].goto(formgrader)
            seen["formgrader_for_student"] = (denied.status, pages[mallory].evaluate("() => document.body.textContent"))
            seen["formgrader_api_for_student"] = students[mallory].get("formgrader/api/submissions/" + NAME, user=room.instructor).status_code
            seen["own_formgrader"] = students[mallory].get("formgrader/api/status").status_code

            # as a student's account, in her terminal: what she can reach, import and run
            probe = ("import os, sys\nfor p in sys.argv[1:]:\n"
                     "    try: os.listdir(p) if os.path.isdir(p) else open(p).read(); print('READ', p)\n"
                     "    except PermissionError: print('DENIED', p)\n"
                     "    except FileNotFoundError: print('ABSENT', p)\n")
            students[mallory].put_file("probe.py", probe)
            secrets = [room.home(ada), room.home(ada) / NAME / f"{NAME}.ipynb", room.course_dir, course / "inbound",
                       course / "feedback", room.hub_dir / "class.json", room.hub_dir / "jupyterhub.sqlite",
                       room.course_dir / "gradebook.db", checkout / "solutions_lib" / "__init__.py",
                       ROOT / "solutions_lib" / "__init__.py", room.volumes.inbound(ada), room.state / "disks"]
            seen["reach"] = shell.run("python probe.py " + " ".join(f"'{p}'" for p in secrets))
            seen["import"] = shell.run("python -c 'import solutions_lib'")
            seen["reveal"] = shell.run("python -c \"from autograder import reveal; reveal('causal_mask')\"")
            seen["server_env"] = server_env(mallory)
            seen["cgroup"] = Path(f"/proc/{server_pid(mallory)}/cgroup").read_text()
            seen["threads"] = shell.run("python -c 'import course_lib, torch; print(torch.get_num_threads())'")

            browser.close()

        shell = students[mallory].terminal()
        # 4. processes: as many threads as she can start, then whether the machine still forks
        students[mallory].put_file("threads.py", "import threading, time\nn = 0\ntry:\n    while True:\n"
                                   "        threading.Thread(target=time.sleep, args=(20,), daemon=True).start()\n        n += 1\n"
                                   "except RuntimeError as e:\n    print('STOPPED', n, e)\n")
        seen["nproc"] = shell.run("ulimit -u")
        seen["threads_attack"] = shell.run("python threads.py & sleep 3; echo forks=$(true && echo yes)", timeout=120)
        seen["machine_forks"] = subprocess.run(["true"]).returncode == 0 and requests.get(f"{hub.url}/hub/login").ok
        shell.run("wait")

        # 5. /dev/shm, /tmp and /var/tmp past her memory, then her server stopped and started again
        seen["fill"] = shell.run("for d in /dev/shm /tmp; do dd if=/dev/zero of=$d/fill bs=1M count=700 2>&1 | grep -E 'No space|bytes'; "
                                 "done; df -B1 --output=size,target /var/tmp | tail -1", timeout=300)
        uid = pwd.getpwnam(mallory).pw_uid
        seen["host_scratch"] = owned_by(uid, ("/tmp", "/dev/shm", "/var/tmp"), apart=top)  # top: the class's own
        namespace, read_at = os.stat(f"/proc/{server_pid(mallory)}/ns/mnt").st_ino, boot_ticks()
        shell.run("rm /tmp/fill")  # room for a kernel's files; /dev/shm stays full until her server stops

        # 6. processes that try to outlive her server: setsid, nohup, double-forked daemons, a restarted kernel
        students[mallory].put_file("daemons.py", "import os, time\nfor i in range(100):\n    if os.fork() == 0:\n"
                                   "        os.setsid()\n        if os.fork():\n            os._exit(0)\n"
                                   "        time.sleep(1000)\n")
        kernel = students[mallory].s.post(hub.server(mallory) + "api/kernels", headers=students[mallory].auth(),
                                          json={"name": "python3"})
        assert kernel.ok, kernel.text[:500]
        restarted = students[mallory].s.post(hub.server(mallory) + f"api/kernels/{kernel.json()['id']}/restart",
                                             headers=students[mallory].auth())
        assert restarted.ok, restarted.text[:500]
        seen["spawned"] = shell.run("for i in $(seq 20); do setsid nohup sleep 1000 >/dev/null 2>&1 & done; "
                                    "python daemons.py; nohup sh -c 'while :; do sleep 1000 & sleep 5; done' >/dev/null 2>&1 & "
                                    "sleep 2; ps -e --no-headers | wc -l")
        seen["alive_before_stop"] = len(processes_of([mallory]).splitlines())
        hers = her_groups(mallory)
        stopped_at = time.monotonic()
        students[mallory].stop()
        until(lambda: not processes_of([mallory]), "every process of hers to end")
        seen["ended_in"] = time.monotonic() - stopped_at
        seen["namespace_left"] = in_namespace(namespace, uid, read_at)
        seen["her_cgroups"] = (len(hers), [str(g) for g in hers if g.exists()])
        students[mallory].start()
        shell = students[mallory].terminal()
        seen["scratch_again"] = shell.run("ls -A /tmp /dev/shm /var/tmp")

        # 7. the disk: her home, then her inbound, past --disk
        seen["disk_home"] = shell.run("dd if=/dev/zero of=~/fill bs=1M count=400 2>&1 | tail -1", timeout=300)
        seen["disk_inbound"] = shell.run(f"mkdir '{course}/inbound/{mallory}+x+1+y' && dd if=/dev/zero "
                                         f"of='{course}/inbound/{mallory}+x+1+y/fill' bs=1M count=100 2>&1 | tail -1")
        seen["disk_image"] = room.volumes.image(mallory).stat().st_blocks * 512
        shell.run(f"rm -rf ~/fill '{course}/inbound/{mallory}+x+1+y'")

        # issue 57: what the class shares, from her terminal. The hub's database and log first
        db, log = room.hub_dir / "jupyterhub.sqlite", room.hub_dir / "hub.log"
        sizes = db.stat().st_size, log.stat().st_size
        seen["student_token"] = students[mallory].s.post(f"{hub.url}/hub/api/users/{mallory}/tokens", json={"note": "mine"},
                                                         headers=students[mallory].xsrf()).status_code
        students[mallory].put_file("flood.py", FLOOD)
        seen["flood"] = shell.run("python flood.py", timeout=300)
        seen["grown"] = (db.stat().st_size - sizes[0], log.stat().st_size - sizes[1])
        # ports, files, terminals and socket memory
        # (her own connections stall while the last part holds her socket memory: the script leaves its answer in a file)
        students[mallory].put_file("tables.py", TABLES)
        shell.run(f"(nohup python tables.py {hub.port} > tables.json 2>&1 &)")
        answer = room.home(mallory) / "tables.json"
        until(lambda: answer.exists() and answer.read_text().endswith("}\n"), "her tables' attack to end")
        seen["tables"] = json.loads(answer.read_text())
        shell = students[mallory].terminal()
        memory_group = next(g for g in her_groups(mallory) if g.parent.name == "memory")
        seen["tcp"] = tuple(int((memory_group / f).read_text()) for f in (
            "memory.kmem.tcp.max_usage_in_bytes", "memory.kmem.tcp.limit_in_bytes"))
        # the front door: her listener on the hub's port, then the proxy dies and the hub starts it again
        shell.run(f"(nohup python -c 'import socket, time; s = socket.socket(); s.bind((\"127.0.0.1\", {hub.port})); "
                  "s.listen(); time.sleep(300)' >/dev/null 2>&1 &)")
        before = hub.proxy_pid()
        os.kill(before, signal.SIGKILL)
        until(lambda: room.proxy_pid_file.exists() and hub.proxy_pid() != before and login_page(hub) == 200,
              "the hub to start its proxy again")
        seen["front_door"] = ([(held.uid, held.pids) for held in proxy.listeners(hub.port)], hub.proxy_pid())
        # namespaces and system calls a notebook does not need
        seen["nested"] = shell.run("unshare -Urnm true; echo unshare=$?; python -c \"import ctypes; l = ctypes.CDLL(None, "
                                   "use_errno=True); print('mount', l.mount(b'x', b'/tmp', b'tmpfs', 0, None), ctypes.get_errno())\"")
        # her server, ended from inside: its groups go with it, and the log says so
        hers = her_groups(mallory)
        shell.run("((sleep 1; kill -9 $(pgrep -f bin/jupyterhub-singleuser)) >/dev/null 2>&1 &)")
        until(lambda: not processes_of([mallory]) and not any(g.exists() for g in hers), "her groups' removal")
        seen["ended_by_itself"] = (len(hers), hub.log.read_text())

        # 3. the checkout, from the make hub's own start: refused while other accounts could read it
        seen["room"], seen["port"] = room, hub.port
        seen["ada_after"] = (students[ada].get("api/status").status_code,
                             {s["student"]: s["score"] for s in teacher.get(f"formgrader/api/submissions/{NAME}").json()})
        seen["left"], seen["cgroups"] = hub.stop()
        seen["log"] = hub.log.read_text()
        # started again: the same accounts, environments, disks and course, with its grades
        seen["again"] = subprocess.run(hub.command("--prepare-only"), cwd=checkout, capture_output=True, text=True, timeout=600)
        seen["kept_grades"] = (room.course_dir / "gradebook.db").exists() and (room.course_dir / "grades.csv").exists()
        # an exchange course folder a student made (an earlier class's exchange was open to all) stops the class
        os.chown(course / "outbound", uid, uid)
        seen["foreign_course"] = subprocess.run(hub.command("--prepare-only"), cwd=checkout, capture_output=True,
                                                text=True, timeout=600)
        teacher_pw = pwd.getpwnam(room.instructor)
        os.chown(course / "outbound", teacher_pw.pw_uid, teacher_pw.pw_gid)
        # and a checkout others can read
        os.chmod(private, 0o755)
        seen["readable_checkout"] = subprocess.run(hub.command("--prepare-only"), cwd=checkout, capture_output=True,
                                                   text=True, timeout=600)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)  # what each attack got, for a person to read (no token's value)
        (ARTIFACTS / "attacks.json").write_text(json.dumps({k: redacted(seen[k]) for k in (
            "click", "control", "tokens_added", "exchange_attack", "nproc", "threads_attack", "fill", "host_scratch",
            "namespace_left", "alive_before_stop", "ended_in", "her_cgroups", "disk_home", "disk_inbound", "disk_image",
            "handed_in", "planted_ran", "memory_attack", "student_token", "flood", "grown", "tables", "tcp", "front_door",
            "nested")},
            indent=1, default=str))
        yield seen
    finally:
        socket.getaddrinfo = resolve
        if hub is not None and hub.proc.poll() is None:
            hub.stop()
        left = ["the class"]
        if (top / "state" / "hub" / "class.json").exists():  # made, even where the hub never answered
            left = classroom.remove(classroom.Classroom.load(top / "state"), say=lambda *_: None)
        if not left or not (top / "state").exists():  # never the disks' images while they are mounted
            shutil.rmtree(top, ignore_errors=True)
        shutil.rmtree(private, ignore_errors=True)


# from her terminal: four token requests with a 90 MiB note each, then a 60 kB URL, each to the hub's API through
# her relay, with her server's own token; what the hub answered, in its first line
FLOOD = r"""import os, socket
api = os.environ['JUPYTERHUB_API_URL']
port, me, token = int(api.split(':')[2].split('/')[0]), os.environ['JUPYTERHUB_USER'], os.environ['JUPYTERHUB_API_TOKEN']
CRLF = '\r\n'

def ask(head, body=b''):
    with socket.create_connection(('127.0.0.1', port), timeout=60) as s:
        try:
            s.sendall(head.replace('\n', CRLF).encode())
            s.sendall(body)
        except OSError:
            pass
        try:
            return s.recv(200).decode('latin-1').split(CRLF)[0] or 'closed'
        except OSError as e:
            return 'closed (%s)' % e.strerror

note = b'{"note": "' + b'x' * (90 * 2**20) + b'"}'
for _ in range(4):
    print('TOKEN', ask('POST /hub/api/users/%s/tokens HTTP/1.1\nHost: 127.0.0.1\nAuthorization: token %s\n'
                       'Content-Type: application/json\nContent-Length: %d\n\n' % (me, token, len(note)), note))
print('URL', ask('GET /hub/api/' + 'a' * 60000 + ' HTTP/1.1\nHost: 127.0.0.1\n\n'))
"""
# from her terminal: as many loopback ports, open files and pseudo-terminals as she can hold, the hub's public port
# in her own network, and 200 loopback connections written to and never read
TABLES = r"""import json, os, socket, sys
got, held = {}, []
try:
    for port in range(20000, 30000):
        s = socket.socket()
        s.bind(('127.0.0.1', port))
        held.append(s)
except OSError as e:
    got['ports_stopped'] = e.strerror
got['ports'] = len(held)
for s in held:
    s.close()
door = socket.socket()
door.bind(('127.0.0.1', int(sys.argv[1])))
door.listen()
got['front_door'] = 'bound'
fds = []
try:
    while len(fds) < 400000:
        fds.append(os.open('/dev/null', os.O_RDONLY))
except OSError as e:
    got['files_stopped'] = e.strerror
got['files'] = len(fds)
for fd in fds:
    os.close(fd)
ptys = []
try:
    while len(ptys) < 5000:
        ptys.append(os.openpty())
except OSError as e:
    got['ptys_stopped'] = e.strerror
got['ptys'] = len(ptys)
for pair in ptys:
    os.close(pair[0]), os.close(pair[1])
server = socket.socket()
server.bind(('127.0.0.1', 0))
server.listen(512)
pairs, queued = [], 0
for _ in range(200):
    c = socket.create_connection(server.getsockname())
    pairs.append((c, server.accept()[0]))
    c.setblocking(False)
    try:
        while True:
            queued += c.send(b'x' * 2**16)
    except OSError:
        pass
got['queued'] = queued
for pair in pairs:  # her server's own connections (her terminal's among them) share what these hold
    pair[0].close(), pair[1].close()
print(json.dumps(got))
"""


def her_groups(user):
    """The cgroups `user`'s server runs in (version 1: one folder a controller)."""
    return [Path("/sys/fs/cgroup", c, path.lstrip("/")) for _, c, path in (line.split(":", 2) for line in Path(
        f"/proc/{server_pid(user)}/cgroup").read_text().split()) if path.startswith("/seqcourse-hub-")]


def login_page(hub):
    try:
        return requests.get(f"{hub.url}/hub/login", timeout=5).status_code
    except requests.ConnectionError:
        return None


def open_in_lab(page, hub, room, path, picture):
    """The instructor opens `path` (in their course) in JupyterLab, as a person does, and waits for its kernel to
    start or be refused; what the page then says."""
    lab = page.context.new_page()
    lab.set_default_timeout(WAIT_MS)
    lab.goto(hub.server(room.instructor) + f"lab/tree/{path}")
    lab.wait_for_selector(".jp-Notebook")
    lab.wait_for_timeout(10_000)
    shot(lab, picture)
    text = lab.evaluate("() => document.body.innerText")
    lab.close()
    return text


def redacted(value):
    return {k: ("(a token)" if k in ("token", "xsrf") and v else v) for k, v in value.items()} if isinstance(value, dict) else value


def exchange_owners(room):
    """Every entry of the exchange's top and course folders: its owner and mode."""
    found = {}
    for path in [room.exchange, *room.exchange.rglob("*")]:
        st = path.lstat()
        found[str(path.relative_to(room.exchange))] = (pwd.getpwuid(st.st_uid).pw_name, oct(st.st_mode & 0o7777))
    return found


def server_env(user):
    """The environment the hub gave `user`'s server, read from its process: what their terminal and kernels get."""
    raw = Path(f"/proc/{server_pid(user)}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def server_pid(user):
    return subprocess.run(["pgrep", "-u", user, "-f", "bin/jupyterhub-singleuser"], capture_output=True, text=True).stdout.split()[-1]


def owned_by(uid, roots, apart):
    """The files and folders under `roots`, but not under `apart`, that `uid` owns."""
    found = []
    for root in roots:
        for folder, dirs, files in os.walk(root, onerror=lambda e: None):
            dirs[:] = [d for d in dirs if Path(folder, d) != apart]
            for name in dirs + files:
                try:
                    if os.lstat(os.path.join(folder, name)).st_uid == uid:
                        found.append(os.path.join(folder, name))
                except OSError:
                    pass
    return found


def boot_ticks():
    """Now, in the clock ticks since boot that /proc/PID/stat gives a process's start in."""
    return time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK")


def in_namespace(namespace, uid, read_at):
    """The processes in the mount namespace numbered `namespace`: `uid`'s, and anyone's already running when it was
    read (at `read_at`, boot_ticks). The kernel gives a freed namespace's number to the next one made, and the other
    test worker's grading sandboxes make namespaces all the time: a process started since, not hers, is in theirs."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if not proc.name.isdigit() or os.stat(proc / "ns/mnt").st_ino != namespace:
                continue
            started = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[19])
            if proc.stat().st_uid == uid or started <= read_at:
                found.append(str(proc))
        except (OSError, IndexError, ValueError):  # ended meanwhile
            pass
    return found


def click_her_link(tpage, hub, room, submission):
    """The instructor, in the formgrader, clicks the link in mallory's submission; then the takeover script runs on
    the page it opened (her origin: whatever her server serves there, it serves in that origin)."""
    tpage.goto(hub.server(room.instructor) + f"formgrader/submissions/{submission}/")
    page = tpage
    with page.expect_navigation():
        page.locator("a", has_text="see my attention heatmap").first.click()
    page.wait_for_load_state("load")
    seen = {"url": page.url, "origin": page.evaluate("() => location.origin"), "text": page.evaluate("() => document.body.textContent")}
    seen |= page.evaluate(TAKEOVER_JS, [hub.url, room.instructor])
    seen["sent_to_her"] = [{"name": c["name"], "domain": c["domain"]} for c in page.context.cookies(page.url)]
    seen["tossed"] = [c["name"] for c in page.context.cookies(hub.url + "/hub/") if c["value"] == "tossed"]
    shot(page, "instructor-opens-her-link.png")
    return seen


def visit(page, url):
    """What ran when the instructor opened `url`: the payloads' marks, dialogs, and what on the page could run."""
    seen = {"dialogs": []}
    page.on("dialog", lambda d: (seen["dialogs"].append(d.message), d.dismiss()))
    page.goto(url)
    page.wait_for_load_state("load")
    page.wait_for_timeout(1500)
    seen["marks"] = page.evaluate("() => window.__pwned || []")
    seen["live"] = page.evaluate(LIVE_JS)
    shot(page, "instructor-hostile-submission.png")
    return seen


# --- the honest class


def test_make_hub_makes_the_exchange_the_instructor_s_before_anyone_logs_in(term):
    room, owners = term["room"], term["exchange_at_start"]
    assert set(owners) == {".", COURSE, *(f"{COURSE}/{n}" for n in EXCHANGE_MODES if n)}, owners
    assert all(who == room.instructor for who, _ in owners.values()), owners
    assert {k: mode for k, (_, mode) in owners.items()} == {".": "0o755", **{
        f"{COURSE}/{n}" if n else COURSE: oct(m) for n, m in EXCHANGE_MODES.items()}}
    assert "Released as: seqcourse 05_self_attention" in term["release"]
    assert term["inbound_mode"] == "0o3733"


def test_students_fetch_and_submit_in_the_assignment_list_and_grade_scores_them(term):
    room = term["room"]
    ada, mallory = room.students
    assert "Collecting submission: " + ada in term["collect"] and "Collecting submission: " + mallory in term["collect"]
    assert term["scores"] == {ada: FULL, mallory: 0}
    assert term["autograde_button"] == "Success" and term["rescored"][ada] == FULL  # the formgrader's button agrees


def test_the_instructor_grades_in_a_jupyterlab_terminal_as_the_readme_says(term):
    room = term["room"]
    tools, status = term["instructor_tools"]
    assert status == 0 and str(room.env("instructor") / "bin" / "nbgrader") in tools, tools
    out, status = term["grade"]
    assert status == 0 and "graded" in out.lower(), out[-3000:]


def test_a_link_planted_in_her_inbound_is_refused_at_collect(term):
    room = term["room"]
    mallory = room.students[1]
    assert term["link"][1] == 0, term["link"]
    assert term["regrade"][1] == 0, term["regrade"][0][-3000:]
    assert term["rescores"][mallory] == 0
    reason = next(p["reason"] for p in read_problems(room.course_dir) if p["student_id"] == mallory)
    assert "nbgrader collect refused this submission: 'answers.ipynb' is a link" in reason, reason


def test_the_hostile_submission_is_inert_in_the_formgrader(term):
    page = term["hostile_page"]
    assert page["marks"] == [] and page["dialogs"] == [] and page["live"] == [], page


def test_each_student_fetches_their_own_feedback_only(term):
    ada, mallory = term["room"].students
    for who in (ada, mallory):
        assert term["feedback"][who], (who, term["feedback"])
    assert f"Score: {FULL:g}" in term["feedback_text"][ada] or f"{FULL:.1f}" in term["feedback_text"][ada]
    assert "hub-out" not in term["feedback_text"][ada]


def test_a_student_reaches_neither_the_formgrader_nor_a_classmate_nor_the_reference(term):
    room = term["room"]
    status, text = term["formgrader_for_student"]
    assert status == 403, (status, text[:500])
    assert term["formgrader_api_for_student"] == 403
    assert term["own_formgrader"] == 404  # the student's own server has no formgrader
    reach, _ = term["reach"]
    lines = reach.split()
    assert lines and all(word in ("DENIED", "ABSENT") for word in lines[::2]), reach
    out, status = term["import"]
    assert status != 0 and "No module named 'solutions_lib'" in out
    assert "not part of this course's student distribution" in term["reveal"][0]
    env = term["server_env"]
    assert env["PATH"].startswith(str(room.env("student"))) and "PYTHONPATH" not in env
    assert env["JUPYTERHUB_DISABLE_USER_CONFIG"] == "1"  # her ~/.jupyter configures nothing of her server


def test_each_server_runs_under_its_cpu_memory_and_process_limits(term):
    groups = {line.split(":")[1]: line.split(":")[2] for line in term["cgroup"].splitlines()}
    for controller in ("cpu", "memory", "pids", "freezer"):
        assert groups[controller].startswith("/seqcourse-hub-"), groups
    out, _ = term["threads"]  # the course reads the quota in her wall: one thread for a 1-CPU server
    said, threads = out.strip().rsplit("\n", 1)
    assert threads == "1" and "PyTorch threads: 1 instead of" in said and "cgroup quota" in said, out


def test_ctrl_c_stops_the_hub_and_every_server(term):
    assert term["left"] == "" and term["cgroups"] == [], (term["left"], term["cgroups"])
    assert "The hub and every server it started have stopped." in term["log"]
    assert "could not be removed" not in term["log"] and "would not end" not in term["log"]
    assert "outlived it" not in term["log"]  # the proxy, restarted once (attack 12), stopped with the hub


def test_started_again_it_reuses_the_accounts_the_environments_the_disks_and_the_course(term):
    again = term["again"]
    assert again.returncode == 0, again.stdout + again.stderr
    for fresh in ("made the Unix account", "installing", "copying", "disk ("):
        assert fresh not in again.stdout, again.stdout
    room = term["room"]
    assert all(f"{user}" in again.stdout and room.passwords[user] in again.stdout for user in room.users)
    assert term["kept_grades"]


# --- the seven attacks of issue 47, each from the hostile student's own terminal


def test_1_a_page_of_her_server_cannot_act_in_the_hub_s_or_the_instructor_s_origin(term):
    room, click, control = term["room"], term["click"], term["control"]
    mallory = room.students[1]
    assert click["origin"] == f"http://{mallory}.localhost:{term['port']}", click  # the link opened in her own origin
    assert "my heatmap" not in click["text"]  # and her ~/.jupyter did not make her server serve her page
    assert click["xsrf"] is None and click["token"] is None and click["token_status"] != 201, click
    # no cookie of the hub's or the instructor's server goes to her server, in this browser that holds them all
    assert all(c["domain"] == f"{mallory}.localhost" for c in click["sent_to_her"]), click["sent_to_her"]
    assert term["tokens_added"] == []
    assert click["tossed"] == []  # a cookie she sets for localhost does not reach the hub: her host is a site of its own
    # the control: the same script in the hub's origin takes the instructor's token, as it did on one origin
    assert control["xsrf"] and control["token_status"] == 201 and control["token"], control


def test_2_the_exchange_cannot_be_taken_or_changed_by_a_student(term):
    room = term["room"]
    out, _ = term["exchange_attack"]
    assert out.count("Read-only file system") == 3 and "Permission denied" in out, out
    before, after = term["exchange_at_start"], term["exchange_after"]
    released = {k: v for k, v in after.items() if k not in before}
    assert all(k.startswith(f"{COURSE}/outbound/{NAME}") for k in released), released
    assert all(who == room.instructor for who, _ in after.values()), after
    assert COURSE + "2" not in after
    refused = term["foreign_course"]
    assert refused.returncode != 0 and f"belongs to {room.students[1]}, not the instructor" in refused.stderr, refused.stderr
    assert f"rm -r {room.exchange / COURSE}" in refused.stderr


def test_3_the_instructor_s_checkout_is_out_of_her_reach_and_make_hub_refuses_one_others_can_read(term):
    reach, _ = term["reach"]
    assert "ABSENT " + str(ROOT / "solutions_lib" / "__init__.py") in reach, reach  # the tests' own checkout
    refused = term["readable_checkout"]
    assert refused.returncode != 0 and "other accounts on this machine can read" in refused.stderr, refused.stderr
    assert "chmod -R go-rwx" in refused.stderr


def test_4_her_threads_stop_at_her_process_limit_and_the_machine_still_forks(term):
    assert term["nproc"][0].strip() == str(PIDS)
    out, _ = term["threads_attack"]
    stopped = re.search(r"STOPPED (\d+)", out)
    assert stopped and int(stopped.group(1)) < PIDS, out
    assert term["machine_forks"]


def test_5_her_tmp_and_shm_stop_at_their_size_and_are_gone_with_her_server(term):
    out, _ = term["fill"]
    assert out.count("No space left on device") == 2, out
    written = [int(n) for n in re.findall(r"(\d+) bytes", out)]
    assert len(written) == 2 and all(TMPFS - 2**20 <= n <= TMPFS for n in written), out  # each stops at a quarter of --mem
    assert out.split()[-2:] == [str(TMPFS), "/var/tmp"], out
    assert term["host_scratch"] == []  # nothing of hers in the machine's /tmp, /var/tmp or /dev/shm
    assert term["namespace_left"] == []  # the mount namespace that held them, and so their memory, is gone
    listed, _ = term["scratch_again"]
    assert "fill" not in listed, listed


def test_6_every_process_she_started_ends_with_her_server(term):
    assert term["alive_before_stop"] > 100, term["spawned"]
    assert term["ended_in"] < 60
    assert term["her_cgroups"] == (4, [])  # her cpu, memory, pids and freezer groups, all removed
    assert "could not be removed" not in term["log"]


def test_7_her_home_and_her_submissions_stop_at_her_disk(term):
    assert not term["room"].disk_note, f"this machine cannot give a student a disk of her own: {term['room'].disk_note}"
    home, inbound = term["disk_home"][0], term["disk_inbound"][0]
    in_home, in_inbound = (int(re.search(r"(\d+) bytes", text).group(1)) for text in (home, inbound))
    assert 0 < in_home < DISK and in_home + in_inbound < DISK, (home, inbound)
    assert term["disk_image"] <= DISK  # what the machine's disk holds of hers


# --- issue 57: nothing she hands in runs as the instructor, and no table the machine shares is hers to fill


def test_8_nothing_she_hands_in_beside_her_notebook_runs_as_the_instructor(term):
    submitted, autograded = term["handed_in"]
    assert not set(PLANTED) & set(submitted) and not set(PLANTED) & set(autograded), term["handed_in"]
    assert f"{NAME}.ipynb" in submitted and f"{NAME}.ipynb" in autograded
    assert term["planted_ran"] == [], term["planted_ran"]  # opened in JupyterLab, as handed in and with them planted
    assert "sandbox" in term["opened_planted"], term["opened_planted"][-2000:]  # the kernel refused, saying why


def test_9_grading_under_the_hub_bounds_her_submission_s_memory(term):
    held = re.search(r"children that held 1 GiB: (\d) of 4", term["memory_attack"])
    assert held and int(held.group(1)) <= 1, term["memory_attack"]  # 2048 MB for the sandbox: one GiB at a time
    assert {g.parent.name for g in term["instructor_groups"]} >= {"memory", "pids"}, term["instructor_groups"]


def test_10_she_grows_neither_the_hub_s_database_nor_its_log(term):
    assert term["student_token"] == 403
    out, _ = term["flood"]
    answers = re.findall(r"^(TOKEN|URL) (.*)$", out, re.M)
    assert len(answers) == 5 and not any(" 201 " in a or " 200 " in a for _, a in answers), out
    grown_db, grown_log = term["grown"]
    assert grown_db < 2**20 and grown_log < 64 * 2**10, term["grown"]
    assert bounds.BODY_BYTES < 90 * 2**20 and bounds.HEADER_BYTES < 60_000


def test_11_ports_files_terminals_and_socket_memory_are_hers_alone(term):
    tables = term["tables"]
    assert tables["front_door"] == "bound", tables  # the hub's public port, in her own network: the proxy holds the machine's
    assert tables["ports_stopped"] == "Too many open files" and tables["ports"] < 4096, tables  # one process's files
    assert tables["files_stopped"] == "Too many open files" and tables["files"] < 4096, tables
    assert tables["ptys_stopped"] == "No space left on device" and tables["ptys"] < wall.pty_count(2), tables
    peak, limit = term["tcp"]
    # the kernel charges a socket's buffers ahead, and lets a few pages past the limit rather than drop what it holds
    assert limit == MEM // 4 and peak <= 1.02 * limit and tables["queued"] <= limit, (term["tcp"], tables["queued"])


def test_12_the_front_door_is_the_proxy_s_after_it_restarts(term):
    held, pid = term["front_door"]
    assert held and all(uid == 0 and pid in pids for uid, pids in held), term["front_door"]


def test_13_her_wall_makes_no_namespace_and_no_mount(term):
    out, _ = term["nested"]
    assert "unshare=1" in out and "mount -1 1" in out, out


def test_14_a_server_that_ends_itself_ends_its_groups(term):
    count, log = term["ended_by_itself"]
    assert count == 4, count
    assert "ended by itself" in log and "could not be removed" not in log
