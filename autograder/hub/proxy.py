"""The hub's front door, checked: configurable-http-proxy on 127.0.0.1:PORT, and no one else where localhost leads.

Every student's server shares this machine's loopback. A student looping on bind() of the hub's port takes it the
moment the proxy is down, JupyterHub restarts a proxy it finds dead (ConfigurableHTTPProxy.check_running), the new
one comes up with its API port alone, and the next login would post its password to her listener. And a browser
tries [::1] first for localhost and NAME.localhost (Chromium does), where the proxy does not listen. So CheckedProxy:

- holds [::1]:PORT from its first start to the hub's end, bound and never listening: no other account can listen
  there (nor on [::]:PORT), and a browser refused there goes on to 127.0.0.1;
- before every start of the proxy (the first and each restart), finds its public and API ports free;
- after every start, finds the process it started, and no other, listening on both (a socket is the proxy's when
  its inode is among the proxy process's descriptors);

and otherwise logs who holds the port (account, uid, pids), writes that beside the proxy's pid file (`refusal`,
which `make hub` prints) and stops the hub as SIGTERM does (every server and the proxy stopped), which then exits 1.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import os
import pwd
import socket
import sys
import time
from pathlib import Path

from jupyterhub.objects import Server
from jupyterhub.proxy import ConfigurableHTTPProxy
from traitlets import Any, Float

# the addresses where a connection to localhost:PORT or NAME.localhost:PORT can land
LOOPBACK = {"127.0.0.1", "0.0.0.0", "::1", "::", "::ffff:127.0.0.1", "::ffff:0.0.0.0"}
LISTEN = "0A"  # a listening socket's state in /proc/net/tcp


@dataclasses.dataclass(frozen=True)
class Listener:
    """A socket listening on this machine's loopback: where, whose, and the processes that hold it."""
    address: str
    port: int
    uid: int
    inode: int
    pids: tuple = ()

    def __str__(self):
        pids = f", pid {' '.join(map(str, self.pids))}" if self.pids else ", no process of it visible"
        return f"{user_name(self.uid)} (uid {self.uid}{pids}) listening on {self.address}:{self.port}"


def free_ports(n, besides=()):
    """`n` ports free on 127.0.0.1 now, no two the same and none in `besides`. Each is held until all are chosen:
    the kernel picks a port for bind(("127.0.0.1", 0)) at random, and may pick a port it just handed out and saw closed."""
    with contextlib.ExitStack() as held:
        ports = []
        while len(ports) < n:
            s = held.enter_context(socket.socket())
            s.bind(("127.0.0.1", 0))
            if s.getsockname()[1] not in besides:
                ports.append(s.getsockname()[1])
        return ports


def listeners(port):
    """Every socket listening on `port` where a connection to localhost reaches (127.0.0.1, ::1, any address), in this
    network namespace, with the pids that hold it (all of them, as root)."""
    found = [Listener(address, port, uid, inode) for table in ("/proc/net/tcp", "/proc/net/tcp6")
             for address, at, uid, inode in _listening(table) if at == port and address in LOOPBACK]
    holders = _holders({listener.inode for listener in found})
    return [dataclasses.replace(listener, pids=holders.get(listener.inode, ())) for listener in found]


def door(ports, pid=None):
    """(others, missing): the listeners on `ports` that are not process `pid`'s, and the ports where `pid` does not
    listen ([] without a pid: then every listener is another's)."""
    mine = socket_inodes(pid) if pid else set()
    others, missing = [], []
    for port in ports:
        held = listeners(port)
        others += [listener for listener in held if listener.inode not in mine]
        if pid and not any(listener.inode in mine for listener in held):
            missing.append(port)
    return others, missing


def socket_inodes(pid):
    """The inodes of the sockets process `pid` holds; empty when it is gone."""
    inodes = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return inodes
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes.add(int(target[len("socket:["):-1]))
    return inodes


def _listening(table):
    """(address, port, uid, inode) of each listening socket in a /proc/net/tcp table."""
    try:
        lines = Path(table).read_text().splitlines()[1:]
    except OSError:
        return []  # no IPv6 on this machine
    rows = [line.split() for line in lines]
    return [(*_address(row[1]), int(row[7]), int(row[9])) for row in rows if row[3] == LISTEN]


