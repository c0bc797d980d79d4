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
import hashlib
import json
import os
import shutil
import tempfile
import queue
import subprocess
import sys
import threading
from pathlib import Path

from autograder.course import CourseError, assignments, find_root, sqlite_url, tool_env
from autograder.nbgrader_jobs import RESULT_PREFIX, generate_assignments

STATE = ".autograder"


def _read_results(proc, events):
    for line in proc.stdout:
        if line.startswith(RESULT_PREFIX):
            events.put(json.loads(line[len(RESULT_PREFIX):]))
    events.put(None)


def _digest(paths):
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(str(p.name).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


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
    def __init__(self, course, root=None, log=print):
        self.course = course_dir_for(course)
        self.root = Path(root) if root else find_root()
        self.state = self.course / STATE
        self.known = set(assignments(self.root))
        self.log = log

    # ---------------------------------------------------------------- bookkeeping
    def fingerprint(self, name):
        """What an assignment's grades depend on besides the submission: its source and the config."""
        return _digest([self.root / "solutions" / name / f"{name}.ipynb", self.root / "nbgrader_config.py"])[:16]

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
                found[(student_dir.name, name)] = _digest(_files(a_dir)) + ":" + fingerprints[name]
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

    def _start_worker(self, index, items):
        jobfile = self.state / f"job-{index}.json"
        jobfile.write_text(json.dumps({
            "root": str(self.root),
            "course": str(self.course),
            "source": str(self.root / "solutions"),
            "items": items,
        }))
        log = open(self.state / f"worker-{index}.log", "w")
        proc = subprocess.Popen(
            [sys.executable, "-m", "autograder.nbgrader_jobs", str(jobfile)],
            cwd=self.course, env=tool_env(), stdout=subprocess.PIPE, stderr=log, text=True,
        )
        return proc, log

    # ---------------------------------------------------------------- the run
    def run(self, jobs=1, force=False, progress=True):
        """Grade what changed; return (graded, skipped, failed) lists of (student, assignment)."""
        self.state.mkdir(parents=True, exist_ok=True)
        subs = self.submissions()
        if not subs:
            raise CourseError(f"no submissions found under {self.course / 'submitted'}")
        manifest = self.load_manifest()
        done = manifest.setdefault("graded", {})
        todo = [key for key, k in subs.items() if force or done.get("/".join(key)) != k]
        skipped = [key for key in subs if key not in todo]
        graded, failed = [], []
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
                proc, log = self._start_worker(i, items)
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
                if event["ok"]:
                    done["/".join(key)] = subs[key]
                    graded.append(key)
                else:
                    done.pop("/".join(key), None)
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
                    self.log(f"a grading process stopped early (exit {proc.returncode}); see {log.name}")
        self.save_manifest(manifest)
        self.export(subs)
        return graded, skipped, failed

    def export(self, subs):
        """grades.csv (nbgrader's format) from every submission's gradebook."""
        from nbgrader.api import Gradebook
        from nbgrader.plugins import CsvExportPlugin

        rows, header = [], None
        with tempfile.TemporaryDirectory() as tmp:
            for student, name in sorted(subs):
                db = self.gradebook(student, name)
                if not db.exists():
                    continue
                out = Path(tmp) / "grades.csv"
                with Gradebook(sqlite_url(db)) as gb:
                    CsvExportPlugin(to=str(out), student=[student], assignment=[name]).export(gb)
                with open(out, newline="") as fh:
                    reader = csv.reader(fh)
                    header = next(reader)
                    rows += list(reader)
        if header is None:
            return None
        rows.sort(key=lambda r: (r[0], r[3]))
        dest = self.course / "grades.csv"
        tmp = dest.with_suffix(".csv.tmp")
        with open(tmp, "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(header)
            writer.writerows(rows)
        os.replace(tmp, dest)
        return dest


def _progress(total, enabled):
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover
        enabled = False
    if not enabled:
        class Null:
            def update(self, n):
                pass

            def close(self):
                pass

        return Null()
    return tqdm(total=total, desc="grading", unit="notebook")


def read_grades(course):
    with open(Path(course) / "grades.csv", newline="") as fh:
        return list(csv.DictReader(fh))
