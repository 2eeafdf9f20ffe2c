"""Dispatch and validation: the fixed path from a model's call to its result.

This is core policy, not a hook. For each call the dispatcher:

1. drops a model-supplied ``workspace`` argument (the session's is used);
2. refuses an unknown tool, and a write tool in read-only mode, by name;
3. validates the arguments against the tool's schema (missing required,
   unknown parameters, wrong types), with a validator compiled once per tool
   that resolves no reference outside the schema and gives up after a number
   of steps linear in the arguments' size (see
   :mod:`toolwire.conversation.validation`);
4. asks the session's approver, if it has one, before a tool that is not
   read-only runs (see :mod:`toolwire.conversation.approval`);
5. runs the tool with a timeout (in a bounded pool of threads, see
   :mod:`toolwire.conversation.tool_threads`), and stops waiting when the
   reply is cancelled;
6. turns the return value into text, at most ``max_output_chars`` of it (the
   rest is cut with a note saying how much the tool returned).

Arguments nested deeper than :data:`MAX_ARGUMENT_DEPTH` are refused before
anything looks into them, and whatever a tool raises, ``SystemExit`` and
``KeyboardInterrupt`` included, is its result (see :mod:`toolwire.boundaries`:
only the host's own Ctrl-C passes).

A tool function may ask :func:`current_call` for the call it runs for: its
deadline and the reply's cancel token, so a tool that waits on something else
(a remote server) can give up at the same moment the dispatcher does.

Every failure becomes a :class:`DispatchResult` with ``is_error`` set and a
message written for the model, so it can correct itself on the next turn.
"""

from __future__ import annotations

import contextvars
import json
import re
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs
import jsonschema
import referencing.exceptions
from jsonschema.exceptions import ValidationError
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for

from ..boundaries import must_propagate
from ..errors import (
    ToolArgumentsError,
    ToolBusyError,
    ToolCallError,
    ToolCancelledError,
    ToolDeniedError,
    ToolExecutionError,
    ToolPermissionError,
    ToolTimeoutError,
    UnknownToolError,
)
from ..limits import DispatchLimits
from ..vocabulary.cancel import CancelToken
from ..vocabulary.history import ToolCall
from ..vocabulary.tools import WORKSPACE_PARAMETER, Tool, ToolRegistry
from ..vocabulary.valid_text import valid_text
from .approval import ApprovalGate, Approver
from .tool_threads import ToolThreadPool, tool_threads
from .validation import (
    VALIDATION_STEPS,
    ValidationStepsExceeded,
    bounded_validator,
    validation_steps,
)

__all__ = ["DEFAULT_MAX_OUTPUT_CHARS", "MAX_ARGUMENT_DEPTH", "DispatchResult", "Dispatcher",
           "RunningCall", "current_call", "format_tool_output", "limit_output"]

DEFAULT_MAX_OUTPUT_CHARS: Final = DispatchLimits().max_output_chars
"""The most characters of one tool result the model (and the history) gets."""
MAX_ARGUMENT_DEPTH: Final = DispatchLimits().max_argument_depth
"""The deepest nesting of lists and objects a call's arguments may have."""

_MAX_PROBLEMS = 8
_CANCEL_POLL_SECONDS = 0.05


