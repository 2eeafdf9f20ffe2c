"""What may cross a plugin or tool boundary: every exception is contained but the host's own.

Plugins (parsers, stream filters, backends, tools, observers) and tool functions
are code the host did not write. Whatever one raises is caught where the core
calls it and becomes a warning, a diagnostic or the tool's result, including
the exceptions Python does not derive from :class:`Exception`: a plugin's
``sys.exit()`` or ``raise KeyboardInterrupt`` must not end the host, nor leave a
call without its result or a reply without ``done``.

Two exceptions still pass, because they are not the plugin's to stop:

* :class:`GeneratorExit`: Python closing a generator the core is iterating;
* the host's own interrupt: a :class:`KeyboardInterrupt` that Python delivered
  for a real SIGINT (Ctrl-C). Python delivers signals to the main thread only,
  between two instructions or out of a blocking call, never at a ``raise``
  statement; so a ``KeyboardInterrupt`` in another thread, or one whose
  innermost frame stopped at a ``raise`` (and that does not wrap a real one),
  was raised by code and is contained like any other exception.
"""

from __future__ import annotations

import dis
import threading
from typing import Final

__all__ = ["is_host_interrupt", "must_propagate"]

_RAISE: Final = dis.opmap["RAISE_VARARGS"]


def is_host_interrupt(exc: BaseException) -> bool:
    """Whether ``exc`` is a real Ctrl-C of the host's main thread (see the module doc)."""
    if not isinstance(exc, KeyboardInterrupt):
        return False
    if threading.current_thread() is not threading.main_thread():
        return False
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, KeyboardInterrupt) and not _raised_by_code(current):
            return True
        current = current.__cause__ or current.__context__
    return False


def must_propagate(exc: BaseException) -> bool:
    """Whether a boundary must let ``exc`` through instead of containing it.

    ``True`` for :class:`GeneratorExit` and the host's own interrupt; a boundary
    re-raises those and turns everything else into its own report.
    """
    return isinstance(exc, GeneratorExit) or is_host_interrupt(exc)


def _raised_by_code(exc: BaseException) -> bool:
    """Whether the innermost frame of ``exc`` stopped at a ``raise`` statement."""
    tb = exc.__traceback__
    if tb is None:
        return True  # never raised anywhere: built by code
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code.co_code
    return 0 <= tb.tb_lasti < len(code) and code[tb.tb_lasti] == _RAISE
