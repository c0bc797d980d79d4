"""Files in: a submission enters the grader's world as plain files only, of bounded size.

Before anything with the grader's rights copies or reads a submission folder, `problem`
looks at it without following anything: a link of any kind (the folder itself, the
notebook, any file or folder in it), a device, a pipe or a socket, a file larger than
Limits.submission_file_mb, a folder larger than Limits.submission_folder_mb or holding
more than Limits.submission_entries entries, and the submission is refused: it gets 0
points and its reason, and nothing of it is read.

A submission is data until a sandbox runs it, so it brings in only what its assignment
declares (`Declared`): notebooks, nbgrader's own files and the data files of the assignment's
source and release folders, never anything Python could import. Whatever else it holds (a
`torch.py`, an `ipykernel_launcher.py` or a `sitecustomize.py` beside the notebook, a package)
is left out, named, of every folder of the instructor's: Collect never copies it into
submitted/, Autograde never copies it into autograded/ (nor so into the sandbox or feedback/),
and the notebook is graded as it would be without it.

Three doors lead in, and each is guarded here:
- `python -m autograder grade` asks `problem` first (autograder.grading.grade);
- plain `nbgrader autograde`: `guard()`, called by nbgrader_config.py, has nbgrader's
  Autograde ask it before it copies or reads a submission, and grade a refused one as a
  notebook that only says why;
- `nbgrader collect`: the course's Collect (autograder.grading.exchange) copies a student's
  submission out of the exchange with `copy`, which follows nothing, reads at most the
  limits and only files the submitting student owns, and leaves a note (REFUSED) that the
  two others read, and a note (LEFT_OUT) naming what it left out, which `grade` reports.

Both walk a folder through descriptors (`_walk`): each folder is opened from its parent's
descriptor without following and listed through its own, each file opened the same way and
judged by what its open descriptor is (fstat), so no path is resolved twice. A student who
shares the grader's uid, or whose folder is writable by others (nbgrader's exchange makes
it so), may swap a folder for a link between a look and a use; that swap then fails or
finds the folder already open, and never leads outside. Names are whatever bytes a student
chose: they travel as `os.fsdecode` makes them (undecodable bytes as surrogates, which every
`os` call encodes back), and are shown only through `shown`.
"""
from __future__ import annotations

import fnmatch
import importlib.machinery
import json
import os
import shutil
import stat
from pathlib import Path
from typing import NamedTuple

import nbformat
from nbformat.v4 import new_markdown_cell, new_notebook
from nbformat.validator import get_validator

from autograder.grading.limits import Limits

REFUSED = ".autograder-refused"  # left by Collect where it refused something; a name no submission may use
LEFT_OUT = ".autograder-left-out"  # left by Collect where it left out what the assignment does not declare; reserved too
RESERVED = (REFUSED, LEFT_OUT)
NBGRADER_FILES = ("timestamp.txt", "submission_secret.txt")  # what nbgrader's submit and collect put beside the notebooks
# a file any of these end in is code Python may load (a module, a compiled one, an extension, a .pth of site's)
IMPORTABLE = (*importlib.machinery.all_suffixes(), ".pyw", ".pyz", ".pth")
DEEPEST = 16  # folders nested deeper are refused
_KINDS = {stat.S_IFLNK: "a link", stat.S_IFIFO: "a pipe", stat.S_IFSOCK: "a socket",
          stat.S_IFCHR: "a device", stat.S_IFBLK: "a device"}
NOFOLLOW_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC  # opens a folder, never through a link
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # a pipe does not block its open


def shown(name):
    """A name from a submission as it may be shown (CSV, HTML, a log): printable, quoted, short."""
    text = ascii(str(name))
    return text if len(text) <= 80 else text[:77] + "..."