@attrs.frozen
class RunningCall:
    """What a tool function may learn about the call it is running for.

    :ivar call: the model's call.
    :ivar deadline: the :func:`time.monotonic` value at which the dispatcher stops
        waiting for the tool, or ``None`` when it waits without a limit.
    :ivar cancel: the reply's cancel token, when the caller gave one.
    """

    call: ToolCall
    deadline: float | None = None
    cancel: CancelToken | None = None

    def remaining(self) -> float | None:
        """Seconds left before the deadline (never negative), or ``None`` without one."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - time.monotonic())


_RUNNING: contextvars.ContextVar[RunningCall | None] = contextvars.ContextVar(
    "toolwire_running_call", default=None)


def current_call() -> RunningCall | None:
    """The call the current tool function runs for; ``None`` outside a dispatch."""
    return _RUNNING.get()


@attrs.frozen
class DispatchResult:
    """A call's outcome as the model will read it.

    :ivar error_kind: for failures, ``unknown_tool``, ``invalid_arguments``,
        ``read_only``, ``denied``, ``tool_error``, ``timeout``, ``cancelled`` or
        ``busy`` (no tool thread was free, see :class:`~toolwire.errors.ToolBusyError`).
    """

    call: ToolCall
    content: str = attrs.field(converter=valid_text)  # a result is text from outside
    is_error: bool = False
    error_kind: str | None = None


def format_tool_output(value: Any) -> str:
    """Turn a tool's return value into the text the model reads.

    Strings pass through; ``None`` says so; anything JSON can express is JSON;
    other objects use ``str()``.
    """
    if isinstance(value, str):
        return value
    if value is None:
        return "(the tool returned nothing)"
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    try:
        return json.dumps(value, ensure_ascii=False, default=_not_json)
    except (TypeError, ValueError):
        pass
    except RecursionError:
        return f"(the tool returned a {type(value).__name__} nested too deeply to show)"
    try:
        return str(value)
    except RecursionError:
        return f"(the tool returned a {type(value).__name__} nested too deeply to show)"


_EARLIER_CUT = re.compile(r"\n\[(?:result cut|truncated): [^\n\]]*\]")
"""The note a tool source leaves at the end of a result it cut itself (an MCP server's)."""


def limit_output(text: str, limit: int | None) -> str:
    """``text``, or its first ``limit`` characters and a note saying it was cut.

    A note an earlier cut left at the end (``[result cut: ...]``, ``[truncated:
    ...]``: how large the tool's own answer was) is kept, before this cut's note,
    so the model still reads the original size.
    """
    if limit is None or len(text) <= limit:
        return text
    last = text.rfind("\n[")
    earlier = _EARLIER_CUT.fullmatch(text, last) if last >= 0 else None
    if earlier is not None and last <= limit:
        return text  # only the earlier note is past the bound: the result is whole
    kept = earlier.group() if earlier is not None else ""
    return (f"{text[:limit]}{kept}\n[truncated: the tool returned {len(text):,} characters; "
            f"only the first {limit:,} are shown]")


def _not_json(value: Any) -> Any:
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    raise TypeError(type(value).__name__)


_ERROR_KINDS: dict[type[ToolCallError], str] = {
    UnknownToolError: "unknown_tool",
    ToolArgumentsError: "invalid_arguments",
    ToolPermissionError: "read_only",
    ToolDeniedError: "denied",
    ToolTimeoutError: "timeout",
    ToolCancelledError: "cancelled",
    ToolBusyError: "busy",
    ToolExecutionError: "tool_error",
}


class Dispatcher:
    """Runs the model's calls against a registry, under one session's policy.

    :param registry: the tools.
    :param read_only: offer and run only read-only tools.
    :param workspace: passed to tools that take a ``workspace`` parameter.
    :param timeout: default seconds a tool may run (a tool's own ``timeout``
        wins); ``None`` runs tools inline without a limit, where only the tool
        itself can notice a cancellation (through :func:`current_call`).
    :param approve: asked before a call of a tool that is not read-only runs
        (see :mod:`toolwire.conversation.approval`); ``None`` runs every call.
    :param max_output_chars: the most characters of a result (success or
        error) the model gets; ``None`` for no limit.
    :param threads: the pool that runs calls with a timeout (default: the
        process-wide one, :func:`~toolwire.conversation.tool_threads.tool_threads`).
    """

    def __init__(self, registry: ToolRegistry, *, read_only: bool = False,
                 workspace: Any = None, timeout: float | None = 60.0,
                 approve: Approver | None = None,
                 max_output_chars: int | None = DEFAULT_MAX_OUTPUT_CHARS,
                 threads: ToolThreadPool | None = None) -> None:
        self.registry = registry
        self.read_only = read_only
        self.workspace = workspace
        self.timeout = timeout
        self.max_output_chars = max_output_chars
        self._threads = threads
        self.approval = None if approve is None else ApprovalGate(approve)
        # Keyed by the tool itself (not its id, which a new tool may reuse once
        # an old one is gone), so a validator never outlives its schema.
        self._validators: dict[Tool, Validator] = {}
        self._fast_checks: dict[Tool, Any] = {}
        self._lock = threading.Lock()

    def offered_tools(self) -> list[Tool]:
        """The tools the model is shown this session."""
        return self.registry.offered(read_only=self.read_only)

    def dispatch(self, call: ToolCall, *, cancel: CancelToken | None = None) -> DispatchResult:
        """Validate and run one call; never raises for anything the model did.

        :param cancel: the reply's cancel token: once it is set the dispatcher stops
            waiting for the tool (which :func:`current_call` also hands to the tool).
        """
        try:
            tool, arguments = self.check(call)
            if self.approval is not None:  # shown the model's arguments, without ours
                self.approval.check(ToolCall(call.id, call.name, {
                    k: v for k, v in call.arguments.items() if k != WORKSPACE_PARAMETER}), tool)
            text = self._run(tool, arguments, call, cancel)
            return DispatchResult(call, limit_output(text, self.max_output_chars))
        except ToolCallError as exc:
            kind = next((k for cls, k in _ERROR_KINDS.items() if isinstance(exc, cls)),
                        "tool_error")
            return DispatchResult(call, limit_output(f"Error: {exc}", self.max_output_chars),
                                  True, kind)
        except BaseException as exc:  # whatever else happened, the call gets a result
            if must_propagate(exc):
                raise
            return DispatchResult(call, limit_output(
                f"Error: calling {call.name!r} failed: {_describe_exception(exc)}",
                self.max_output_chars), True, "tool_error")

    def check(self, call: ToolCall) -> tuple[Tool, dict[str, Any]]:
        """Resolve and validate a call without running it.

        :raises ToolCallError: with a message for the model.
        """
        tool = self.registry.get(call.name)
        if tool is None:
            offered = ", ".join(t.name for t in self.offered_tools()) or "none"
            raise UnknownToolError(
                f"there is no tool named {call.name!r}. Available tools: {offered}.",
                tool=call.name)
        if self.read_only and not tool.read_only:
            raise ToolPermissionError(
                f"tool {call.name!r} changes things and this session is read-only; "
                "it was not run. Use only the read-only tools offered.", tool=call.name)
        arguments = {k: v for k, v in call.arguments.items() if k != WORKSPACE_PARAMETER}
        depth = _nesting_depth(arguments, MAX_ARGUMENT_DEPTH)
        if depth > MAX_ARGUMENT_DEPTH:
            raise ToolArgumentsError(
                f"invalid arguments for {tool.name!r}: nested more than "
                f"{MAX_ARGUMENT_DEPTH} levels deep; flatten them", tool=tool.name,
                problems=(f"nested more than {MAX_ARGUMENT_DEPTH} levels deep",))
        self._validate(tool, arguments)
        if tool.accepts_workspace:
            arguments[WORKSPACE_PARAMETER] = self.workspace
        return tool, arguments

    def _validator(self, tool: Tool) -> Validator:
        with self._lock:
            validator = self._validators.get(tool)
            if validator is None:
                schema = dict(tool.parameters)
                base = validator_for(schema, default=jsonschema.Draft202012Validator)
                validator = bounded_validator(schema, base)
                self._validators[tool] = validator
        return validator

    def _validate(self, tool: Tool, arguments: Mapping[str, Any]) -> None:
        params = tool.parameters
        properties = params.get("properties") or {}
        problems: list[str] = []
        required = params.get("required") or []
        missing = [r for r in required if r not in arguments]
        for name in missing:
            problems.append(f"missing required parameter {name!r}")
        unknown = [k for k in arguments if k not in properties]
        if unknown and params.get("additionalProperties", False) is False:
            expected = ", ".join(properties) or "no parameters"
            for name in unknown:
                problems.append(f"unknown parameter {name!r} (expected: {expected})")
        if not problems:
            fast = self._fast_checks.get(tool, _UNCOMPILED)
            if fast is _UNCOMPILED:
                fast = _compile_fast_check(params)
                self._fast_checks[tool] = fast
            if fast is not None and fast(arguments):
                return  # certainly valid; jsonschema is only needed to explain failures
        for error in self._schema_errors(tool, arguments):
            if error.validator == "required" and not error.path:
                continue  # reported above, by name
            if error.validator == "additionalProperties" and not error.path:
                continue
            problems.append(_describe(error))
        if problems:
            shown = problems[:_MAX_PROBLEMS]
            more = len(problems) - len(shown)
            text = "; ".join(shown) + (f"; and {more} more" if more else "")
            raise ToolArgumentsError(
                f"invalid arguments for {tool.name!r}: {text}. "
                f"Expected parameters: {_signature(tool)}.",
                tool=tool.name, problems=tuple(problems))

    def _schema_errors(self, tool: Tool, arguments: Mapping[str, Any]) -> list[ValidationError]:
        """jsonschema's errors for the arguments, in path order, within the step allowance."""
        validator = self._validator(tool)
        try:
            with validation_steps(VALIDATION_STEPS, arguments):
                return sorted(validator.iter_errors(dict(arguments)),
                              key=lambda e: [str(p) for p in e.path])
        except ValidationStepsExceeded as exc:
            problem = (f"checking them against the schema took more than {exc.steps:,} "
                       "steps (the schema's branches multiply with the arguments' depth)")
        except referencing.exceptions.Unresolvable as exc:
            problem = (f"the tool's schema refers to {exc.ref!r}, which is not inside it "
                       "(references are never fetched), so they cannot be checked")
        raise ToolArgumentsError(
            f"invalid arguments for {tool.name!r}: {problem}; the tool was not run. "
            f"Expected parameters: {_signature(tool)}.", tool=tool.name, problems=(problem,))

    def _run(self, tool: Tool, arguments: dict[str, Any], call: ToolCall,
             cancel: CancelToken | None) -> str:
        timeout = tool.timeout if tool.timeout is not None else self.timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        running = _RUNNING.set(RunningCall(call, deadline, cancel))
        try:
            if timeout is None:  # inline, as documented; the tool still sees the token
                return self._call(tool, arguments)
            pool = self._threads or tool_threads()
            try:
                job = pool.submit(self._call, tool, arguments)  # copies the context
            except ToolBusyError as exc:
                raise ToolBusyError(f"tool {tool.name!r} was not run: {exc}",
                                    tool=tool.name) from None
        finally:
            _RUNNING.reset(running)
        if not _wait(job.done, deadline, cancel):
            started = pool.abandon(job)
            if job.done.is_set() and started:
                pass  # it finished just now
            elif cancel is not None and cancel.cancelled:
                raise ToolCancelledError(
                    f"tool {tool.name!r} was still running when the reply was cancelled; "
                    "it was abandoned" if started else
                    f"tool {tool.name!r} had not started when the reply was cancelled",
                    tool=tool.name)
            elif started:
                raise ToolTimeoutError(
                    f"tool {tool.name!r} did not finish within {timeout:g} seconds and was "
                    "abandoned; try a smaller request", tool=tool.name)
            else:
                raise ToolTimeoutError(
                    f"tool {tool.name!r} did not start within {timeout:g} seconds: all "
                    f"{pool.threads} tool threads were busy", tool=tool.name)
        if job.error is not None:
            raise job.error
        text: str = job.value
        return text

    @staticmethod
    def _call(tool: Tool, arguments: dict[str, Any]) -> str:
        try:
            return format_tool_output(tool.function(**arguments))
        except ToolCallError:
            raise
        except BaseException as exc:  # a tool's sys.exit() is its result, not the host's end
            if must_propagate(exc):
                raise
            raise ToolExecutionError(
                f"tool {tool.name!r} failed: {_describe_exception(exc)}", tool=tool.name
            ) from exc


def _wait(done: threading.Event, deadline: float | None, cancel: CancelToken | None) -> bool:
    """Wait for ``done`` until the deadline or a cancellation; return whether it is set.

    A cancel token has no way to wake this thread, so it is polled in short slices.
    """
    while True:
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            return done.is_set()
        if cancel is None:
            return done.wait(remaining)
        if cancel.cancelled:
            return done.is_set()
        step = _CANCEL_POLL_SECONDS if remaining is None else min(remaining,
                                                                 _CANCEL_POLL_SECONDS)
        if done.wait(step):
            return True


_UNCOMPILED = object()
_SIMPLE_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "object": lambda v: isinstance(v, dict),
}
_INERT_KEYWORDS = frozenset({"type", "description", "title", "default", "examples"})


