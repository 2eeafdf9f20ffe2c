"""The model worker: one backend in a process of its own.

Started by :class:`.model_worker.WorkerBackend` as ``python -m
toolwire.backends.worker_main``, a supervised child (:mod:`toolwire.isolation`:
it dies with its host, and the kernel's out-of-memory killer takes it first): it
reads the backend to build from its pipe, builds it through the plugin manager,
says ``ready`` and then runs the turns it is sent, one at a time, writing each item
back as it comes (the protocol is :mod:`.worker_wire`'s). A thread reads the pipe
meanwhile, so a cancel reaches the turn under way; when the host goes away (the
pipe ends) the worker exits at once, even mid-turn.

:data:`ABORT_HOOK_VARIABLE` is for tests only: a turn whose last user message holds
its value makes the worker call ``abort()`` after the turn's first item, a real
crash in the worker.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
from collections.abc import Mapping
from typing import Any, Final

from ..errors import ToolwireError
from ..events import ErrorEvent
from ..hooks.manager import default_plugin_manager
from ..isolation.pipe import ChildPipe
from ..vocabulary.backend import ModelRequest, TurnEnd
from ..vocabulary.cancel import CancelToken
from .worker_wire import decode_request, encode_end

__all__ = ["ABORT_HOOK_VARIABLE", "main"]

ABORT_HOOK_VARIABLE: Final = "TOOLWIRE_TEST_WORKER_ABORT"
"""Test-only: a turn whose last user message contains this variable's value aborts
the worker process after its first item."""

def _read_commands(pipe: ChildPipe, turns: queue.Queue[dict[str, Any]],
                   tokens: dict[int, CancelToken]) -> None:
    """Queue turns and cancel them as the host asks; exit when the host is gone."""
    while (message := pipe.receive()) is not None:
        if message.get("op") in ("turn", "count"):
            tokens[message["id"]] = CancelToken()
            turns.put(message)
        elif message.get("op") == "cancel":
            token = tokens.get(message.get("id", -1))
            if token is not None:
                token.cancel(str(message.get("reason") or "cancelled"))
    os._exit(0)  # the host closed the pipe (or died): nothing is left to answer


def _abort_for_tests(request: ModelRequest) -> bool:
    trigger = os.environ.get(ABORT_HOOK_VARIABLE, "")
    last = next((m for m in reversed(request.messages) if m.role == "user"), None)
    return bool(trigger) and last is not None and trigger in last.content


def _count(backend: Any, message: Mapping[str, Any], out: ChildPipe) -> None:
    """The tokens of the prompt a request renders, or why they cannot be counted."""
    answer: dict[str, Any] = {"op": "counted", "id": message["id"]}
    count = getattr(backend, "prompt_tokens", None)
    try:
        if count is None:
            raise ValueError(f"the {getattr(backend, 'name', '')} backend cannot count a "
                             "prompt's tokens")
        answer["tokens"] = int(count(decode_request(message["request"])))
    except Exception as exc:  # any failure is the answer, never the worker's end
        answer["error"] = f"{type(exc).__name__}: {exc}" if not isinstance(exc, ValueError) \
            else str(exc)
        answer["kind"] = "template" if isinstance(exc, ToolwireError) else "backend"
    out.send(answer)


def _run_turn(backend: Any, message: Mapping[str, Any], token: CancelToken,
              out: ChildPipe) -> None:
    turn = message["id"]
    try:
        request = decode_request(message["request"])
    except ValueError as exc:
        out.send({"op": "item", "id": turn, "event": ErrorEvent("backend", str(exc)).to_dict()})
        out.send({"op": "end", "id": turn, "turn_end": encode_end(TurnEnd("error"))})
        return
    crash = _abort_for_tests(request)
    end = TurnEnd("error")
    try:
        for item in backend.stream_turn(request, token):
            if isinstance(item, TurnEnd):
                end = item
                continue
            out.send({"op": "item", "id": turn, "event": item.to_dict()})
            if crash:
                os.abort()
    except Exception as exc:  # a backend must not raise; one that does ends its turn
        out.send({"op": "item", "id": turn,
                  "event": ErrorEvent("backend", f"{type(exc).__name__}: {exc}").to_dict()})
    if crash:
        os.abort()
    out.send({"op": "end", "id": turn, "turn_end": encode_end(end)})


def main() -> int:
    """Run the worker on its supervisor's pipe; return its status."""
    out = ChildPipe()
    spec = out.receive()
    if spec is None:
        return 0  # the host went away before it said what to load
    try:
        plugins = default_plugin_manager()
        backend = plugins.backend(str(spec["backend"])).create(**spec["options"])
    except Exception as exc:
        failed = {"op": "failed", "error": f"{type(exc).__name__}: {exc}"}
        if isinstance(exc, ValueError) and not isinstance(exc, ToolwireError):
            failed["refused"] = str(exc)  # the backend refused an option value: the user's input
        out.send(failed)
        return 1
    choice = getattr(backend, "template_choice", None)
    parser = choice(tools=True).parser if callable(choice) else None
    out.send({"op": "ready", "name": str(getattr(backend, "name", "")),
              "call_ids": parser.name if parser is not None else "",
              "logprobs": bool(getattr(backend, "token_logprobs", False)),
              "counts": callable(getattr(backend, "prompt_tokens", None))})
    turns: queue.Queue[dict[str, Any]] = queue.Queue()
    tokens: dict[int, CancelToken] = {}
    threading.Thread(target=_read_commands, args=(out, turns, tokens), daemon=True,
                     name="toolwire-worker-commands").start()
    while True:
        message = turns.get()
        token = tokens[message["id"]]
        try:
            if message.get("op") == "count":
                _count(backend, message, out)
            else:
                _run_turn(backend, message, token, out)
        finally:
            tokens.pop(message["id"], None)


if __name__ == "__main__":
    sys.exit(main())
