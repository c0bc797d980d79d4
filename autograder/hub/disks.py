"""Each student's disk: a file system of its own and of a fixed size, holding all she can store that outlives her server.

    STATE/disks/NAME.img    an ext4 image of --disk bytes, sparse: it takes on the machine's disk what she stores
    STATE/volumes/NAME      where it is mounted (nosuid, nodev), root's, holding
        home/               her home (hers, 0700), mounted again at her account's home, where her server sees it
        inbound/            her inbound: what her server sees as the exchange's inbound folder (the instructor's, 3733)

So her home and her submissions together stop at --disk, whatever she writes; her /tmp, /var/tmp and /dev/shm are
in her memory (autograder/hub/wall.py). Nothing of hers is on the file system of the hub's database, the gradebook
or the instructor's home. The kernel here has no disk quotas (CONFIG_QUOTA), which would bound a user on a shared
file system; an image a student is the one way to bound her that every Linux offers to root. Where the machine lends
no loop device (a container), her volume is a plain folder, her disk is not limited, and `make hub` says so.
"""
from __future__ import annotations

import ctypes
import os
import pwd
import re
import shutil
import subprocess
import time
from pathlib import Path

UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


class DiskError(Exception):
    """What stops a student's disk from being made or mounted, said so that the person running make hub can act."""


def parse_size(text):
    """'2G', '512M', '1073741824' as bytes, as JupyterHub reads mem_limit."""
    text = str(text).strip().upper().removesuffix("B")
    number, unit = (text[:-1], text[-1]) if text[-1:] in UNITS and text[-1:] else (text, "")
    try:
        value = float(number) * UNITS[unit]
    except (ValueError, KeyError):
        raise DiskError(f"{text!r} is not a size: write it as 2G, 512M or a number of bytes") from None
    if value <= 0:
        raise DiskError(f"{text!r} is not a size above zero")
    return int(value)


def shown(size):
    for unit in ("T", "G", "M", "K"):
        if size >= UNITS[unit] and size % UNITS[unit] == 0:
            return f"{size // UNITS[unit]}{unit}"
    return f"{size} bytes"


def can_limit():
    """'' where this machine can give each student a disk of its own (root, loop devices, mkfs.ext4); else why not."""
    if os.geteuid() != 0:
        return "only root can mount a disk a student"
    for tool in ("mkfs.ext4", "losetup", "mount", "umount"):
        if not shutil.which(tool):
            return f"`{tool}` is not installed (Debian: e2fsprogs, mount)"
    if not Path("/dev/loop-control").exists():
        return "this machine lends no loop device (/dev/loop-control; a container usually does not)"
    return ""


