"""The model a server serves, which may still be loading when the server starts.

``toolwire serve`` starts listening at once and loads the model in a worker
thread: until it is ready, the model routes answer ``503`` (and ``/healthz``
says ``loading``); if loading fails, the server stops with the error. A local
model runs in a supervised worker process (:mod:`toolwire.backends.model_worker`), whose state
``/healthz`` shows too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from ...backends.model_worker import WorkerBackend
from ...vocabulary.backend import Backend
from ...vocabulary.history import Message

if TYPE_CHECKING:
    from ...conversation.chat import Chat

__all__ = ["ChatFactory", "LoadedModel", "ServedModel"]

ChatFactory = Callable[[Sequence[Message], str | None], "Chat"]
"""``make_chat(history, system_prompt) -> Chat``; ``system_prompt`` is ``None``
unless the request began with system messages (then it replaces the default)."""


@attrs.frozen
class LoadedModel:
    """A model ready to answer.

    :ivar make_chat: builds the :class:`~toolwire.Chat` of one ``/v1/chat`` request
        (the chats share one backend).
    :ivar backend: the backend the chat-completions route runs turns on directly;
        ``None``: the one of a chat made with no history.
    :ivar label: a description for people (the dashboard, ``/healthz``).
    :ivar model_id: the id OpenAI clients send as ``model`` (``/v1/models``).
    """

    make_chat: ChatFactory
    backend: Backend | None = None
    label: str = ""
    model_id: str = "toolwire"


class ServedModel:
    """The served model's state: ``loading``, ``ready`` or ``failed``.

    :param loaded: the model when it is ready at once; ``None`` starts in ``loading``.
    :param label: what to call the model while it loads.
    :param model_id: the id clients will use, known before loading ends.
    """

    def __init__(self, loaded: LoadedModel | None = None, *, label: str = "",
                 model_id: str = "") -> None:
        self._loaded = loaded
        self._error: str | None = None
        self._backend: Backend | None = loaded.backend if loaded else None
        self.label = loaded.label if loaded else label
        self.model_id = loaded.model_id if loaded else (model_id or "toolwire")

    @property
    def state(self) -> str:
        """``loading``, ``ready`` or ``failed``."""
        if self._loaded is not None:
            return "ready"
        return "failed" if self._error is not None else "loading"

    @property
    def error(self) -> str | None:
        """Why loading failed, once it has."""
        return self._error

    @property
    def loaded(self) -> LoadedModel | None:
        """The model when ready, else ``None``."""
        return self._loaded

    def set_ready(self, loaded: LoadedModel) -> None:
        """The model has loaded (safe from the loading thread)."""
        self.label = loaded.label or self.label
        self.model_id = loaded.model_id
        self._backend = loaded.backend
        self._loaded = loaded

    def set_failed(self, error: str) -> None:
        """Loading failed (safe from the loading thread)."""
        self._error = error

    def backend(self) -> Backend:
        """The backend of the ready model (made once from a chat when not given).

        :raises RuntimeError: the model is not ready.
        """
        if self._loaded is None:
            raise RuntimeError(f"the model is {self.state}")
        if self._backend is None:
            self._backend = self._loaded.make_chat((), None).backend
        return self._backend

    def worker_status(self) -> dict[str, Any] | None:
        """The model worker's state (``ready``, ``restarting``, its restarts...), or
        ``None`` when the model runs in the server's own process."""
        if self._loaded is None:
            return None
        backend = self.backend()
        return backend.status() if isinstance(backend, WorkerBackend) else None
