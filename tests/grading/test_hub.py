"""A class through a real JupyterHub, as `make hub` starts it (python -m autograder.hub), driven in Chromium.

Real Unix accounts (an instructor, two students), each user's server started by the hub as that account in its
role's environment (the students': the student distribution only) under cgroup limits, nbgrader's exchange, the
hub's groups read by nbgrader's JupyterHubAuthPlugin. The instructor releases notebook 05 through the formgrader;
the students log in at the hub's login page and fetch and submit it in JupyterLab's Assignment List, one complete,
one hostile (scripts in outputs and cells, a link to a classmate's home); the instructor collects, grades with
`grade` from a terminal and with the formgrader's autograde button, looks at both in the formgrader, and releases
feedback, which each student fetches in the Assignment List. Then, as the students: what they must not reach.
Ctrl-C stops the hub and every server. Screenshots go to test-artifacts/hub/.
"""
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest
import requests

from autograder import registry
from autograder.hub import classroom
from autograder.hub.classroom import COURSE
from autograder.grading.grade import read_problems
from autograder.release import fill_submission
from conftest import ROOT

if os.geteuid() != 0 or not shutil.which("useradd"):
    pytest.skip("a class's hub needs root, to make Unix accounts and start servers as them", allow_module_level=True)
if not shutil.which("npm"):
    pytest.skip("the hub's proxy comes from the npm registry: npm is not installed", allow_module_level=True)
sys.path.insert(0, str(ROOT / "tests" / "learner"))
from test_browser import CHROMIUM, CHROMIUM_FLAGS, LIVE_JS, payload  # noqa: E402 (skips this file without Chromium)

pytestmark = pytest.mark.slow
NAME = "05_self_attention"
FULL = sum(ex.points for ex in registry.for_notebook(NAME))
ARTIFACTS = ROOT / "test-artifacts" / "hub"
WAIT_MS = 180_000  # a server's start, a fetch, a submit: seconds on a quiet machine, more beside other tests


