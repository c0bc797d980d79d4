"""`make hub`: a class on this machine through a real JupyterHub, on http://localhost:PORT/ (as root).

    python -m autograder.hub [--students N] [--port 8000] [--cpu 1] [--mem 3G] [--pids 512] [--disk 2G]
                             [--state /srv/seqcourse-hub]
    python -m autograder.hub --remove [--state /srv/seqcourse-hub]

Makes (the first time) or reuses (later) the class: an instructor and N students as Unix accounts, their
environments, nbgrader's exchange and the hub's proxy (autograder/hub/classroom.py); prints where to log in and
as whom; runs the hub until Ctrl-C, which stops it and every server it started. The hub stops by itself, and this
command exits 1 with the reason, when anyone but its proxy holds its port (autograder/hub/proxy.py).

With --remove (`make hub-remove`): takes the class down, its accounts and homes, the students' disks and the class's
folder, saying what it removed and what it could not (then exiting 1); refused while the class's hub runs.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
from pathlib import Path

from autograder.hub import cgroups, classroom, proxy, spawner, wall
from autograder.hub.disks import DiskError, parse_size, shown
from autograder.hub.spawner import TRIAL

CONFIG = Path(__file__).with_name("jupyterhub_config.py")


def parse(argv):
    p = argparse.ArgumentParser(prog="python -m autograder.hub", description=__doc__.splitlines()[0])
    p.add_argument("--students", type=int, default=3, help="students in the class (default 3; more can be added later)")
    p.add_argument("--port", type=int, default=8000, help="the hub's port on 127.0.0.1 (default 8000)")
    p.add_argument("--cpu", type=float, default=1.0, help="CPUs each user's server may use (default 1)")
    p.add_argument("--mem", default="3G", help="memory each student's server may use, its /tmp and /dev/shm included "
                                                "(default 3G)")
    p.add_argument("--pids", type=int, default=512, help="processes and threads each student's server may run at once "
                                                         "(default 512)")
    p.add_argument("--disk", default="2G", help="what each student may store, her home and her submissions (default 2G)")
    p.add_argument("--state", default="/srv/seqcourse-hub", help="the class's folder (default /srv/seqcourse-hub)")
    p.add_argument("--prefix", default="seq-", help="the accounts' names begin with this (default seq-)")
    p.add_argument("--home-base", default="/home", help="the accounts' homes are made under this (default /home)")
    p.add_argument("--prepare-only", action="store_true", help="make the class, print the logins, start no hub")
    p.add_argument("--remove", action="store_true", help="take the class at --state down: its accounts and homes, the "
                                                         "students' disks, the class's folder (make hub-remove)")
    args = p.parse_args(argv)
    if not 1 <= args.students <= 500:
        p.error("--students must be between 1 and 500")
    if not 0 < args.cpu <= os.cpu_count():
        p.error(f"--cpu must be above 0 and at most this machine's {os.cpu_count()} CPUs")
    if not 64 <= args.pids <= 100_000:
        p.error("--pids must be between 64 and 100000 (a server and a kernel need about 60)")
    try:
        args.disk_bytes = parse_size(args.disk)
        args.mem_bytes = parse_size(args.mem)
    except DiskError as e:
        p.error(str(e))
    if args.disk_bytes < 32 * 2**20:
        p.error("--disk must be at least 32M")
    return args


def logins(room, port):
    """The table `make hub` prints: where, who, password, role."""
    rows = [f"JupyterHub for the class: http://{classroom.HOST}:{port}/", TRIAL, ""]
    rows += [f"  {user:<24} {room.passwords[user]:<16} {room.role(user)}" for user in room.users]
    return "\n".join(rows)


def walls(room, args):
    """What bounds each student, in the lines `make hub` prints after the logins."""
    disk = (f"her home and her submissions on a disk of her own, {shown(room.disk)}" if not room.disk_note else
            f"her disk is NOT limited ({room.disk_note})")
    return (f"Each student's server: {args.cpu:g} CPU, {args.mem} of memory (her /tmp, /var/tmp and /dev/shm included), "
            f"{args.pids} processes; {disk}; on her own origin (http://NAME.{classroom.HOST}:{args.port}/), seeing only her "
            "home, the exchange's released work and her own inbound.")


def hub_env(room, args):
    """The hub's settings (jupyterhub_config.py); its own and its proxy's API on ports free now, not 8081 and 8001."""
    api, proxy_api = proxy.free_ports(2, besides={args.port})
    return os.environ | {"SEQCOURSE_HUB_STATE": str(room.state), "SEQCOURSE_HUB_PORT": str(args.port),
                         "SEQCOURSE_HUB_CPU": str(args.cpu), "SEQCOURSE_HUB_MEM": str(args.mem_bytes),
                         "SEQCOURSE_HUB_PIDS": str(args.pids),
                         "SEQCOURSE_HUB_API_PORT": str(api), "SEQCOURSE_HUB_PROXY_PORT": str(proxy_api)}


def leftovers(hub_pid, room):
    """After the hub: every process still in a cgroup it made, or of a student's account, or running the class's
    proxy, killed; the groups removed. Returns what could not be ended, each in a line."""
    for pid in classroom.end_running(room.proxy):
        print(f"make hub: the hub's proxy (pid {pid}) outlived it, and was ended", file=sys.stderr, flush=True)
    left = [f"the cgroup {group} could not be removed: {n} processes are still in it" for group, n in cgroups.leftovers(hub_pid)]
    alive = classroom.end_processes(room.students)
    return left + ([f"{len(alive)} processes of the students' accounts would not end: {' '.join(alive[:10])}"] if alive else [])


def stop_with_parent():
    """In the hub's process, before it starts: SIGTERM when this command dies, even by `kill -9`, so that no hub
    outlives it (JupyterHub stops its servers and its proxy on SIGTERM)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux


