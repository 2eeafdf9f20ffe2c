"""Jobs of untrusted work in warm child processes, each bounded from the outside.

A :class:`JobPool` keeps up to two children of one handler module warm
(:mod:`.job_child` runs them) and hands each job to one: the job carries its
:class:`JobLimits`, which the child sets as kernel limits for that job alone
(address space, CPU time), while the pool waits for the answer until the wall
deadline or a cancellation, and kills the child then. A child that passed a bound,
was killed, or died is never reused: the next job starts a new one; nor is one that
still holds more than :data:`KEEP_RESIDENT_BYTES` after its job (a large job's memory
is not carried into the next, whose peak a refusal reports). What passed which bound
is a :class:`~toolwire.errors.ChildStoppedError`.

Nothing here knows what a job does: a chat template's render and a pattern's
match are bounded alike, without counting a single operation of either.
"""

from __future__ import annotations

import atexit
import math
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs

from ..errors import ChildStoppedError, ToolwireError
from .supervisor import ChildEnd, ChildGone, SupervisedChild, encode_line, package_folder

__all__ = ["KEEP_RESIDENT_BYTES", "JobLimits", "JobPool"]

_POLL_SECONDS: Final = 0.05
_START_SECONDS: Final = 120.0  # a new child's start, before any job's clock: a failure bound
_PAGE: Final = os.sysconf("SC_PAGE_SIZE")
KEEP_RESIDENT_BYTES: Final = 96 << 20
"""The most resident memory a child may hold after a job and be kept warm (a new one
holds some 30 MiB: the interpreter and its handler's modules)."""
_MAX_IDLE: Final = 2  # children kept warm between jobs
_MAX_REPLY_BYTES: Final = 256 << 20  # the largest answer a child may write
_OOM_SCORE: Final = 800  # of -1000..1000: a job child goes first when memory runs out
_START: Final = ("import sys, types; package = types.ModuleType('toolwire'); "
                 "package.__path__ = [sys.argv[1]]; sys.modules['toolwire'] = package; "
                 "from toolwire.isolation.job_child import main; sys.exit(main(sys.argv[2:]))")
"""A job child's program: the package registered without its ``__init__`` (see
:mod:`.job_child`), then the job loop."""


@attrs.frozen
class JobLimits:
    """The bounds of one job.

    :ivar memory_bytes: address space the job may add to its child (``None``: no bound).
    :ivar cpu_seconds: CPU time it may use (``None``: its wall time, rounded up, plus one).
    :ivar wall_seconds: time it may take, from when it is sent (``None``: no bound).
    """

    memory_bytes: int | None = None
    cpu_seconds: float | None = None
    wall_seconds: float | None = None

    def cpu(self) -> float | None:
        """The CPU seconds the child is held to."""
        if self.cpu_seconds is not None:
            return self.cpu_seconds
        return None if self.wall_seconds is None else math.ceil(self.wall_seconds) + 1


def _limit_detail(bound: str, limits: JobLimits) -> str:
    if bound == "memory" and limits.memory_bytes is not None:
        return f" ({limits.memory_bytes / 2 ** 20:g} MiB)"
    if bound == "wall time" and limits.wall_seconds is not None:
        return f" ({limits.wall_seconds:g} s)"
    if bound == "cpu time":
        return f" ({limits.cpu():g} s)"
    return ""


