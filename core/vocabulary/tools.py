"""The tool registry: each tool is a Python callable plus its JSON schema.

Build a tool explicitly from a schema with :class:`Tool`, or from a typed
function with the :func:`tool` decorator, which derives the schema from the
annotations and the docstring::

    @toolwire.tool(read_only=True)
    def search(query: str, limit: int = 10) -> str:
        '''Search the notes.

        :param query: words to look for
        :param limit: how many hits to return
        '''

A parameter named ``workspace`` is never shown to the model: the session's
workspace is passed in its place (and a model-supplied value is dropped).
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, get_args, get_origin

import attrs
import jsonschema
from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for

from ..errors import DuplicateToolError, ToolDefinitionError
from .schema import normalize_schema
from .schema_size import check_schema_size
from .valid_text import valid_json_value, valid_text

__all__ = ["WORKSPACE_PARAMETER", "Tool", "ToolRegistry", "tool"]

WORKSPACE_PARAMETER = "workspace"
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,127}")


def _check_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    if schema.get("type") == "function" and isinstance(schema.get("function"), Mapping):
        schema = schema["function"]  # the OpenAI ``tools`` entry form
    name = schema.get("name")
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise ToolDefinitionError(
            f"tool name {name!r} is not a valid identifier (letters, digits, _ . -)"
        )
    params = schema.get("parameters", {"type": "object", "properties": {}})
    if not isinstance(params, Mapping):
        raise ToolDefinitionError(f"tool {name!r}: 'parameters' must be an object schema")
    # before anything walks it: every later walk is linear once these bounds hold
    check_schema_size(params, tool=name)
    notes: list[str] = []
    params = normalize_schema(dict(params), notes)
    params.setdefault("type", "object")
    if params.get("type") != "object":
        raise ToolDefinitionError(f"tool {name!r}: parameters must have type 'object'")
    props = params.setdefault("properties", {})
    if not isinstance(props, Mapping):
        raise ToolDefinitionError(f"tool {name!r}: 'properties' must be a mapping")
    required = params.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise ToolDefinitionError(f"tool {name!r}: 'required' must be a list of names")
    missing = [r for r in required if r not in props]
    if missing:
        raise ToolDefinitionError(
            f"tool {name!r}: required parameters {missing} are not in 'properties'"
        )
    if WORKSPACE_PARAMETER in props:
        props = {k: v for k, v in props.items() if k != WORKSPACE_PARAMETER}
        params["properties"] = props
        params["required"] = [r for r in required if r != WORKSPACE_PARAMETER]
        if not params["required"]:
            del params["required"]
    # what the tool holds is what every later maker of it measures (the model worker
    # makes it again from this schema): the root's type and properties count too
    check_schema_size(params, tool=name)
    # A schema the validator cannot use would otherwise fail on the model's
    # first call, far from the definition that is wrong.
    try:
        validator_for(params, default=jsonschema.Draft202012Validator).check_schema(params)
    except SchemaError as exc:
        raise ToolDefinitionError(
            f"tool {name!r}: parameters are not a valid JSON schema: {exc.message}"
        ) from exc
    # a schema from outside (an MCP server's, a client's) is rendered into every prompt
    out = {"name": name, "description": valid_text(str(schema.get("description") or "")),
           "parameters": valid_json_value(params)}
    return out


@attrs.frozen(eq=False)
class Tool:
    """A callable the model may call, with the JSON schema the model sees.

    :ivar schema: ``{"name", "description", "parameters"}`` (normalised; a
        ``workspace`` parameter is removed from what the model sees). An OpenAI
        ``{"type": "function", "function": {...}}`` entry is accepted too. The
        parameters are held to the schema limits
        (:mod:`toolwire.vocabulary.schema_size`): a schema over one raises
        :class:`~toolwire.errors.ToolSchemaBudgetError` (a
        :class:`~toolwire.errors.ToolDefinitionError`).
    :ivar function: called with the validated arguments as keyword arguments.
    :ivar read_only: ``True`` when the tool changes nothing; read-only sessions
        offer and run only these.
    :ivar accepts_workspace: the function takes a ``workspace`` keyword, which
        the dispatcher fills with the session's workspace.
    :ivar timeout: seconds the tool may run before the model is told it timed
        out; ``None`` uses the session default.
    """

    schema: Mapping[str, Any] = attrs.field(converter=_check_schema)
    function: Callable[..., Any]
    read_only: bool = False
    accepts_workspace: bool = False
    timeout: float | None = None

    @property
    def name(self) -> str:
        """The name the model calls the tool by."""
        return str(self.schema["name"])

    @property
    def description(self) -> str:
        """What the tool does, as the model reads it."""
        return str(self.schema.get("description", ""))

    @property
    def parameters(self) -> Mapping[str, Any]:
        """The JSON schema of the tool's arguments."""
        params: Mapping[str, Any] = self.schema["parameters"]
        return params

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function directly, so a decorated function stays usable in code."""
        return self.function(*args, **kwargs)

    def openai_schema(self) -> dict[str, Any]:
        """The ``{"type": "function", "function": schema}`` form used in requests."""
        return {"type": "function", "function": dict(self.schema)}

    @classmethod
    def from_function(
        cls,
        function: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        read_only: bool = False,
        timeout: float | None = None,
    ) -> Tool:
        """Derive a tool from a typed function: see :func:`tool`."""
        schema, accepts_workspace = schema_from_function(function, name, description)
        return cls(schema=schema, function=function, read_only=read_only,
                   accepts_workspace=accepts_workspace, timeout=timeout)


_PARAM_DOC_RE = re.compile(r"^\s*:param\s+(?:\w+\s+)?(\w+)\s*:\s*(.*)$")
_GOOGLE_ARGS_RE = re.compile(r"^\s*(Args|Arguments|Parameters)\s*:\s*$")
_GOOGLE_ARG_RE = re.compile(r"^\s+(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a docstring into its description and per-parameter texts.

    Understands Sphinx (``:param x: ...``) and Google (``Args:`` block) styles.
    """
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    params: dict[str, str] = {}
    in_google_args = False
    current: str | None = None
    for line in lines:
        match = _PARAM_DOC_RE.match(line)
        if match:
            current = match.group(1)
            params[current] = match.group(2).strip()
            in_google_args = False
            continue
        if _GOOGLE_ARGS_RE.match(line):
            in_google_args = True
            current = None
            continue
        if in_google_args:
            arg = _GOOGLE_ARG_RE.match(line)
            if arg:
                current = arg.group(1)
                params[current] = arg.group(2).strip()
                continue
            if line.strip() and line.startswith((" ", "\t")) and current:
                params[current] += " " + line.strip()
                continue
            if not line.strip():
                continue
            in_google_args = False
        if line.lstrip().startswith((":returns", ":return", ":raises", "Returns:", "Raises:")):
            current = None
            continue
        if current and line.startswith((" ", "\t")) and line.strip():
            params[current] += " " + line.strip()
            continue
        current = None
        if not params:
            summary.append(line)
    return "\n".join(summary).strip(), params


