"""Her server's two doors to the machine, when it runs in a network of its own.

A student's server runs in a network namespace of its own (autograder/hub/wall.py: bubblewrap's --unshare-net): a
loopback that is hers alone and nothing else. The ports she binds, the connections she opens and the socket memory
they hold are in her namespace, not the machine's: she cannot take the hub's public port, run the machine out of
loopback ports or queue the machine's TCP memory. This relay, one per server and root's, is all that joins the two:

- the proxy's door: it listens on the machine's 127.0.0.1:PORT, where the hub's proxy sends her pages, and carries
  each connection to 127.0.0.1:PORT in her namespace, where her server listens;
- the hub's door: it listens on 127.0.0.1:API_PORT in her namespace and carries each connection to the hub's API on
  the machine's 127.0.0.1:API_PORT (her server checks its visitors' tokens and reports activity there).

A socket belongs to the namespace it was made in, so the relay makes each in the right one (setns around the
socket() call) and serves both from one event loop. Each door carries at most MAX_OPEN connections at once (she
chooses how many she opens through the hub's door; each one is a connection on the machine's loopback); one more is
closed at once. The relay ends when her namespace's first process does, and with the hub (PR_SET_PDEATHSIG).

    python -m autograder.hub.relay SERVER_PID PORT API_PORT
"""
from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import socket
import sys
import time
from pathlib import Path

CLONE_NEWNET = 0x40000000
MAX_OPEN = 64  # connections at once through each door: a server and its browser tabs use a handful
CHUNK = 2**16
_libc = ctypes.CDLL(None, use_errno=True)


def setns(fd):
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


class Networks:
    """The machine's network namespace and hers, held open: sockets made in either."""

    def __init__(self, pid):
        self.home = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        self.pid, self.hers = pid, os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        self.inode = os.fstat(self.hers).st_ino

    def socket(self, hers):
        """A TCP socket in her namespace (hers=True) or the machine's."""
        if not hers:
            return socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        setns(self.hers)
        try:
            return socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        finally:
            setns(self.home)

    def alive(self):
        """True while her namespace's first process runs."""
        try:
            return os.stat(f"/proc/{self.pid}/ns/net").st_ino == self.inode
        except OSError:
            return False


def namespace_of(server_pid, seconds=60.0):
    """The pid of the first process in `server_pid`'s new network namespace: bubblewrap (`server_pid`) makes its
    child in the namespaces it unshares. None when none appears in `seconds`."""
    mine = os.stat("/proc/self/ns/net").st_ino
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for pid in [server_pid, *_children(server_pid)]:
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{pid}/ns/net").st_ino != mine:
                    return pid
        if not Path(f"/proc/{server_pid}").exists():
            return None
        time.sleep(0.05)
    return None


def _children(pid):
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def listener(networks, hers, port):
    sock = networks.socket(hers)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(MAX_OPEN)
    sock.setblocking(False)
    return sock


def door(networks, to_hers, port):
    """A handler that carries each connection to 127.0.0.1:`port` in her namespace (to_hers) or the machine's."""
    open_now = 0

    async def carry(reader, writer):
        nonlocal open_now
        if open_now >= MAX_OPEN:
            writer.close()
            return
        open_now += 1
        try:
            sock = networks.socket(to_hers)
            sock.setblocking(False)
            try:
                await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
            except OSError:
                sock.close()
                return
            far_reader, far_writer = await asyncio.open_connection(sock=sock)
            try:
                await asyncio.gather(_pipe(reader, far_writer), _pipe(far_reader, writer))
            finally:
                far_writer.close()
        finally:
            open_now -= 1
            writer.close()
    return carry


async def _pipe(reader, writer):
    """Bytes from `reader` to `writer` until the end, then the end passed on (a half-close, as TCP has)."""
    with contextlib.suppress(OSError):
        while chunk := await reader.read(CHUNK):
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()


async def serve(networks, port, api_port):
    proxy_door = await asyncio.start_server(door(networks, True, port), sock=listener(networks, False, port))
    hub_door = await asyncio.start_server(door(networks, False, api_port), sock=listener(networks, True, api_port))
    async with proxy_door, hub_door:
        while networks.alive():
            await asyncio.sleep(0.5)


def main(argv=None):
    server_pid, port, api_port = map(int, (sys.argv[1:] if argv is None else argv))
    _libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: ends with the hub
    pid = namespace_of(server_pid)
    if pid is None:
        sys.exit(f"relay: the server {server_pid} made no network namespace of its own")
    asyncio.run(serve(Networks(pid), port, api_port))


if __name__ == "__main__":
    main()