class Volumes:
    """The students' disks of a class: `root` holds the images and their mount points."""

    def __init__(self, state):
        self.images, self.mounts = Path(state, "disks"), Path(state, "volumes")

    def volume(self, student):
        return self.mounts / student

    def home(self, student):
        return self.volume(student) / "home"

    def inbound(self, student):
        return self.volume(student) / "inbound"

    def image(self, student):
        return self.images / f"{student}.img"

    def limited(self, student):
        return mounted(self.volume(student))

    def room_needed(self, students, size):
        """Bytes the images of `students` may still take on the state's file system when every one fills up."""
        return sum(size - (self.image(s).stat().st_blocks * 512 if self.image(s).exists() else 0) for s in students)

    def prepare(self, students, size, home_of, owner_of_inbound, say=print):
        """Each student's disk made (the first time), mounted, and her home and inbound on it; her account's home
        (`home_of(student)`) made the mount point of her volume's home. Returns '' or why disks are not limited."""
        why = can_limit()
        for folder in (self.images, self.mounts):
            folder.mkdir(parents=True, exist_ok=True)
            os.chown(folder, 0, 0)
        os.chmod(self.images, 0o700)
        os.chmod(self.mounts, 0o755)
        if not why:
            free = shutil.disk_usage(self.images).free
            needed = self.room_needed(students, size)
            if needed > free:
                raise DiskError(f"{len(students)} students' disks of {shown(size)} each may take {needed / 2**30:.1f} GB more "
                                f"of {self.images}'s file system, which has {free / 2**30:.1f} GB free: students who filled "
                                "their disks would fill this machine's. Give a smaller --disk, or a --state on a larger disk")
        for student in students:
            volume = self.volume(student)
            volume.mkdir(exist_ok=True)
            if why and self.image(student).exists():
                raise DiskError(f"{student}'s disk {self.image(student)} holds her files and cannot be mounted: {why}")
            if not why and not self.limited(student):
                self._mount(student, size, say)
            os.chown(volume, 0, 0)
            os.chmod(volume, 0o755)
            self._folders(student, home_of(student), owner_of_inbound)
        return why

    def _mount(self, student, size, say):
        image = self.image(student)
        if not image.exists():
            say(f"making {student}'s disk ({shown(size)}, {image})")
            with open(image, "wb") as f:
                f.truncate(size)
            os.chmod(image, 0o600)
            _run(["mkfs.ext4", "-q", "-F", "-m", "0", "-E", "root_owner=0:0", "-L", student[:16], str(image)])
        _run(["mount", "-o", "loop,nosuid,nodev", str(image), str(self.volume(student))])

    def _folders(self, student, home, owner_of_inbound):
        pw = pwd.getpwnam(student)
        mine, home = self.home(student), Path(home)
        if not mine.exists():
            mine.mkdir()
            if home.is_dir() and not mounted(home):  # what useradd put there (/etc/skel), or an earlier class's files
                _run(["cp", "-a", "--no-target-directory", str(home), str(mine)])
        os.chown(mine, pw.pw_uid, pw.pw_gid)
        os.chmod(mine, 0o700)
        inbound = self.inbound(student)
        inbound.mkdir(exist_ok=True)
        uid, gid = owner_of_inbound
        os.chown(inbound, uid, gid)
        os.chmod(inbound, 0o3733)  # autograder.grading.exchange.INBOUND_MODE: she may add, not list
        home.mkdir(parents=True, exist_ok=True)
        if not mounted(home):
            _run(["mount", "--bind", str(mine), str(home)])

    def unmount(self, students, home_of, say=print):
        """Each student's home, then her volume, unmounted, and her image's loop device detached. Returns
        {student: why} for each disk still in use: a student whose home is busy keeps her volume mounted too."""
        kept = {}
        for student in students:
            why = unmount_all(Path(home_of(student)), say) or unmount_all(self.volume(student), say)
            why = why or self._detach(student, say)
            if why:
                kept[student] = why
        return kept

    def _detach(self, student, say):
        """'' once no loop device holds the student's image, or why one still does. `mount -o loop` sets autoclear,
        which detaches it at the last unmount; a device left attached (by hand, or by an older mount) is detached.
        A copy of her file system that another mount namespace holds is unmounted there first (see unmount_copies)."""
        image = self.image(student)
        for device in loop_devices(image):
            why = unmount_copies(device, say)
            if why:
                return f"{image}'s file system {why}"
        for _ in range(20):
            devices = loop_devices(image)
            if not devices:
                return ""
            for device in devices:  # on a device still open this only sets autoclear: it is gone once nothing holds it
                subprocess.run(["losetup", "-d", device], capture_output=True)
            time.sleep(0.1)
            for device in set(devices) - set(loop_devices(image)):
                say(f"detached {device} from {image}")
        return f"{image} is still attached to {' '.join(devices)} (losetup -j {image}; `fuser -v {devices[0]}` names " \
               "the processes holding it open)"


def mount_points():
    """Every mount point in this mount namespace, as /proc/self/mountinfo lists them (one mounted twice, twice)."""
    with open("/proc/self/mountinfo") as f:
        return [_unescaped(line.split()[4]) for line in f]


def _unescaped(field):  # mountinfo writes a space as \040, a tab \011, a newline \012, a backslash \134
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), field)


def mounted(path):
    """True when `path` is a mount point: also a bind mount of a folder of the same file system, which
    os.path.ismount does not see."""
    return os.path.realpath(path) in mount_points()


def mounts_under(folder):
    """The mount points at or below `folder`."""
    top = os.path.realpath(folder)
    return sorted({p for p in mount_points() if p == top or p.startswith(top.rstrip("/") + "/")})


def loop_devices(image):
    """The loop devices backed by `image` ([] when it does not exist)."""
    if not Path(image).exists():
        return []
    done = subprocess.run(["losetup", "--noheadings", "--output", "NAME", "--associated", str(image)],
                          capture_output=True, text=True)
    return done.stdout.split()


CLONE_NEWNS, UMOUNT_NOFOLLOW = 0x00020000, 8
LIBC = ctypes.CDLL(None, use_errno=True)