def _compile_fast_check(
    parameters: Mapping[str, Any],
) -> Callable[[Mapping[str, Any]], bool] | None:
    """A quick "certainly valid" test for schemas made only of plain typed properties.

    Returns ``None`` for anything richer (enums, formats, nesting constraints...),
    which jsonschema then validates alone. A ``False`` answer is never final:
    jsonschema re-checks and explains.
    """
    if set(parameters) - {"type", "properties", "required", "additionalProperties",
                          "description", "title", "$schema"}:
        return None
    checks: dict[str, Callable[[Any], bool]] = {}
    for name, schema in (parameters.get("properties") or {}).items():
        check = _simple_value_check(schema)
        if check is None:
            return None
        checks[name] = check

    def fast(arguments: Mapping[str, Any]) -> bool:
        for key, value in arguments.items():
            check = checks.get(key)
            if check is None or not check(value):
                return False
        return True

    return fast


def _simple_value_check(schema: Any) -> Callable[[Any], bool] | None:
    if not isinstance(schema, Mapping):
        return None
    keys = set(schema)
    kind = schema.get("type")
    if kind == "array" and keys <= _INERT_KEYWORDS | {"items"}:
        items = schema.get("items")
        if items is None:
            return lambda v: isinstance(v, list)
        inner = _simple_value_check(items)
        if inner is None or items.get("type") in ("array", "object"):
            return None
        return lambda v: isinstance(v, list) and all(inner(x) for x in v)
    if not keys <= _INERT_KEYWORDS:
        return None
    if isinstance(kind, str) and kind in _SIMPLE_TYPES:
        return _SIMPLE_TYPES[kind]
    if isinstance(kind, list) and kind and all(k in _SIMPLE_TYPES for k in kind):
        tests = [_SIMPLE_TYPES[k] for k in kind]
        return lambda v: any(t(v) for t in tests)
    return None


