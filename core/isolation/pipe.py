"""The child's end of its supervisor's JSON-lines pipe (:mod:`.supervisor`)."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from typing import Any

from .supervisor import PIPE_VARIABLE, encode_line

__all__ = ["ChildPipe"]


class ChildPipe:
    """What a child reads from and writes to its supervisor, one JSON message a line.

    Reading is for one thread; writing takes a lock, so any thread may answer.

    :raises RuntimeError: the child was not started with a pipe.
    """

    def __init__(self) -> None:
        named = os.environ.get(PIPE_VARIABLE, "")
        try:
            read_fd, write_fd = (int(fd) for fd in named.split(","))
        except ValueError:
            raise RuntimeError(f"no supervisor's pipe here ({PIPE_VARIABLE} is "
                               f"{named!r})") from None
        self._inbox = os.fdopen(read_fd, "rb")
        self._outbox = os.fdopen(write_fd, "wb")
        self._lock = threading.Lock()

    def receive(self) -> dict[str, Any] | None:
        """The next message; ``None`` once the supervisor closed the pipe (or died).
        A line that is not a JSON object is passed over."""
        for line in self._inbox:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict):
                return message
        return None

    def send(self, message: Mapping[str, Any]) -> None:
        """Write one message."""
        self.send_line(encode_line(message))

    def send_line(self, line: bytes) -> None:
        """Write one message already encoded by :func:`.supervisor.encode_line`."""
        with self._lock:
            self._outbox.write(line)
            self._outbox.flush()
