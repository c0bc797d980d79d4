"""Talking to the class's hub from a program as a browser does (the hub's test and benchmark use it).

Browsers resolve every name under localhost to this machine, so each user's server has its own origin on one
machine (http://NAME.localhost:PORT); Python's resolver knows only `localhost` itself, and its cookie jar refuses
the hub's session cookie (Domain=localhost, a domain with no dot), which a browser keeps for localhost.
"""
from __future__ import annotations

import http.cookies
import socket

import requests

from autograder.hub.classroom import HOST


def resolve_loopback():
    """From now on in this process, every name under HOST is 127.0.0.1; returns the resolver it replaced."""
    original = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        if isinstance(host, str) and (host == HOST or host.endswith("." + HOST)):
            host = "127.0.0.1"
        return original(host, *args, **kwargs)
    socket.getaddrinfo = getaddrinfo
    return original


def session():
    """A requests session that keeps a cookie set for Domain=HOST, for HOST alone (Chromium's rule for a public suffix)."""
    s = requests.Session()

    def keep(response, *args, **kwargs):
        for header in response.raw.headers.getlist("Set-Cookie") if response.raw is not None else []:
            for name, morsel in http.cookies.SimpleCookie(header).items():
                if morsel["domain"].lstrip(".") == HOST:
                    s.cookies.set(name, morsel.value, domain=f"{HOST}.local", path=morsel["path"] or "/")  # Python's name for it
    s.hooks["response"].append(keep)
    return s


def server_url(user, port):
    """Where the user's server answers: its own origin."""
    return f"http://{user}.{HOST}:{port}/user/{user}/"
