"""Dispatch and validation: the fixed path from a model's call to its result.

This is core policy, not a hook. For each call the dispatcher:

1. drops a model-supplied ``workspace`` argument (the session's is used);
2. refuses an unknown tool, and a write tool in read-only mode, by name;
3. validates the arguments against the tool's schema (missing required,
   unknown parameters, wrong types), with a validator compiled once per tool;
4. runs the tool with a timeout;
5. turns the return value into text.

Every failure becomes a :class:`DispatchResult` with ``is_error`` set and a
message written for the model, so it can correct itself on the next turn.
"""

from __future__ import annotations

import contextvars
import json
import threading
from collections.abc import Mapping
from typing import Any

import attrs
import jsonschema
from jsonschema.exceptions import ValidationError
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for

from .errors import (
    ToolArgumentsError,
    ToolCallError,
    ToolExecutionError,
    ToolPermissionError,
    ToolTimeoutError,
    UnknownToolError,
)
from .history import ToolCall
from .tools import WORKSPACE_PARAMETER, Tool, ToolRegistry

__all__ = ["DispatchResult", "Dispatcher", "format_tool_output"]

_MAX_PROBLEMS = 8


@attrs.frozen
class DispatchResult:
    """A call's outcome as the model will read it.

    :ivar error_kind: for failures, ``unknown_tool``, ``invalid_arguments``,
        ``read_only``, ``tool_error`` or ``timeout``.
    """

    call: ToolCall
    content: str
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
        return str(value)


def _not_json(value: Any) -> Any:
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    raise TypeError(type(value).__name__)


_ERROR_KINDS: dict[type[ToolCallError], str] = {
    UnknownToolError: "unknown_tool",
    ToolArgumentsError: "invalid_arguments",
    ToolPermissionError: "read_only",
    ToolTimeoutError: "timeout",
    ToolExecutionError: "tool_error",
}


class Dispatcher:
    """Runs the model's calls against a registry, under one session's policy.

    :param registry: the tools.
    :param read_only: offer and run only read-only tools.
    :param workspace: passed to tools that take a ``workspace`` parameter.
    :param timeout: default seconds a tool may run (a tool's own ``timeout``
        wins); ``None`` runs tools inline without a limit.
    """

    def __init__(self, registry: ToolRegistry, *, read_only: bool = False,
                 workspace: Any = None, timeout: float | None = 60.0) -> None:
        self.registry = registry
        self.read_only = read_only
        self.workspace = workspace
        self.timeout = timeout
        # Keyed by the tool itself (not its id, which a new tool may reuse once
        # an old one is gone), so a validator never outlives its schema.
        self._validators: dict[Tool, Validator] = {}
        self._lock = threading.Lock()

    def offered_tools(self) -> list[Tool]:
        """The tools the model is shown this session."""
        return self.registry.offered(read_only=self.read_only)

    def dispatch(self, call: ToolCall) -> DispatchResult:
        """Validate and run one call; never raises for anything the model did."""
        try:
            tool, arguments = self.check(call)
            return DispatchResult(call, self._run(tool, arguments))
        except ToolCallError as exc:
            kind = next((k for cls, k in _ERROR_KINDS.items() if isinstance(exc, cls)),
                        "tool_error")
            return DispatchResult(call, f"Error: {exc}", True, kind)

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
        self._validate(tool, arguments)
        if tool.accepts_workspace:
            arguments[WORKSPACE_PARAMETER] = self.workspace
        return tool, arguments

    def _validator(self, tool: Tool) -> Validator:
        with self._lock:
            validator = self._validators.get(tool)
            if validator is None:
                schema = dict(tool.parameters)
                cls = validator_for(schema, default=jsonschema.Draft202012Validator)
                validator = cls(schema)
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
        validator = self._validator(tool)
        errors = sorted(validator.iter_errors(dict(arguments)),
                        key=lambda e: [str(p) for p in e.path])
        for error in errors:
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

    def _run(self, tool: Tool, arguments: dict[str, Any]) -> str:
        timeout = tool.timeout if tool.timeout is not None else self.timeout
        if timeout is None:
            return self._call(tool, arguments)
        # One daemon thread per call rather than a pool: a hung tool must neither
        # occupy a worker that later calls wait for, nor keep the process from
        # exiting (pool workers are joined at interpreter exit).
        outcome: list[tuple[bool, Any]] = []
        finished = threading.Event()
        context = contextvars.copy_context()

        def target() -> None:
            try:
                outcome.append((True, context.run(self._call, tool, arguments)))
            except BaseException as exc:
                outcome.append((False, exc))
            finally:
                finished.set()

        threading.Thread(target=target, name=f"toolwire-tool-{tool.name}", daemon=True).start()
        if not finished.wait(timeout):
            raise ToolTimeoutError(
                f"tool {tool.name!r} did not finish within {timeout:g} seconds and was "
                "abandoned; try a smaller request", tool=tool.name)
        ok, value = outcome[0]
        if not ok:
            raise value
        text: str = value
        return text

    @staticmethod
    def _call(tool: Tool, arguments: dict[str, Any]) -> str:
        try:
            return format_tool_output(tool.function(**arguments))
        except ToolCallError:
            raise
        except Exception as exc:
            raise ToolExecutionError(
                f"tool {tool.name!r} failed: {type(exc).__name__}: {exc}", tool=tool.name
            ) from exc


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