class Hub:
    """`python -m autograder.hub` for a class of two, on a free port, in a folder of its own."""

    def __init__(self, top):
        from autograder.hub.__main__ import free_port

        self.top, self.port = top, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = top / "hub.log"
        self.state = top / "state"
        cmd = [sys.executable, "-m", "autograder.hub", "--state", self.state, "--prefix", f"h{os.getpid()}-",
               "--students", "2", "--home-base", top / "home", "--port", self.port, "--cpu", "1", "--mem", "2G"]
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(list(map(str, cmd)), stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
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
            pytest.fail(f"the hub did not answer:\n{self.log.read_text()[-4000:]}")
        self.room = classroom.Classroom.load(self.state)

    def stop(self):
        """Ctrl-C, as a person stops it; what is left of the class's processes afterwards."""
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # the hub, whose parent it was, gets SIGTERM (autograder.hub.__main__.stop_with_parent)
            self.proc.wait()
        left = subprocess.run(["pgrep", "-a", "-u", ",".join(self.room.users)], capture_output=True, text=True).stdout
        cgroups = [p.name for c in ("cpu", "memory") for p in Path("/sys/fs/cgroup", c).glob("seqcourse-hub-*")]
        return left, cgroups


class User:
    """A user's session at the hub (requests), with an API token of their own for their server."""

    def __init__(self, hub, name):
        self.hub, self.name, self.s = hub, name, requests.Session()
        self.s.get(f"{hub.url}/hub/login")
        r = self.s.post(f"{hub.url}/hub/login", data={"username": name, "password": hub.room.passwords[name],
                                                      "_xsrf": self.s.cookies.get("_xsrf", path="/hub/")})
        assert r.ok, r.text[:500]
        r = self.s.post(f"{hub.url}/hub/api/users/{name}/tokens", json={"note": "test"},
                        headers={"X-XSRFToken": self.s.cookies.get("_xsrf", path="/hub/")})
        assert r.ok, r.text[:500]
        self.token = r.json()["token"]
        self.wait_server()

    def wait_server(self):
        self.s.post(f"{self.hub.url}/hub/api/users/{self.name}/server", headers=self.auth())
        for _ in range(WAIT_MS // 1000):
            if self.get("api/status").status_code == 200:
                return
            time.sleep(1)
        pytest.fail(f"{self.name}'s server did not start:\n{self.hub.log.read_text()[-4000:]}")

    def auth(self):
        return {"Authorization": f"token {self.token}"}

    def get(self, path, user=None):
        return self.s.get(f"{self.hub.url}/user/{user or self.name}/{path}", headers=self.auth(), allow_redirects=False)

    def post(self, path):
        r = self.s.post(f"{self.hub.url}/user/{self.name}/{path}", headers=self.auth(), timeout=600)
        assert r.ok and r.json().get("success", True), r.text[-3000:]
        return r.json()

    def put_notebook(self, path, nb):
        r = self.s.put(f"{self.hub.url}/user/{self.name}/api/contents/{path}", headers=self.auth(),
                       json={"type": "notebook", "format": "json", "content": json.loads(nbformat.writes(nb))})
        assert r.ok, r.text[:500]

    def notebook(self, path):
        r = self.get(f"api/contents/{path}")
        assert r.ok, r.text[:500]
        return nbformat.from_dict(r.json()["content"])


def server_env(user):
    """The environment the hub gave `user`'s server, read from its process: what their terminal and kernels get."""
    raw = Path(f"/proc/{server_pid(user)}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def server_pid(user):
    return subprocess.run(["pgrep", "-u", user, "-f", "jupyterhub-singleuser"], capture_output=True, text=True).stdout.split()[0]


def as_account(user, args, cwd=None):
    """`args` as the user's Unix account, no capability, with the environment of their server and in its cgroups,
    as a terminal of theirs runs."""
    pw = pwd.getpwnam(user)
    groups = [f"/sys/fs/cgroup/{c}{path}" for _, c, path in (line.split(":", 2) for line in
              Path(f"/proc/{server_pid(user)}/cgroup").read_text().splitlines()) if c in ("cpu", "memory") and path != "/"]
    enter = "".join(f"echo $$ > {g}/cgroup.procs && " for g in groups)
    become = ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--init-groups"]
    return subprocess.run(["sh", "-c", enter + 'exec "$@"', "enter", *become, *map(str, args)],
                          cwd=cwd or pw.pw_dir, env=server_env(user), capture_output=True, text=True, timeout=900)


def log_in(browser, hub, user):
    """The hub's login page, as a person fills it; returns the page on the user's JupyterLab."""
    page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto(f"{hub.url}/hub/login")
    page.fill("input[name=username]", user)
    page.fill("input[name=password]", hub.room.passwords[user])
    page.click("[type=submit]")
    page.wait_for_url(f"**/user/{user}/lab**")
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


def hostile_notebook(released, solution, classmate_home):
    """The complete notebook, plus a script in an output, a handler in a markdown cell and a link to a classmate's work."""
    nb = fill_submission(released, solution)
    nb.cells.append(nbformat.v4.new_markdown_cell(f"<img src=x onerror=\"{payload('hub-md')}\"> "
                                                  f"[their work](file://{classmate_home}/{NAME}/{NAME}.ipynb)"))
    code = nbformat.v4.new_code_cell("1")
    code.outputs = [nbformat.v4.new_output("display_data", {"text/html": f"<script>{payload('hub-out')}</script>",
                                                            "text/plain": "x"})]
    nb.cells.append(code)
    for cell in nb.cells:  # and what it wrote in its exercises is all wrong: 0 points
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = "raise ValueError('no')"
    return nb


@pytest.fixture(scope="module")
def term():
    from playwright.sync_api import sync_playwright

    top = Path(tempfile.mkdtemp(prefix="seqcourse-hub-"))
    os.chmod(top, 0o755)  # the accounts pass through it to their homes and the environments
    hub, seen = None, {}
    try:
        hub = Hub(top)
        room = hub.room
        ada, mallory = room.students
        teacher = User(hub, room.instructor)
        teacher.post(f"formgrader/api/assignment/{NAME}/assign")
        seen["release"] = teacher.post(f"formgrader/api/assignment/{NAME}/release")["log"]
        seen["inbound_mode"] = oct((room.exchange / COURSE / "inbound").stat().st_mode & 0o7777)
        students = {who: User(hub, who) for who in room.students}
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
            students[mallory].put_notebook(f"{NAME}/{NAME}.ipynb", hostile_notebook(released, solution, room.home_base + "/" + ada))
            for who, page in pages.items():  # submit in the Assignment List
                press(page, "fetched_assignments_list", "Submit")
                page.locator("#submitted_assignments_list .list_item", has_text=NAME).first.wait_for()
            # the instructor: collect in the formgrader, `grade` in a terminal, then the formgrader's own autograde
            seen["collect"] = teacher.post(f"formgrader/api/assignment/{NAME}/collect")["log"]
            seen["grade"] = as_account(room.instructor, [room.env("instructor") / "bin" / "python", "-m", "autograder", "grade",
                                                         ".", "--jobs", "1", "--no-progress"], cwd=room.course_dir)
            seen["scores"] = {s["student"]: s["score"] for s in teacher.get(f"formgrader/api/submissions/{NAME}").json()}
            ids = {s["student"]: s["id"] for s in teacher.get(f"formgrader/api/submitted_notebooks/{NAME}/{NAME}").json()}
            tpage = log_in(browser, hub, room.instructor)
            tpage.goto(f"{hub.url}/user/{room.instructor}/formgrader/manage_submissions/{NAME}")
            tpage.wait_for_selector("table")
            tpage.locator("tr", has_text=ada).locator(".autograde a").click()  # the formgrader's own autograde button
            tpage.wait_for_selector("#success-modal, #error-modal")
            seen["autograde_button"] = tpage.locator(".modal-title").first.text_content()
            tpage.goto(f"{hub.url}/user/{room.instructor}/formgrader/manage_submissions/{NAME}")
            tpage.wait_for_selector("table")
            tpage.wait_for_timeout(1000)
            seen["rescored"] = {s["student"]: s["score"] for s in teacher.get(f"formgrader/api/submissions/{NAME}").json()}
            shot(tpage, "instructor-formgrader.png")
            seen["formgrader_text"] = tpage.evaluate("() => document.body.textContent")
            seen["hostile_page"] = visit(tpage, f"{hub.url}/user/{room.instructor}/formgrader/submissions/{ids[mallory]}/")

            # mallory submits again, then adds to her entry in the inbound (hers: she may write in it) a link to the
            # instructor's solutions; the formgrader's collect takes the newer submission, and refuses it
            inbound = room.exchange / COURSE / "inbound"
            entries = lambda: [e for e in os.listdir(inbound) if e.startswith(f"{mallory}+{NAME}+")]  # noqa: E731
            press(pages[mallory], "fetched_assignments_list", "Submit")
            until(lambda: len(entries()) == 2, "mallory's second submission in the inbound")
            entry = max(entries(), key=lambda e: (inbound / e).stat().st_ctime)
            seen["link"] = as_account(mallory, ["ln", "-s", room.course_dir / "solutions" / NAME / f"{NAME}.ipynb",
                                                room.exchange / COURSE / "inbound" / entry / "answers.ipynb"])
            seen["recollect"] = teacher.post(f"formgrader/api/assignment/{NAME}/collect")["log"]
            seen["regrade"] = as_account(room.instructor, [room.env("instructor") / "bin" / "python", "-m", "autograder",
                                                           "grade", ".", "--jobs", "1", "--no-progress"], cwd=room.course_dir)
            seen["rescores"] = {s["student"]: s["score"] for s in teacher.get(f"formgrader/api/submissions/{NAME}").json()}

            # feedback, released in the formgrader and fetched in each student's Assignment List
            teacher.post(f"formgrader/api/assignment/{NAME}/generate_feedback")
            teacher.post(f"formgrader/api/assignment/{NAME}/release_feedback")
            def fetched(who):
                return sorted(str(p.relative_to(Path(room.home_base, who))) for p in Path(room.home_base, who, NAME, "feedback").rglob("*.html"))
            for who, page in pages.items():
                press(page, "submitted_assignments_list", "Fetch Feedback")
                until(lambda: fetched(who), f"{who}'s feedback in their home")
            seen["feedback"] = {who: fetched(who) for who in room.students}
            seen["feedback_text"] = {who: "".join(Path(room.home_base, who, f).read_text() for f in seen["feedback"][who])
                                     for who in room.students}

            # as a student: the instructor's formgrader, in the browser and with their own token; their own has none
            denied = pages[mallory].goto(f"{hub.url}/user/{room.instructor}/formgrader/")
            seen["formgrader_for_student"] = (denied.status, pages[mallory].evaluate("() => document.body.textContent"))
            seen["formgrader_api_for_student"] = students[mallory].get("formgrader/api/submissions/" + NAME, user=room.instructor).status_code
            seen["own_formgrader"] = students[mallory].get("formgrader/api/status").status_code
            browser.close()

        # as a student's account, with their server's environment (a terminal or a kernel of theirs)
        probe = ("import os, sys\nfor p in sys.argv[1:]:\n"
                 "    try: os.listdir(p) if os.path.isdir(p) else open(p).read(); print('READ', p)\n"
                 "    except PermissionError: print('DENIED', p)\n")
        seen["reach"] = as_account(mallory, ["python", "-c", probe, Path(room.home_base, ada),
                                             Path(room.home_base, ada, NAME, f"{NAME}.ipynb"), room.course_dir,
                                             room.exchange / COURSE / "inbound", room.exchange / COURSE / "feedback",
                                             room.hub_dir / "class.json"]).stdout
        seen["import"] = as_account(mallory, ["python", "-c", "import solutions_lib"])
        seen["reveal"] = as_account(mallory, ["python", "-c", "from autograder import reveal; reveal('causal_mask')"]).stdout
        seen["server_env"] = server_env(mallory)
        seen["cgroup"] = Path(f"/proc/{server_pid(mallory)}/cgroup").read_text()
        seen["threads"] = as_account(mallory, ["python", "-c", "import course_lib, torch; print(torch.get_num_threads())"]).stdout
        seen["room"] = room
        left, cgroups = hub.stop()
        seen["left"], seen["cgroups"] = left, cgroups
        seen["log"] = hub.log.read_text()
        # started again: the same accounts, environments and course, with its grades
        seen["again"] = subprocess.run([sys.executable, "-m", "autograder.hub", "--state", hub.state, "--prefix", room.instructor.split("-")[0] + "-",
                                        "--students", "2", "--home-base", top / "home", "--prepare-only"],
                                       cwd=ROOT, capture_output=True, text=True, timeout=600)
        seen["kept_grades"] = (room.course_dir / "gradebook.db").exists() and (room.course_dir / "grades.csv").exists()
        yield seen
    finally:
        if hub is not None:
            if hub.proc.poll() is None:
                hub.stop()
            classroom.remove(classroom.Classroom.load(hub.state), say=lambda *_: None)
        shutil.rmtree(top, ignore_errors=True)


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


def test_the_instructor_releases_through_the_formgrader_into_an_exchange_students_cannot_list(term):
    assert "Released as: seqcourse 05_self_attention" in term["release"]
    assert term["inbound_mode"] == "0o3733"


def test_students_fetch_and_submit_in_the_assignment_list_and_grade_scores_them(term):
    room = term["room"]
    ada, mallory = room.students
    assert term["grade"].returncode == 0, term["grade"].stdout[-3000:] + term["grade"].stderr[-3000:]
    assert term["scores"] == {ada: FULL, mallory: 0}
    assert term["autograde_button"] == "Success" and term["rescored"][ada] == FULL  # the formgrader's button agrees

def test_a_link_planted_in_the_exchange_is_refused_at_collect(term):
    room = term["room"]
    mallory = room.students[1]
    assert term["link"].returncode == 0, term["link"].stderr
    assert term["regrade"].returncode == 0, term["regrade"].stdout[-3000:] + term["regrade"].stderr[-3000:]
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
    reach = term["reach"].splitlines()
    assert reach and all(line.startswith("DENIED") for line in reach), reach
    assert term["import"].returncode != 0 and "No module named 'solutions_lib'" in term["import"].stderr
    assert "not part of this course's student distribution" in term["reveal"]
    env = term["server_env"]
    assert env["PATH"].startswith(str(room.env("student"))) and "PYTHONPATH" not in env


def test_each_server_runs_under_its_cpu_and_memory_limits(term):
    groups = {line.split(":")[1]: line.split(":")[2] for line in term["cgroup"].splitlines()}
    assert groups["cpu"].startswith("/seqcourse-hub-") and groups["memory"].startswith("/seqcourse-hub-"), groups
    said, threads = term["threads"].strip().rsplit("\n", 1)  # the course reads the quota: one thread for a 1-CPU server
    assert threads == "1" and "PyTorch threads: 1 instead of" in said and "cgroup quota" in said, term["threads"]


def test_ctrl_c_stops_the_hub_and_every_server(term):
    assert term["left"] == "" and term["cgroups"] == [], (term["left"], term["cgroups"])
    assert "The hub and every server it started have stopped." in term["log"]


def test_started_again_it_reuses_the_accounts_the_environments_and_the_course(term):
    again = term["again"]
    assert again.returncode == 0, again.stdout + again.stderr
    assert "made the Unix account" not in again.stdout and "installing" not in again.stdout and "copying" not in again.stdout
    room = term["room"]
    assert all(f"{user}" in again.stdout and room.passwords[user] in again.stdout for user in room.users)
    assert term["kept_grades"]
