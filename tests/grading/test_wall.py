"""A student's wall, piece by piece, against the real kernel: the seccomp filter, her network and its relay, her
devpts. The whole class, with every attack from her own terminal, is tests/grading/test_hub.py."""
import errno
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

from autograder.hub import proxy, relay, seccomp, wall

if not shutil.which("bwrap") or not sys.platform.startswith("linux"):
    pytest.skip("a student's wall is bubblewrap's, on Linux", allow_module_level=True)

WALL = ["bwrap", "--unshare-user", "--disable-userns", "--unshare-pid", "--unshare-net", "--die-with-parent",
        "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]

PROBE = r"""
import ctypes, errno, os, subprocess
libc = ctypes.CDLL(None, use_errno=True)
def code(result):
    return ctypes.get_errno() if result == -1 else 0
print('unshare', code(libc.unshare(0x40000000)))
print('mount', code(libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)))
print('keyctl', code(libc.syscall(250 if os.uname().machine == 'x86_64' else 219, 0, 0)))
print('clone3', code(libc.syscall(435, 0, 0)))
print('fork', subprocess.run(['true']).returncode)
print('nested', subprocess.run(['unshare', '-U', 'true'], capture_output=True).returncode)
"""


@pytest.mark.skipif(seccomp.program() is None, reason="the filter describes x86-64 and AArch64 only")
def test_the_filter_refuses_namespaces_mounts_and_the_keyring_and_lets_a_notebook_fork():
    fd = seccomp.memfd()
    try:
        done = subprocess.run([*WALL, "--seccomp", str(fd), "--", sys.executable, "-c", PROBE], pass_fds=(fd,),
                              capture_output=True, text=True, timeout=120)
    finally:
        os.close(fd)
    got = dict(line.split() for line in done.stdout.split("\n") if line)
    assert got == {"unshare": str(errno.EPERM), "mount": str(errno.EPERM), "keyctl": str(errno.EPERM),
                   "clone3": str(errno.ENOSYS), "fork": "0", "nested": "1"}, (done.stdout, done.stderr)


def test_the_filter_is_one_rule_a_system_call_whatever_the_architecture():
    x86, arm = seccomp.program("x86_64"), seccomp.program("aarch64")
    assert len(x86) % 8 == 0 and len(arm) == len(x86) - 16  # x86-64's two more: the x32 ABI refused
    assert seccomp.program("riscv64") is None


@pytest.fixture
def walled():
    """A server in a network of its own (an echo of what it is sent, prefixed), a server on the machine standing for
    the hub's API, and the relay between them."""
    port, api = proxy.free_ports(2)
    hub = socket.socket()
    hub.bind(("127.0.0.1", api))
    hub.listen(128)
    inside = (f"import socket, threading\ns = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen(128)\n"
              "def serve(c):\n    c.sendall(b'hers:' + c.recv(100)); c.close()\n"
              "while True:\n    c, _ = s.accept(); threading.Thread(target=serve, args=(c,)).start()\n")
    server = subprocess.Popen([*WALL, "--", sys.executable, "-c", inside])
    joined = subprocess.Popen([sys.executable, "-m", "autograder.hub.relay", str(server.pid), str(port), str(api)])
    try:
        yield server, joined, port, api, hub
    finally:
        for proc in (server, joined):
            proc.kill()
            proc.wait()
        hub.close()


def ask(port, text=b"hello"):
    for _ in range(600):  # the relay listens once her namespace is up
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=30) as c:
                c.sendall(text)
                return c.recv(100)
        except ConnectionRefusedError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listened on {port}")


def in_her_network(server, code):
    """`code` run in the namespaces of `server`'s wall (nsenter as root)."""
    pid = relay.namespace_of(server.pid)
    return subprocess.run(["nsenter", "-t", str(pid), "-n", sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("nsenter"), reason="the relay enters her network as root")
def test_the_relay_carries_the_proxy_to_her_server_and_her_server_to_the_hub_and_no_more(walled):
    server, joined, port, api, hub = walled
    assert ask(port) == b"hers:hello"  # the proxy's door, on the machine's loopback
    # the hub's door, in her network: at most relay.MAX_OPEN connections at once reach the machine
    opened = in_her_network(server, f"import socket, time\nheld = []\nfor _ in range({relay.MAX_OPEN + 20}):\n"
                                    f"    held.append(socket.create_connection(('127.0.0.1', {api})))\n"
                                    "time.sleep(3)\nprint(len(held))")
    hub.settimeout(5)
    reached = []
    try:
        while True:
            reached.append(hub.accept()[0])
    except socket.timeout:
        pass
    assert opened.stdout.strip() == str(relay.MAX_OPEN + 20), opened.stderr
    assert len(reached) == relay.MAX_OPEN
    # and nothing else of the machine's: a port held on the machine is free in her network
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = in_her_network(server, f"import socket\ns = socket.socket()\ns.bind(('127.0.0.1', {held.getsockname()[1]}))\n"
                                       "s.listen()\nprint('bound')")
    assert taken.stdout.strip() == "bound", taken.stderr
    server.kill()
    server.wait()
    assert joined.wait(timeout=60) == 0  # the relay ends with her namespace


@pytest.mark.skipif(os.geteuid() != 0, reason="a devpts of her own is mounted by root")
def test_her_devpts_stops_at_her_share(tmp_path):
    room = type("Room", (), {"state": tmp_path, "students": ["a"] * 1000})()
    folder = wall.mount_ptys(room, "a")
    try:
        done = subprocess.run([*WALL, "--dev-bind", str(folder), "/dev/pts", "--", sys.executable, "-c",
                               "import os\nn = 0\ntry:\n    while True:\n        os.openpty(); n += 1\n"
                               "except OSError as e:\n    print(n, e.strerror)"], capture_output=True, text=True, timeout=120)
    finally:
        subprocess.run(["umount", str(folder)], check=True)
    assert done.stdout.split(None, 1) == [str(wall.pty_count(1000)), "No space left on device\n"], done
    assert wall.pty_count(1000) < wall.PTYS and wall.pty_count(2) == wall.PTYS
