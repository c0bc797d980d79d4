"""Files in: a submission enters the grader's world as plain files only, of bounded size.

Before anything with the grader's rights copies or reads a submission folder, `problem`
looks at it without following anything: a link of any kind (the folder itself, the
notebook, any file or folder in it), a device, a pipe or a socket, a file larger than
Limits.submission_file_mb, a folder larger than Limits.submission_folder_mb or holding
more than Limits.submission_entries entries, and the submission is refused: it gets 0
points and its reason, and nothing of it is read.

Three doors lead in, and each is guarded here:
- `python -m autograder grade` asks `problem` first (autograder.grading.grade);
- plain `nbgrader autograde`: `guard()`, called by nbgrader_config.py, has nbgrader's
  Autograde ask it before it copies or reads a submission, and grade a refused one as a
  notebook that only says why;
- `nbgrader collect`: `Collect` (nbgrader_config.py names it) copies a student's
  submission out of the exchange with `copy`, which follows nothing, reads at most the
  limits and only files the submitting student owns, and leaves a note (REFUSED) that the
  two others read.
"""
from __future__ import annotations

import fnmatch
import os
import shutil
import stat
from pathlib import Path

from nbgrader.exchange.default.collect import ExchangeCollect

REFUSED = ".autograder-refused"  # left by Collect where it refused something; a name no submission may use
_KINDS = {stat.S_IFLNK: "a link", stat.S_IFIFO: "a pipe", stat.S_IFSOCK: "a socket",
          stat.S_IFCHR: "a device", stat.S_IFBLK: "a device"}


def shown(name):
    """A name from a submission as it may be shown (CSV, HTML, a log): printable, quoted, short."""
    text = ascii(str(name))
    return text if len(text) <= 80 else text[:77] + "..."


def problem(folder, limits):
    """'' when `folder` holds plain files and folders only, within the limits; else why not.
    Nothing is followed or read, but a note left by Collect."""
    folder = Path(folder)
    for path in (folder.parent, folder):
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            return f"{shown(path.name)} cannot be read"
        if not stat.S_ISDIR(mode):
            return f"{shown(path.name)} is {_KINDS.get(stat.S_IFMT(mode), 'no folder')}, not a folder: not graded"
    entries, total, stack = 0, 0, [(folder, 0)]
    while stack:
        here, depth = stack.pop()
        try:
            found = list(os.scandir(here))
        except OSError as e:
            return f"{shown(here.name)} cannot be read ({e.strerror})"
        for entry in found:
            entries += 1
            rel = Path(entry.path).relative_to(folder)
            if entries > limits.submission_entries:
                return f"the submission holds more than {limits.submission_entries} files and folders"
            if entry.name == REFUSED:
                return _note(entry.path) if here == folder else f"{shown(rel)}: a name the course reserves"
            mode = entry.stat(follow_symlinks=False).st_mode
            if stat.S_ISDIR(mode):
                if depth >= 16:
                    return f"{shown(rel)}: folders nested more than 16 deep"
                stack.append((Path(entry.path), depth + 1))
            elif stat.S_ISREG(mode):
                size = entry.stat(follow_symlinks=False).st_size
                total += size
                if size > limits.submission_file_mb * 2**20:
                    return f"{shown(rel)} is {size / 2**20:.1f} MB, more than the {limits.submission_file_mb} MB a file may be"
                if total > limits.submission_folder_mb * 2**20:
                    return f"the submission's files total more than the {limits.submission_folder_mb} MB allowed"
            else:
                return f"{shown(rel)} is {_KINDS.get(stat.S_IFMT(mode), 'no plain file')}: a submission holds plain files only"
    return ""


def _note(path):
    """The reason Collect wrote, read safely (it is short, and Collect's own words)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with open(fd, "rb") as fh:
            text = fh.read(2000).decode("utf-8", "replace")
    except OSError:
        text = ""
    text = "".join(c for c in text if c.isprintable())
    return text or "nbgrader collect refused part of the submission"


def listing(folder):
    """What changes whenever a submission folder's entries do, read without following or opening anything."""
    found = []
    for here, dirs, files in os.walk(folder, followlinks=False):
        for name in sorted(dirs + files):
            st = os.lstat(os.path.join(here, name))
            found.append(f"{os.path.relpath(os.path.join(here, name), folder)}:{st.st_mode}:{st.st_size}:{st.st_mtime_ns}")
    return "\n".join(sorted(found))