def problem(folder, limits):
    """'' when `folder` holds plain files and folders only, within the limits; else why not.
    Nothing is followed or read, but a note left by Collect. `folder` may be str or bytes."""
    folder = Path(os.fsdecode(folder))
    try:
        top = _open_folder(folder)
    except _NotAFolder as e:
        return str(e)
    total = 0
    try:
        for entry in _walk(top, limits):
            if entry.name == REFUSED and entry.rel == entry.name:
                return _note(entry.parent, REFUSED)
            if entry.name == LEFT_OUT and entry.rel == entry.name:
                continue
            if entry.why:
                return entry.why
            if stat.S_ISREG(entry.st.st_mode):
                total += entry.st.st_size
                if entry.st.st_size > limits.submission_file_mb * 2**20:
                    return f"{shown(entry.rel)} is {entry.st.st_size / 2**20:.1f} MB, more than the {limits.submission_file_mb} MB a file may be"
                if total > limits.submission_folder_mb * 2**20:
                    return f"the submission's files total more than the {limits.submission_folder_mb} MB allowed"
    finally:
        os.close(top)
    return ""


def _note(folder_fd, name):
    """The note `name` Collect wrote in the open folder ('' when there is none), read safely (it is short, and
    Collect's own words)."""
    try:
        fd = os.open(name, _FILE, dir_fd=folder_fd)
        with open(fd, "rb") as fh:
            text = fh.read(2000).decode("utf-8", "replace")
    except FileNotFoundError:
        return ""
    except OSError:
        text = ""
    text = "".join(c for c in text if c.isprintable())
    return text or f"nbgrader collect {'refused' if name == REFUSED else 'left out'} part of the submission"


class _NotAFolder(Exception):
    """Why a submission folder (or the folder holding it) is not opened: its message is shown as it is."""


def _open_folder(folder):
    """A descriptor of `folder`, opened from its parent's, neither of the two through a link: the student
    may own both (submitted/<id>/<assignment>, inbound/<entry>), the folders above are the grader's."""
    try:
        parent = os.open(folder.parent, NOFOLLOW_FOLDER)
    except OSError:
        raise _NotAFolder(_not_a_folder(folder.parent)) from None
    try:
        return os.open(folder.name, NOFOLLOW_FOLDER, dir_fd=parent)
    except OSError:
        raise _NotAFolder(_not_a_folder(folder)) from None
    finally:
        os.close(parent)


def _not_a_folder(path):
    """Why `path` could not be opened as a folder, said from its lstat."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return f"{shown(path.name)} cannot be read"
    if stat.S_ISDIR(mode):
        return f"{shown(path.name)} cannot be read"
    return f"{shown(path.name)} is {_KINDS.get(stat.S_IFMT(mode), 'no folder')}, not a folder: not graded"


class _Entry(NamedTuple):
    rel: str  # its path inside the submission, '/'-separated: for messages and the copy's destination
    name: str  # as os.fsdecode makes it: any bytes come back unchanged from it
    parent: int  # the descriptor of the folder holding it, open while the entry is looked at
    st: os.stat_result | None  # a file's lstat; a folder's fstat, taken through the descriptor the walk lists it by
    why: str  # '' or why it is refused (a folder refused is not entered)


def _walk(top, limits, ignore=(), owner=None):
    """Every entry below the open folder `top`, depth first in name order, without following anything.

    A folder is opened from its parent's descriptor (O_NOFOLLOW | O_DIRECTORY) as soon as it is seen,
    and later listed through that descriptor, so what is listed is the folder that was looked at even
    if its name is swapped for a link meanwhile. Yields, with their reasons, a link, a special file, a
    folder nested deeper than DEEPEST, a folder not `owner`'s (when given) and the names RESERVED, none of
    them entered; after Limits.submission_entries entries (those matching `ignore` not counted), it
    yields the reason and stops. `top` stays the caller's to close."""
    entries, stack = 0, [(top, "", 0)]
    try:
        while stack:
            fd, base, depth = stack.pop()
            try:
                try:
                    names = sorted(os.listdir(fd))
                except OSError as e:
                    yield _Entry(base, os.path.basename(base), fd, None, f"{shown(base or '.')} cannot be read ({e.strerror})")
                    continue
                for name in names:
                    if _ignored(name, ignore):
                        continue
                    entries += 1
                    rel = f"{base}/{name}" if base else name
                    if entries > limits.submission_entries:
                        yield _Entry(rel, name, fd, None, f"the submission holds more than {limits.submission_entries} files and folders")
                        return
                    yield _look(fd, name, rel, depth, owner, stack)
            finally:
                if fd != top:
                    os.close(fd)
    finally:
        for fd, _, _ in stack:
            if fd != top:
                os.close(fd)


