"""Grading a class on several instructor nodes: `grade --shard K/N` grades one shard, `merge` joins the shards.

Every node computes the same split from the student ids alone (sha256 of the id, modulo N), so N nodes
holding the same submitted/ folder grade every student exactly once without talking to each other. Each
node grades into a course folder of its own (a gradebook has one writer at a time, under a file lock no
network file system keeps); `merge` then takes each shard's results into the instructor's course: scores
and comments through the gradebook's own merge (which keeps what a person entered there), the autograded
notebooks and feedback pages, grade's state (so that `grade` there later regrades only what changed), and
grades.csv and grading_problems.csv written again as `grade` writes them.

A shard folder may come from a node that was compromised. It speaks only for the students of its own
shard, whose ids are checked (autograder.grading.ids); nothing in it is followed: a link is not read, and
only plain files are copied.
"""
from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

from nbgrader.api import Gradebook

from autograder.course import CourseError, sqlite_url
from autograder.grading import gradebook, ids, intake
from autograder.grading.grade import STATE, Grader, read_problems

FORM = "K/N, shard K of N with 1 <= K <= N (for example --shard 2/3)"
STATE_PARTS = ("graded", "problems", "notes", "feedback")  # grade's manifest, per submission


@dataclasses.dataclass(frozen=True)
class Shard:
    k: int
    n: int

    def has(self, student) -> bool:
        """Whether the folder named `student` (str or bytes) is graded in this shard."""
        return number(student, self.n) == self.k

    def __str__(self):
        return f"{self.k}/{self.n}"


def number(student, n):
    """The shard, 1 to n, of `student`: from the bytes of the name alone, so that every node splits a class
    alike (Python's hash() changes from process to process, a listing's order from disk to disk)."""
    return 1 + int.from_bytes(hashlib.sha256(os.fsencode(student)).digest()[:8], "big") % n


def parse(text):
    """`--shard K/N` as a Shard; anything else is refused before anything is graded."""
    m = re.fullmatch(r"([0-9]{1,6})/([0-9]{1,6})", str(text))
    if not m or not 1 <= int(m[1]) <= int(m[2]):
        raise CourseError(f"--shard {str(text)!r}: expected {FORM}")
    return Shard(int(m[1]), int(m[2]))


# ---------------------------------------------------------------- reading a shard, following nothing
def _dir_fd(top, parts):
    """A descriptor of the folder top/parts..., following no link below `top`; None where there is no folder."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts:
            new = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = new
    except OSError:  # missing, a file, or a link
        os.close(fd)
        return None
    return fd


def _open_plain(name, dir_fd):
    """A regular file's binary stream, or None for a link, a pipe or anything else (opened without blocking)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return os.fdopen(fd, "rb")


def _plain(top, *parts):
    """The plain file top/parts... opened for reading, or None where there is none (a link is none)."""
    fd = _dir_fd(top, parts[:-1])
    if fd is None:
        return None
    try:
        return _open_plain(parts[-1], fd)
    finally:
        os.close(fd)


def _read(top, *parts):
    """The bytes of the plain file top/parts..., or None where there is none."""
    fh = _plain(top, *parts)
    if fh is None:
        return None
    with fh:
        return fh.read()


def _copy_tree(top, parts, dest, log):
    """Copy the plain files under top/parts... into `dest`, following no link; False where there is no folder."""
    fd = _dir_fd(top, parts)
    if fd is None:
        return False
    try:
        for here, _, files, here_fd in os.fwalk(".", dir_fd=fd, follow_symlinks=False):
            (dest / here).mkdir(parents=True, exist_ok=True)
            for name in files:
                src = _open_plain(name, here_fd)
                if src is None:
                    log(f"{Path(top, *parts, here)}/{intake.shown(name)} is not a plain file: not copied")
                    continue
                with src, open(dest / here / name, "wb") as out:
                    shutil.copyfileobj(src, out)
    finally:
        os.close(fd)
    return True


