"""Saving a conversation to a file: never destroying what it replaces, never losing it.

``/save FILE`` and ``--save FILE`` write the stored tool-exchange format. A save
goes to a temporary file beside ``FILE`` that is flushed to the disk and then
renamed over it, so ``FILE`` is at every moment either what it was or the whole
new conversation: a full disk, a dying process or a conversation that cannot be
written leaves it as it was. Every failure, whatever raised it, is a
:class:`SaveOutcome` saying why, whether ``FILE`` is intact, and (for ``--save``,
whose chat is over by then) the file of toolwire's own the conversation went to
instead. The signals that would end the process wait while a save runs.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs

__all__ = ["SaveOutcome", "save_conversation"]

_HELD_SIGNALS = frozenset({signal.SIGTERM, signal.SIGHUP, signal.SIGINT}) \
    if hasattr(signal, "SIGHUP") else frozenset({signal.SIGTERM, signal.SIGINT})


@attrs.frozen
class SaveOutcome:
    """What a save did.

    :ivar saved: the conversation is in the file asked for.
    :ivar message: for a failure, what to tell the user (why, whether the file is
        intact, where the conversation went instead); ``""`` on success.
    :ivar fallback: the file of toolwire's own the conversation went to, if any.
    """

    saved: bool
    message: str = ""
    fallback: Path | None = None


def save_conversation(records: Callable[[], Any], path: str | os.PathLike[str], *,
                      fallback: Sequence[Path] = ()) -> SaveOutcome:
    """Write the conversation ``records()`` gives (the stored format) to ``path``.

    :param fallback: folders to write it to on failure, in turn, a file of toolwire's
        own (named by the time) in the first that takes it; the outcome says where.
        Empty: no fallback (the user is there to try again).
    :returns: what happened; never raises for a failed save.
    """
    target = Path(path).expanduser()
    with _signals_held():
        try:
            data = (json.dumps(records(), ensure_ascii=False, indent=2) + "\n").encode("utf-8")
        except Exception as exc:  # whatever made the conversation unwritable
            return SaveOutcome(False, f"cannot save to {path}: the conversation could not be "
                                      f"written as JSON ({type(exc).__name__}: {exc}); "
                                      f"{_state_of(target)}")
        try:
            _replace_with(target, data)
        except Exception as exc:
            problem = (exc.strerror or str(exc)) if isinstance(exc, OSError) else \
                f"{type(exc).__name__}: {exc}"
            said = f"cannot save to {path} ({problem}); {_state_of(target)}"
        else:
            return SaveOutcome(True)
        if not fallback:
            return SaveOutcome(False, said)
        return _save_elsewhere(data, said, fallback)


def _state_of(target: Path) -> str:
    return f"{target} is unchanged" if target.exists() else f"{target} was not created"


def _replace_with(target: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``target``, then rename it over ``target``."""
    folder = target.parent
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            _write_all(out, data)
            out.flush()
            os.fsync(out.fileno())
        try:
            os.chmod(temporary, os.stat(target).st_mode & 0o7777)  # keep the file's mode
        except FileNotFoundError:
            pass
        os.replace(temporary, target)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
    try:  # the rename itself reaches the disk with its folder
        folder_handle = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(folder_handle)
    except OSError:
        pass
    finally:
        os.close(folder_handle)


def _write_all(out: Any, data: bytes) -> None:
    out.write(data)


def _save_elsewhere(data: bytes, said: str, folders: Sequence[Path]) -> SaveOutcome:
    name = time.strftime("chat-%Y%m%d-%H%M%S.json")
    for folder in folders:
        fallback = folder / name
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with fallback.open("xb") as file:
                file.write(data)
        except OSError:
            continue
        return SaveOutcome(False, f"{said}; the conversation was saved to {fallback} instead "
                                  f"(--resume {fallback} continues it)", fallback)
    text = data.decode("utf-8")
    return SaveOutcome(False, f"{said}; nor could it be saved to a file of toolwire's own: "
                              f"the conversation follows:\n{text}")


@contextmanager
def _signals_held() -> Iterator[None]:
    """Hold off the signals that end the process while a save runs (the main thread's),
    so a save is never cut in the middle; they are delivered right after."""
    if threading.current_thread() is not threading.main_thread() or \
            not hasattr(signal, "pthread_sigmask") or sys.platform == "win32":
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
