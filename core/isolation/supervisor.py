"""Start a child process, talk to it in JSON lines, end it, and say how it ended.

Every child toolwire starts is a :class:`SupervisedChild`:

* **started by one thread** that lives as long as this process, through
  :mod:`.launcher`, so it dies with toolwire however toolwire ends (Linux ties
  ``PR_SET_PDEATHSIG`` to the *thread* that started a child, and a tool thread or
  a request's thread may end while its child is still wanted);
* **a JSON-lines pipe** on the child's descriptors 3 (what it reads) and 4 (what it
  writes), named to it by :data:`PIPE_VARIABLE`: its standard output stays free for
  what native code prints. A line is bounded (``max_line_bytes``): a child that
  writes more is killed;
* **ended** by closing its pipe (it exits), or killed; reaped with ``wait4``, which
  also gives its peak memory and CPU time;
* **one description** of how it ended, :class:`ChildEnd`, for the bound it passed
  (set by the kernel's limits, by its supervisor's deadline or cancellation) or the
  signal or status it ended with.

POSIX only (``posix_spawn``, ``wait4``); the deaths-with-the-host rule is Linux's.
"""

from __future__ import annotations

import concurrent.futures
import errno
import fcntl
import json
import os
import queue
import select
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar

import attrs

__all__ = ["MEMORY_STATUS", "PIPE_VARIABLE", "ChildEnd", "ChildGone", "SupervisedChild",
           "encode_line", "find_program", "host_bound_command", "own_peak_memory",
           "package_folder"]

PIPE_VARIABLE: Final = "TOOLWIRE_CHILD_PIPE"
"""Environment variable: the child's two pipe descriptors, ``"3,4"`` (read, write)."""

MEMORY_STATUS: Final = 86
"""The exit status of a child whose work ran out of its memory bound (a job child's
``MemoryError``, see :mod:`.job_child`)."""

_CHILD_IN: Final = 3
_CHILD_OUT: Final = 4
_HIGH_FD: Final = 10  # the parent's pipe ends sit above the numbers the child's take
_LAUNCHER: Final = Path(__file__).with_name("launcher.py")
_READ_BYTES: Final = 1 << 20
_REAP_SECONDS: Final = 10.0

_SIGNAL_MEANINGS: Final = {
    "SIGSEGV": "a crash in native code", "SIGABRT": "an abort in native code",
    "SIGBUS": "a crash in native code", "SIGILL": "an instruction this CPU lacks",
    "SIGFPE": "a crash in native code",
    "SIGKILL": "killed, often by the kernel when memory runs out",
    "SIGXCPU": "its CPU-time limit"}
_BREACHES: Final = {
    "memory": "it passed its memory bound",
    "cpu time": "it passed its CPU-time bound",
    "wall time": "it passed its time bound and was killed",
    "cancelled": "it was stopped: its work was cancelled",
    "output": "it wrote a message larger than its pipe takes and was killed"}


def package_folder() -> Path:
    """The folder of the ``toolwire`` package (where a child finds its modules)."""
    return Path(__file__).parent.parent


@attrs.frozen
class ChildEnd:
    """How a child process ended.

    :ivar status: its exit status (``None``: a signal ended it, or it could not be read).
    :ivar signal: the signal that ended it (``None``: it exited).
    :ivar breach: the bound that ended it: ``memory``, ``cpu time``, ``wall time``,
        ``cancelled``, ``output``, or ``""`` (none: it exited or crashed).
    :ivar peak_memory_bytes: its own peak resident memory, as it was read before it was
        killed or as it said on its way out (``0``: unknown). Not ``wait4``'s
        ``ru_maxrss``, which for a spawned child counts the peak of the process that
        spawned it.
    :ivar cpu_seconds: the CPU time it used.
    """

    status: int | None
    signal: int | None = None
    breach: str = ""
    peak_memory_bytes: int = 0
    cpu_seconds: float = 0.0

    @property
    def signal_name(self) -> str:
        """``"SIGSEGV"``..., ``""`` when no signal ended it."""
        if self.signal is None:
            return ""
        try:
            return signal.Signals(self.signal).name
        except ValueError:
            return f"signal {self.signal}"

    @property
    def bound(self) -> str:
        """The bound it passed, or ``crash`` (a signal, a failing exit), or ``""``."""
        if self.breach:
            return self.breach
        return "crash" if self.signal is not None or self.status else ""

    def describe(self) -> str:
        """How it ended, for people (``"SIGSEGV: a crash in native code"``...)."""
        if self.breach:
            return _BREACHES.get(self.breach, self.breach)
        name = self.signal_name
        if name:
            meaning = _SIGNAL_MEANINGS.get(name, "")
            return f"{name}: {meaning}" if meaning else name
        if self.status is None:
            return "it ended (how is unknown)"
        return "it exited" if self.status == 0 else f"exit status {self.status}"

    @classmethod
    def from_wait(cls, status: int, rusage: Any, breach: str = "", peak: int = 0
                  ) -> ChildEnd:
        """The end ``wait4`` reported (``peak``: the child's own peak, when known)."""
        signal_number = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        if not breach:
            if code == MEMORY_STATUS:
                breach = "memory"
            elif signal_number == signal.SIGXCPU:
                breach = "cpu time"
        return cls(code, signal_number, breach, peak, rusage.ru_utime + rusage.ru_stime)