def _annotation_schema(annotation: Any, where: str) -> dict[str, Any]:
    """Translate one Python annotation into a JSON schema."""
    if annotation is inspect.Parameter.empty or annotation is Any:
        return {}
    origin = get_origin(annotation)
    args = get_args(annotation)
    if annotation is str:
        return {"type": "string"}
    if annotation is bool:
        return {"type": "boolean"}
    if annotation is int:
        return {"type": "integer"}
    if annotation is float:
        return {"type": "number"}
    if annotation is type(None):
        return {"type": "null"}
    if annotation in (dict, Mapping) or origin in (dict, Mapping):
        schema: dict[str, Any] = {"type": "object"}
        if len(args) == 2 and args[1] is not Any:
            schema["additionalProperties"] = _annotation_schema(args[1], where)
        return schema
    if annotation in (list, tuple) or origin in (list, tuple, Sequence):
        schema = {"type": "array"}
        if args and args[0] is not Ellipsis:
            schema["items"] = _annotation_schema(args[0], where)
        return schema
    if origin is Literal:
        values = list(args)
        schema = {"enum": values}
        kinds = {type(v) for v in values}
        if kinds == {str}:
            schema["type"] = "string"
        elif kinds == {int}:
            schema["type"] = "integer"
        elif kinds == {bool}:
            schema["type"] = "boolean"
        return schema
    if origin in (typing.Union, types.UnionType):
        non_null = [a for a in args if a is not type(None)]
        branches = [_annotation_schema(a, where) for a in non_null]
        if len(non_null) < len(args):
            branches.append({"type": "null"})
        if all(set(b) == {"type"} for b in branches):
            return {"type": [b["type"] for b in branches]}
        return {"anyOf": branches}
    raise ToolDefinitionError(f"{where}: cannot describe annotation {annotation!r} as JSON schema")


