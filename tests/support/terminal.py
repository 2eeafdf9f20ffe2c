"""A command run on a real pseudo-terminal, for tests of interactive programs.

:class:`Terminal` starts a process with a pty as its controlling terminal (so
``isatty()`` is true, readline edits lines, and Ctrl-C typed on the terminal
sends SIGINT), lets a test type into it and wait for text to appear, the way a
person would use it. The standard library's :mod:`pty` does the work; output is
matched with ANSI escapes removed.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import termios
import time
from collections.abc import Mapping, Sequence

__all__ = ["Terminal"]

_READING = ("poll_schedule_timeout", "do_select", "core_sys_select", "n_tty_read",
            "wait_woken", "do_sys_poll")
"""Kernel wait channels of a process blocked reading its terminal."""

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]|\r")


class Terminal:
    """A process on a pseudo-terminal.

    :param argv: the command.
    :param env: its whole environment.
    :param cwd: its working folder.
    """

    def __init__(self, argv: Sequence[str], *, env: Mapping[str, str],
                 cwd: str | os.PathLike[str] | None = None) -> None:
        pid, fd = pty.fork()
        if pid == 0:  # the child: become the command
            try:
                if cwd is not None:
                    os.chdir(cwd)
                os.execvpe(argv[0], list(argv), dict(env))
            finally:
                os._exit(127)
        self.pid = pid
        self.fd = fd
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
        self.raw = ""
        self._seen = 0
        self.status: int | None = None

    @property
    def text(self) -> str:
        """Everything the process wrote so far, without terminal escapes."""
        return _ANSI.sub("", self.raw)

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return True
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            return False
        if not data:
            return False
        self.raw += data.decode("utf-8", "replace")
        return True

    def expect(self, needle: str, timeout: float = 60.0) -> str:
        """Wait until ``needle`` appears after what earlier calls matched; return the text
        up to and including it.

        :raises AssertionError: it did not appear in time (the message shows the output).
        """
        deadline = time.monotonic() + timeout
        while True:
            text = self.text
            found = text.find(needle, self._seen)
            if found >= 0:
                end = found + len(needle)
                chunk = text[self._seen:end]
                self._seen = end
                return chunk
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._read(min(remaining, 0.2)):
                if text.find(needle, self._seen) >= 0:
                    continue
                raise AssertionError(f"{needle!r} did not appear; output since the last "
                                     f"match:\n{text[self._seen:]}")

    def wait_for_input(self, timeout: float = 60.0) -> None:
        """Wait until the process sleeps reading the terminal (Linux: its main thread's
        ``/proc`` wait channel is a select, poll or tty read).

        A prompt on the screen is not enough before Ctrl-C: CPython's readline shows the
        prompt, then enters ``select``; a SIGINT in between is only looked at after the
        next key, so a Ctrl-C typed at once would wait for good.

        :raises AssertionError: it did not start reading in time.
        """
        deadline = time.monotonic() + timeout
        channel = ""
        while time.monotonic() < deadline:
            try:
                with open(f"/proc/{self.pid}/wchan", encoding="ascii") as wchan:
                    channel = wchan.read()
            except OSError as exc:
                raise AssertionError(f"cannot see whether the process reads: {exc}") from None
            if channel.startswith(_READING):
                return
            self._read(0.01)
        raise AssertionError(f"the process did not wait for input (it waits in {channel!r}); "
                             f"output:\n{self.text}")

    def type(self, text: str) -> None:
        """Type ``text`` (use ``\\n`` for Enter, ``\\x03`` for Ctrl-C, ``\\x04`` for Ctrl-D)."""
        os.write(self.fd, text.encode("utf-8"))

    def line(self, text: str) -> None:
        """Type a line and Enter."""
        self.type(text + "\n")

    def wait(self, timeout: float = 30.0) -> int:
        """Wait for the process to end (reading its output meanwhile); its exit status."""
        deadline = time.monotonic() + timeout
        while self.status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"the process did not end; output:\n{self.text}")
            self._read(0.1)
        while self._read(0.05) and select.select([self.fd], [], [], 0)[0]:
            pass
        return self.status

    def close(self) -> None:
        """Stop the process if it still runs, and release the terminal."""
        if self.status is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            self.status = -9
        try:
            os.close(self.fd)
        except OSError:
            pass