def read_small(path, most=65536):
    """The bytes of a plain file of at most `most` bytes, or None: never through a link, never blocking."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with open(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > most:
            return None
        return fh.read(most + 1)[:most]


def copy(src, dest, limits, ignore=()):
    """Copy a submission folder following nothing and reading at most the limits; what it skips (a link,
    a special file, what is over a limit) is named in dest/REFUSED. Returns that reason, or ''."""
    src, dest = Path(src), Path(dest)
    reasons, total, entries, owner = [], 0, 0, os.lstat(src).st_uid
    dest.mkdir(parents=True, exist_ok=True)
    stack = [(src, dest, 0)]
    while stack:
        here, there, depth = stack.pop()
        for entry in sorted(os.scandir(here), key=lambda e: e.name):
            rel = Path(entry.path).relative_to(src)
            if any(fnmatch.fnmatch(entry.name, pattern) for pattern in ignore):
                continue
            entries += 1
            if entries > limits.submission_entries:
                reasons.append(f"the submission holds more than {limits.submission_entries} files and folders")
                stack = []
                break
            mode = entry.stat(follow_symlinks=False).st_mode
            if entry.name == REFUSED:
                reasons.append(f"{shown(rel)}: a name the course reserves")
            elif stat.S_ISDIR(mode) and depth < 16:
                (there / entry.name).mkdir()
                stack.append((Path(entry.path), there / entry.name, depth + 1))
            elif stat.S_ISREG(mode):
                room = min(limits.submission_file_mb * 2**20, limits.submission_folder_mb * 2**20 - total)
                copied, why = _copy_file(entry.path, there / entry.name, room, owner)
                if why:
                    reasons.append(f"{shown(rel)} {why}")
                total += copied
            else:
                kind = "folders nested more than 16 deep" if stat.S_ISDIR(mode) else _KINDS.get(stat.S_IFMT(mode), "no plain file")
                reasons.append(f"{shown(rel)} is {kind}: a submission holds plain files only")
    reason = ("nbgrader collect refused this submission: " + "; ".join(reasons[:3])) if reasons else ""
    if reason:
        (dest / REFUSED).write_text(reason[:1500])
    return reason


def _copy_file(src, dest, room, owner):
    """Copy one plain file of at most `room` bytes that `owner` owns: (bytes copied, '' or why it was not).
    (A hard link to someone else's file is a plain file, but not the student's own.)"""
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return 0, "cannot be read"
    with open(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            return 0, "changed into something else while it was copied"
        if st.st_uid != owner:
            return 0, "is not the student's own file (a hard link?): a submission holds its own plain files only"
        data = fh.read(max(room, 0) + 1)
    if len(data) > room:
        return 0, "is larger than the limits (a file, or the submission, over its size)"
    dest.write_bytes(data)
    shutil.copystat(src, dest, follow_symlinks=False)
    return len(data), ""


# ---------------------------------------------------------------- plain nbgrader


def guard():
    """Have nbgrader's Autograde refuse a submission that `problem` refuses, before it copies or reads
    anything of it: the submission is graded as a notebook saying why, with 0 points."""
    from nbgrader.converters.autograde import Autograde

    if getattr(Autograde, "_intake_guarded", False):
        return
    init_destination, init_assignment, convert = Autograde.init_destination, Autograde.init_assignment, Autograde.convert_single_notebook

    def refusal(self, assignment_id, student_id):
        from autograder.grading.limits import Limits

        return problem(Path(self._format_source(assignment_id, student_id)), Limits(parent=self))

    def guarded_destination(self, assignment_id, student_id):
        self._refused = refusal(self, assignment_id, student_id)
        return True if self._refused else init_destination(self, assignment_id, student_id)

    def guarded_assignment(self, assignment_id, student_id):
        self._refused = refusal(self, assignment_id, student_id)
        if not self._refused:
            return init_assignment(self, assignment_id, student_id)
        self.log.warning("%s/%s is not graded: %s", student_id, assignment_id, self._refused)
        _grade_refused(self, assignment_id, student_id, self._refused)

    def guarded_convert(self, notebook_filename):
        if not getattr(self, "_refused", ""):
            return convert(self, notebook_filename)

    Autograde.init_destination, Autograde.init_assignment = guarded_destination, guarded_assignment
    Autograde.convert_single_notebook, Autograde._intake_guarded = guarded_convert, True


def _grade_refused(converter, assignment_id, student_id, reason):
    """0 for every cell of every notebook of the assignment, and in place of each notebook one that says why."""
    import nbformat
    from nbformat.v4 import new_markdown_cell, new_notebook
    from nbgrader.api import Gradebook

    dest = Path(converter._format_dest(assignment_id, student_id))
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    with Gradebook(converter.coursedir.db_url, converter.coursedir.course_id) as gb:
        gb.update_or_create_student(student_id)
        assignment = gb.find_assignment(assignment_id)
        gb.update_or_create_submission(assignment_id, student_id)
        for notebook in assignment.notebooks:
            for grade in gb.find_submission_notebook(notebook.name, assignment_id, student_id).grades:
                grade.auto_score, grade.needs_manual_grade = 0, False
            page = new_notebook(cells=[new_markdown_cell(f"# Not graded\n\nThis submission gets 0 points: {_escaped(reason)}.\n\n"
                                                         "Fix this and submit again; ask your instructor if the deadline has passed.")])
            page.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
            nbformat.write(page, dest / f"{notebook.name}.ipynb")
        gb.db.commit()
    converter.notebooks = []


def _escaped(text):
    """Text that markdown shows as it is."""
    return "".join("\\" + c if c in "\\`*_{}[]()<>#+-.!|~" else c for c in text)


class Collect(ExchangeCollect):
    """nbgrader's collect, copying each submission out of the exchange with `copy`: nothing is followed,
    at most the limits are read, and what is refused is named for `grade` and `autograde`."""

    def do_copy(self, src, dest, log=None):
        from autograder.grading.limits import Limits

        reason = copy(src, dest, Limits(parent=self), ignore=self.coursedir.ignore)
        if reason:
            self.log.warning("%s: %s", dest, reason)