class JobPool:
    """Warm children that run the jobs of one handler module.

    :param handler: the module whose ``handle_job(job)`` runs a job in the child.
    """

    def __init__(self, handler: str) -> None:
        self.handler = handler
        self._idle: list[SupervisedChild] = []
        self._lock = threading.Lock()
        _POOLS.add(self)

    def run(self, job: Mapping[str, Any], limits: JobLimits, *,
            cancelled: Callable[[], bool] | None = None, deadline: float | None = None) -> Any:
        """Run ``job`` in a child; return the handler's answer.

        :param cancelled: asked while the job runs; ``True`` kills the child.
        :param deadline: a ``time.monotonic()`` the job must not outlive (when it
            comes before ``limits.wall_seconds``).
        :raises ChildStoppedError: the job passed a bound, was cancelled, or ended
            its child; the error names the bound.
        :raises ToolwireError: the handler raised (a bug of the handler's).
        :raises TypeError: the job holds a value that is not JSON.
        """
        line = encode_line({"job": job, "memory": limits.memory_bytes, "cpu": limits.cpu()})
        try:
            child = self._take(deadline, cancelled)
        except ChildGone as gone:
            raise self._stopped(gone.end, limits) from None
        # the wall clock starts once a child is ready: a new one's start (an interpreter and
        # its handler's imports, seconds on a loaded machine) is not the job's time
        ends = [time.monotonic() + limits.wall_seconds] if limits.wall_seconds is not None \
            else []
        if deadline is not None:
            ends.append(deadline)
        wall_end = min(ends, default=math.inf)
        try:
            if not child.send_line(line):
                raise ChildGone(child.kill())
            answer = _next_line(child, wall_end, cancelled, "wall time")
            while answer.keys() == {"peak"}:  # its last word
                child.note_peak(int(answer["peak"]))
                answer = _next_line(child, wall_end, cancelled, "wall time")
        except ChildGone as gone:
            child.release()
            raise self._stopped(gone.end, limits) from None
        except BaseException:
            child.kill()
            child.release()
            raise
        self._give_back(child)
        if "failed" in answer:
            raise ToolwireError(f"a job of {self.handler} failed in its child: "
                                f"{answer['failed']}")
        return answer.get("reply")

    def _stopped(self, end: ChildEnd, limits: JobLimits) -> ChildStoppedError:
        bound = end.bound or "crash"
        how = end.describe() + _limit_detail(bound, limits)
        return ChildStoppedError(f"the work of {self.handler} stopped: {how}", bound=bound,
                                 how=how, peak_memory_bytes=end.peak_memory_bytes)

    def _take(self, deadline: float | None = None,
              cancelled: Callable[[], bool] | None = None) -> SupervisedChild:
        """A warm child, or a new one once it says it is ready. A start is not a job's time,
        but the caller's deadline and cancellation hold during it."""
        with self._lock:
            while self._idle:
                child = self._idle.pop()
                if child.poll() is None:
                    return child
                child.release()
        child = SupervisedChild(
            [sys.executable, "-P", "-c", _START, str(package_folder()), self.handler],
            quiet=True, oom_score=_OOM_SCORE, max_line_bytes=_MAX_REPLY_BYTES)
        start_end = time.monotonic() + _START_SECONDS
        end = start_end if deadline is None else min(deadline, start_end)
        try:
            try:
                ready = _next_line(child, end, cancelled,
                                   "start" if end == start_end else "wall time")
            except ChildGone as gone:
                if gone.end.bound not in ("cancelled", "wall time", "start"):
                    raise ChildGone(child.kill("start")) from None  # it died starting
                raise  # (killed for a bound already: not killed again)
            if not ready.get("ready"):
                raise ChildGone(child.kill("start"))
        except ChildGone:
            child.release()
            raise
        return child

    def _give_back(self, child: SupervisedChild) -> None:
        with self._lock:
            if len(self._idle) < _MAX_IDLE and _resident(child.pid) <= KEEP_RESIDENT_BYTES:
                self._idle.append(child)
                return
        child.close()
        child.release()

    def idle_children(self) -> list[int]:
        """The pids of the children kept warm."""
        with self._lock:
            return [child.pid for child in self._idle]

    def close(self) -> None:
        """End the children kept warm (a later job starts a new one)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for child in idle:
            child.close()
            child.release()


def _next_line(child: SupervisedChild, end: float, cancelled: Callable[[], bool] | None,
               bound: str) -> dict[str, Any]:
    """The child's next line, waited for until ``end`` (a ``time.monotonic()``, or
    ``math.inf``): the child is killed for ``bound`` at ``end``, and as ``cancelled`` as
    soon as ``cancelled()`` says so.

    :raises ChildGone: the child ended, or was killed so.
    """
    while True:
        wait = end - time.monotonic()
        if cancelled is not None:
            wait = min(wait, _POLL_SECONDS)
        line = child.receive(max(wait, 0.0) if math.isfinite(wait) else None)
        if line is not None:
            return line
        if cancelled is not None and cancelled():
            raise ChildGone(child.kill("cancelled"))
        if time.monotonic() >= end:
            raise ChildGone(child.kill(bound))


def _resident(pid: int) -> int:
    """The resident memory of process ``pid`` (Linux; ``0`` where it cannot be read)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


_POOLS: weakref.WeakSet[JobPool] = weakref.WeakSet()


@atexit.register
def _close_pools() -> None:
    for pool in list(_POOLS):
        pool.close()