# ---------------------------------------------------------------- what a shard holds
@dataclasses.dataclass(eq=False)
class _Results:
    path: Path
    shard: Shard
    db: Path  # a private copy of its gradebook
    manifest: dict
    units: dict  # {student: {assignment: True when the gradebook holds its submission, False when withheld}}
    unnamed: dict  # grading_problems.csv rows of folders graded under no name: {(student, folder): reason}
    assignments: set  # the assignments it put in its gradebook for its students

    def state(self, part):
        """One part of grade's manifest ({"student/assignment": value}), or {} where it is none."""
        found = self.manifest.get(part)
        return found if isinstance(found, dict) else {}

    def submission(self, student):
        """What `student`'s results were graded from, to tell one submission graded twice from two."""
        return {a: (self.state("graded").get(f"{student}/{a}"), self.state("problems").get(f"{student}/{a}"), held)
                for a, held in self.units[student].items()}


def _load(path, grader, tmp, log):
    """A shard's results, read and checked before anything is written."""
    path = Path(path).resolve()
    if not path.is_dir():
        raise CourseError(f"{path} is not a folder")
    db, manifest = _plain(path, "gradebook.db"), _read(path, STATE, "manifest.json")
    if db is None or manifest is None:
        if db is not None:
            db.close()
        raise CourseError(f"{path} is not a graded course (no gradebook.db or {STATE}/manifest.json as plain files): "
                          f"run `python -m autograder grade {path} --shard K/N` there first")
    try:
        manifest = json.loads(manifest)
        shard = parse(manifest.get("shard", "1/1"))
    except (ValueError, AttributeError, CourseError):
        raise CourseError(f"{path}/{STATE}/manifest.json is not what `grade` writes") from None
    copy = Path(tmp, f"{len(os.listdir(tmp))}.db")
    with db, open(copy, "wb") as out:
        shutil.copyfileobj(db, out)
    res = _Results(path, shard, copy, manifest, {}, {}, set())
    try:
        with Gradebook(sqlite_url(copy)) as gb:
            students = [s.id for s in gb.students]
            graded = [(sub.student.id, a.name) for a in gb.assignments for sub in a.submissions]
    except Exception as e:  # noqa: BLE001 (no gradebook nbgrader can read: that shard is refused, nothing else)
        raise CourseError(f"{path}/gradebook.db is not a gradebook nbgrader can read ({type(e).__name__})") from None
    withheld = [tuple(key.split("/", 1)) for key in res.state("problems") if "/" in key]  # grade withdrew them
    for student in dict.fromkeys(students + [s for s, _ in graded + withheld]):
        if not ids.valid(student):
            log(f"{path}: {ids.refusal(student)}: not merged")
        elif shard.has(student):  # the others are another shard's (a course copied before grading holds every student)
            res.units[student] = {}
    for (student, a), held in [(key, True) for key in graded] + [(key, False) for key in withheld]:
        if student in res.units and ids.valid(a):
            res.units[student][a] = held
    _check_assignments(res, grader)
    res.unnamed = _unnamed(res, _read(path, "grading_problems.csv") or b"")
    return res


def _check_assignments(res, grader):
    """Refuse a shard graded with another course than this one: its gradebook's cells would not be this one's."""
    res.assignments = {a for u in res.units.values() for a, held in u.items() if held or a in res.state("gradebook")}
    for a in sorted(res.assignments):
        if a not in grader.known:
            raise CourseError(f"{res.path} holds grades of {a}, which is no assignment of {grader.root}")
        if res.state("gradebook").get(a) != grader.fingerprint(a):
            raise CourseError(f"{res.path} graded {a} with another version of the course or of torch than {grader.root}: "
                              "grade every shard, and merge, from the same commit and environment")


def _unnamed(res, text):
    """The rows of a shard's grading_problems.csv for folders graded under no name (not in grade's state):
    those of its own students, and those whose name is no id, which only one shard lists."""
    found = {}
    for row in csv.DictReader(io.StringIO(text.decode("utf-8", "replace"))):
        student, folder, reason = (row.get(c) for c in ("student_id", "assignment", "reason"))
        if all(isinstance(v, str) for v in (student, folder, reason)) and not (ids.valid(student) and ids.valid(folder)):
            if not ids.valid(student) or student in res.units:
                found[(student, folder)] = reason
    return found