def _look(parent, name, rel, depth, owner, stack):
    """The entry `name` of the open folder `parent`; a folder to enter is opened and put on `stack`."""
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except OSError:
        return _Entry(rel, name, parent, None, f"{shown(rel)} cannot be read")
    if name in RESERVED:
        return _Entry(rel, name, parent, st, f"{shown(rel)}: a name the course reserves")
    if stat.S_ISREG(st.st_mode):
        return _Entry(rel, name, parent, st, "")
    if not stat.S_ISDIR(st.st_mode):
        return _Entry(rel, name, parent, st, f"{shown(rel)} is {_KINDS.get(stat.S_IFMT(st.st_mode), 'no plain file')}: a submission holds plain files only")
    if depth >= DEEPEST:
        return _Entry(rel, name, parent, st, f"{shown(rel)}: folders nested more than {DEEPEST} deep")
    try:
        fd = os.open(name, NOFOLLOW_FOLDER, dir_fd=parent)
    except OSError:
        return _Entry(rel, name, parent, st, f"{shown(rel)} changed into something else while it was read")
    st = os.fstat(fd)
    if owner is not None and st.st_uid != owner:
        os.close(fd)
        return _Entry(rel, name, parent, st, f"{shown(rel)} is not the student's own folder: a submission holds its own plain files only")
    stack.append((fd, rel, depth + 1))
    return _Entry(rel, name, parent, st, "")


class Declared(NamedTuple):
    """What a submission of an assignment may bring in: the assignment's files and the folders holding them
    (paths inside the submission, '/'-separated), besides notebooks and NBGRADER_FILES at its top."""
    files: frozenset
    folders: frozenset

    def takes(self, rel, folder=False):
        """Whether the submission's entry `rel` (a folder when `folder`) is part of the assignment."""
        if folder:
            return rel in self.folders
        at_top = "/" not in rel
        return rel in self.files or at_top and (rel.endswith(".ipynb") or rel in NBGRADER_FILES)


def importable(name):
    """Whether Python could load a file of this name as code (see IMPORTABLE)."""
    return name.endswith(IMPORTABLE)


def declared(*folders, ignore=()):
    """What a submission may bring in, from the assignment's own `folders` (its source and release, the
    instructor's): their files, but those matching `ignore` and any Python could import."""
    files = set()
    for top in map(Path, folders):
        for here, dirs, names in os.walk(top):
            dirs[:] = [d for d in dirs if not _ignored(d, ignore)]
            files |= {(Path(here) / n).relative_to(top).as_posix() for n in names if not _ignored(n, ignore) and not importable(n)}
    held = {rel.rsplit("/", i)[0] for rel in files for i in range(1, rel.count("/") + 1)}
    return Declared(frozenset(files), frozenset(held))


def declared_by(coursedir, assignment):
    """`declared` for an assignment of an nbgrader course (a CourseDirectory): its source and release folders."""
    folders = (coursedir.format_path(kind, ".", assignment) for kind in (coursedir.source_directory, coursedir.release_directory))
    return declared(*folders, ignore=coursedir.ignore)


def _ignored(name, ignore):
    return any(fnmatch.fnmatch(name, pattern) for pattern in ignore)


def _kept(entries, takes):
    """(entry, kept) for each of `entries` (from `_walk`): kept when nothing is against it and `takes` (a Declared)
    takes it. Below a folder not kept nothing is kept, and only what is against it is yielded (a link there refuses
    the submission as anywhere else): a folder left out is named once."""
    dropped = set()
    for entry in entries:
        below = entry.rel.rpartition("/")[0] in dropped
        if entry.why:
            yield entry, False
            continue
        folder = stat.S_ISDIR(entry.st.st_mode)
        kept = not below and takes.takes(entry.rel, folder)
        if folder and not kept:
            dropped.add(entry.rel)
        if not below:
            yield entry, kept


def left_out(folder, takes, limits, ignore=()):
    """'' when `folder` (a submission `problem` passes) holds nothing that `takes` (a Declared) leaves out; else
    what is left out of the folders made from it, and what Collect left out of it (its LEFT_OUT note)."""
    top = _open_folder(Path(os.fsdecode(folder)))
    try:
        names = [shown(entry.rel) for entry, kept in _kept(_walk(top, limits, ignore), takes) if not kept and not entry.why]
        return "; ".join(filter(None, (_note(top, LEFT_OUT), _leaving(names))))
    finally:
        os.close(top)


