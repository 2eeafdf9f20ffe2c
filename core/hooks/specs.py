"""The hooks a toolwire plugin can implement.

A plugin is a module (or object) with functions decorated ``@toolwire.hookimpl``
and named after these specs. Registration hooks receive a ``register`` callback
from the core; the core validates each record, stamps it with the plugin's name
and rejects duplicates, so plugins stay trivial::

    import toolwire

    @toolwire.hookimpl
    def register_parsers(register):
        register(toolwire.ParserSpec(name="my_family", detect=..., create=...))

Hooks only ever gain arguments; an implementation may accept fewer than the spec
lists. Behaviour never depends on the order pluggy calls implementations in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

import pluggy

from ..parse.protocol import ParserSpec, StreamFilterSpec
from ..vocabulary.backend import BackendSpec
from ..vocabulary.tool_sources import ToolSourceSpec
from ..vocabulary.tools import Tool

__all__ = [
    "PROJECT_NAME",
    "RegisterBackend",
    "RegisterParser",
    "RegisterStreamFilter",
    "RegisterTool",
    "RegisterToolSource",
    "hookimpl",
    "hookspec",
]

PROJECT_NAME = "toolwire"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)

RegisterParser: TypeAlias = Callable[[ParserSpec], None]
"""The ``register`` callback of :func:`register_parsers`."""
RegisterBackend: TypeAlias = Callable[[BackendSpec], None]
"""The ``register`` callback of :func:`register_backends`."""
RegisterTool: TypeAlias = Callable[[Tool], None]
"""The ``register`` callback of :func:`register_tools`."""
RegisterStreamFilter: TypeAlias = Callable[[StreamFilterSpec], None]
"""The ``register`` callback of :func:`register_stream_filters`."""
RegisterToolSource: TypeAlias = Callable[[ToolSourceSpec], None]
"""The ``register`` callback of :func:`register_tool_sources`."""


@hookspec
def register_parsers(register: RegisterParser) -> None:
    """Register tool-call parser plugins for model families.

    Call ``register(spec)`` once per family with a :class:`toolwire.ParserSpec`:
    its ``name`` (the family users select), ``detect(template_source) -> float``
    (``0.0`` for "not mine", up to ``1.0``), and ``create(tools) -> StreamParser``.
    When a chat template is given, the parser with the highest score wins.

    :param register: the core's registration callback; raises
        :class:`toolwire.PluginConflictError` if another plugin took the name.
    :returns: nothing; use ``register``.

    .. versionadded:: 0.1
    """


@hookspec
def register_backends(register: RegisterBackend) -> None:
    """Register model backends (a local runtime, a remote provider protocol).

    Call ``register(spec)`` with a :class:`toolwire.BackendSpec`: a ``name`` and a
    ``create(**options) -> Backend`` factory. Heavy imports belong inside
    ``create`` so that ``import toolwire`` stays fast.

    :param register: the core's registration callback.
    :returns: nothing; use ``register``.

    .. versionadded:: 0.1
    """


@hookspec
def register_tools(register: RegisterTool) -> None:
    """Contribute tools that applications may offer to models.

    Call ``register(tool)`` with a :class:`toolwire.Tool` (build one with
    ``@toolwire.tool`` or from an explicit schema). Tools contributed here are
    available from ``PluginManager.tools()``; a chat offers only the tools its
    application puts in its registry.

    :param register: the core's registration callback.
    :returns: nothing; use ``register``.

    .. versionadded:: 0.1
    """


@hookspec
def register_stream_filters(register: RegisterStreamFilter) -> None:
    """Register filters that run on a reply's text before the parser.

    Call ``register(spec)`` with a :class:`toolwire.StreamFilterSpec`: a ``name``,
    an explicit ``priority`` (lower runs first; never registration order) and
    ``create(context) -> StreamFilter | None`` (``None`` where it does not apply).
    The reasoning filter that turns ``<think>`` blocks into ``reasoning`` events
    is one.

    :param register: the core's registration callback.
    :returns: nothing; use ``register``.

    .. versionadded:: 0.1
    """


@hookspec
def register_tool_sources(register: RegisterToolSource) -> None:
    """Register sources of tools that live outside the process (MCP servers).

    Call ``register(spec)`` with a :class:`toolwire.plugin_api.ToolSourceSpec`: a
    ``name``, ``open(**options) -> ToolSource`` (nothing is started before an
    application opens the source) and ``origin(tool)`` naming where a tool it made
    comes from. An application opens a source with the options its user gave and
    offers the tools it lists; ``register_tools`` is for tools that cost nothing to
    list, because it runs for every plugin manager.

    :param register: the core's registration callback.
    :returns: nothing; use ``register``.

    .. versionadded:: 0.2
    """


@hookspec
def on_tool_call(name: str, arguments: Mapping[str, Any], call_id: str) -> None:
    """Observe a tool call just before it runs (for dashboards and audit logs).

    Exceptions raised here are reported as warnings and never stop the chat.

    :param name: the tool the model called.
    :param arguments: the arguments as parsed (before validation).
    :param call_id: the call's id in this conversation.
    :returns: nothing.

    .. versionadded:: 0.1
    """


@hookspec
def on_tool_result(name: str, call_id: str, content: str, is_error: bool) -> None:
    """Observe a tool's result, exactly as the model will read it.

    Exceptions raised here are reported as warnings and never stop the chat.

    :param name: the tool that ran (or was refused).
    :param call_id: the call's id.
    :param content: the result text.
    :param is_error: ``True`` when the call failed and ``content`` says why.
    :returns: nothing.

    .. versionadded:: 0.1
    """
