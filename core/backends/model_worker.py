"""A backend in a supervised worker process: a native crash never takes its host down.

llama.cpp computes in native code: a segfault, an abort or the kernel's
out-of-memory killer ends whatever process runs it. ``toolwire serve`` and
``toolwire chat`` therefore run a local model in a worker process
(:mod:`.worker_main`, a :class:`~toolwire.isolation.supervisor.SupervisedChild`)
and talk to it through :class:`WorkerBackend`, which is a
:class:`~toolwire.Backend` like any other: the chats, their tools and the
conversation stay in the host; only the model turns cross the pipe, as JSON lines
(:mod:`.worker_wire`), events as their ``to_dict()``.

When the worker dies, the turn under way ends with an ``error`` event of kind
``model_crashed`` naming how it died (the server answers ``503`` then), one warning
is logged with how it died, a new worker is started, and the next turn waits for it.
Nothing else is lost: the other clients' requests wait their turn as usual, the
dashboard keeps its conversations, and each chat's history is the host's, not the
worker's.

A request that crashes the worker every time must not cost a model load per
request: :class:`CrashBackoff` restarts at once after one crash, and after crashes
in a row (no turn ended between them) waits longer each time (1 s, 2 s, 4 s... at
most a minute); while it waits, turns are answered at once with ``model_crashed``
saying when the worker comes back, and the first turn that ends resets it.
"""

from __future__ import annotations

import logging
import math
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

import attrs

from ..errors import BackendError, TemplateError
from ..events import ErrorEvent, Event, event_from_dict
from ..families.selection import DERIVED_FAMILY
from ..hooks.manager import PluginManager
from ..isolation.supervisor import ChildGone, SupervisedChild
from ..vocabulary.backend import ModelRequest, TurnEnd
from ..vocabulary.call_ids import default_call_id, nine_char_call_id
from ..vocabulary.cancel import CancelToken
from .worker_wire import decode_end, encode_request

__all__ = ["CRASH_KIND", "CrashBackoff", "WorkerBackend", "WorkerSpec"]

logger = logging.getLogger("toolwire.backends.model_worker")

CRASH_KIND: Final = "model_crashed"
"""The ``error`` event kind of a turn whose worker died."""

_POLL_SECONDS: Final = 0.05
_DRAIN_SECONDS: Final = 30.0  # how long a turn left early may take to end in the worker
_MAX_BACKOFF: Final = 30.0
_DIED: Final = object()


@attrs.frozen
class WorkerSpec:
    """The backend a worker builds: a backend plugin's name and its options (JSON values).

    :ivar label: what to call the model in messages.
    """

    backend: str
    options: Mapping[str, Any]
    label: str = "the model"


@attrs.define
class CrashBackoff:
    """How long to wait before starting the model worker again after it crashed.

    One crash restarts at once: a rare crash costs one model load. Each further
    crash in a row (no turn ended since the last one) doubles the wait from
    ``first_delay``, up to ``max_delay``, so a request that crashes the worker every
    time costs a few loads a minute, not one per request. A turn that ends resets it.

    :ivar crashes: crashes in a row so far.
    """

    first_delay: float = 1.0
    max_delay: float = 60.0
    crashes: int = 0
    _resume_at: float = 0.0

    def crashed(self) -> float:
        """Count a crash; return the seconds to wait before the next start."""
        self.crashes += 1
        delay = 0.0 if self.crashes == 1 else min(
            self.max_delay, self.first_delay * 2 ** (self.crashes - 2))
        self._resume_at = time.monotonic() + delay
        return delay

    def turn_ended(self) -> None:
        """A turn ended in a worker: the crashes are no longer in a row."""
        self.crashes = 0
        self._resume_at = 0.0

    def waiting(self) -> float:
        """Seconds left before the next start is allowed (``0``: none)."""
        return max(0.0, self._resume_at - time.monotonic())


_OOM_SCORE: Final = 800  # of -1000..1000: the worker goes first when memory runs out


