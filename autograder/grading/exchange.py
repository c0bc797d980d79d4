"""nbgrader's exchange, believing the file system and never a folder's name: who submitted, and when.

A student's `nbgrader submit` creates <root>/<course>/inbound/<id>+<assignment>+<time>+<random>, a
folder every student may create. nbgrader's collect takes the student id and the time from that
name, and builds a glob of the id: so another Unix user could submit a blank notebook as a
classmate, dated 2099, and win over every later resubmission of theirs. Here:

- who: the Unix account owning the entry (its descriptor's st_uid, through pwd). An entry whose
  name claims another id is skipped with a warning naming both, never collected: not under the
  claimed id, which would be the forgery itself, and not under its owner's, since a name that lies
  says nothing of what its owner meant to hand in (their own submissions are collected as theirs).
  So an instructor submitting for a student by `--student` is skipped too: they may place the work
  in submitted/<id>/ themselves. A claimed id outside `ids.PATTERN` is refused with its reason. The
  inbound is listed once and names are compared exactly: no id ever reaches a glob. This enforces
  nbgrader's check_owner, which by itself only warns, whatever `check_owner` is set to.
- when: the latest st_ctime of the entry and of everything in it (`intake.last_change`). Its owner
  can set mtime (utime) but not ctime, and a ctime moves only forward, so a submission is never
  dated before its last byte changed. This picks a student's latest submission, and is written into
  the collected copy's timestamp.txt, which is what nbgrader's late penalty and `collect --update`
  read; the name's time and the student's own timestamp.txt are not believed. (Feedback still
  reaches the student: nbgrader finds it by submission_secret.txt, not by the time.)
- where: the inbound must be sticky (no one removes or renames another's entry) and not listable by
  students (no one learns another's entry's name, inside which nbgrader's submit lets anyone write).
  `ReleaseAssignment` makes it so (INBOUND_MODE) whenever the instructor releases; `Collect` warns
  where it is not. `Collect.student_inbounds` adds folders of the same kind, each one student's, that
  her server sees in the inbound's place (`make hub` puts each on her own disk, so that what she
  submits counts in what she may store).
"""
from __future__ import annotations

import datetime
import os
import pwd
import shutil
import stat
from collections import defaultdict

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.exchange.default.collect import ExchangeCollect
from nbgrader.exchange.default.release_assignment import ExchangeReleaseAssignment
from nbgrader.utils import parse_utc
from traitlets import List, Unicode

from autograder.grading import ids, intake
from autograder.grading.limits import Limits

# nbgrader's inbound (0o2733: students may create entries, not list them; the setgid bit gives them
# the instructors' group), made sticky: an entry may be removed or renamed by its owner only
INBOUND_MODE = stat.S_ISVTX | stat.S_ISGID | 0o733


def inbound_problem(st, groupshared=False):
    """'' when an inbound folder of this stat keeps students' submissions apart; else why not."""
    why = []
    if st.st_uid != os.geteuid() and not groupshared:
        owner = _account(st.st_uid)
        why.append(f"it belongs to {intake.shown(owner) if owner else f'uid {st.st_uid}'}, who may read, change and remove every submission")
    if not st.st_mode & stat.S_ISVTX:
        why.append("it has no sticky bit, so any student may remove or rename another's submission")
    if st.st_mode & stat.S_IROTH or (st.st_mode & stat.S_IRGRP and not groupshared):
        why.append("students may list it, and so write into another's submission (nbgrader's submit leaves it writable)")
    return "; ".join(why)


def secure_inbound(path, log, groupshared=False):
    """Give the inbound folder INBOUND_MODE's protections (the sticky bit, no listing by students),
    keeping the rest of its mode; warn of what cannot be mended here."""
    st = os.stat(path, follow_symlinks=False)
    mode = stat.S_IMODE(st.st_mode)
    secured = (mode | stat.S_ISVTX) & ~stat.S_IROTH & ~(0 if groupshared else stat.S_IRGRP)
    if secured != mode:
        try:
            os.chmod(path, secured, follow_symlinks=False)
            log.info("The exchange's inbound %s is now mode %o: sticky, not listable by students", path, secured)
        except OSError as e:
            log.warning("Could not chmod %o the exchange's inbound %s: %s", secured, path, e.strerror)
    why = inbound_problem(os.stat(path, follow_symlinks=False), groupshared)
    if why:
        log.warning("The exchange's inbound %s is not safe: %s", path, why)


class ReleaseAssignment(ExchangeReleaseAssignment):
    """nbgrader's release_assignment, leaving the course's inbound sticky and not listable by students,
    whether release created it or found it (an exchange set up before this course's settings)."""

    def init_dest(self):
        super().init_dest()
        secure_inbound(self.inbound_path, self.log, self.coursedir.groupshared)

    def ensure_root(self):
        """nbgrader makes the exchange's top folder writable by all; one the instructor owns and others cannot write
        (`make hub`'s: students write only into an inbound) is kept as it is."""
        try:
            st = os.stat(self.root)
        except OSError:
            return super().ensure_root()
        if st.st_uid != os.geteuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return super().ensure_root()


