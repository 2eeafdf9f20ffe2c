"""The chat loop: one fixed dispatch and validation loop around any backend.

A :class:`Chat` holds a conversation, a tool registry and a backend. ``send``
runs one exchange: model turn -> parse -> for each call: ``tool_call`` event,
run it, ``tool_result`` event, a tool message answering it -> next model turn,
until the model answers without calling tools. ``max_tool_iters`` bounds the
model turns; the last one is reserved for the answer: it offers no tools and
asks the model to answer from what it has, so the user always gets an answer.

``send`` is a plain iterator; ``asend`` is the same loop as an async iterator
(it runs the iterator in a worker thread), so a dashboard server and a script
share one implementation.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncGenerator, Generator, Iterable, Iterator, Mapping, Sequence
from typing import Any

import attrs

from ..boundaries import must_propagate
from ..events import (
    DiagnosticEvent,
    DoneEvent,
    ErrorEvent,
    Event,
    ReasoningEvent,
    TextEvent,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallEvent,
    ToolCallStartEvent,
    ToolResultEvent,
)
from ..hooks.manager import PluginManager, default_plugin_manager
from ..limits import DispatchLimits
from ..vocabulary.backend import Backend, ModelRequest, TurnEnd
from ..vocabulary.cancel import CancelToken
from ..vocabulary.history import Message, ToolCall, from_stored, to_stored
from ..vocabulary.tool_choice import ToolChoice, resolve_tool_choice
from ..vocabulary.tools import Tool, ToolRegistry
from .approval import Approver
from .dispatch import Dispatcher

__all__ = ["DEFAULT_FINAL_ANSWER_PROMPT", "Chat"]

_LIMITS = DispatchLimits()

DEFAULT_FINAL_ANSWER_PROMPT = (
    "No more tool calls are available for this request. Answer the user now, as well as "
    "you can, from the tool results above."
)
_CANCELLED_RESULT = "Not run: the user cancelled the reply before this call ran."
_NOT_A_BACKENDS_EVENT = ("the backend yielded a tool_call event, which only the chat loop "
                         "emits as it runs a call; a call the model wrote is a tool_call_end")


class _Failure:
    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


_END = object()


class Chat:
    """A conversation with one model and one set of tools.

    :param backend: the model (see :class:`toolwire.Backend`).
    :param tools: a :class:`ToolRegistry` or tools to put in one.
    :param system_prompt: strategy guidance for the model; tool descriptions come
        from the schemas and need not be repeated here.
    :param max_tool_iters: the most model turns one exchange may take (>= 1); the
        last is reserved for the answer and offers no tools.
    :param read_only: offer and run only read-only tools; a write tool called by
        name anyway is refused.
    :param workspace: given to tools that take a ``workspace`` parameter.
    :param tool_timeout: default seconds a tool may run.
    :param history: earlier messages (see :func:`toolwire.from_stored`).
    :param plugins: the plugin manager for observation hooks.
    :param final_answer_prompt: the user message that asks for the answer on the
        turn reserved for it.
    :param approve: asked before a call of a tool that is not read-only runs
        (``approve(ApprovalRequest) -> Approval``, see
        :mod:`toolwire.conversation.approval`); a denial becomes the tool's result
        (``error_kind`` ``"denied"``). ``None`` runs every call.
    :param max_tool_output_chars: the most characters of one tool result the
        model and the history get (the rest is cut with a note); ``None`` for no
        limit.
    :param tool_choice: ``"auto"`` (the model decides), ``"required"`` (it must
        call a tool), ``{"type": "function", "function": {"name": N}}`` (it must
        call ``N``) or ``"none"`` (no tools are offered). A required or named
        choice applies to the first model turn after each user message; the turns
        that follow the tool results are ``"auto"``, so the model can answer (and a
        forced call cannot repeat forever). Local backends enforce it with a
        grammar (``docs/grammar.md``); remote ones pass it to the provider.
    :param parallel_tool_calls: ``False``: at most one call per model turn.
    :raises toolwire.grammar.ToolChoiceError: ``tool_choice`` is none of those
        forms, or names a tool that is not in ``tools``.
    """

    def __init__(
        self,
        backend: Backend,
        tools: ToolRegistry | Iterable[Tool] = (),
        *,
        system_prompt: str | None = None,
        max_tool_iters: int = _LIMITS.max_tool_iters,
        read_only: bool = False,
        workspace: Any = None,
        tool_timeout: float | None = _LIMITS.tool_seconds,
        history: Sequence[Message] = (),
        plugins: PluginManager | None = None,
        final_answer_prompt: str = DEFAULT_FINAL_ANSWER_PROMPT,
        approve: Approver | None = None,
        max_tool_output_chars: int | None = _LIMITS.max_output_chars,
        tool_choice: ToolChoice = "auto",
        parallel_tool_calls: bool = True,
    ) -> None:
        if max_tool_iters < 1:
            raise ValueError("max_tool_iters must be at least 1")
        self.backend = backend
        self.registry = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
        self.system_prompt = system_prompt
        self.max_tool_iters = max_tool_iters
        self.dispatcher = Dispatcher(self.registry, read_only=read_only, workspace=workspace,
                                     timeout=tool_timeout, approve=approve,
                                     max_output_chars=max_tool_output_chars)
        self.final_answer_prompt = final_answer_prompt
        resolve_tool_choice(tool_choice, self.registry.names())
        self.tool_choice = tool_choice
        self.parallel_tool_calls = parallel_tool_calls
        self._history: list[Message] = list(history)
        self._plugins = plugins
        self._busy = threading.Lock()

    # -- state ----------------------------------------------------------------

    @property
    def history(self) -> tuple[Message, ...]:
        """The conversation so far (without the system prompt)."""
        return tuple(self._history)

    @property
    def read_only(self) -> bool:
        """Whether write tools are withheld."""
        return self.dispatcher.read_only

    @read_only.setter
    def read_only(self, value: bool) -> None:
        self.dispatcher.read_only = value

    def save(self) -> list[dict[str, Any]]:
        """The conversation in the stored tool-exchange format."""
        return to_stored(self._history)

    def load(self, records: Sequence[Mapping[str, Any]]) -> None:
        """Replace the conversation with a stored one."""
        self._history = from_stored(records, self.backend.make_call_id)

    def _plugins_or_default(self) -> PluginManager:
        if self._plugins is None:
            self._plugins = default_plugin_manager()
        return self._plugins

    # -- the loop ---------------------------------------------------------------

    def send(self, message: str, *,
             cancel: CancelToken | None = None) -> Generator[Event, None, None]:
        """Run one exchange for a user message; yield its events, ``done`` last.

        Stopping early (``break``, ``close()``) cancels the rest of the exchange;
        the history keeps what was written and every call gets its result.
        """
        if not self._busy.acquire(blocking=False):
            raise RuntimeError("this chat is already answering a message")
        try:
            yield from self._exchange(message, cancel or CancelToken())
        finally:
            self._busy.release()

    def ask(self, message: str, *, cancel: CancelToken | None = None) -> str:
        """Run one exchange and return the answer's text."""
        return "".join(e.text for e in self.send(message, cancel=cancel)
                       if isinstance(e, TextEvent))

    def _request(self, turn: int, final: bool) -> ModelRequest:
        messages: list[Message] = []
        if self.system_prompt:
            messages.append(Message.system(self.system_prompt))
        messages.extend(self._history)
        if final and turn > 1 and self._history and self._history[-1].role == "tool":
            messages.append(Message.user(self.final_answer_prompt))
        tools = () if final else tuple(self.dispatcher.offered_tools())
        choice = self.tool_choice if turn == 1 or self.tool_choice == "none" else "auto"
        return ModelRequest(tuple(messages), tools, final, choice if tools else "auto",
                            self.parallel_tool_calls)

    def _exchange(self, message: str, cancel: CancelToken) -> Iterator[Event]:
        self._history.append(Message.user(message))
        pending: list[_TurnOutcome] = []
        try:
            yield from self._turns(cancel, pending)
        finally:
            # Reached early when the caller stops iterating, or when something
            # raises (Ctrl-C in a tool): keep the conversation replayable.
            for outcome in pending:
                self._history.append(Message.assistant("".join(outcome.text), (),
                                                       "".join(outcome.reasoning) or None))
            self._answer_open_calls()

    def _turns(self, cancel: CancelToken, pending: list[_TurnOutcome]) -> Iterator[Event]:
        usage: dict[str, Any] = {}
        started = time.perf_counter()
        for turn in range(1, self.max_tool_iters + 1):
            final = turn == self.max_tool_iters
            outcome = _TurnOutcome()
            pending.append(outcome)
            yield from self._model_turn(self._request(turn, final), cancel, outcome)
            _add_usage(usage, outcome.end.usage if outcome.end else None)
            calls = outcome.calls
            stopped = cancel.cancelled or outcome.failed
            if final and calls and not stopped:
                yield DiagnosticEvent("call_in_final_turn",
                                      "the model called tools on the turn reserved for the "
                                      "answer; the calls were not run",
                                      ", ".join(c.name for c in calls))
                calls = []
            pending.clear()
            self._history.append(Message.assistant(
                "".join(outcome.text), () if stopped else calls,
                "".join(outcome.reasoning) or None))
            timings = {"total": round(time.perf_counter() - started, 6)}
            if cancel.cancelled:
                yield DoneEvent("cancelled", turn, usage or None, timings)
                return
            if outcome.failed:
                yield DoneEvent("error", turn, usage or None, timings)
                return
            if not calls:
                reason = "length" if outcome.end and outcome.end.reason == "length" else "stop"
                if reason == "length":
                    yield ErrorEvent("length", "the reply reached the token limit and was cut "
                                               "short; what was written is kept")
                yield DoneEvent(reason, turn, usage or None, timings)
                return
            yield from self._run_calls(calls, cancel)
            if cancel.cancelled:
                yield DoneEvent("cancelled", turn, usage or None,
                                {"total": round(time.perf_counter() - started, 6)})
                return
        raise AssertionError("unreachable: the final turn always returns")

    def _answer_open_calls(self) -> None:
        """Give every call of the last assistant turn a result, if it has none yet."""
        last = next((i for i in range(len(self._history) - 1, -1, -1)
                     if self._history[i].role == "assistant"), None)
        if last is None:
            return
        answered = {m.tool_call_id for m in self._history[last + 1:] if m.role == "tool"}
        for call in self._history[last].tool_calls:
            if call.id not in answered:
                self._history.append(Message.tool_result(call, _CANCELLED_RESULT, True))

    def _model_turn(self, request: ModelRequest, cancel: CancelToken,
                    outcome: _TurnOutcome) -> Iterator[Event]:
        ids: dict[int, str] = {}

        def call_id(index: int, given: str) -> str:
            if given:
                ids.setdefault(index, given)
                return given
            if index not in ids:
                ids[index] = self.backend.make_call_id(index)
            return ids[index]

        stream = self.backend.stream_turn(request, cancel)
        try:
            for item in stream:
                if isinstance(item, TurnEnd):
                    outcome.end = item
                    continue
                if isinstance(item, TextEvent):
                    outcome.text.append(item.text)
                elif isinstance(item, ReasoningEvent):
                    outcome.reasoning.append(item.text)
                elif isinstance(item, ToolCallStartEvent | ToolCallDeltaEvent):
                    item = attrs.evolve(item, id=call_id(item.index, item.id))
                elif isinstance(item, ToolCallEndEvent):  # a call the model wrote
                    cid = call_id(item.index, item.id)
                    outcome.calls.append(ToolCall(cid, item.name, item.arguments))
                    continue  # announced when it runs
                elif isinstance(item, ToolCallEvent):  # the loop's own event, not a backend's
                    item = ErrorEvent("backend", _NOT_A_BACKENDS_EVENT)
                if isinstance(item, ErrorEvent):
                    outcome.failed = True
                yield item
        except BaseException as exc:  # a backend must not raise; one that does ends the turn
            if must_propagate(exc):  # the generator closing, or the host's own Ctrl-C
                raise
            outcome.failed = True
            detail = str(exc)
            yield ErrorEvent("backend", f"{type(exc).__name__}: {detail}" if detail
                             else type(exc).__name__)
        finally:
            # release the backend's stream (a connection, a slot) now, not at GC
            _close_quietly(stream)
        if outcome.end is not None and outcome.end.reason == "error":
            outcome.failed = True

    def _run_calls(self, calls: list[ToolCall], cancel: CancelToken) -> Iterator[Event]:
        plugins = self._plugins_or_default()
        for index, call in enumerate(calls):
            if cancel.cancelled:
                # every call keeps its answer, so the history stays replayable
                self._history.append(Message.tool_result(call, _CANCELLED_RESULT, True))
                continue
            yield ToolCallEvent(call.name, call.arguments, call.id, index)
            if cancel.cancelled:  # the caller cancelled on seeing the call: do not run it
                self._history.append(Message.tool_result(call, _CANCELLED_RESULT, True))
                yield ToolResultEvent(call.id, call.name, _CANCELLED_RESULT, True, "cancelled")
                continue
            plugins.notify_tool_call(call.name, call.arguments, call.id)
            result = self.dispatcher.dispatch(call, cancel=cancel)
            self._history.append(Message.tool_result(call, result.content, result.is_error))
            plugins.notify_tool_result(call.name, call.id, result.content, result.is_error)
            yield ToolResultEvent(call.id, call.name, result.content, result.is_error,
                                  result.error_kind)

    # -- asyncio ------------------------------------------------------------------

    async def asend(self, message: str, *,
                    cancel: CancelToken | None = None) -> AsyncGenerator[Event, None]:
        """``send`` as an async iterator; the loop runs in a worker thread.

        Leaving the iteration early (``break``, task cancellation) cancels the
        reply and waits for the worker to finish, so the history stays whole.
        Python closes an abandoned async generator only when it is collected; wrap
        the call in :func:`contextlib.aclosing` to have that happen at the ``break``.
        """
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        token = cancel or CancelToken()

        def worker() -> None:
            try:
                for event in self.send(message, cancel=token):
                    loop.call_soon_threadsafe(queue.put_nowait, event)
            except BaseException as exc:
                loop.call_soon_threadsafe(queue.put_nowait, _Failure(exc))
            finally:
                loop.call_soon_threadsafe(queue.put_nowait, _END)

        thread = threading.Thread(target=worker, name="toolwire-chat", daemon=True)
        thread.start()
        finished = False
        try:
            while True:
                item = await queue.get()
                if item is _END:
                    finished = True
                    return
                if isinstance(item, _Failure):
                    raise item.exc
                yield item
        finally:
            if not finished:
                token.cancel()
                await asyncio.shield(loop.run_in_executor(None, thread.join))


@attrs.define
class _TurnOutcome:
    text: list[str] = attrs.Factory(list)
    reasoning: list[str] = attrs.Factory(list)
    calls: list[ToolCall] = attrs.Factory(list)
    end: TurnEnd | None = None
    failed: bool = False


def _close_quietly(stream: Any) -> None:
    """Close a backend's stream; what its ``close`` raises is the backend's problem."""
    close = getattr(stream, "close", None)
    if close is None:
        return
    try:
        close()
    except BaseException as exc:
        if must_propagate(exc):
            raise


def _add_usage(total: dict[str, Any], usage: Any) -> None:
    if not usage:
        return
    for key, value in dict(usage).items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            total[key] = total.get(key, 0) + value