def _leaving(names):
    """Why the entries `names` (shown) are left out; '' for none."""
    if not names:
        return ""
    listed = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
    return f"left out as no part of the assignment, which brings in its notebooks and data files only (never code): {listed}"


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
        fd = os.open(path, _FILE)
    except OSError:
        return None
    with open(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > most:
            return None
        return fh.read(most + 1)[:most]


class Copied(NamedTuple):
    reason: str  # '' or why something was refused (also written to dest/REFUSED)
    changed_ns: int  # the latest st_ctime of the folder and of all it copied: when the submission last changed
    left_out: str = ""  # '' or what was left out as no part of the assignment (also written to dest/LEFT_OUT)


def copy(src, dest, limits, takes, ignore=(), owner=None):
    """Copy a submission folder following nothing and reading at most the limits, only files and folders
    `owner` (a uid; by default the folder's owner) owns and `takes` (a Declared) takes; what it refuses (a
    link, a special file, someone else's file, what is over a limit) is named in dest/REFUSED, and what it
    leaves out as no part of the assignment in dest/LEFT_OUT.

    Returns the reasons and the latest st_ctime of what it copied, taken from the open descriptors after
    reading: a time the owner cannot set back (utime sets mtime, never ctime), and never earlier than any
    byte copied."""
    src, dest = Path(os.fsdecode(src)), Path(os.fsdecode(dest))
    dest.mkdir(parents=True, exist_ok=True)
    reasons, left, total, changed = [], [], 0, 0
    try:
        top = _open_folder(src)
    except _NotAFolder as e:
        return Copied(_refuse(dest, [str(e)]), 0)
    try:
        st = os.fstat(top)
        owner = st.st_uid if owner is None else owner
        if st.st_uid != owner:
            return Copied(_refuse(dest, ["the submission folder is not the student's own"]), 0)
        for entry, kept in _kept(_walk(top, limits, ignore, owner), takes):
            if entry.why:
                reasons.append(entry.why)
            elif not kept:
                left.append(shown(entry.rel))
            elif stat.S_ISDIR(entry.st.st_mode):
                (dest / entry.rel).mkdir()
                changed = max(changed, entry.st.st_ctime_ns)
            else:
                room = min(limits.submission_file_mb * 2**20, limits.submission_folder_mb * 2**20 - total)
                copied, why, ctime = _copy_file(entry.parent, entry.name, dest / entry.rel, room, owner)
                if why:
                    reasons.append(f"{shown(entry.rel)} {why}")
                total, changed = total + copied, max(changed, ctime)
        changed = max(changed, os.fstat(top).st_ctime_ns)
    finally:
        os.close(top)
    leaving = _leaving(left)
    return Copied(_refuse(dest, reasons), changed, leaving and _write_note(dest, LEFT_OUT, "nbgrader collect " + leaving))


def _refuse(dest, reasons):
    """The note saying what was refused, written in `dest`; '' when nothing was."""
    if not reasons:
        return ""
    return _write_note(dest, REFUSED, "nbgrader collect refused this submission: " + "; ".join(reasons[:3]))


def _write_note(dest, name, text):
    """`text`, written as the note `name` in `dest` (cut to what `_note` reads back)."""
    (dest / name).write_text(text[:1500])
    return text


def _copy_file(parent, name, dest, room, owner):
    """Copy the plain file `name` of the open folder `parent`, of at most `room` bytes, if `owner` owns it:
    (bytes copied, '' or why it was not, its st_ctime after reading). It is judged by the descriptor that
    is read (never through a link, never blocking on a pipe), so a swap after the walk looked at it
    cannot bring in anything else. (A hard link to someone else's file is a plain file, but not the
    student's own.)"""
    try:
        fd = os.open(name, _FILE, dir_fd=parent)
    except OSError:
        return 0, "cannot be read (changed into a link?)", 0
    with open(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return 0, "changed into something else while it was copied", 0
        if st.st_uid != owner:
            return 0, "is not the student's own file (a hard link?): a submission holds its own plain files only", 0
        data = fh.read(max(room, 0) + 1)
        ctime = os.fstat(fd).st_ctime_ns
    if len(data) > room:
        return 0, "is larger than the limits (a file, or the submission, over its size)", ctime
    out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with open(out, "wb") as fh:
        fh.write(data)
        fh.flush()  # before the times are set, which a later write would change
        os.fchmod(out, stat.S_IMODE(st.st_mode) & 0o777)
        os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))
    return len(data), "", ctime