def _describe_exception(exc: BaseException) -> str:
    detail = str(exc)
    return f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__


def _nesting_depth(value: Any, limit: int) -> int:
    """How deeply lists and dicts nest in ``value`` (counting stops past ``limit``).

    Iterative, so a value nested thousands deep cannot exhaust the interpreter's
    stack here (validation, messages and JSON would recurse into it).
    """
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        depth += 1
        if depth > deepest:
            deepest = depth
            if deepest > limit:
                return deepest
        stack.extend((child, depth) for child in children)
    return deepest


def _describe(error: ValidationError) -> str:
    where = ".".join(str(p) for p in error.path)
    if error.validator == "type":
        expected = error.validator_value
        return (f"parameter {where!r} must be of type {expected}, "
                f"got {type(error.instance).__name__} {_short(error.instance)}")
    if error.validator == "enum":
        return (f"parameter {where!r} must be one of {error.validator_value}, "
                f"got {_short(error.instance)}")
    if where:
        return f"parameter {where!r}: {error.message}"
    return error.message


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def _signature(tool: Tool) -> str:
    params = tool.parameters
    properties = params.get("properties") or {}
    required = set(params.get("required") or [])
    parts = []
    for name, schema in properties.items():
        kind = schema.get("type", "any") if isinstance(schema, Mapping) else "any"
        parts.append(f"{name}: {kind}{'' if name in required else ' (optional)'}")
    return ", ".join(parts) or "none"
