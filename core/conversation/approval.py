"""Asking before a tool that changes things runs.

An application passes an *approver* to :class:`toolwire.Chat` (``approve=``) or to
:class:`~toolwire.conversation.dispatch.Dispatcher`. The dispatcher calls it for a
call of a tool that is not read-only, after the call has been validated and just
before it runs, with an :class:`ApprovalRequest`. The approver answers with an
:class:`Approval`:

* ``APPROVE``: run this call;
* ``ALWAYS``: run it, and every later call of the same tool in this session
  without asking again;
* ``DENY``: do not run it. The model reads a refusal as the tool's result
  (``error_kind`` ``"denied"``), so it can go on without it.

The terminal chat asks the user (yes / no / always); a dashboard can answer from
a browser through the same callable. An approver that raises denies the call: a
broken approver must never let a write through.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable

import attrs

from ..errors import ToolDeniedError
from ..vocabulary.history import ToolCall
from ..vocabulary.tools import Tool

__all__ = ["Approval", "ApprovalGate", "ApprovalRequest", "Approver"]


class Approval(enum.Enum):
    """An approver's answer for one call."""

    APPROVE = "approve"
    """Run this call."""
    DENY = "deny"
    """Do not run it; the model reads a refusal."""
    ALWAYS = "always"
    """Run it and every later call of this tool in the session, without asking."""


@attrs.frozen
class ApprovalRequest:
    """What an approver is asked about.

    :ivar call: the model's call, with its validated arguments.
    :ivar tool: the tool it would run (its name, description and schema).
    """

    call: ToolCall
    tool: Tool


Approver = Callable[[ApprovalRequest], Approval]
"""``approve(request) -> Approval``, called before a tool that is not read-only runs."""


class ApprovalGate:
    """One session's approver and the tools it approved for good (``ALWAYS``).

    :param approver: asked for each call of a tool that is not read-only.
    """

    def __init__(self, approver: Approver) -> None:
        self.approver = approver
        self._always: set[str] = set()
        self._lock = threading.Lock()

    @property
    def always_approved(self) -> frozenset[str]:
        """The tools the approver answered ``ALWAYS`` for."""
        with self._lock:
            return frozenset(self._always)

    def check(self, call: ToolCall, tool: Tool) -> None:
        """Ask about ``call`` unless ``tool`` is read-only or approved for good.

        :raises ToolDeniedError: the approver denied the call, answered something
            that is not an :class:`Approval`, or raised.
        """
        if tool.read_only:
            return
        with self._lock:
            if tool.name in self._always:
                return
        try:
            answer = self.approver(ApprovalRequest(call, tool))
        except Exception as exc:
            raise ToolDeniedError(
                f"tool {tool.name!r} was not run: asking the user for approval failed "
                f"({type(exc).__name__}: {exc}).", tool=tool.name) from exc
        if answer is Approval.ALWAYS:
            with self._lock:
                self._always.add(tool.name)
            return
        if answer is Approval.APPROVE:
            return
        raise ToolDeniedError(
            f"the user did not allow this call of {tool.name!r}; it was not run. Do not "
            "repeat it: continue without it, or ask the user what to do.", tool=tool.name)
