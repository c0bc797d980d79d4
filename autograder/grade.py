"""`python -m autograder grade`: real `nbgrader autograde` of a class, J students at a time.

Layout (nbgrader's): COURSE/submitted/<student>/<assignment>/<notebook>.ipynb.
Produces COURSE/autograded/..., COURSE/feedback/<student>/<assignment>/<notebook>.html
and COURSE/grades.csv in nbgrader's export format.

Each student has a gradebook of their own (COURSE/.autograder/gradebooks), so
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
        self.fingerprint = _digest(
            [self.root / "solutions" / a / f"{a}.ipynb" for a in sorted(self.known)] + [self.root / "nbgrader_config.py"]
        )[:16]

    # ---------------------------------------------------------------- bookkeeping
    def manifest_path(self):
        return self.state / "manifest.json"

    def load_manifest(self):
        try:
            data = json.loads(self.manifest_path().read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {}
        return data if data.get("fingerprint") == self.fingerprint else {}

    def save_manifest(self, manifest):
        manifest["fingerprint"] = self.fingerprint
        tmp = self.manifest_path().with_suffix(".tmp")
        tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True))
        os.replace(tmp, self.manifest_path())

    def submissions(self):
        """{student: {assignment: digest}} for every submission on disk."""
        found = {}
        for student_dir in sorted((self.course / "submitted").iterdir()):
            if not student_dir.is_dir() or student_dir.name.startswith("."):
                continue
            for a_dir in sorted(student_dir.iterdir()):
                if not a_dir.is_dir():
                    continue
                if a_dir.name not in self.known:
                    self.log(f"skipping {student_dir.name}/{a_dir.name}: no assignment of that name in solutions/")
                    continue
                found.setdefault(student_dir.name, {})[a_dir.name] = _digest(_files(a_dir))
        return found

    # ---------------------------------------------------------------- nbgrader
    def template_db(self):
        """A gradebook holding every assignment, copied for each new student."""
        path = self.state / f"template-{self.fingerprint}.db"
        if path.exists():
            return path
        with tempfile.TemporaryDirectory() as tmp:
            db = Path(tmp) / "template.db"
            results = generate_assignments(self.root, sorted(self.known), Path(tmp) / "release", db)
            for name, (ok, log) in results.items():
                if not ok:
                    raise CourseError(f"nbgrader could not prepare {name}:\n{log[-3000:]}")
            shutil.copy(db, path.with_suffix(".tmp"))
            os.replace(path.with_suffix(".tmp"), path)
        return path

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
        (self.state / "gradebooks").mkdir(parents=True, exist_ok=True)
        subs = self.submissions()
        if not subs:
            raise CourseError(f"no submissions found under {self.course / 'submitted'}")
        manifest = self.load_manifest()
        fresh_dbs = not manifest
        done = manifest.setdefault("graded", {})
        todo, skipped = [], []
        for student, items in subs.items():
            changed = [a for a, d in items.items() if force or done.get(student, {}).get(a) != d]
            skipped += [(student, a) for a in items if a not in changed]
            todo += [(student, a) for a in changed]
        graded, failed = [], []
        if todo:
            template = self.template_db()
            for student in {s for s, _ in todo}:
                db = self.state / "gradebooks" / f"{student}.db"
                if fresh_dbs or not db.exists():
                    shutil.copy(template, db)
            # Students, not submissions, are spread over the workers: a gradebook has one writer.
            students = sorted({s for s, _ in todo})
            groups = [students[i::max(1, jobs)] for i in range(max(1, jobs))]
            events = queue.Queue()
            workers = []
            for i, group in enumerate(g for g in groups if g):
                items = [[s, a, str(self.state / "gradebooks" / f"{s}.db")] for s, a in todo if s in group]
                proc, log = self._start_worker(i, items)
                reader = threading.Thread(target=_read_results, args=(proc, events), daemon=True)
                reader.start()
                workers.append((proc, log, reader, items))
            bar = _progress(len(todo), progress)
            remaining = len(workers)
            seen = set()
            while remaining:
                event = events.get()
                if event is None:
                    remaining -= 1
                    continue
                key = (event["student"], event["assignment"])
                seen.add(key)
                if event["ok"]:
                    done.setdefault(key[0], {})[key[1]] = subs[key[0]][key[1]]
                    graded.append(key)
                else:
                    done.get(key[0], {}).pop(key[1], None)
                    failed.append(key)
                    self.log(f"nbgrader failed on {key[0]}/{key[1]}:\n{event['log']}")
                self.save_manifest(manifest)
                bar.update(1)
            bar.close()
            for proc, log, reader, items in workers:
                proc.wait()
                log.close()
                lost = [(s, a) for s, a, _ in items if (s, a) not in seen]
                if lost:
                    failed += lost
                    self.log(f"a grading process stopped early (exit {proc.returncode}); see {log.name}")
        self.save_manifest(manifest)
        self.export(subs)
        return graded, skipped, failed

    def export(self, subs):
        """grades.csv (nbgrader's format) from every student's gradebook."""
        from nbgrader.api import Gradebook
        from nbgrader.plugins import CsvExportPlugin

        rows, header = [], None
        with tempfile.TemporaryDirectory() as tmp:
            for student in sorted(subs):
                db = self.state / "gradebooks" / f"{student}.db"
                if not db.exists():
                    continue
                out = Path(tmp) / f"{student}.csv"
                with Gradebook(sqlite_url(db)) as gb:
                    CsvExportPlugin(to=str(out), student=[student]).export(gb)
                with open(out, newline="") as fh:
                    reader = csv.reader(fh)
                    header = next(reader)
                    rows += [r for r in reader if r[0] in subs[student]]
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
