"""The child process that runs regular expressions for ``search_text``.

Python's ``re`` can backtrack for ever on patterns like ``(a+)+$`` and holds the
interpreter lock while it does, so no thread of the host could stop it or even
run beside it. Here it runs in its own process, which the host kills when its
time budget runs out.

The child never outlives its host, and never spins past its budget, even when
nobody kills it: while ``re`` holds its interpreter lock no thread of the child
could watch anything, so both rules are the kernel's.

* On Linux it asks for ``SIGKILL`` when the thread that started it ends
  (``prctl(PR_SET_PDEATHSIG)``; the host starts children from one thread that
  lives as long as the host), and exits at once if its host is already gone.
* Before each request it sets its own CPU limit (``RLIMIT_CPU``) to the CPU time
  it has used plus the seconds the request carries, so the kernel ends it
  (``SIGXCPU``) when matching runs past them, host or no host.

Run as a script (``python -I -S regex_worker.py HOST_PID``): it imports nothing but
the standard library. Frames on stdin and stdout are a 4-byte big-endian length
and a UTF-8 JSON body; every request may carry ``"cpu_seconds": S``:

* ``{"pattern": P, "ignore_case": B}`` -> ``{"ok": true}`` or ``{"error": MSG}``
* ``{"text": T, "limit": N}`` -> ``{"lines": [i, ...]}``: 0-based indices of at
  most ``N`` lines of ``T`` (split on ``\\n``) that the pattern matches.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import struct
import sys

__all__ = ["die_with_host", "limit_cpu", "read_frame", "serve", "write_frame"]

_HEADER = struct.Struct(">I")
_PR_SET_PDEATHSIG = 1


def read_frame(stream: object) -> object:
    """Read one frame's JSON body, or ``None`` at the end of the stream."""
    header = stream.read(_HEADER.size)  # type: ignore[attr-defined]
    if len(header) < _HEADER.size:
        return None
    (length,) = _HEADER.unpack(header)
    body = stream.read(length)  # type: ignore[attr-defined]
    return json.loads(body.decode("utf-8"))


def write_frame(stream: object, body: object) -> None:
    """Write one frame and flush it."""
    data = json.dumps(body, ensure_ascii=False).encode("utf-8")
    stream.write(_HEADER.pack(len(data)) + data)  # type: ignore[attr-defined]
    stream.flush()  # type: ignore[attr-defined]


def die_with_host(host_pid: int) -> None:
    """Be killed when the host's starting thread ends; exit now if the host is gone.

    The check after ``prctl`` closes the window in which the host died before the
    request was made (the child was then already handed to another parent).
    """
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != host_pid:
        os._exit(0)


def limit_cpu(seconds: object) -> None:
    """Let the kernel end this process once it used ``seconds`` more CPU time."""
    if not isinstance(seconds, int | float) or isinstance(seconds, bool) or seconds <= 0:
        return
    try:
        import resource
    except ImportError:  # not a POSIX system: the host's kill is the only bound
        return
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = math.ceil(usage.ru_utime + usage.ru_stime + float(seconds))
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def serve(stdin: object, stdout: object) -> None:
    """Answer frames until stdin closes."""
    matcher: re.Pattern[str] | None = None
    while True:
        request = read_frame(stdin)
        if not isinstance(request, dict):
            return
        limit_cpu(request.get("cpu_seconds"))
        if "pattern" in request:
            try:
                flags = re.IGNORECASE if request.get("ignore_case") else 0
                matcher = re.compile(request["pattern"], flags)
            except (re.error, RecursionError, OverflowError) as exc:
                matcher = None
                write_frame(stdout, {"error": str(exc)})
                continue
            write_frame(stdout, {"ok": True})
        elif matcher is not None:
            limit = int(request.get("limit", 0))
            found: list[int] = []
            for index, line in enumerate(str(request.get("text", "")).split("\n")):
                if matcher.search(line):
                    found.append(index)
                    if len(found) >= limit:
                        break
            write_frame(stdout, {"lines": found})
        else:
            write_frame(stdout, {"error": "no pattern compiled"})


if __name__ == "__main__":
    die_with_host(int(sys.argv[1]) if len(sys.argv) > 1 else os.getppid())
    serve(sys.stdin.buffer, sys.stdout.buffer)
