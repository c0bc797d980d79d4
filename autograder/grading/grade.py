"""`python -m autograder grade`: real `nbgrader autograde` of a class, J students at a time.

Layout (nbgrader's): COURSE/submitted/<student>/<assignment>/<notebook>.ipynb.
Produces COURSE/autograded/..., COURSE/feedback/<student>/<assignment>/<notebook>.html,
the course's gradebook COURSE/gradebook.db (autograder.grading.gradebook), and from it
COURSE/grades.csv, exactly as `nbgrader export` writes it.

Each job autogrades a submission into a gradebook of its own, then merges the
result into the course's gradebook, one at a time. A manifest remembers what was
graded from which files, so a second run grades only submissions that changed
(or whose autograded notebook is gone), rebuilds feedback that is missing or
older than the gradebook, and a run killed halfway resumes.
"""
from __future__ import annotations

import contextlib
import csv
import dataclasses
import difflib
import functools
import hashlib
import html
import json
import os
import queue
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from tqdm.auto import tqdm

from autograder.grading import gradebook, ids, intake, limits, nbgrader_jobs, sandbox
from autograder.grading.pages import policy
from autograder.course import CourseError, assignments, cache_dir, digest, find_root, sqlite_url, tool_env
from autograder.nbgrader_api import api_for, generate_assignments
from autograder import ship

STATE = ".autograder"


def _read_results(index, proc, stream, token, events):
    """Put each result line of worker `index` on `events` as (index, proc, result), a line that is no result as
    (index, proc, Malformed), and its end as (index, proc, None). A line is read at most MAX_LINE bytes at a time,
    so whatever arrives on the pipe costs the grader no more memory than that."""
    with stream:
        while True:
            line = stream.readline(nbgrader_jobs.MAX_LINE + 1)
            if not line:
                break
            if not line.endswith(b"\n"):  # too long: skip to its end, reading no more than a line at a time
                while (rest := stream.readline(nbgrader_jobs.MAX_LINE + 1)) and not rest.endswith(b"\n"):
                    pass
            try:
                events.put((index, proc, nbgrader_jobs.parse(line, token)))
            except nbgrader_jobs.Malformed as e:
                events.put((index, proc, e))
    events.put((index, proc, None))


@dataclasses.dataclass
class _Worker:
    proc: subprocess.Popen
    log: object
    token: str  # what its result lines must carry (autograder.grading.nbgrader_jobs.parse)
    share: list  # the submissions it has still to report, in its order
    since: float  # when it started on the first of them


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _stop(worker):
    """Stop a worker and what it started (its sandboxes die with it), and wait for it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(worker.proc.pid, signal.SIGKILL)
    worker.proc.wait()
    worker.log.close()



def _files(folder):
    """A submission folder's plain files (autograder.grading.intake has refused it if it holds anything else)."""
    return [Path(here, name) for here, dirs, files in os.walk(folder) for name in files if ".ipynb_checkpoints" not in Path(here).parts]


def course_dir_for(path):
    """Accept either the course folder (holding submitted/) or submitted/ itself."""
    path = Path(path).resolve()
    if not path.is_dir():
        raise CourseError(f"{path} is not a folder")
    if (path / "submitted").is_dir():
        return path
    if path.name == "submitted":
        return path.parent
    raise CourseError(f"{path} has no submitted/ folder (expected submitted/<student>/<assignment>/<notebook>.ipynb)")


def split(todo, jobs):
    """The submissions each of `jobs` workers grades, in turn: dealt out notebook by notebook, so that each worker
    gets its share of every notebook. Dealt student by student, where each student handed in a multiple of `jobs`
    notebooks, a worker would get the same notebooks of every student (of two workers, one all of 08 and 10, the
    longest to grade)."""
    dealt = sorted(todo, key=lambda key: (key[1], key[0]))
    return [dealt[i::jobs] for i in range(min(jobs, len(dealt)))]


