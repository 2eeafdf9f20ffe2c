"""Regular-expression matching under a time budget, in a killable child process.

A backtracking pattern cannot freeze the host: matching happens in a child
process (:mod:`.regex_worker`), the host waits for its answer with ``select``
(which releases the interpreter lock, so every other thread keeps running), and
when the budget is spent the child is killed and the search ends with a clear
error. Idle children are kept for reuse, so a search costs a pipe round trip per
file rather than a process start.
"""

from __future__ import annotations

import atexit
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from .regex_worker import read_frame, write_frame

__all__ = ["RegexBudgetExceeded", "RegexMatcher", "RegexPatternError", "regex_time_budget"]

_WORKER_SCRIPT = Path(__file__).with_name("regex_worker.py")
_MAX_IDLE = 2
DEFAULT_BUDGET_SECONDS = 5.0


def regex_time_budget() -> float:
    """Seconds one regular-expression search may spend matching.

    ``TOOLWIRE_REGEX_TIMEOUT`` overrides the default of 5 seconds.
    """
    raw = os.environ.get("TOOLWIRE_REGEX_TIMEOUT")
    try:
        value = float(raw) if raw else DEFAULT_BUDGET_SECONDS
    except ValueError:
        value = DEFAULT_BUDGET_SECONDS
    return value if value > 0 else DEFAULT_BUDGET_SECONDS


class RegexPatternError(ValueError):
    """The pattern does not compile."""


class RegexBudgetExceeded(TimeoutError):
    """Matching took longer than the budget; the child was killed."""


class _Worker:
    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-I", "-S", str(_WORKER_SCRIPT)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            close_fds=True)

    def ask(self, body: dict[str, Any], deadline: float) -> Any:
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            write_frame(self.process.stdin, body)
        except (BrokenPipeError, OSError):
            raise RegexBudgetExceeded("the matching process ended unexpectedly") from None
        remaining = deadline - time.monotonic()
        ready, _, _ = select.select([self.process.stdout], [], [], max(remaining, 0.0))
        if not ready:
            raise RegexBudgetExceeded("the time budget ran out")
        answer = read_frame(self.process.stdout)
        if answer is None:
            raise RegexBudgetExceeded("the matching process ended unexpectedly")
        return answer

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()


class _Pool:
    def __init__(self) -> None:
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()

    def take(self) -> _Worker:
        with self._lock:
            while self._idle:
                worker = self._idle.pop()
                if worker.process.poll() is None:
                    return worker
        return _Worker()

    def give_back(self, worker: _Worker) -> None:
        with self._lock:
            if len(self._idle) < _MAX_IDLE and worker.process.poll() is None:
                self._idle.append(worker)
                return
        worker.kill()

    def close_all(self) -> None:
        """Stop the idle children (at exit: no process outlives the host)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.kill()


_POOL = _Pool()
atexit.register(_POOL.close_all)


class RegexMatcher:
    """One search's matcher: compile once, then match texts until the budget ends.

    Use as a context manager; the child goes back to the pool only when it
    finished every answer in time.

    :param pattern: a Python regular expression.
    :param budget: seconds for the whole search, compile included.
    """

    def __init__(self, pattern: str, *, ignore_case: bool = False,
                 budget: float | None = None) -> None:
        self.deadline = time.monotonic() + (budget if budget is not None else regex_time_budget())
        self._worker: _Worker | None = _POOL.take()
        answer = self._ask({"pattern": pattern, "ignore_case": ignore_case})
        if "error" in answer:
            self.close()
            raise RegexPatternError(str(answer["error"]))

    def matching_lines(self, text: str, limit: int) -> list[int]:
        """Indices of up to ``limit`` lines of ``text`` the pattern matches."""
        answer = self._ask({"text": text, "limit": limit})
        return [int(i) for i in answer.get("lines", [])]

    def _ask(self, body: dict[str, Any]) -> dict[str, Any]:
        if self._worker is None:
            raise RegexBudgetExceeded("the matcher is closed")
        try:
            answer = self._worker.ask(body, self.deadline)
        except RegexBudgetExceeded:
            self._worker.kill()
            self._worker = None
            raise
        return answer if isinstance(answer, dict) else {}

    def close(self) -> None:
        """Return the child to the pool (or kill it if it was interrupted)."""
        if self._worker is not None:
            _POOL.give_back(self._worker)
            self._worker = None

    def __enter__(self) -> RegexMatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
