"""What a user may make the hub keep: nothing a student sends grows what the class shares.

The hub's database and its log are the class's, and a student reaches the hub (its pages through the proxy, its API
through her server's relay). So:

- a student's role is JupyterHub's 'self' less token creation and sharing: her server, her activity, her name and
  groups. She makes no API token (a token's note was stored whole: four of 90 MiB grew the database by 360 MiB, and
  it kept the space after they were deleted) and shares nothing (each share is a row). The instructor may make
  tokens, each expiring within TOKEN_DAYS;
- every request to the hub is bounded before it is read: its request line and headers to HEADER_BYTES (a long URL
  was written to the log whole, twice), its body to BODY_BYTES (the hub's forms and API calls are small);
- the hub's log goes, besides its terminal, to STATE/hub/hub.log, rotated at LOG_BYTES with LOG_KEPT old files.
"""
from __future__ import annotations

import logging.handlers

import tornado.httpserver

HEADER_BYTES = 16 * 2**10
BODY_BYTES = 2**20
TOKEN_DAYS = 7
LOG_BYTES, LOG_KEPT = 16 * 2**20, 3
STUDENT_SCOPES = ["read:users!user", "read:users:name!user", "read:users:groups!user", "users:activity!user",
                  "read:users:activity!user", "servers!user", "delete:servers!user", "read:servers!user",
                  "read:tokens!user", "access:servers!user"]


def roles(instructor):
    """JupyterHub's load_roles: every user's role without tokens or shares; the instructor's tokens."""
    return [{"name": "user", "description": "a member of the class: their own server, no tokens, no shares",
             "scopes": STUDENT_SCOPES},
            {"name": "instructor-tokens", "description": "the instructor's API tokens", "scopes": ["tokens!user"],
             "users": [instructor]}]


class BoundedHTTPServer(tornado.httpserver.HTTPServer):
    """Tornado's server with the hub's bounds: a request past them is refused before any handler or log sees it."""

    def initialize(self, *args, **kwargs):
        kwargs.setdefault("max_header_size", HEADER_BYTES)
        kwargs.setdefault("max_body_size", BODY_BYTES)
        super().initialize(*args, **kwargs)


def bound_requests():
    """From now on in this process (the hub's), the hub's HTTP server is a BoundedHTTPServer. JupyterHub makes its
    server inside JupyterHub.start with no way to pass these bounds, so the class it makes is replaced."""
    tornado.httpserver.HTTPServer = BoundedHTTPServer


class RotatingLog(logging.handlers.RotatingFileHandler):
    """A rotating log file that configuration passes on as it is (traitlets deep-copies what it is given)."""

    def __deepcopy__(self, memo):
        return self


def log_file(path):
    """A handler for the hub's log that keeps at most (LOG_KEPT + 1) * LOG_BYTES of it at `path`."""
    handler = RotatingLog(path, maxBytes=LOG_BYTES, backupCount=LOG_KEPT)
    handler.setFormatter(logging.Formatter("[%(levelname)1.1s %(asctime)s %(name)s] %(message)s"))
    return handler
