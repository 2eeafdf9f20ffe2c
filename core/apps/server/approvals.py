"""Approval of write calls from the client: the page asks, the reply waits.

With approvals on (``create_app(approvals=True)``, ``toolwire serve --approvals``),
each ``/v1/chat`` reply gets a :class:`ReplyApprovals` as its chat's approver.
Before a call of a tool that is not read-only runs, it puts an
:class:`~toolwire.events.ApprovalRequestEvent` into the reply's stream (after the
call's ``tool_call``) and waits, in the chat's worker thread, until the client
answers at ``POST /v1/chat/{reply id}/approval`` (:mod:`.approval_route`) with
``{"id": <call id>, "answer": "approve" | "always" | "deny"}``. A reply that is
cancelled (or whose client goes away) while it waits, or an answer that does not
come within the timeout, denies the call: nothing is written without a yes.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from typing import Any

from ...conversation.approval import Approval, ApprovalRequest
from ...events import ApprovalRequestEvent, Event, ToolCallEvent
from ...limits import ServerLimits
from ...vocabulary.cancel import CancelToken

__all__ = ["ReplyApprovals",
           "parse_approval_answer", "with_approval_requests"]


_POLL_SECONDS = 0.05  # how often a waiting call looks at the reply's cancel token
_ANSWERS = {a.value: a for a in Approval}


class _Waiting:
    """One call waiting for its answer."""

    def __init__(self) -> None:
        self.answered = threading.Event()
        self.answer: Approval = Approval.DENY


class ReplyApprovals:
    """The approver of one reply: announces each write call, waits for the client.

    :param token: the reply's cancel token (a cancelled reply denies at once).
    :param announce: puts an event into the reply's stream; called from the chat's
        worker thread, so it must be thread-safe.
    :param timeout: seconds to wait for an answer before denying.
    """

    def __init__(self, token: CancelToken, announce: Callable[[ApprovalRequestEvent], None],
                 timeout: float = ServerLimits().approval_timeout) -> None:
        self.token = token
        self.announce = announce
        self.timeout = timeout
        self._waiting: dict[str, _Waiting] = {}
        self._lock = threading.Lock()

    @property
    def waiting(self) -> frozenset[str]:
        """The ids of the calls waiting for an answer now."""
        with self._lock:
            return frozenset(self._waiting)

    def __call__(self, request: ApprovalRequest) -> Approval:
        """Ask the client about ``request`` and wait for the answer (the approver)."""
        call = request.call
        slot = _Waiting()
        with self._lock:
            self._waiting[call.id] = slot
        try:
            self.announce(ApprovalRequestEvent(call.id, call.name, call.arguments))
            deadline = time.monotonic() + self.timeout
            while not self.token.cancelled:
                left = deadline - time.monotonic()
                if left <= 0:
                    return Approval.DENY
                if slot.answered.wait(min(left, _POLL_SECONDS)):
                    return slot.answer
            return Approval.DENY
        finally:
            with self._lock:
                self._waiting.pop(call.id, None)

    def answer(self, call_id: str, answer: Approval) -> bool:
        """Answer the call ``call_id``; ``False`` when no call with that id waits."""
        with self._lock:
            slot = self._waiting.pop(call_id, None)
        if slot is None:
            return False
        slot.answer = answer
        slot.answered.set()
        return True


class _Failure:
    """What the chat's event iterator raised, handed on to the reader."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


_END = object()


async def with_approval_requests(events: AsyncIterator[Event],
                                 requests: asyncio.Queue[ApprovalRequestEvent],
                                 ) -> AsyncGenerator[Event, None]:
    """The reply's events with the approval requests put in, each after its ``tool_call``.

    The chat's events come through ``events``; the approver puts its requests into
    ``requests`` from the worker thread. Two long-lived tasks forward both into one
    queue (a hop per event, no task per event). A request is held back until its call's
    ``tool_call`` has gone out, so a client always knows the call it is asked about.
    What ``events`` raises is raised here.
    """
    merged: asyncio.Queue[Any] = asyncio.Queue()

    async def forward_events() -> None:
        try:
            async for event in events:
                merged.put_nowait(event)
        except Exception as exc:
            merged.put_nowait(_Failure(exc))
        finally:
            merged.put_nowait(_END)

    async def forward_requests() -> None:
        while True:
            merged.put_nowait(await requests.get())

    tasks = (asyncio.create_task(forward_events()), asyncio.create_task(forward_requests()))
    announced: set[str] = set()
    held: list[ApprovalRequestEvent] = []
    try:
        while True:
            item = await merged.get()
            if item is _END:
                return
            if isinstance(item, _Failure):
                raise item.exc
            if isinstance(item, ApprovalRequestEvent) and item.id not in announced:
                held.append(item)
                continue
            yield item
            if isinstance(item, ToolCallEvent):
                announced.add(item.id)
                for request in [r for r in held if r.id == item.id]:
                    held.remove(request)
                    yield request
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def parse_approval_answer(data: Any) -> tuple[str, Approval]:
    """Read an approval body: ``{"id": <call id>, "answer": "approve"|"always"|"deny"}``.

    :raises ValueError: the body is not of that shape.
    """
    if not isinstance(data, Mapping):
        raise ValueError('the body must be a JSON object: {"id": ..., "answer": ...}')
    call_id, answer = data.get("id"), data.get("answer")
    if not isinstance(call_id, str) or not call_id:
        raise ValueError('"id" must be the id of the call to answer')
    if not isinstance(answer, str) or answer not in _ANSWERS:
        raise ValueError('"answer" must be "approve", "always" or "deny"')
    return call_id, _ANSWERS[answer]