def last_change(folder_fd, limits, ignore=()):
    """The latest st_ctime (ns) of the open folder and of everything in it that `copy` would look at:
    when the submission last changed, as its owner cannot forge (utime sets mtime, never ctime)."""
    changed = os.fstat(folder_fd).st_ctime_ns
    for entry in _walk(folder_fd, limits, ignore):
        if entry.st is not None:
            changed = max(changed, entry.st.st_ctime_ns)
    return changed


def notebook_problem(path, limits):
    """'' when `path` is a version-4 notebook by nbformat's own schema, else why not: read once, at most the
    limits, and judged by fastjsonschema in time linear in its size. (nbformat's validate falls back to
    jsonschema, quadratic on some inputs: 30,000 tags of mixed types took it 750 s, in the grader's own
    process, before any limit of the submission's applied.)"""
    data = read_small(path, limits.submission_file_mb * 2**20)
    if data is None:
        return f"{shown(Path(path).name)} cannot be read"
    try:
        nb = json.loads(data)
        if not isinstance(nb, dict) or nb.get("nbformat") != 4 or type(nb.get("nbformat_minor")) is not int:
            raise ValueError("not a notebook of nbformat version 4")
        get_validator(4, min(max(nb["nbformat_minor"], 0), 5), name="fastjsonschema").validate(nb)
    except Exception as e:  # noqa: BLE001 (whatever is wrong with it: that submission's reason)
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        return f"{shown(Path(path).name)} could not be read as a notebook ({shown(first)[1:-1]})"
    return ""


# ---------------------------------------------------------------- plain nbgrader


def guard():
    """Have nbgrader's Autograde refuse a submission that `problem` refuses, before it copies or reads
    anything of it: the submission is graded as a notebook saying why, with 0 points. Of one it grades, it
    copies into autograded/ only what the assignment declares (`declared_by`), and logs what it leaves out."""
    from nbgrader.converters.autograde import Autograde
    from nbgrader.converters.base import BaseConverter

    if getattr(Autograde, "_intake_guarded", False):
        return
    init_destination, init_assignment, convert = Autograde.init_destination, Autograde.init_assignment, Autograde.convert_single_notebook
    copy_files = BaseConverter.init_assignment  # what Autograde.init_assignment calls first: copies every file but notebooks

    def declared_files_only(self, assignment_id, student_id):
        if not isinstance(self, Autograde):
            return copy_files(self, assignment_id, student_id)
        _copy_declared(self, assignment_id, student_id)

    def refusal(self, assignment_id, student_id):
        folder, limits = Path(self._format_source(assignment_id, student_id)), Limits(parent=self)
        notebooks = sorted(name for name in os.listdir(folder) if name.endswith(".ipynb")) if folder.is_dir() else []
        return problem(folder, limits) or next(filter(None, (notebook_problem(folder / n, limits) for n in notebooks)), "")

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
    BaseConverter.init_assignment = declared_files_only


def _copy_declared(converter, assignment_id, student_id):
    """nbgrader's copy of a submission's files but notebooks into autograded/ (BaseConverter.init_assignment),
    of those the assignment declares only; what it leaves out is logged."""
    from nbgrader.utils import find_all_files

    source, dest = Path(converter._format_source(assignment_id, student_id)), Path(converter._format_dest(assignment_id, student_id))
    takes, ignore = declared_by(converter.coursedir, assignment_id), converter.coursedir.ignore
    for filename in find_all_files(str(source), ignore + ["*.ipynb"]):
        rel = Path(filename).relative_to(source)
        if takes.takes(rel.as_posix()):
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            (dest / rel).unlink(missing_ok=True)
            shutil.copy(filename, dest / rel)
    why = left_out(source, takes, Limits(parent=converter), ignore)
    if why:
        converter.log.warning("%s/%s: %s", student_id, assignment_id, why)


def _grade_refused(converter, assignment_id, student_id, reason):
    """0 for every cell of every notebook of the assignment, and in place of each notebook one that says why."""
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
