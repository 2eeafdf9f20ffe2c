"""One reply's HTTP stream, read on a worker thread so a cancel ends the turn at once.

A server can be silent for a long time before its first token (a long prompt
being processed) and between tokens, or stall for good. Reading the stream on
the caller's thread would make a cancel wait for the next byte (a Ctrl-C in the
chat would hang until the server sent one); :class:`StreamPump` reads it on a
daemon thread and hands the items over through a queue, which the caller polls
every :data:`POLL_SECONDS` while watching its cancel token. On a cancel the
caller returns at once and the worker, at the next item (or when its wait for a
retry ends), closes the connection from its own thread (``httpx2`` connections
are not shared between threads mid-read), so the server sees the client go.

Opening the stream is retried on the worker, as the backend's
:class:`RetryPolicy` decides (429 and 5xx answers after the wait the server asks
for, or an exponential backoff); an async backend asks the same policy. Each retry is announced by a
:class:`RetryNotice`. The HTTP backends share it: ``openai_compat`` (chat
completions) and ``completions`` (text completions).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any, Final

import attrs

from ..events import DiagnosticEvent
from .remote import RETRYABLE_STATUS, retry_after_seconds, status_of

__all__ = ["POLL_SECONDS", "Broken", "OpenedStream", "RetryNotice", "RetryPolicy", "StreamPump"]

POLL_SECONDS: Final = 0.05
"""How often a waiting caller looks at its cancel token."""


@attrs.frozen
class OpenedStream:
    """A reply whose answer has begun: its items, and how to close the connection."""

    items: Iterator[Any]
    close: Callable[[], None]


def _never(exc: BaseException) -> bool:
    return False


@attrs.frozen
class RetryPolicy:
    """How often and how long opening a stream is retried: the one policy of the
    HTTP backends, for a sync :class:`StreamPump` and an async loop alike.

    A 429 or 5xx answer is retried after the wait the server asks for
    (``retry-after``), else after ``backoff`` seconds, doubled on each retry: at
    most ``max_retries`` times and ``max_wait`` seconds in all. An answer that
    ``resend(exc)`` accepts (the backend dropped a field the server refused) is
    sent again at once, uncounted.

    :raises ValueError: a number is negative.
    """

    max_retries: int = 3
    max_wait: float = 30.0
    backoff: float = 1.0
    resend: Callable[[BaseException], bool] = _never

    def __attrs_post_init__(self) -> None:
        if self.max_retries < 0 or self.max_wait < 0 or self.backoff < 0:
            raise ValueError("max_retries, max_retry_wait and retry_backoff must be >= 0")

    def decide(self, exc: BaseException, attempt: int, waited: float
               ) -> float | BaseException | None:
        """Seconds to wait before the next attempt, ``None`` to send again at once
        (not counted), or the exception to report."""
        if self.resend(exc):
            return None
        if status_of(exc) in RETRYABLE_STATUS and attempt < self.max_retries:
            asked = retry_after_seconds(exc)
            delay = asked if asked is not None else self.backoff * (2 ** attempt)
            if waited + delay <= self.max_wait:
                return delay
        return exc

    def note(self, notice: RetryNotice, where: str) -> DiagnosticEvent:
        """The ``retrying`` diagnostic that says a retry follows."""
        return DiagnosticEvent(
            "retrying", f"HTTP {status_of(notice.error)} from {where}; retry "
                        f"{notice.attempt + 1} of {self.max_retries} in {notice.delay:g} s")


@attrs.frozen
class RetryNotice:
    """Opening failed with a retryable answer; the next attempt follows after ``delay``."""

    error: BaseException
    delay: float
    attempt: int


@attrs.frozen
class Broken:
    """The stream failed.

    :ivar error: the exception (an SDK error, or whatever the reader raised).
    :ivar opened: the answer had begun (a cut mid-reply, not a refused request).
    :ivar retries: retries made before giving up.
    """

    error: BaseException
    opened: bool
    retries: int = 0


Delivered = Any
"""An item of the stream, a :class:`RetryNotice` or a :class:`Broken`."""


class _Done:
    pass


_DONE: Final = _Done()


class StreamPump:
    """Opens a stream (with retries) and reads it on a daemon thread.

    :param open_stream: opens the stream; raises SDK errors.
    :param policy: what to do when opening fails.
    """

    def __init__(self, open_stream: Callable[[], OpenedStream], policy: RetryPolicy) -> None:
        self._open = open_stream
        self._policy = policy
        self._queue: queue.SimpleQueue[Delivered | _Done] = queue.SimpleQueue()
        self._abandoned = threading.Event()
        self._thread = threading.Thread(target=self._run, name="toolwire-completions-stream",
                                        daemon=True)

    def start(self) -> StreamPump:
        """Begin opening and reading."""
        self._thread.start()
        return self

    def abandon(self) -> None:
        """Stop: the worker closes the stream at its next item and drops the rest."""
        self._abandoned.set()

    def items(self, cancelled: Callable[[], bool]) -> Iterator[Delivered]:
        """What the worker delivers, in order, until the stream ends or ``cancelled()``.

        Returns as soon as ``cancelled()`` is true (checked at least every
        :data:`POLL_SECONDS`), having abandoned the stream.
        """
        while True:
            try:
                item = self._queue.get(timeout=POLL_SECONDS)
            except queue.Empty:
                if cancelled():
                    self.abandon()
                    return
                continue
            if isinstance(item, _Done):
                return
            yield item

    def _put(self, item: Delivered | _Done) -> None:
        self._queue.put(item)

    def _run(self) -> None:
        try:
            stream = self._open_with_retries()
            if stream is not None:
                self._read(stream)
        finally:
            self._put(_DONE)

    def _open_with_retries(self) -> OpenedStream | None:
        attempt, waited = 0, 0.0
        while not self._abandoned.is_set():
            try:
                return self._open()
            except Exception as exc:
                step = self._policy.decide(exc, attempt, waited)
                if isinstance(step, BaseException):
                    self._put(Broken(step, opened=False, retries=attempt))
                    return None
                if step is not None:
                    self._put(RetryNotice(exc, step, attempt))
                    attempt += 1
                    waited += step
                    if self._abandoned.wait(step):
                        return None
        return None

    def _read(self, stream: OpenedStream) -> None:
        try:
            for item in stream.items:
                if self._abandoned.is_set():
                    break
                self._put(item)
        except Exception as exc:
            if not self._abandoned.is_set():
                self._put(Broken(exc, opened=True))
        finally:
            _close_quietly(stream.close)


def _close_quietly(close: Callable[[], Any]) -> None:
    try:
        close()
    except Exception:  # the connection is already gone; nothing to release
        return
