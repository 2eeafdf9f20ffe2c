"""The repack probe's child: load a GGUF with llama.cpp's defaults and decode a few tokens.

Run as ``python -P .../repack_child.py MODEL.gguf`` by :mod:`.repack_probe` (the
file, so that the child imports ``llama_cpp`` and nothing of toolwire). It loads
the model the way ``Llama()`` does by default (weights repacked into the CPU's
extra buffer types: CPU_REPACK, AMX), evaluates
a short prompt as one batch and decodes a few tokens one at a time: the two
paths where a repacked kernel that does not fit the CPU crashes. Exit status 0
means both ran; a crash kills the process by a signal, which is the answer.

:data:`CRASH_HOOK_VARIABLE` is for tests only, so both verdicts are tested on any
CPU: ``segv`` or ``abort`` makes the child crash for real (a read of address 0, or
``abort()``) after loading; ``healthy`` makes it exit 0 after loading without
running the kernels, as a CPU where repacking works would.
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Final

__all__ = ["CRASH_HOOK_VARIABLE", "PROBE_TEXT", "main"]

CRASH_HOOK_VARIABLE: Final = "TOOLWIRE_TEST_PROBE_CRASH"
"""Test-only: ``segv`` or ``abort`` makes the probe child crash after it loads the model,
``healthy`` makes it report a CPU where repacking works."""

PROBE_TEXT: Final = ("Probe: the quick brown fox jumps over the lazy dog, then counts one two "
                     "three four five.")
"""About twenty tokens: enough to go through the batched matrix path."""

_DECODED: Final = 4


def _verdict_for_tests() -> None:
    hook = os.environ.get(CRASH_HOOK_VARIABLE, "")
    if hook == "segv":
        ctypes.string_at(0)
    elif hook == "abort":
        os.abort()
    elif hook == "healthy":
        sys.exit(0)


def main(argv: list[str]) -> int:
    """Probe the model at ``argv[0]``; return the exit status (0: it ran)."""
    if len(argv) != 1:
        sys.stderr.write("usage: python -P repack_child.py MODEL.gguf\n")
        return 2
    import llama_cpp

    model = llama_cpp.Llama(argv[0], n_ctx=256, n_batch=64, n_threads=1, n_threads_batch=1,
                            verbose=False)
    _verdict_for_tests()
    tokens = model.tokenize(PROBE_TEXT.encode("utf-8"))
    model.eval(tokens)
    for _ in range(_DECODED):
        model.eval([model.sample(temp=0.0)])
    model.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
