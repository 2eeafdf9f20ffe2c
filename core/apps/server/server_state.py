"""What the server's routes share: the model, its queue, the bounds, the live replies.

:func:`.app.create_app` makes one :class:`ServerState` and hands it to every route
(each route module imports it from here, never from the app that assembles them).
"""

from __future__ import annotations

import time
from typing import Any

from ...limits import ServerLimits
from ...vocabulary.cancel import CancelToken
from .approvals import ReplyApprovals
from .metrics import ServerMetrics
from .model_queue import ModelQueue
from .served_model import ServedModel

__all__ = ["ServerState"]


class ServerState:
    """What the routes share: the model, its queue, the bounds, the live replies.

    :ivar replies: the cancel token of every ``/v1/chat`` reply running or waiting.
    :ivar generations: the cancel token of every chat-completions request
        running or waiting.
    :ivar started: the Unix time the app was made (the model's ``created``).
    :ivar ask_approval: write calls wait for the client's approval.
    :ivar approvals: the approver of every ``/v1/chat`` reply running or waiting
        (with ``ask_approval``).
    """

    def __init__(self, model: ServedModel, limits: ServerLimits, queue: ModelQueue, *,
                 ask_approval: bool = False) -> None:
        self.model = model
        self.limits = limits
        self.queue = queue
        self.ask_approval = ask_approval
        self.approvals: dict[str, ReplyApprovals] = {}
        self.replies: dict[str, CancelToken] = {}
        self.generations: set[CancelToken] = set()
        self.started = int(time.time())
        self.caches: dict[str, Any] = {}
        """What the routes learn once per backend (the call-id form...)."""
        self.metrics: ServerMetrics | None = None
        """The figures ``/metrics`` shows (``None``: not counted)."""

    def worker_restarts(self) -> int:
        """Model workers started after a crash (``0`` without a worker)."""
        status = self.model.worker_status() if self.model.loaded is not None else None
        return int(status.get("restarts", 0)) if status else 0

    def cancel_all(self, reason: str) -> int:
        """Cancel every reply and generation; return how many ``/v1/chat`` replies."""
        tokens = list(self.replies.values())
        for token in [*tokens, *list(self.generations)]:
            token.cancel(reason)
        return len(tokens)