class ChildGone(Exception):
    """The child ended (or was killed) while it was being talked to.

    :ivar end: how it ended.
    """

    def __init__(self, end: ChildEnd) -> None:
        super().__init__(end.describe())
        self.end = end


T = TypeVar("T")


class _Spawner:
    """The one thread that starts every child, alive as long as this process."""

    def __init__(self) -> None:
        self._requests: queue.SimpleQueue[tuple[Callable[[], Any],
                                                concurrent.futures.Future[Any]]] = \
            queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def run(self, start: Callable[[], T]) -> T:
        """``start()``, called on the spawner thread; its result or its exception."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._lock:
            if self._thread is None or not self._thread.is_alive():  # none yet, or forked
                self._thread = threading.Thread(target=self._serve, daemon=True,
                                                name="toolwire-spawner")
                self._thread.start()
        self._requests.put((start, future))
        return future.result()

    def _serve(self) -> None:
        while True:
            start, future = self._requests.get()
            try:
                future.set_result(start())
            except BaseException as exc:  # the asking thread raises it
                future.set_exception(exc)


_SPAWNER = _Spawner()


def host_bound_command(program: str, argv: Sequence[str], *, oom_score: int | None = None
                       ) -> list[str]:
    """The command line that runs ``program`` (with ``argv``, its ``argv[0]`` first)
    through :mod:`.launcher`, so that it dies with this process.

    :param program: the program's path (found already, see :func:`find_program`).
    """
    return [sys.executable, "-I", "-S", str(_LAUNCHER), str(os.getpid()),
            "" if oom_score is None else str(oom_score), program, *argv]


def find_program(command: str, env: Mapping[str, str],
                 cwd: str | os.PathLike[str] | None = None) -> str:
    """``command``'s path, found as ``exec`` would find it (a name on ``env``'s
    ``PATH``, a path from ``cwd``), so a missing program is the same
    :class:`FileNotFoundError` as when it is started directly.

    :raises OSError: the program is not there, or may not be run.
    """
    if os.sep in command:
        program = os.path.join(os.fspath(cwd) if cwd is not None else os.getcwd(), command)
        if not os.path.isfile(program):
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), command)
        if not os.access(program, os.X_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), command)
        return program
    found = shutil.which(command, path=env.get("PATH", os.defpath))
    if found is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), command)
    return found


def own_peak_memory(pid: int) -> int:
    """Process ``pid``'s own peak resident memory (``VmHWM``, Linux; ``0`` where it
    cannot be read, or once the process has ended)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _high(fd: int) -> int:
    """``fd`` moved above the descriptors a child's pipe takes (and closed on exec)."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, _HIGH_FD)
    os.close(fd)
    return moved


def _json_value(value: Any) -> Any:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"a {type(value).__name__} cannot cross a child's pipe (JSON values only)")


def encode_line(message: Mapping[str, Any]) -> bytes:
    """One message as a line of JSON in UTF-8 (a message holding a lone surrogate, which
    UTF-8 cannot write, in ASCII with JSON's escapes, so it crosses unchanged).

    :raises TypeError: it holds a value that is not JSON (mappings count as objects).
    """
    text = json.dumps(message, ensure_ascii=False, separators=(",", ":"), default=_json_value)
    try:
        return text.encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        return json.dumps(message, separators=(",", ":"),
                          default=_json_value).encode("ascii") + b"\n"


class SupervisedChild:
    """One child process: started, talked to in JSON lines, ended, described.

    :param argv: the program and its arguments (``argv[0]`` is the program's path).
    :param env: its environment (default: this process's).
    :param pipe: give it the JSON-lines pipe (``False``: a program that only runs).
    :param quiet: its standard output and error go nowhere (else it inherits this
        process's).
    :param oom_score: its ``oom_score_adj`` (Linux; ``None``: the kernel's default).
    :param max_line_bytes: the longest line it may write; a longer one kills it.
    :raises OSError: the child could not be started.
    """

    def __init__(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
                 pipe: bool = True, quiet: bool = False, oom_score: int | None = None,
                 max_line_bytes: int = 64 << 20) -> None:
        environment = dict(os.environ if env is None else env)
        self.max_line_bytes = max_line_bytes
        self._write_lock = threading.Lock()
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._lines: list[bytes] = []
        self._eof = not pipe
        self._end: ChildEnd | None = None
        self._breach = ""
        self._peak = 0
        self._to_child = self._from_child = -1
        actions: list[tuple[Any, ...]] = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)]
        if quiet:
            actions += [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_WRONLY, 0) for fd in (1, 2)]
        child_ends: tuple[int, ...] = ()
        if pipe:
            child_in, to_child = os.pipe()
            from_child, child_out = os.pipe()
            child_in, to_child, from_child, child_out = (
                _high(fd) for fd in (child_in, to_child, from_child, child_out))
            child_ends = (child_in, child_out)
            self._to_child, self._from_child = to_child, from_child
            actions += [(os.POSIX_SPAWN_DUP2, child_in, _CHILD_IN),
                        (os.POSIX_SPAWN_DUP2, child_out, _CHILD_OUT)]
            environment[PIPE_VARIABLE] = f"{_CHILD_IN},{_CHILD_OUT}"
        command = host_bound_command(argv[0], argv, oom_score=oom_score)
        try:
            self.pid: int = _SPAWNER.run(lambda: os.posix_spawn(
                command[0], command, environment, file_actions=actions))
        except BaseException:
            for fd in (*child_ends, self._to_child, self._from_child):
                if fd >= 0:
                    os.close(fd)
            raise
        for fd in child_ends:
            os.close(fd)

    # -- the pipe ---------------------------------------------------------------------

    def send(self, message: Mapping[str, Any]) -> bool:
        """Write one message; ``False`` when the child is gone.

        :raises TypeError: the message holds a value that is not JSON.
        """
        return self.send_line(encode_line(message))

    def send_line(self, data: bytes) -> bool:
        """Write one message :func:`encode_line` made; ``False`` when the child is gone."""
        with self._write_lock:
            if self._to_child < 0:
                return False
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(self._to_child, view):]
            except OSError:
                return False
        return True

    def receive(self, timeout: float | None = None) -> dict[str, Any] | None:
        """The child's next message; ``None`` when none came within ``timeout`` seconds.
        One thread at a time.

        :raises ChildGone: the child ended (its pipe closed), or wrote a line over
            ``max_line_bytes`` (it is killed then).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._lines:
                line = self._lines.pop(0)
                try:
                    message = json.loads(line)
                except ValueError:
                    continue  # not a message of the protocol: passed over
                if isinstance(message, dict):
                    return message
                continue
            if self._eof:
                self.release()
                raise ChildGone(self.wait(_REAP_SECONDS) or self.kill())
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if self._from_child < 0:
                raise ChildGone(self.wait(_REAP_SECONDS) or self.kill())
            ready, _, _ = select.select([self._from_child], [], [], wait)
            if not ready:
                return None
            self._read_chunk()

    def _read_chunk(self) -> None:
        try:
            chunk = os.read(self._from_child, _READ_BYTES)
        except OSError:
            chunk = b""
        if not chunk:
            self._eof = True
            return
        start = 0
        while (newline := chunk.find(b"\n", start)) >= 0:
            self._pending.append(chunk[start:newline])
            self._lines.append(b"".join(self._pending))
            self._pending.clear()
            self._pending_bytes = 0
            start = newline + 1
        if start < len(chunk):
            self._pending.append(chunk[start:])
            self._pending_bytes += len(chunk) - start
            if self._pending_bytes > self.max_line_bytes:
                self._pending.clear()
                end = self.kill("output")
                self.release()
                raise ChildGone(end)

    # -- the end ---------------------------------------------------------------------

    @property
    def end(self) -> ChildEnd | None:
        """How the child ended (``None``: it has not, or it has not been reaped)."""
        return self._end

    def poll(self) -> ChildEnd | None:
        """How the child ended, reaping it if it has; ``None`` while it runs."""
        if self._end is None:
            self._reap(os.WNOHANG)
        return self._end

    def wait(self, timeout: float | None = None) -> ChildEnd | None:
        """Wait up to ``timeout`` seconds (``None``: for ever) for the child to end."""
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.001
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        return self._end

    def kill(self, breach: str = "") -> ChildEnd:
        """Kill the child (if it still runs) and reap it; ``breach`` names the bound it
        was killed for. A thread reading from it then sees it gone."""
        if self._end is None:
            self._breach = self._breach or breach
            self.note_peak(own_peak_memory(self.pid))
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._close_input()
        return self.wait(_REAP_SECONDS) or ChildEnd(None, signal.SIGKILL, self._breach)

    def note_peak(self, peak: int) -> None:
        """The child's own peak resident memory, as it said it or as it was read."""
        self._peak = max(self._peak, peak)

    def close(self, grace: float = 5.0) -> ChildEnd:
        """End the child: close its pipe (it exits), kill it after ``grace`` seconds."""
        self._close_input()
        end = self.wait(grace)
        return end if end is not None else self.kill()

    def release(self) -> None:
        """Close what is left of the pipe once no thread reads from it any more."""
        self._close_input()
        if self._from_child >= 0:
            os.close(self._from_child)
            self._from_child = -1
        self._eof = True

    def _close_input(self) -> None:
        with self._write_lock:
            if self._to_child >= 0:
                os.close(self._to_child)
                self._to_child = -1

    def _reap(self, flags: int) -> None:
        try:
            pid, status, rusage = os.wait4(self.pid, flags)
        except ChildProcessError:  # reaped elsewhere: how it ended is not known
            self._end = ChildEnd(None, None, self._breach)
            return
        if pid:
            self._end = ChildEnd.from_wait(status, rusage, self._breach, self._peak)

    def __repr__(self) -> str:
        state = "running" if self._end is None else self._end.describe()
        return f"SupervisedChild(pid={self.pid}, {state})"
