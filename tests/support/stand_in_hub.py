"""A stand-in Hugging Face hub on 127.0.0.1, for ``toolwire pull`` against a real HTTP server.

:class:`StandInHub` serves what :mod:`huggingface_hub` asks a hub for a download:

* ``HEAD`` and ``GET /{org}/{name}/resolve/{revision}/{file}``: ``X-Repo-Commit`` (the
  repository's one commit), ``X-Linked-Etag`` (an LFS file's sha256, quoted) and
  ``X-Linked-Size``; ``Range`` requests answered with ``206``; a missing repository,
  revision or file is a ``404`` with the hub's ``X-Error-Code`` (``RepoNotFound``,
  ``RevisionNotFound``, ``EntryNotFound``);
* ``GET /api/models/{org}/{name}[/revision/{revision}]``: the file list (``siblings``).

A file can be served corrupt (its bytes changed, its size and ETag kept), cut off
after some bytes on its first ``GET`` (the client must resume with ``Range``), or with
headers a hostile hub would send in place of the real ones. Every
request is recorded as ``(method, path, headers)``. Point the client at
:attr:`StandInHub.url` with ``HF_ENDPOINT``.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["COMMIT", "HubRepo", "StandInHub", "stand_in_hub"]

COMMIT = "0123456789abcdef0123456789abcdef01234567"
_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")
_API = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)(?:/revision/(?P<rev>[^/]+))?$")


@dataclass
class HubRepo:
    """One model repository: its files, and how a file is to be served wrongly.

    :ivar files: path in the repository -> bytes.
    :ivar corrupt: files served with changed bytes (same size, same ETag).
    :ivar cut_after: file -> bytes sent on its first GET before the connection drops.
    :ivar headers: file -> headers sent in place of the real ones (``X-Linked-Etag``,
        ``X-Repo-Commit``...), on every answer about it.
    """

    files: dict[str, bytes]
    corrupt: set[str] = field(default_factory=set)
    cut_after: dict[str, int] = field(default_factory=dict)
    headers: dict[str, dict[str, str]] = field(default_factory=dict)


class StandInHub:
    """The hub's download routes for :attr:`repos` on 127.0.0.1 (see the module doc)."""

    def __init__(self) -> None:
        self.repos: dict[str, HubRepo] = {}
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self._cut_done: set[tuple[str, str]] = set()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_HEAD(self) -> None:
                hub._answer(self, body=False)

            def do_GET(self) -> None:
                hub._answer(self, body=True)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _answer(self, handler: BaseHTTPRequestHandler, *, body: bool) -> None:
        path = handler.path.split("?", 1)[0]
        self.requests.append((handler.command, path, dict(handler.headers)))
        api = _API.match(path)
        if api and body:
            self._listing(handler, api["repo"], api["rev"])
            return
        resolve = _RESOLVE.match(path)
        if resolve is None:
            self._error(handler, 404, "", body)
            return
        repo = self.repos.get(resolve["repo"])
        if repo is None:
            self._error(handler, 404, "RepoNotFound", body)
        elif resolve["rev"] not in ("main", COMMIT):
            self._error(handler, 404, "RevisionNotFound", body)
        elif resolve["file"] not in repo.files:
            self._error(handler, 404, "EntryNotFound", body)
        else:
            self._file(handler, resolve["repo"], resolve["file"], repo, body)

    def _listing(self, handler: BaseHTTPRequestHandler, name: str, rev: str | None) -> None:
        repo = self.repos.get(name)
        if repo is None:
            self._error(handler, 404, "RepoNotFound", True)
            return
        if rev not in (None, "main", COMMIT):
            self._error(handler, 404, "RevisionNotFound", True)
            return
        data = json.dumps({"id": name, "sha": COMMIT,
                           "siblings": [{"rfilename": f} for f in sorted(repo.files)]}).encode()
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _file(self, handler: BaseHTTPRequestHandler, name: str, filename: str, repo: HubRepo,
              body: bool) -> None:
        content = repo.files[filename]
        etag = hashlib.sha256(content).hexdigest()
        sent = bytes(b ^ 0xFF for b in content) if filename in repo.corrupt else content
        start = 0
        wanted = re.match(r"bytes=(\d+)-$", handler.headers.get("Range", ""))
        if wanted and body:
            start = int(wanted.group(1))
        handler.send_response(206 if start else 200)
        sent_headers = {"X-Repo-Commit": COMMIT,
                        "ETag": f'"{hashlib.sha1(content).hexdigest()}"',
                        "X-Linked-Etag": f'"{etag}"', "X-Linked-Size": str(len(content)),
                        **repo.headers.get(filename, {})}
        for key, value in sent_headers.items():
            handler.send_header(key, value)
        handler.send_header("Accept-Ranges", "bytes")
        handler.send_header("Content-Length", str(len(content) - start))
        if start:
            handler.send_header("Content-Range", f"bytes {start}-{len(content) - 1}/"
                                                 f"{len(content)}")
        handler.end_headers()
        if not body:
            return
        cut = repo.cut_after.get(filename)
        if cut is not None and (name, filename) not in self._cut_done:
            self._cut_done.add((name, filename))
            handler.wfile.write(sent[start:cut])
            handler.wfile.flush()
            handler.close_connection = True
            handler.connection.shutdown(2)
            return
        handler.wfile.write(sent[start:])

    def _error(self, handler: BaseHTTPRequestHandler, status: int, code: str,
               body: bool) -> None:
        data = json.dumps({"error": code or "not found"}).encode()
        handler.send_response(status)
        if code:
            handler.send_header("X-Error-Code", code)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        if body:
            handler.wfile.write(data)


@contextmanager
def stand_in_hub() -> Iterator[StandInHub]:
    """A running :class:`StandInHub`, stopped afterwards."""
    hub = StandInHub()
    hub.start()
    try:
        yield hub
    finally:
        hub.stop()
