"""Become a program that dies with toolwire: ``python -I -S launcher.py HOST_PID OOM_SCORE
PROGRAM ARGV0 [ARGS...]``.

Every child toolwire starts goes through this launcher (:mod:`.supervisor` for its
own children, the MCP plugin for stdio servers, which are anyone's programs). On
Linux it asks the kernel to kill it when the thread that started it ends
(``prctl(PR_SET_PDEATHSIG, SIGKILL)``, which survives ``exec``; toolwire starts
children from threads that live as long as it does), so the child ends however
toolwire ends, a ``kill -9`` included, which no ``atexit`` survives. The check after
``prctl`` closes the window in which the host died first. A non-empty
``OOM_SCORE`` is written to ``/proc/self/oom_score_adj``, so the kernel's
out-of-memory killer takes the child before its host. Then it becomes ``PROGRAM``.

Started with ``-I -S`` it imports nothing but the standard library's startup;
elsewhere than Linux it only becomes the program.
"""

from __future__ import annotations

import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> None:
    """Ask to die with the host whose pid is ``argv[0]``, then exec ``argv[2]``."""
    host, oom_score, program, *program_argv = argv
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if oom_score:
            try:
                with open("/proc/self/oom_score_adj", "w", encoding="ascii") as score:
                    score.write(oom_score)
            except OSError:
                pass  # not allowed here: the kernel chooses as it would
    if os.getppid() != int(host):
        os._exit(0)  # the host is already gone
    os.execv(program, program_argv)


if __name__ == "__main__":
    main(sys.argv[1:])
