"""Regular-expression matching under a time budget, in a killable child process.

A backtracking pattern cannot freeze the host: matching happens in a child
process (:mod:`.regex_worker`), the host waits for its answer with ``select``
(which releases the interpreter lock, so every other thread keeps running), and
when the budget is spent the child is killed and the search ends with a clear
error. Idle children are kept for reuse, so a search costs a pipe round trip per
file rather than a process start.

A search's child never outlives the search's reason to run:

* the wait ends at the earliest of the regex budget, the dispatcher's deadline
  for the call and the reply's cancellation (both from
  :func:`toolwire.plugin_api.current_call`), and the child is killed then, so a
  call the dispatcher gave up on leaves nothing spinning;
* each request carries its seconds to the child, which sets its own CPU limit;
* the child dies with its host (:func:`.regex_worker.die_with_host`). Linux ties
  that to the *thread* that started the child, so every child is started by one
  thread that lives as long as the host, never by a tool thread that may end
  while its child waits in the pool.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import math
import os
import queue
import select
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from toolwire.plugin_api import CancelToken

from .regex_worker import read_frame, write_frame

__all__ = ["DEFAULT_BUDGET_SECONDS", "RegexBudgetExceeded", "RegexMatcher",
           "RegexPatternError", "regex_time_budget"]

_WORKER_SCRIPT = Path(__file__).with_name("regex_worker.py")
_MAX_IDLE = 2
_CANCEL_POLL_SECONDS = 0.05
_CPU_GRACE_SECONDS = 1
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
    """Matching was stopped (its time ran out, or its call ended); the child was killed.

    :ivar reason: ``budget`` (the regex budget ran out), ``deadline`` (the call's
        deadline came first), ``cancelled`` (the reply was cancelled) or ``ended``
        (the child ended unexpectedly).
    """

    def __init__(self, message: str, reason: str = "budget") -> None:
        super().__init__(message)
        self.reason = reason


class _Spawner:
    """The one thread that starts every child, alive as long as the host.

    A child asks to be killed when its starting thread ends; a tool thread ends
    when the pool has enough idle ones, which would kill a child waiting idle.
    """

    def __init__(self) -> None:
        self._requests: queue.SimpleQueue[concurrent.futures.Future[subprocess.Popen[bytes]]] \
            = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start_child(self) -> subprocess.Popen[bytes]:
        """A new matching child, started by the spawner thread."""
        request: concurrent.futures.Future[subprocess.Popen[bytes]] = \
            concurrent.futures.Future()
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name="toolwire-regex",
                                                daemon=True)
                self._thread.start()
        self._requests.put(request)
        return request.result()

    def _serve(self) -> None:
        while True:
            request = self._requests.get()
            if not request.set_running_or_notify_cancel():
                continue
            try:
                request.set_result(subprocess.Popen(
                    [sys.executable, "-I", "-S", str(_WORKER_SCRIPT), str(os.getpid())],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                    close_fds=True))
            except BaseException as exc:  # the asking thread raises it
                request.set_exception(exc)


_SPAWNER = _Spawner()


class _Worker:
    def __init__(self) -> None:
        self.process = _SPAWNER.start_child()

    def ask(self, body: dict[str, Any], deadline: float, cancel: CancelToken | None,
            reason: str) -> Any:
        """Send ``body``; wait for the answer until ``deadline`` or a cancellation."""
        assert self.process.stdin is not None and self.process.stdout is not None
        remaining = deadline - time.monotonic()
        try:
            write_frame(self.process.stdin,
                        {**body, "cpu_seconds": math.ceil(max(remaining, 0.0))
                         + _CPU_GRACE_SECONDS})
        except (BrokenPipeError, OSError):
            raise RegexBudgetExceeded("the matching process ended unexpectedly",
                                      "ended") from None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RegexBudgetExceeded("the time budget ran out", reason)
            step = remaining if cancel is None else min(remaining, _CANCEL_POLL_SECONDS)
            ready, _, _ = select.select([self.process.stdout], [], [], step)
            if ready:
                break
            if cancel is not None and cancel.cancelled:
                raise RegexBudgetExceeded("the reply was cancelled", "cancelled")
        answer = read_frame(self.process.stdout)
        if answer is None:
            raise RegexBudgetExceeded("the matching process ended unexpectedly", "ended")
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
    """One search's matcher: compile once, then match texts until its time ends.

    Use as a context manager; the child goes back to the pool only when it
    finished every answer in time.

    :param pattern: a Python regular expression.
    :param budget: seconds for the whole search, compile included (default:
        :func:`regex_time_budget`).
    :param deadline: a :func:`time.monotonic` value the search must not outlive
        (the dispatcher's deadline for the call), when it comes before the budget.
    :param cancel: a token whose cancellation stops the search at once.
    """

    def __init__(self, pattern: str, *, ignore_case: bool = False,
                 budget: float | None = None, deadline: float | None = None,
                 cancel: CancelToken | None = None) -> None:
        own = time.monotonic() + (budget if budget is not None else regex_time_budget())
        self.deadline = own if deadline is None else min(own, deadline)
        self._reason = "budget" if deadline is None or own <= deadline else "deadline"
        self._cancel = cancel
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
            raise RegexBudgetExceeded("the matcher is closed", "ended")
        try:
            answer = self._worker.ask(body, self.deadline, self._cancel, self._reason)
        except BaseException:  # a child interrupted mid-answer is never reused
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