def _owners(results):
    """{student: the results to take them from}; a student in two shards is refused unless graded from one submission."""
    owner = {}
    for res in results:
        for student in sorted(res.units):
            other = owner.setdefault(student, res)
            if other is not res and other.submission(student) != res.submission(student):
                raise CourseError(f"{student} is in both {other.path} (shard {other.shard}) and {res.path} (shard {res.shard}), "
                                  "graded from different submissions: nothing merged. Grade every shard with the same N "
                                  "from the same submitted/ folder, or merge only one of them")
    return owner


# ---------------------------------------------------------------- merging
def merge(course, shards, root=None, log=print):
    """Take the results of the graded shard courses `shards` into `course`; return {student: shard path}.
    Everything is read and checked first: a refused shard leaves `course` as it was."""
    grader = Grader(course, root=root, log=log)
    paths = [Path(s).resolve() for s in shards]
    if grader.course in paths or len(set(paths)) < len(paths):
        raise CourseError("each shard course is to be named once, and none may be COURSE itself")
    with tempfile.TemporaryDirectory() as tmp:
        results = [_load(p, grader, Path(tmp), log) for p in paths]
        owner = _owners(results)
        for n in {res.shard.n for res in results}:
            if missing := [f"{k}/{n}" for k in range(1, n + 1) if Shard(k, n) not in {res.shard for res in results}]:
                log(f"not merged (yet): shard {', '.join(missing)}")
        grader.state.mkdir(parents=True, exist_ok=True)
        manifest = grader.load_manifest()
        grader.prepare_gradebook(sorted(set().union(*(res.assignments for res in set(owner.values())))), manifest)
        with gradebook.locked(grader.course), Gradebook(sqlite_url(grader.course / "gradebook.db")) as gb:
            for student in sorted(owner):  # listed even with nothing graded, as `grade` lists them
                gb.update_or_create_student(student)
        for student, res in sorted(owner.items()):
            for a, held in sorted(res.units[student].items()):
                _take(grader, manifest, res, student, a, held)
        grader.refresh_feedback([(s, a) for s, r in sorted(owner.items()) for a, held in r.units[s].items() if held], manifest)
        grader.save_manifest(manifest)
    _export(grader, manifest, owner)
    return {student: res.path for student, res in owner.items()}


def _take(grader, manifest, res, student, a, held):
    """One submission's results from a shard: its gradebook entry (or its withdrawal), grade's state for it,
    and its autograded notebook and feedback. The state includes what its feedback page showed, so that
    refresh_feedback writes it again where the course's gradebook holds more (a manual grade)."""
    if held:
        gradebook.merge(res.db, grader.course, a, student)
    else:
        gradebook.withdraw(grader.course, a, student)
    key = f"{student}/{a}"
    for part in STATE_PARTS:
        value = res.state(part).get(key)
        if isinstance(value, str):
            manifest.setdefault(part, {})[key] = value
        else:
            manifest.setdefault(part, {}).pop(key, None)
    for kind in ("autograded", "feedback"):
        dest = grader.course / kind / student / a
        tmp = dest.with_name(f".{a}.merging")
        shutil.rmtree(tmp, ignore_errors=True)
        found = _copy_tree(res.path, (kind, student, a), tmp, grader.log)
        shutil.rmtree(dest, ignore_errors=True)
        if found:
            os.replace(tmp, dest)


def _export(grader, manifest, owner):
    """grades.csv and grading_problems.csv as `grade` writes them: the problem or note of every submission in
    the course's state, and the folders graded under no name: the course's own, but for the merged students'."""
    grader.unnamed = {(r["student_id"], r["assignment"]): r["reason"] for r in read_problems(grader.course)
                      if not (ids.valid(r["student_id"]) and ids.valid(r["assignment"])) and r["student_id"] not in owner}
    for res in set(owner.values()):
        grader.unnamed |= res.unnamed
    keys = sorted({tuple(k.split("/", 1)) for part in ("problems", "notes") for k in manifest.get(part, {})})
    grader.export(keys, manifest.get("problems", {}), manifest.get("notes", {}))
