"""`python -m autograder grade`: real `nbgrader autograde` of a class, J students at a time.

Layout (nbgrader's): COURSE/submitted/<student>/<assignment>/<notebook>.ipynb.
Produces COURSE/autograded/..., COURSE/feedback/<student>/<assignment>/<notebook>.html
and COURSE/grades.csv in nbgrader's export format.

Each submission has a gradebook of its own (COURSE/.autograder/gradebooks), so
parallel jobs never write the same database; grades.csv is exported from all of
them. A manifest remembers what was graded from which files, so a second run
grades only submissions that changed, and a run killed halfway resumes.
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import tempfile
import queue
import subprocess
import sys
import threading
from pathlib import Path

import nbformat

from autograder import sandbox, views
from autograder.course import CourseError, assignments, digest, find_root, sqlite_url, tool_env
from autograder.nbgrader_jobs import RESULT_PREFIX, generate_assignments

STATE = ".autograder"


def _read_results(proc, events):
    for line in proc.stdout:
        if line.startswith(RESULT_PREFIX):
            events.put(json.loads(line[len(RESULT_PREFIX):]))
    events.put(None)


def _files(folder):
    return [p for p in Path(folder).rglob("*") if p.is_file() and ".ipynb_checkpoints" not in p.parts]


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


class Grader:
    """`sandboxed=False` grades without the sandbox (autograder.sandbox), for trusted work only:
    every submission it grades says so in grading_problems.csv."""

    def __init__(self, course, root=None, log=print, sandboxed=True):
        self.course = course_dir_for(course)
        self.root = Path(root) if root else find_root()
        self.state = self.course / STATE
        self.known = set(assignments(self.root))
        self.log = log
        self.sandboxed = sandboxed

    # ---------------------------------------------------------------- bookkeeping
    def fingerprint(self, name):
        """What an assignment's grades depend on besides the submission: its source, the course's code and config."""
        return views.fingerprint(self.root, name)

    def gradebook(self, student, name):
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
        """{(student, assignment): key} for every submission on disk; the key changes
        when the submitted files, the assignment's source or the config change."""
        found = {}
        fingerprints = {}
        for student_dir in sorted((self.course / "submitted").iterdir()):
            if not student_dir.is_dir() or student_dir.name.startswith("."):
                continue
            for a_dir in sorted(student_dir.iterdir()):
                if not a_dir.is_dir():
                    continue
                name = a_dir.name
                if name not in self.known:
                    self.log(f"skipping {student_dir.name}/{name}: no assignment of that name in solutions/")
                    continue
                if name not in fingerprints:
                    fingerprints[name] = self.fingerprint(name)
                found[(student_dir.name, name)] = digest(_files(a_dir)) + ":" + fingerprints[name]
        return found

    # ---------------------------------------------------------------- nbgrader
    def templates(self, names):
        """{assignment: a gradebook holding just that assignment}, copied for each submission."""
        paths = {name: self.state / "templates" / f"{name}-{self.fingerprint(name)}.db" for name in names}
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

    def _start_worker(self, index, items, jobs):
        jobfile = self.state / f"job-{index}.json"
        jobfile.write_text(json.dumps({
            "root": str(self.root),
            "course": str(self.course),
            "source": str(self.root / "solutions"),
            "items": items,
        }))
        log = open(self.state / f"worker-{index}.log", "w")
        env = tool_env()
        if not self.sandboxed:
            env[sandbox.NO_SANDBOX] = "1"
        if jobs > 1:  # J kernels at a time already fill the cores; more threads each only fight
            env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // jobs)))
        proc = subprocess.Popen(
            [sys.executable, "-m", "autograder.nbgrader_jobs", str(jobfile)],
            cwd=self.course, env=env, stdout=subprocess.PIPE, stderr=log, text=True,
        )
        return proc, log

    # ---------------------------------------------------------------- the run
    def run(self, jobs=1, force=False, progress=True):
        """Grade what changed; return (graded, skipped, failed) lists of (student, assignment)."""
        if self.sandboxed:
            sandbox.require()  # before anything is graded
        self.state.mkdir(parents=True, exist_ok=True)
        subs = self.submissions()
        if not subs:
            raise CourseError(f"no submissions found under {self.course / 'submitted'}")
        manifest = self.load_manifest()
        done = manifest.setdefault("graded", {})
        problems = manifest.setdefault("problems", {})  # graded 0: nbgrader could not grade it
        notes = manifest.setdefault("notes", {})  # graded, but the instructor should know
        todo = [key for key, k in subs.items() if force or done.get("/".join(key)) != k]
        skipped = [key for key in subs if key not in todo]
        graded, failed = [], []
        for key in list(todo):
            problem = self.precheck(*key)
            problems.pop("/".join(key), None)
            notes.pop("/".join(key), None)
            if problem:  # nothing nbgrader could grade: 0 points, and the reason
                todo.remove(key)
                problems["/".join(key)] = problem
                done["/".join(key)] = subs[key]
                self.gradebook(*key).unlink(missing_ok=True)
                for folder in ("autograded", "feedback"):  # no stale results of an earlier version
                    shutil.rmtree(self.course / folder / key[0] / key[1], ignore_errors=True)
                failed.append(key)
                self.log(f"{key[0]}/{key[1]}: {problem}")
        if todo:
            templates = self.templates(sorted({name for _, name in todo}))
            for student, name in todo:
                db = self.gradebook(student, name)
                db.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(templates[name], db)  # a fresh gradebook: a half-graded one is never reused
            # Every submission has its own gradebook, so the workers never share a database.
            groups = [todo[i::jobs] for i in range(min(jobs, len(todo)))]
            events = queue.Queue()
            workers = []
            for i, group in enumerate(groups):
                items = [[s, a, str(self.gradebook(s, a))] for s, a in group]
                proc, log = self._start_worker(i, items, len(groups))
                threading.Thread(target=_read_results, args=(proc, events), daemon=True).start()
                workers.append((proc, log, group))
            bar = _progress(len(todo), progress)
            remaining, seen = len(workers), set()
            while remaining:
                event = events.get()
                if event is None:
                    remaining -= 1
                    continue
                key = (event["student"], event["assignment"])
                seen.add(key)
                notes.pop("/".join(key), None)
                if event["ok"]:
                    done["/".join(key)] = subs[key]
                    graded.append(key)
                    if not self.sandboxed:
                        notes["/".join(key)] = sandbox.UNSAFE_NOTE
                else:
                    done.pop("/".join(key), None)
                    problems["/".join(key)] = "nbgrader could not grade it: " + _last_error(event["log"])
                    failed.append(key)
                    self.log(f"nbgrader failed on {key[0]}/{key[1]}:\n{event['log']}")
                self.save_manifest(manifest)
                bar.update(1)
            bar.close()
            for proc, log, group in workers:
                proc.wait()
                log.close()
                lost = [key for key in group if key not in seen]
                if lost:
                    failed += lost
                    for key in lost:
                        problems["/".join(key)] = f"grading stopped early (exit {proc.returncode}); run grade again"
                    self.log(f"a grading process stopped early (exit {proc.returncode}); see {log.name}")
        self.save_manifest(manifest)
        self.export(subs, problems, notes)
        return graded, skipped, failed

    def precheck(self, student, name):
        """Why a submission cannot be graded at all, or '' when nbgrader can take it."""
        folder = self.course / "submitted" / student / name
        path = folder / f"{name}.ipynb"
        if not path.is_file():
            found = ", ".join(sorted(p.name for p in folder.glob("*.ipynb"))) or "no notebook"
            return f"{name}.ipynb is missing (found: {found})"
        try:
            nbformat.validate(nbformat.read(path, as_version=4))
        except Exception as e:  # any unreadable file, whatever the reason
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
            return f"{name}.ipynb could not be read as a notebook ({first})"
        return ""

    def export(self, subs, problems, notes=None):
        """grades.csv (nbgrader's format) from every submission's gradebook; a submission
        that could not be graded gets 0 points, and its reason goes to grading_problems.csv,
        beside the notes on submissions that were graded (without the sandbox, say)."""
        notes = {} if notes is None else notes
        from nbgrader.api import Gradebook
        from nbgrader.plugins import CsvExportPlugin

        header = ["assignment", "duedate", "timestamp", "student_id", "last_name", "first_name", "email",
                  "raw_score", "late_submission_penalty", "score", "max_score"]
        rows, missing = [], []
        with tempfile.TemporaryDirectory() as tmp:
            for student, name in sorted(subs):
                db = self.gradebook(student, name)
                found = []
                if db.exists() and "/".join((student, name)) not in problems:
                    out = Path(tmp) / "grades.csv"
                    with Gradebook(sqlite_url(db)) as gb:
                        CsvExportPlugin(to=str(out), student=[student], assignment=[name]).export(gb)
                    with open(out, newline="") as fh:
                        reader = csv.reader(fh)
                        header = next(reader)
                        found = list(reader)
                if found:
                    rows += found
                else:
                    missing.append((student, name))
        if missing:
            max_scores = self.max_scores(sorted({name for _, name in missing}))
            for student, name in missing:
                rows.append([name, "", "", student, "", "", "", 0.0, 0.0, 0.0, max_scores[name]])
        rows.sort(key=lambda r: (r[0], r[3]))
        _write_csv(self.course / "grades.csv", header, rows)
        wanted = {"/".join(key) for key in subs}
        listed = sorted((k.split("/", 1), reason) for k, reason in (notes or {}).items() if k in wanted and k not in problems)
        listed = sorted(listed + [(k.split("/", 1), reason) for k, reason in problems.items() if k in wanted])
        _write_csv(self.course / "grading_problems.csv", ["student_id", "assignment", "reason"],
                   [[s, a, reason] for (s, a), reason in listed])
        return self.course / "grades.csv"

    def max_scores(self, names):
        from nbgrader.api import Gradebook

        out = {}
        for name, template in self.templates(names).items():
            with Gradebook(sqlite_url(template)) as gb:
                out[name] = gb.find_assignment(name).max_score
        return out


def _write_csv(dest, header, rows):
    tmp = dest.with_suffix(".csv.tmp")
    with open(tmp, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    os.replace(tmp, dest)


def _last_error(log):
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line or "error" in line]
    return (errors or lines or ["unknown error"])[-1][:200]


def _progress(total, enabled):
    from tqdm.auto import tqdm

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