def schema_from_function(
    function: Callable[..., Any], name: str | None = None, description: str | None = None
) -> tuple[dict[str, Any], bool]:
    """Build a tool schema from a function's signature, annotations and docstring.

    :returns: the schema and whether the function takes a ``workspace`` keyword.
    """
    tool_name = name or getattr(function, "__name__", None)
    if not tool_name:
        raise ToolDefinitionError(f"cannot name tool for {function!r}: pass name=")
    try:
        hints = typing.get_type_hints(function)
    except Exception as exc:  # annotations that do not evaluate are a definition error
        raise ToolDefinitionError(f"tool {tool_name!r}: annotations do not resolve: {exc}") from exc
    summary, param_docs = _parse_docstring(inspect.getdoc(function))
    properties: dict[str, Any] = {}
    required: list[str] = []
    accepts_workspace = False
    for param in inspect.signature(function).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if param.kind is param.POSITIONAL_ONLY:
            raise ToolDefinitionError(
                f"tool {tool_name!r}: positional-only parameter {param.name!r} cannot be "
                "passed by name"
            )
        if param.name == WORKSPACE_PARAMETER:
            accepts_workspace = True
            continue
        prop = _annotation_schema(hints.get(param.name, param.annotation),
                                  f"tool {tool_name!r}, parameter {param.name!r}")
        if param.name in param_docs:
            prop["description"] = param_docs[param.name]
        if param.default is param.empty:
            required.append(param.name)
        elif param.default is not None and _json_scalar(param.default):
            prop["default"] = param.default
        properties[param.name] = prop
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    schema = {"name": tool_name, "description": description or summary,
              "parameters": parameters}
    return schema, accepts_workspace


def _json_scalar(value: Any) -> bool:
    return isinstance(value, str | int | float | bool)


@typing.overload
def tool(function: Callable[..., Any], /) -> Tool: ...


@typing.overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    read_only: bool = False,
    timeout: float | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    function: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    read_only: bool = False,
    timeout: float | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Turn a typed function into a :class:`Tool` (usable bare or with options).

    Annotations map to JSON Schema: ``str``, ``int``, ``float``, ``bool``,
    ``list[...]``, ``dict``, ``Literal[...]`` (-> ``enum``), ``X | None``;
    parameters with defaults are optional. The docstring's text before its
    parameter list is the description; ``:param name:`` lines (or a Google
    ``Args:`` block) describe the parameters.
    """

    def wrap(func: Callable[..., Any]) -> Tool:
        return Tool.from_function(func, name=name, description=description,
                                  read_only=read_only, timeout=timeout)

    if function is not None:
        return wrap(function)
    return wrap


class ToolRegistry:
    """An ordered set of tools with unique names."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for item in tools:
            self.add(item)

    def add(self, item: Tool | Callable[..., Any]) -> Tool:
        """Add a tool (a plain function is wrapped with :func:`tool`)."""
        new = item if isinstance(item, Tool) else Tool.from_function(item)
        if new.name in self._tools:
            raise DuplicateToolError(f"a tool named {new.name!r} is already registered")
        self._tools[new.name] = new
        return new

    def get(self, name: str) -> Tool | None:
        """The tool called ``name``, or ``None``."""
        return self._tools.get(name)

    def __getitem__(self, name: str) -> Tool:
        return self._tools[name]

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def names(self) -> list[str]:
        """Tool names in registration order."""
        return list(self._tools)

    def offered(self, *, read_only: bool) -> list[Tool]:
        """The tools a session offers: only the read-only ones in read-only mode."""
        return [t for t in self._tools.values() if t.read_only or not read_only]