class Collect(ExchangeCollect):
    """nbgrader's collect, taking each submission's student id from the Unix account owning it and its
    time from the file system (see the module's docstring), and copying it out of the exchange with
    `intake.copy`: nothing is followed, at most the limits are read, only the student's own files of what
    the assignment declares are taken (`intake.declared_by`: never a `.py` beside the notebook), and what is
    refused or left out is named for `grade` and `autograde`."""

    student_inbounds = List(Unicode(), help="More inbound folders, each one student's (make hub's, on her own disk); "
                            "each must be the instructor's, sticky and not listable, like the course's inbound").tag(config=True)

    def init_src(self):
        if self.coursedir.course_id == "":
            self.fail("No course id specified. Re-run with --course flag.")
        wanted = self.coursedir.student_id
        if wanted not in ("", "*") and not ids.valid(wanted):
            self.fail(ids.refusal(wanted))
        self.course_path = os.path.join(self.root, self.coursedir.course_id)
        self.inbound_path = os.path.join(self.course_path, "inbound")
        limits = Limits(parent=self)
        records = self._records_in(self.inbound_path, limits, required=True)
        for folder in self.student_inbounds:
            records += self._records_in(folder, limits)
        if wanted not in ("", "*"):
            records = [r for r in records if r["username"] == wanted]
        self.src_records = self._latest(records)
        self._records = {r["filename"]: r for r in self.src_records}
        self._takes = intake.declared_by(self.coursedir, self.coursedir.assignment_id)

    def _records_in(self, path, limits, required=False):
        """The records of this assignment's submissions in the inbound folder `path`, each under its full path."""
        try:
            inbound = os.open(path, intake.NOFOLLOW_FOLDER)
        except OSError as e:
            if required:
                self.fail(f"Course not found, or no folder one may read: {path} ({e.strerror})")
            self.log.warning("The inbound %s is not read: %s", path, e.strerror)
            return []
        try:
            why = inbound_problem(os.fstat(inbound), self.coursedir.groupshared)
            if why:
                self.log.warning("The exchange's inbound %s is not safe: %s. `nbgrader release_assignment` with the course's "
                                 "configuration mends its mode, or chmod %o it.", path, why, INBOUND_MODE)
            found = [r for r in (self._record(inbound, name, limits) for name in os.listdir(inbound)) if r]
        finally:
            os.close(inbound)
        for record in found:  # nbgrader's copy_files joins the inbound's path with this: an absolute path stays itself
            record["filename"] = os.path.join(path, record["filename"])
        return found

    def _record(self, inbound, name, limits):
        """The record of the inbound entry `name` if it is a submission of this assignment by the account
        its name claims, timed by the file system; else None, with a warning where it claims to be one."""
        claimed, _, rest = name.partition("+")
        assignment, plus, _ = rest.partition("+")
        if assignment != self.coursedir.assignment_id or not plus:
            return None
        if not ids.valid(claimed):
            self.log.warning("%s is not collected: %s", intake.shown(name), ids.refusal(claimed))
            return None
        try:
            entry = os.open(name, intake.NOFOLLOW_FOLDER, dir_fd=inbound)
        except OSError:
            self.log.warning("%s is not collected: it is no folder (a link?)", intake.shown(name))
            return None
        try:
            uid = os.fstat(entry).st_uid
            owner = _account(uid)
            if owner != claimed:
                self.log.warning("%s is not collected: it claims to be %s's submission, but the account %s owns it",
                                 intake.shown(name), intake.shown(claimed), intake.shown(owner) if owner else f"with uid {uid}")
                return None
            changed = intake.last_change(entry, limits, self.coursedir.ignore)
        finally:
            os.close(entry)
        return {"username": owner, "filename": name, "timestamp": parse_utc(_stamp(changed)), "uid": uid}

    def _latest(self, records):
        """Each student's latest submission, or with before_duedate their latest before the due date
        if there is one (nbgrader's rule, on the file system's times)."""
        with Gradebook(self.coursedir.db_url, self.coursedir.course_id) as gb:
            try:
                self.duedate = gb.find_assignment(self.coursedir.assignment_id).duedate
            except MissingEntry:
                self.duedate = None
        by_student = defaultdict(list)
        for record in records:
            by_student[record["username"]].append(record)
        picked = []
        for found in by_student.values():
            found.sort(key=lambda r: r["timestamp"], reverse=True)
            in_time = [r for r in found if self.duedate is not None and r["timestamp"] <= self.duedate]
            picked.append(in_time[0] if self.before_duedate and in_time else found[0])
        return picked

    def do_copy(self, src, dest, log=None):
        record = self._records[src]
        copied = intake.copy(src, dest, Limits(parent=self), self._takes, ignore=self.coursedir.ignore, owner=record["uid"])
        for why in filter(None, (copied.reason, copied.left_out)):
            self.log.warning("%s: %s", dest, why)
        changed = max(copied.changed_ns, _nanoseconds(record["timestamp"]))
        stamp = os.path.join(dest, "timestamp.txt")
        if os.path.isdir(stamp) and not os.path.islink(stamp):
            shutil.rmtree(stamp)  # a folder of the student's by that name; the copy holds no link
        with open(stamp, "w") as fh:
            fh.write(_stamp(changed))


def _account(uid):
    """The name of the Unix account `uid`, or None."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


def _stamp(ns):
    """A time in nanoseconds since the epoch as nbgrader writes timestamp.txt (its default format, in UTC),
    cut to the microsecond in integers, so that `_nanoseconds` of its parse_utc never passes `ns`."""
    when = datetime.datetime.fromtimestamp(ns // 10**9, datetime.timezone.utc).replace(microsecond=ns // 1000 % 10**6)
    return when.strftime("%Y-%m-%d %H:%M:%S.%f %Z")


def _nanoseconds(utc):
    """A naive UTC datetime (as parse_utc gives) in nanoseconds since the epoch."""
    return (utc - datetime.datetime(1970, 1, 1)) // datetime.timedelta(microseconds=1) * 1000