def remove(state):
    """`make hub-remove`: the class at `state` taken down; exits 1 when anything is left, saying what."""
    if os.geteuid() != 0:
        sys.exit("make hub-remove: removing a class's accounts and disks needs root (sudo make hub-remove)")
    if not (Path(state) / "hub" / "class.json").exists():
        sys.exit(f"make hub-remove: there is no class at {state} (no hub/class.json there): give its --state")
    try:
        left = classroom.remove(classroom.Classroom.load(state))
    except classroom.ClassError as e:
        sys.exit(f"make hub-remove: {e}")
    for line in left:
        print(f"make hub-remove: could not remove {line}", file=sys.stderr, flush=True)
    sys.exit(1 if left else 0)


def main(argv=None):
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.remove:
        remove(args.state)
    try:
        room = classroom.prepare(args.state, args.students, args.prefix, args.home_base, disk=args.disk_bytes)
    except classroom.ClassError as e:
        sys.exit(f"make hub: {e}")
    walled = wall.problem(room.students[0])
    if walled:
        sys.exit(f"make hub: {walled}")
    print(logins(room, args.port), flush=True)
    print("\n" + walls(room, args), flush=True)
    widened = wall.widen_file_table(len(room.students), args.pids, spawner.FILES)
    if widened:
        print(widened, flush=True)
    if args.prepare_only:
        return
    print("\nCtrl-C stops the hub and every server it started.", flush=True)
    refused = proxy.refusal(room.proxy_pid_file)
    refused.unlink(missing_ok=True)
    # in a session of its own, so that Ctrl-C reaches this process alone, which asks the hub once to stop
    hub = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(CONFIG)], cwd=room.hub_dir,
                           env=hub_env(room, args), start_new_session=True, preexec_fn=stop_with_parent)
    stop = lambda *_: hub.poll() is None and hub.send_signal(signal.SIGTERM)  # noqa: E731
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        hub.wait()  # JupyterHub, told to stop, stops every user's server and its proxy, then exits
    finally:
        stop()
        hub.wait()
        left = leftovers(hub.pid, room)
        for line in left:
            print(f"make hub: {line}", file=sys.stderr, flush=True)
        if not left:
            print("The hub and every server it started have stopped.", flush=True)
    if refused.exists():
        sys.exit(f"make hub: {refused.read_text().strip()}")
    sys.exit(0 if hub.returncode in (0, -signal.SIGINT, -signal.SIGTERM) else hub.returncode)


if __name__ == "__main__":
    main()
