"""The main loop of a job child: run jobs of one handler, each within its bounds.

Started by :class:`.jobs.JobPool` with the ``toolwire`` package registered without
running its ``__init__`` (which gathers the whole public API: a second to import,
where a job needs Jinja or ``regex`` alone), then :func:`main` with the handler's
module, whose ``handle_job(job) -> reply`` runs each job (JSON in, JSON out).

Each job message carries its bounds, set here just before the job runs and lifted
after it, so the kernel enforces them whatever the job does, with no thread of this
process needed to watch:

* ``memory``: the address space the job may add (``RLIMIT_AS`` set to the process's
  size now plus it, Linux). Past it an allocation fails; the ``MemoryError`` ends
  the process with :data:`~.supervisor.MEMORY_STATUS` (after a last message with its
  own peak memory, which the supervisor cannot read once it has exited), which its supervisor reads
  as the memory bound (a job that ran out of memory may have left anything half
  built, so the child is never reused);
* ``cpu``: the CPU seconds the job may use (``RLIMIT_CPU``): past them the kernel
  sends ``SIGXCPU``, which ends the process even if its supervisor is gone.

The wall deadline and cancellation are the supervisor's: it kills the child.
"""

from __future__ import annotations

import importlib
import math
import os
import resource
import sys
from typing import Any

from .pipe import ChildPipe
from .supervisor import MEMORY_STATUS, encode_line, own_peak_memory

__all__ = ["main"]

_PAGE = os.sysconf("SC_PAGE_SIZE")
_OWN = {limit: resource.getrlimit(limit)[0] for limit in (resource.RLIMIT_AS,
                                                           resource.RLIMIT_CPU)}
"""The soft limits the process started with: a job's are never above them."""


def _address_space() -> int | None:
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[0]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None  # not Linux: no memory bound here, only time


def _set(limit: int, soft: int | None) -> None:
    own = _OWN[limit]
    if soft is None or (own != resource.RLIM_INFINITY and soft > own):
        soft = own
    resource.setrlimit(limit, (soft, resource.getrlimit(limit)[1]))


def _bound(memory: Any, cpu: Any) -> None:
    if isinstance(memory, int) and memory > 0:
        size = _address_space()
        if size is not None:
            _set(resource.RLIMIT_AS, size + memory)
    if isinstance(cpu, int | float) and cpu > 0:
        used = resource.getrusage(resource.RUSAGE_SELF)
        _set(resource.RLIMIT_CPU, math.ceil(used.ru_utime + used.ru_stime + cpu))


def _reset_peak() -> None:
    """Start the peak resident memory (what the supervisor reports of a stopped child)
    afresh, at what the process holds now: a warm child's earlier jobs are not this
    job's (Linux; elsewhere the peak is the process's)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as refs:
            refs.write("5")
    except OSError:
        pass


def _lift() -> None:
    _set(resource.RLIMIT_AS, None)
    _set(resource.RLIMIT_CPU, None)


def main(argv: list[str]) -> int:
    """Run the jobs of the handler module ``argv[0]`` until the pipe closes."""
    handle = importlib.import_module(argv[0]).handle_job
    pipe = ChildPipe()
    pipe.send({"ready": True})  # a job's clock starts after this, not at the spawn
    while (message := pipe.receive()) is not None:
        _reset_peak()
        _bound(message.get("memory"), message.get("cpu"))
        try:
            try:
                line = encode_line({"reply": handle(message.get("job"))})
            except MemoryError:
                raise
            except Exception as exc:  # a handler's own failure is its answer
                line = encode_line({"failed": f"{type(exc).__name__}: {exc}"})
        except MemoryError:
            _lift()
            try:  # its own peak, which its supervisor cannot read once it has exited
                pipe.send({"peak": own_peak_memory(os.getpid())})
            except (OSError, MemoryError):
                pass
            os._exit(MEMORY_STATUS)
        _lift()
        pipe.send_line(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