def copies_elsewhere(device):
    """[(pids, mount points)] of `device`'s file system in each mount namespace other than this one, with the pids of
    that namespace's processes. A namespace made (`unshare -m`, a container) while her disk was mounted holds a copy
    of the mount, which an unmount here does not reach where the mounts do not propagate (a machine without systemd
    makes them private)."""
    rdev = os.stat(device).st_rdev
    number, ours, found = f"{os.major(rdev)}:{os.minor(rdev)}", os.stat("/proc/self/ns/mnt").st_ino, []
    for namespace, pids in _namespaces().items():
        if namespace == ours:
            continue
        try:
            lines = Path(f"/proc/{pids[0]}/mountinfo").read_text().splitlines()
        except OSError:  # its process ended
            continue
        points = [_unescaped(line.split()[4]) for line in lines if line.split()[2] == number]
        if points:
            found.append((pids, points))
    return found


def _namespaces():
    """{a mount namespace (its inode): the pids of its processes}, for every process."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit():
                found.setdefault(os.stat(entry / "ns" / "mnt").st_ino, []).append(int(entry.name))
        except OSError:  # a process that ended
            continue
    return found


def unmount_copies(device, say):
    """'' once no other mount namespace mounts `device`, each copy unmounted there (never lazily), or why some still
    do, with the processes of each such namespace. The unmount runs in a forked child that enters the namespace and
    calls umount2 itself: nothing from that namespace's files is run as root."""
    kept = []
    for pids, points in copies_elsewhere(device):
        pid = pids[0]
        try:
            fd = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY)
        except OSError:
            continue  # the namespace ended with its last process, and its copy with it
        try:
            failed = _unmount_in(fd, sorted(points, key=len, reverse=True), os.stat(device).st_rdev)
        finally:
            os.close(fd)
        if failed:
            path, code = failed
            why = os.strerror(code) if code else "another mount covers it there"
            kept.append(f"at {path} in the mount namespace of process {pid} ({_comm(pid)}): {why}; "
                        f"that namespace's processes: {' '.join(f'{p} ({_comm(p)})' for p in pids[:10])}")
            continue
        for path in points:
            say(f"unmounted {path} in the mount namespace of process {pid} ({_comm(pid)})")
    return f"is still mounted {', and '.join(kept)}" if kept else ""


def _unmount_in(fd, points, device):
    """None once every one of `points` is unmounted in the mount namespace `fd`, or (the point, errno) that was not
    (errno 0: what is mounted on top there is not the file system of `device`, a device number, and is left alone)."""
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child alone enters the namespace: this process stays in its own
        os.close(read)
        failed = b""
        try:
            if LIBC.setns(fd, CLONE_NEWNS) != 0:
                failed = f"{points[0]}\0{ctypes.get_errno()}".encode()
            for path in points:
                if failed:
                    break
                try:
                    code = 0 if os.lstat(path).st_dev != device else None
                except OSError as e:
                    code = e.errno
                if code is None and LIBC.umount2(os.fsencode(path), UMOUNT_NOFOLLOW) != 0:
                    code = ctypes.get_errno()
                if code is not None:
                    failed = os.fsencode(path) + f"\0{code}".encode()
            os.write(write, failed)
        finally:
            os._exit(0)
    os.close(write)
    with open(read, "rb") as said:
        failed = said.read()
    os.waitpid(child, 0)
    if not failed:
        return None
    path, code = failed.rsplit(b"\0", 1)
    return os.fsdecode(path), int(code)


def _comm(pid):
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "ended"


def unmount_all(path, say):
    """'' once `path` is no mount point (each mount stacked on it taken off), or why it still is one. Never lazily:
    a file system still in use stays mounted, and its image and folder stay with it."""
    for _ in range(10):
        if not mounted(path):
            return ""
        done = subprocess.run(["umount", str(path)], capture_output=True, text=True)
        if done.returncode:
            why = done.stderr.strip().rstrip(".") or f"umount exited {done.returncode}"
            return f"{path} is still mounted ({why}; `fuser -vm {path}` names the processes using it)"
        say(f"unmounted {path}")
    return f"{path} is still mounted after 10 unmounts"


def _run(cmd):
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise DiskError(f"{' '.join(cmd)} failed ({done.returncode}): {(done.stdout + done.stderr).strip()[-1000:]}")
    return done