class Grader:
    """`sandboxed=False` grades without the sandbox (autograder.grading.sandbox), for trusted work only:
    every submission it grades says so in grading_problems.csv. `shard` (autograder.grading.shard.Shard)
    grades only its students, for one of several nodes that grade a class together."""

    def __init__(self, course, root=None, log=print, sandboxed=True, shard=None):
        self.course = course_dir_for(course)
        self.root = Path(root) if root else find_root()
        self.state = self.course / STATE
        self.known = assignments(self.root)
        self.log = log
        self.sandboxed = sandboxed
        self.shard = shard
        self.elsewhere = 0  # student folders left to the other shards
        self.limits = limits.load(self.root)
        os.environ.update(tool_env())  # nbgrader runs `alembic` from PATH when it creates a gradebook (a shard's may be empty)
        self.refused = {}  # (student, assignment): why autograder.grading.intake refused it
        self.left_out = {}  # (student, assignment): what intake leaves out of its autograded/ (no part of the assignment)
        self.unnamed = {}  # (student, folder) as shown: why a folder under submitted/ has no name to grade under

    # ---------------------------------------------------------------- bookkeeping
    def fingerprint(self, name):
        """What an assignment's grades depend on besides the submission: its source, the course's code and config."""
        return ship.fingerprint(self.root, name)

    def own_gradebook(self, student, name):
        return self.state / "gradebooks" / student / f"{name}.db"

    def load_manifest(self):
        try:
            return json.loads((self.state / "manifest.json").read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    def save_manifest(self, manifest):
        path = self.state / "manifest.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True))
        os.replace(tmp, path)

    def submissions(self):
        """({(student, assignment): key}, {(student, folder): reason}): every submission on disk, its key
        changing with the submitted files, the assignment's source and the course's code; and the
        folders under submitted/ that are no assignment. A student folder whose name is no student id
        (autograder.grading.ids) is graded under no name: it goes to `self.unnamed` with the reason."""
        found, strays, fingerprints, takes = {}, {}, {}, {}
        for student_dir in sorted((self.course / "submitted").iterdir()):
            if student_dir.name.startswith(".") or not student_dir.is_dir():
                continue
            if self.shard and not self.shard.has(student_dir.name):  # another node's, by the name alone
                self.elsewhere += 1
                continue
            if student_dir.is_symlink():  # nothing of it is read: its target may be anywhere
                self.log(f"submitted/{intake.shown(student_dir.name)} is a link, not a folder: not graded")
                continue
            if not ids.valid(student_dir.name):
                self._unnamed(student_dir.name, "*", ids.refusal(student_dir.name))
                continue
            for a_dir in sorted(p for p in student_dir.iterdir() if p.is_dir() or p.is_symlink()):
                name, key = a_dir.name, (student_dir.name, a_dir.name)
                if name not in self.known:
                    close = difflib.get_close_matches(name, self.known, n=1, cutoff=0.6)
                    hint = f"; did you mean {close[0]}?" if close else f"; the assignments are {', '.join(self.known)}"
                    strays[key] = f"submitted as {intake.shown(name)}, which is no assignment" + hint
                    continue
                if name not in fingerprints:
                    fingerprints[name], takes[name] = self.fingerprint(name), intake.declared_by(self.coursedir, name)
                try:
                    refused = intake.problem(a_dir, self.limits)
                    files = _digest(refused, a_dir) if refused else digest(_files(a_dir))
                    left = "" if refused else intake.left_out(a_dir, takes[name], self.limits, self.coursedir.ignore)
                except Exception as e:  # noqa: BLE001 (reading it failed: that submission alone, never the class)
                    refused, left = f"the submission could not be read ({type(e).__name__})", ""
                    files = _digest(refused, a_dir)
                if refused:
                    self.refused[key] = refused
                if left:
                    self.left_out[key] = left
                found[key] = files + ":" + fingerprints[name]
        return found, strays

    def _unnamed(self, student, folder, reason):
        """A folder under submitted/ graded under no name: a row in grading_problems.csv, shown safely."""
        row = (student if ids.valid(student) else intake.shown(student), folder if folder == "*" else intake.shown(folder))
        self.unnamed[row] = reason
        self.log(f"submitted/{row[0]}/{row[1]}: {reason}")

    # ---------------------------------------------------------------- nbgrader
    def api(self, **settings):
        """nbgrader's API on the course as the workers see it (autograder.grading.nbgrader_jobs)."""
        return api_for(self.root, root=str(self.course), source_directory=str(self.root / "solutions"), **settings)

    @functools.cached_property
    def coursedir(self):
        """nbgrader's CourseDirectory of the course, as the workers see it: what an assignment declares, what it ignores."""
        return self.api().coursedir

    def templates(self, names):
        """{assignment: a gradebook holding just that assignment}, copied for each submission. They live beside the
        sandbox's views, under the course code's .autograder/ (cache_dir), keyed by all they depend on: every course
        graded from that code shares them."""
        paths = {name: cache_dir(self.root) / "templates" / f"{name}-{self.fingerprint(name)}.db" for name in names}
        missing = [name for name, path in paths.items() if not path.exists()]
        if missing:
            paths[missing[0]].parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory() as tmp:
                for name in missing:
                    db = Path(tmp) / f"{name}.db"
                    ok, log = generate_assignments(self.root, [name], Path(tmp) / "release", db)[name]
                    if not ok:
                        raise CourseError(f"nbgrader could not prepare {name}:\n{log[-3000:]}")
                    shutil.copy(db, paths[name].with_suffix(".tmp"))
                    os.replace(paths[name].with_suffix(".tmp"), paths[name])
        return paths

    def prepare_gradebook(self, names, manifest):
        """The assignments in the course's gradebook, as nbgrader's generate_assignment puts them there."""
        known = manifest.setdefault("gradebook", {})
        stale = [name for name in names if known.get(name) != self.fingerprint(name)]
        if stale:
            with tempfile.TemporaryDirectory() as tmp, gradebook.locked(self.course):
                for name, (ok, log) in generate_assignments(self.root, stale, Path(tmp), self.course / "gradebook.db").items():
                    if not ok:
                        raise CourseError(f"nbgrader could not put {name} into {self.course / 'gradebook.db'}:\n{log[-3000:]}")
                    known[name] = self.fingerprint(name)

    def _start_worker(self, index, items):
        """A worker for `items`: (process, its log, the read end of its results pipe, its token)."""
        token = secrets.token_hex(16)
        read, write = os.pipe()
        jobfile = self.state / f"job-{index}.json"
        jobfile.write_text(json.dumps({
            "root": str(self.root),
            "course": str(self.course),
            "source": str(self.root / "solutions"),
            "items": items,
            "parent": os.getpid(),  # the worker dies with it (nbgrader_jobs)
            "results_fd": write,
            "token": token,
        }))
        log = open(self.state / f"worker-{index}.log", "a")
        env = tool_env()
        if not self.sandboxed:
            env[sandbox.NO_SANDBOX] = "1"
        try:
            proc = subprocess.Popen(
                self.worker_command(jobfile), cwd=self.course, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                pass_fds=(write,), start_new_session=True,
            )
        finally:
            os.close(write)
        return proc, log, os.fdopen(read, "rb"), token

    def worker_command(self, jobfile):
        return [sys.executable, "-m", "autograder.grading.nbgrader_jobs", str(jobfile)]

    def deadline(self):
        """Seconds a worker may spend on one submission before it is stopped: the notebook's budget, the
        grader's comparison's, and two minutes for starting the kernel, nbgrader and the feedback."""
        return self.limits.notebook_seconds + self.limits.verdict_seconds + 120

    # ---------------------------------------------------------------- the run
    def run(self, jobs=1, force=False, progress=True):
        """Grade what changed; return (graded, skipped, failed) lists of (student, assignment).
        SIGTERM stops it as Ctrl-C does: every worker and sandbox stopped, what was graded kept. Both are
        handled here, SIGINT too: a process started with SIGINT ignored (`cmd &` in a script) keeps it ignored,
        and Python then never raises KeyboardInterrupt."""
        if threading.current_thread() is not threading.main_thread():
            return self._run(jobs, force, progress)
        old = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            return self._run(jobs, force, progress)
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)

    def _run(self, jobs, force, progress):
        if self.sandboxed:
            sandbox.require()  # before anything is graded
        self.state.mkdir(parents=True, exist_ok=True)
        subs, strays = self.submissions()
        if not subs and not strays and not self.unnamed and not self.elsewhere:
            raise CourseError(f"no submissions found under {self.course / 'submitted'}")
        manifest = self.load_manifest()
        manifest["shard"] = str(self.shard or "1/1")  # whom this course's results speak for (autograder.grading.shard.merge)
        done = manifest.setdefault("graded", {})
        problems = manifest.setdefault("problems", {})  # graded 0: nbgrader could not grade it
        notes = manifest.setdefault("notes", {})  # graded, but the instructor should know
        todo = [key for key, k in subs.items() if force or done.get("/".join(key)) != k or not self._autograded(key)]
        skipped = [key for key in subs if key not in todo]
        graded, failed = [], []
        self.prepare_gradebook(sorted({name for _, name in subs}), manifest)
        for key in list(todo):
            problem = self.precheck(*key)
            problems.pop("/".join(key), None)
            notes.pop("/".join(key), None)
            if key in self.left_out:  # graded without what it left out: the instructor should know
                notes["/".join(key)] = self.left_out[key]
            if problem:  # nothing nbgrader could grade: 0 points, and the reason
                todo.remove(key)
                problems["/".join(key)] = problem
                done["/".join(key)] = subs[key]
                failed.append(key)
                self.log(f"{key[0]}/{key[1]}: {problem}")
        for (student, folder), reason in strays.items():  # under the assignment meant, when the student has none
            close = difflib.get_close_matches(folder, self.known, n=1, cutoff=0.6)
            key = (student, close[0] if close and (student, close[0]) not in subs else folder)
            if not ids.valid(key[1]):  # no assignment it resembles, and a name not to put in the gradebook or a page
                self._unnamed(student, folder, reason)
                continue
            problems["/".join(key)] = reason
            failed.append(key)
        if todo:
            self._grade(todo, jobs, subs, manifest, graded, failed, progress)
        for key in failed:
            self.withhold(*key, problems["/".join(key)])
        current = {"/".join(key) for key in list(subs) + failed}
        for key in [k for k in problems if k not in current]:  # a stray folder since renamed, say
            del problems[key]
        self.refresh_feedback([key for key in subs if "/".join(key) not in problems], manifest, force=graded)
        self.save_manifest(manifest)
        self.export([tuple(k.split("/", 1)) for k in current], problems, notes)
        return graded, skipped, failed

    def _autograded(self, key):
        return (self.course / "autograded" / key[0] / key[1] / f"{key[1]}.ipynb").exists()

    def _grade(self, todo, jobs, subs, manifest, graded, failed, progress):
        """Grade `todo` with J worker processes. A worker that takes longer than `deadline()` on one submission
        is stopped (that submission gets 0 and the reason) and another takes over the rest of its share;
        stopping `grade` (Ctrl-C, SIGTERM, or its death) stops every worker and their sandboxes."""
        done, problems, notes = manifest["graded"], manifest["problems"], manifest["notes"]
        templates = self.templates(sorted({name for _, name in todo}))
        for student, name in todo:
            db = self.own_gradebook(student, name)
            db.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(templates[name], db)  # a fresh gradebook: a half-graded one is never reused
        shares = split(todo, jobs)
        events, workers, limit = queue.Queue(), {}, self.deadline()

        def start(i, share):
            proc, log, results, token = self._start_worker(i, [[s, a, str(self.own_gradebook(s, a))] for s, a in share])
            threading.Thread(target=_read_results, args=(i, proc, results, token, events), daemon=True).start()
            workers[i] = _Worker(proc, log, token, list(share), time.monotonic())

        def lost(key, reason):
            done.pop("/".join(key), None)
            problems["/".join(key)] = reason
            failed.append(key)
            self.save_manifest(manifest)
            bar.update(1)

        bar = _progress(len(todo), progress)
        try:
            for i, share in enumerate(shares):
                start(i, share)
            while workers:
                try:
                    i, proc, event = events.get(timeout=1)
                except queue.Empty:
                    i = proc = event = None
                for j, w in list(workers.items()):  # a submission past its deadline: stop its worker, go on without it
                    if w.share and time.monotonic() - w.since > limit:
                        _stop(w)
                        del workers[j]
                        lost(w.share[0], f"grading did not finish within {limit} s; not graded (0 points)")
                        self.log(f"{w.share[0][0]}/{w.share[0][1]}: grading did not finish within {limit} s; stopped")
                        if w.share[1:]:
                            start(j, w.share[1:])
                w = workers.get(i)
                if w is None or w.proc is not proc:
                    continue  # nothing, or a stopped worker's last words
                if event is None:  # the worker ended: whatever it did not report was not graded
                    _stop(w)
                    del workers[i]
                    for key in w.share:
                        lost(key, f"grading stopped early (exit {w.proc.returncode}); run grade again")
                    if w.share:
                        self.log(f"a grading process stopped early (exit {w.proc.returncode}); see {w.log.name}")
                    continue
                # a result speaks only for the submission its worker is on: the first of its share, in order
                key = w.share[0] if w.share else None
                if key is None or isinstance(event, nbgrader_jobs.Malformed) or (event["student"], event["assignment"]) != key:
                    if key is not None:
                        why = event if isinstance(event, nbgrader_jobs.Malformed) else "a result for another submission"
                        w.share.pop(0)
                        w.since = time.monotonic()
                        lost(key, f"the grading process sent {why}: not graded (0 points); run grade again")
                        self.log(f"{key[0]}/{key[1]}: the grading process sent {why}; see {w.log.name}")
                    continue
                w.share.pop(0)
                w.since = time.monotonic()
                if event["ok"]:
                    done["/".join(key)] = subs[key]
                    graded.append(key)
                    if not self.sandboxed:
                        notes["/".join(key)] = "; ".join(filter(None, (sandbox.UNSAFE_NOTE, notes.get("/".join(key)))))
                    self.save_manifest(manifest)
                    bar.update(1)
                else:
                    lost(key, "nbgrader could not grade it: " + _last_error(event["log"]))
                    self.log(f"nbgrader failed on {key[0]}/{key[1]}:\n{event['log']}")
        finally:
            for w in workers.values():
                _stop(w)
            bar.close()

    def precheck(self, student, name):
        """Why a submission cannot be graded at all, or '' when nbgrader can take it; in time linear in its
        size, which autograder.grading.intake bounds (`intake.notebook_problem`)."""
        folder = self.course / "submitted" / student / name
        path = folder / f"{name}.ipynb"
        if (student, name) in self.refused:
            return self.refused[(student, name)]
        if not path.is_file():
            found = ", ".join(sorted(intake.shown(p.name) for p in folder.glob("*.ipynb"))) or "no notebook"
            return f"{name}.ipynb is missing (found: {found})"
        return intake.notebook_problem(path, self.limits)

    def withhold(self, student, folder, reason):
        """0 points in the gradebook for a submission that could not be graded, and feedback that says why:
        one page per notebook the student handed in (as nbgrader's fetch_feedback looks for them)."""
        gradebook.withdraw(self.course, folder, student)
        for kind in ("autograded", "feedback"):  # no stale results of an earlier version
            shutil.rmtree(self.course / kind / student / folder, ignore_errors=True)
        submitted = self.course / "submitted" / student / folder
        if not submitted.is_dir():
            submitted = next((p for p in (self.course / "submitted" / student).iterdir()
                              if p.is_dir() and difflib.get_close_matches(p.name, [folder], n=1, cutoff=0.6)), submitted)
        out = self.course / "feedback" / student / folder
        out.mkdir(parents=True, exist_ok=True)
        for stem in sorted({p.stem for p in submitted.glob("*.ipynb") if not p.is_symlink() and p.is_file()} or {folder}):
            (out / f"{stem}.html").write_text(policy.with_policy(PROBLEM_PAGE.format(assignment=html.escape(folder), reason=html.escape(reason))))
        for extra in intake.NBGRADER_FILES:  # what nbgrader's release_feedback needs
            data = intake.read_small(submitted / extra)
            if data is not None:
                (out / extra).write_bytes(data)

    def refresh_feedback(self, keys, manifest, force=()):
        """Generate again the feedback that is missing or older than the gradebook (manual grades, say)."""
        known, states = manifest.setdefault("feedback", {}), gradebook.states(self.course)
        stale = []
        for key in keys:
            now = states.get(key, "")
            page = self.course / "feedback" / key[0] / key[1] / f"{key[1]}.html"
            if key in force:
                known["/".join(key)] = now
            elif known.get("/".join(key)) != now or not page.exists():
                stale.append(key)
                known["/".join(key)] = now
        if stale:
            api = self.api(db_url=sqlite_url(self.course / "gradebook.db"))
            for student, name in stale:
                result = api.generate_feedback(name, student, force=True)
                if not result["success"]:
                    self.log(f"could not write the feedback of {student}/{name}: {_last_error(result.get('log', ''))}")

    def export(self, keys, problems, notes):
        """grades.csv from the course's gradebook (what `nbgrader export` writes); the reasons for
        the submissions that could not be graded, and notes on others, in grading_problems.csv."""
        gradebook.export(self.course, self.course / "grades.csv")
        wanted = {"/".join(key) for key in keys}
        listed = sorted((k.split("/", 1), reason) for k, reason in notes.items() if k in wanted and k not in problems)
        listed = sorted(listed + [(k.split("/", 1), reason) for k, reason in problems.items() if k in wanted])
        listed += sorted((list(row), reason) for row, reason in self.unnamed.items())
        _write_csv(self.course / "grading_problems.csv", ["student_id", "assignment", "reason"],
                   [[s, a, reason] for (s, a), reason in listed])
        return self.course / "grades.csv"


PROBLEM_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{assignment}: not graded</title></head>
<body style="font-family: sans-serif; max-width: 50em; margin: 2em auto">
<h1>{assignment}: not graded</h1>
<p>Your submission could not be graded, so it gets 0 points for now:</p>
<p><strong>{reason}</strong></p>
<p>Fix this and submit again; ask your instructor if the deadline has passed.</p>
</body></html>
"""


def _write_csv(dest, header, rows):
    tmp = dest.with_suffix(".csv.tmp")
    with open(tmp, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    os.replace(tmp, dest)


def _digest(refused, folder):
    """The key of a refused submission: its reason and what its entries are, none of them opened."""
    return hashlib.sha256((refused + intake.listing(folder)).encode("utf-8", "surrogateescape")).hexdigest()


def _last_error(log):
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line or "error" in line]
    return (errors or lines or ["unknown error"])[-1][:200]


def _progress(total, enabled):
    return tqdm(total=total, desc="grading", unit="notebook", disable=not enabled)


def read_problems(course):
    path = Path(course) / "grading_problems.csv"
    if not path.exists():
        return []
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def read_grades(course):
    with open(Path(course) / "grades.csv", newline="") as fh:
        return list(csv.DictReader(fh))