def _address(field):
    """'0100007F:1F40' as ('127.0.0.1', 8000): the kernel writes each 32-bit word of the address in host order."""
    hexaddr, port = field.split(":")
    raw = b"".join(int(hexaddr[i:i + 8], 16).to_bytes(4, sys.byteorder) for i in range(0, len(hexaddr), 8))
    return socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, raw), int(port, 16)


def _holders(inodes):
    """{inode: (pid, ...)}: the processes whose descriptors hold each of these sockets."""
    holders = {}
    if not inodes:
        return holders
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            for inode in socket_inodes(entry) & inodes:
                holders[inode] = (*holders.get(inode, ()), int(entry))
    return holders


def user_name(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def refusal(pid_file):
    """Where the proxy leaves why it stopped the hub: beside its pid file; `make hub` prints it."""
    return Path(pid_file).with_name("proxy-refused")


def hold_v6_loopback(port):
    """A socket bound to [::1]:`port` and never listening, or None where this machine has no IPv6 loopback. While it
    is open no other account can listen on [::1] or [::] at this port; a connection there is refused."""
    try:
        guard = socket.socket(socket.AF_INET6)
    except OSError:
        return None
    try:
        guard.bind(("::1", port))  # without SO_REUSEADDR or SO_REUSEPORT: no one may share it
    except OSError as e:
        guard.close()
        if e.errno == errno.EADDRNOTAVAIL:
            return None
        raise
    return guard


class CheckedProxy(ConfigurableHTTPProxy):
    """configurable-http-proxy, found alone on its ports after every start, or the hub stops (module docstring)."""

    listen_wait = Float(5.0, help="seconds a started proxy has to be found listening on its ports").tag(config=True)
    _guard = Any(None)

    @property
    def ports(self):
        return [Server.from_url(self.public_url).port, Server.from_url(self.api_url).port]

    async def start(self):
        if self._check_running_callback is not None:
            # JupyterHub makes a new check at every start and stops only the newest: the older one, still running,
            # would start the proxy again after the hub's clean-up has stopped it, and that proxy would outlive the hub
            self._check_running_callback.stop()
        self._check_previous_process()  # a proxy a killed hub left still holds the ports: stopped first
        others, _ = door(self.ports)
        if others:
            await self._refuse(
                f"the hub's port is already taken: {_named(others)}. Stop that process, or give make hub another --port"
                if self.proxy_process is None else
                f"the hub's proxy stopped, and before it could start again its port was taken: {_named(others)}")
        if self._guard is None:
            try:
                self._guard = hold_v6_loopback(self.ports[0])
            except OSError as e:
                await self._refuse(f"[::1]:{self.ports[0]}, where browsers try localhost first, is held by another "
                                   f"process, not listening yet ({e.strerror})")
        await super().start()
        await self._verify(self.proxy_process.pid)

    async def _verify(self, pid):
        """The proxy of `pid`, and no other process, found listening on each port within `listen_wait` seconds."""
        deadline = time.monotonic() + self.listen_wait
        others, missing = door(self.ports, pid)
        while missing and not others and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            others, missing = door(self.ports, pid)
        if others:
            await self._refuse(f"the hub's proxy (pid {pid}) started, but {_named(others)}, not the proxy")
        if missing:
            await self._refuse(f"the hub's proxy (pid {pid}) started, but is not listening on 127.0.0.1:"
                               f"{' nor on 127.0.0.1:'.join(map(str, missing))}")

    async def _refuse(self, why):
        """`why` logged and left for `make hub`; the hub stopped, its servers and proxy with it, and its process
        ended (exit status 1) before a login can go to anyone else's listener."""
        why += ". The hub stops, so that no login goes to anyone else's listener"
        self.log.error(why)
        refusal(self.pid_file).write_text(why + "\n")
        await self.app.shutdown_cancel_tasks()  # what SIGTERM does: every server stopped, then the proxy
        raise SystemExit(1)  # out of the event loop, which the shutdown has told to stop, and out of the hub

    def stop(self):
        if self.proxy_process is not None:  # None when the hub stops before its proxy first started
            super().stop()


def _named(held):
    return "; ".join(map(str, held))