class _Worker:
    """One worker process, and a thread that reads what it says."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.process = SupervisedChild([sys.executable, "-m", "toolwire.backends.worker_main"],
                                       oom_score=_OOM_SCORE)
        self.messages: queue.Queue[Any] = queue.Queue()
        self.send({"backend": spec.backend, "options": dict(spec.options)})
        threading.Thread(target=self._read, daemon=True, name="toolwire-worker-reader").start()

    def _read(self) -> None:
        try:
            while True:
                self.messages.put(self.process.receive())
        except ChildGone:
            self.messages.put(_DIED)

    def send(self, message: Mapping[str, Any]) -> bool:
        """Write one message; ``False`` when the worker is gone."""
        return self.process.send(message)

    def how_it_ended(self) -> str:
        """How the process ended, for people, once it has (waiting a little)."""
        end = self.process.wait(5.0)
        return "it stopped answering" if end is None else end.describe()

    def stop(self) -> None:
        """End the process (its pipe closes: it exits; a hung one is killed)."""
        self.process.close(5.0)


class _Died(Exception):
    def __init__(self, how: str) -> None:
        super().__init__(how)
        self.how = how


class WorkerBackend:
    """A :class:`~toolwire.Backend` whose model runs in a supervised worker process.

    :param spec: the backend the worker builds.
    :param plugins: the server's plugin manager (call ids in the form of the family
        the worker's template selected).
    :param start_timeout: seconds a turn waits for a worker that is (re)starting.
    :param backoff: when to start a worker again after crashes in a row.
    :raises ToolwireError: see :meth:`start`.
    """

    def __init__(self, spec: WorkerSpec, plugins: PluginManager, *,
                 start_timeout: float = 600.0, backoff: CrashBackoff | None = None) -> None:
        self.spec = spec
        self.backoff = backoff or CrashBackoff()
        self.name = spec.backend
        self.start_timeout = start_timeout
        self._plugins = plugins
        self._make_call_id: Callable[[int], str] = default_call_id
        self._worker: _Worker | None = None
        self._ready = threading.Event()
        self._state_lock = threading.Lock()
        self._turn_lock = threading.Lock()
        self._turns = 0
        self._closed = False
        self._closing = threading.Event()  # set by close(): a back-off wait ends at once
        self._starting = False
        self._failures = 0
        self._refused = ""  # the backend's refusal of an option value, from the last start
        self.restarts = 0
        """Workers started after a crash."""
        self.last_exit = ""
        """How the last worker that died ended (``""``: none has)."""
        self.start_error = ""
        """Why the last start failed (``""``: it did not)."""
        self.token_logprobs = False
        """Whether the worker's backend gives token log probabilities (its word)."""
        self.counts_tokens = False
        """Whether the worker's backend counts a prompt's tokens (:meth:`prompt_tokens`)."""

    # -- the worker's life ---------------------------------------------------------------

    def start(self) -> WorkerBackend:
        """Start the worker and wait until its model is loaded; return ``self``.

        :raises BackendError: the worker could not load the model (the message is
            the worker's), or it died while loading.
        :raises ValueError: the backend refused an option value (as it does in-process).
        """
        error = self._launch()
        if self._refused:
            raise ValueError(self._refused)  # what the backend raises in-process
        if error:
            raise BackendError(f"the model worker could not start: {error}", kind="load")
        return self

    def _launch(self, *, restart: bool = False) -> str:
        """Start a worker and wait for its word; ``""`` once it is ready, else why not."""
        worker = _Worker(self.spec)
        message = worker.messages.get()
        if isinstance(message, dict) and message.get("op") == "ready":
            self._adopt_call_ids(str(message.get("call_ids") or ""))
            self.token_logprobs = message.get("logprobs") is True
            self.counts_tokens = message.get("counts") is True
            with self._state_lock:
                if self._closed:
                    worker.stop()
                    return "the backend was closed"
                self._worker = worker
                self.restarts += int(restart)
                self._failures = 0
                self.start_error = ""
                self._ready.set()
            return ""
        if isinstance(message, dict) and message.get("op") == "failed":
            error = str(message.get("error") or "it failed")
            self._refused = str(message.get("refused") or "")
            worker.stop()
        else:
            error = f"it died while loading ({worker.how_it_ended()})"
        self.start_error = error
        return error

    def _adopt_call_ids(self, family: str) -> None:
        if family == DERIVED_FAMILY:
            self._make_call_id = nine_char_call_id  # what derived parsers are checked with
        elif family in self._plugins.parsers():
            self._make_call_id = self._plugins.parser(family).make_call_id

    def _restart(self, delay: float = 0.0) -> None:
        """Start workers until one is ready (backing off while they fail), in a thread;
        the first start waits ``delay`` seconds (the crash back-off)."""
        with self._state_lock:
            if self._starting or self._closed:
                return
            self._starting = True

        def run() -> None:
            try:
                wait = delay
                # Wait on close(), not a sleep: a worker closed during a back-off is never
                # started afterwards (a 600 s wait used to start one long after the close).
                while not self._closing.wait(wait):
                    if not self._launch(restart=True):
                        return
                    self._failures += 1
                    wait = min(_MAX_BACKOFF, 0.5 * 2 ** (self._failures - 1))
            finally:
                with self._state_lock:
                    self._starting = False

        threading.Thread(target=run, name="toolwire-worker-restart", daemon=True).start()

    def _lost(self, worker: _Worker) -> str:
        """The worker died: say how (in the log too), and start another when the
        crash back-off allows."""
        how = worker.how_it_ended()
        with self._state_lock:
            if self._worker is worker:
                self._worker = None
                self._ready.clear()
        worker.stop()
        self.last_exit = how
        delay = self.backoff.crashed()
        when = "now" if not delay else \
            f"in {delay:g} s ({self.backoff.crashes} crashes in a row)"
        logger.warning("the model worker (pid %s) running %s died: %s; a new one starts %s",
                       worker.process.pid, self.spec.label, how, when)
        self._restart(delay)
        return how

    @property
    def state(self) -> str:
        """``ready``, ``restarting`` (a new worker is loading the model) or ``closed``."""
        if self._closed:
            return "closed"
        return "ready" if self._ready.is_set() else "restarting"

    def status(self) -> dict[str, Any]:
        """The worker's state for ``/healthz``."""
        worker = self._worker
        status: dict[str, Any] = {"state": self.state, "restarts": self.restarts,
                                  "pid": worker.process.pid if worker is not None else None}
        if self.last_exit:
            status["last_exit"] = self.last_exit
        if self.start_error and not self._ready.is_set():
            status["start_error"] = self.start_error
        return status

    def close(self) -> None:
        """Stop the worker (the backend answers no turn afterwards)."""
        with self._state_lock:
            self._closed = True
            self._closing.set()
            worker, self._worker = self._worker, None
            self._ready.clear()
        if worker is not None:
            worker.stop()

    # -- the Backend protocol -------------------------------------------------------------

    def make_call_id(self, index: int) -> str:
        """A call id in the form of the worker's parser family."""
        return self._make_call_id(index)

    def _wait_ready(self, cancel: CancelToken) -> _Worker | str | None:
        """The ready worker; ``None`` when cancelled first; the reason it is not there."""
        deadline = time.monotonic() + self.start_timeout
        while True:
            if cancel.cancelled:
                return None
            worker = self._worker
            if worker is not None and self._ready.is_set():
                return worker
            if self._closed:
                return "the model worker was stopped"
            waiting = self.backoff.waiting()
            if waiting:
                return (f"the worker process running {self.spec.label} crashed "
                        f"{self.backoff.crashes} times in a row (last: {self.last_exit}); "
                        f"it is started again in {math.ceil(waiting)} s. The conversation is "
                        "kept: send the message again then, or change what made it crash.")
            if worker is None and not self._starting:
                self._restart()
            if time.monotonic() > deadline:
                detail = f" (the last start failed: {self.start_error})" if self.start_error \
                    else ""
                return f"the model worker is still starting after {self.start_timeout:g} s" \
                       f"{detail}; try again later"
            self._ready.wait(_POLL_SECONDS)

    def stream_turn(self, request: ModelRequest, cancel: CancelToken) -> Iterator[Event | TurnEnd]:
        """Run one turn in the worker; yield its events as they come, then a ``TurnEnd``.

        A worker that dies ends the turn with an ``error`` of kind ``model_crashed``
        and ``TurnEnd("error")``, and is restarted. Never raises.
        """
        while not self._turn_lock.acquire(timeout=_POLL_SECONDS):
            if cancel.cancelled:
                yield TurnEnd("cancelled")
                return
        try:
            found = self._wait_ready(cancel)
            if found is None:
                yield TurnEnd("cancelled")
                return
            if isinstance(found, str):
                yield ErrorEvent(CRASH_KIND, found)
                yield TurnEnd("error")
                return
            yield from self._run(found, request, cancel)
        finally:
            self._turn_lock.release()

    def prompt_tokens(self, request: ModelRequest) -> int:
        """The tokens of the prompt ``request`` renders, counted by the worker's backend
        (its :meth:`~toolwire.plugin_api.TemplatedBackend.prompt_tokens`); one at a
        time with turns.

        :raises TemplateError: the template failed.
        :raises BackendError: the backend cannot count, or the worker is not there.
        """
        with self._turn_lock:
            found = self._wait_ready(CancelToken())
            if isinstance(found, str) or found is None:
                raise BackendError(found or "the model worker is not ready", kind=CRASH_KIND)
            if not self.counts_tokens:
                raise BackendError(f"the {self.spec.backend} backend cannot count a prompt's "
                                   "tokens", kind="unsupported")
            self._turns += 1
            turn = self._turns
            try:
                if not found.send({"op": "count", "id": turn,
                                   "request": encode_request(request)}):
                    raise _Died(self._lost(found))
                while True:
                    message = self._next(found)
                    if message is not None and message.get("id") == turn \
                            and message.get("op") == "counted":
                        break
            except _Died as died:
                raise BackendError(self._crash_message(died.how), kind=CRASH_KIND) from None
        if "tokens" in message:
            return int(message["tokens"])
        error = str(message.get("error") or "the count failed")
        if message.get("kind") == "template":
            raise TemplateError(error)
        raise BackendError(error, kind="backend")

    def _run(self, worker: _Worker, request: ModelRequest,
             cancel: CancelToken) -> Iterator[Event | TurnEnd]:
        self._turns += 1
        turn = self._turns
        ended = False
        cancel_sent = False
        try:
            if not worker.send({"op": "turn", "id": turn, "request": encode_request(request)}):
                raise _Died(self._lost(worker))
            while True:
                if cancel.cancelled and not cancel_sent:
                    cancel_sent = worker.send({"op": "cancel", "id": turn,
                                               "reason": cancel.reason})
                message = self._next(worker)
                if message is None or message.get("id") != turn:
                    continue
                if message.get("op") == "end":
                    ended = True
                    self.backoff.turn_ended()
                    yield decode_end(message.get("turn_end") or {})
                    return
                yield event_from_dict(message["event"])
        except _Died as died:
            ended = True
            yield ErrorEvent(CRASH_KIND, self._crash_message(died.how))
            yield TurnEnd("error")
        finally:
            if not ended:  # left early (the caller closed the stream): end it there too
                self._drain(worker, turn)

    def _next(self, worker: _Worker) -> dict[str, Any] | None:
        """The worker's next message, ``None`` after a short wait; raises :class:`_Died`."""
        try:
            message = worker.messages.get(timeout=_POLL_SECONDS)
        except queue.Empty:
            return None
        if message is _DIED:
            raise _Died(self._lost(worker))
        return message if isinstance(message, dict) else None

    def _drain(self, worker: _Worker, turn: int) -> None:
        if not worker.send({"op": "cancel", "id": turn, "reason": "stopped"}):
            return
        deadline = time.monotonic() + _DRAIN_SECONDS
        while time.monotonic() < deadline:
            try:
                message = self._next(worker)
            except _Died:
                return
            if message is not None and message.get("id") == turn and message.get("op") == "end":
                return
        self._lost(worker)  # a turn that will not end: the worker is replaced

    def _crash_message(self, how: str) -> str:
        advice = " If it keeps crashing on this model, try --no-repack." \
            if self.spec.backend == "llama_cpp" else ""
        waiting = self.backoff.waiting()
        restart = "a new one is starting and the next request is answered as usual" \
            if not waiting else (f"it crashed {self.backoff.crashes} times in a row, so a new "
                                 f"one starts in {math.ceil(waiting)} s")
        return (f"the worker process running {self.spec.label} died while answering ({how}); "
                f"{restart}. The conversation is kept: send the message again.{advice}")

    def __repr__(self) -> str:
        return f"WorkerBackend({self.spec.backend!r}, {self.spec.label!r}, {self.state})"
