"""The plugin manager: built-in plugins, entry-point plugins, typed hook calls.

Built-in plugins are registered explicitly (so they work without installed
metadata) and are also published in the ``toolwire`` entry-point group, exactly
as a third-party plugin is. Third-party plugins load from that group with an
error boundary per plugin: a plugin that fails to import, or whose registration
hook raises (``SystemExit`` and ``KeyboardInterrupt`` included, see
:mod:`toolwire.boundaries`), contributes nothing and is reported by name; so is
one whose stream-filter factory raises even for an empty context. When two
plugins register one name, the one registered first (built-ins before entry
points) keeps it and the other is skipped with a warning naming both; an entry
point named like a built-in plugin loads with a warning. Plugin callables the
core calls later (a stream filter's factory, a parser's ``detect``, observers)
keep their boundary: a failure is one warning and the plugin is left out there.

Environment variables:

* ``TOOLWIRE_LOAD_PLUGINS=a,b``: load only these entry-point plugins (an empty
  value loads none). Built-ins are always there.
* ``TOOLWIRE_STRICT_PLUGINS=1``: a broken plugin raises instead of warning
  (:class:`PluginLoadError`, or :class:`PluginConflictError` for a taken name).
* ``TOOLWIRE_TRACE_PLUGINS=1``: print every hook call to standard error.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import os
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs
import pluggy

from ..boundaries import must_propagate
from ..errors import (
    BackendNotFoundError,
    ParserNotFoundError,
    PluginConflictError,
    PluginLoadError,
    ToolSourceNotFoundError,
)
from ..parse.protocol import FilterContext, ParserSpec, StreamFilterSpec
from ..vocabulary.backend import BackendSpec
from ..vocabulary.tool_sources import ToolSourceSpec
from ..vocabulary.tools import Tool
from . import specs as hookspecs

__all__ = ["BUILTIN_PLUGINS", "PluginInfo", "PluginManager", "PluginWarning", "SpecPlugin"]

def _builtin_plugins() -> tuple[str, ...]:
    """The core's own plugin, then every package in ``toolwire.plugins`` (by name).

    The folders under ``plugins/`` are the one list of built-in plugins: each is also
    a ``toolwire`` entry point and a package in ``pyproject.toml``
    (``tests/unit/test_layout.py`` holds the three together). They are found without
    importing them, and registered explicitly, so they work without installed metadata.
    """
    spec = importlib.util.find_spec("toolwire.plugins")
    folders = spec.submodule_search_locations if spec is not None else None
    found = sorted({entry.name for folder in folders or () for entry in os.scandir(folder)
                    if entry.name.isidentifier() and os.path.isfile(
                        os.path.join(entry.path, "__init__.py"))})
    return ("toolwire.hooks.builtin_reasoning", *(f"toolwire.plugins.{n}" for n in found))


BUILTIN_PLUGINS: tuple[str, ...] = _builtin_plugins()
"""Modules registered by every plugin manager, before any entry point."""

ENTRY_POINT_GROUP = "toolwire"

# "qwen_xml" -> "toolwire.plugins.qwen_xml": the names a built-in answers to.
_BUILTIN_SHORT_NAMES: dict[str, str] = {
    **{module.rsplit(".", 1)[1]: module for module in BUILTIN_PLUGINS},
    **{module: module for module in BUILTIN_PLUGINS},
}

_REGISTRATION_HOOKS: dict[str, tuple[type, str]] = {
    "parsers": (ParserSpec, "register_parsers"),
    "backends": (BackendSpec, "register_backends"),
    "tool_sources": (ToolSourceSpec, "register_tool_sources"),
    "tools": (Tool, "register_tools"),
    "stream_filters": (StreamFilterSpec, "register_stream_filters"),
}
_LABELS = {"parsers": "parser", "backends": "backend", "tools": "tool",
           "tool_sources": "tool source",
           "stream_filters": "stream filter"}


class SpecPlugin:
    """A plugin object that registers one given :class:`ParserSpec` (a parser under test,
    or one derived from a chat template)."""

    def __init__(self, spec: ParserSpec) -> None:
        self.spec = spec

    @hookspecs.hookimpl
    def register_parsers(self, register: Callable[[ParserSpec], None]) -> None:
        """Register the spec."""
        register(self.spec)


class PluginWarning(UserWarning):
    """A plugin failed to load or register and was skipped."""


@attrs.frozen
class PluginInfo:
    """What ``toolwire plugins`` shows for one plugin."""

    name: str
    distribution: str | None
    version: str | None
    builtin: bool
    parsers: tuple[str, ...] = ()
    backends: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    stream_filters: tuple[str, ...] = ()
    tool_sources: tuple[str, ...] = ()
    error: str | None = None


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


class PluginManager:
    """Owns a :class:`pluggy.PluginManager` and the records plugins registered.

    :param builtins: register the built-in plugins.
    :param entry_points: load third-party plugins from the ``toolwire``
        entry-point group (tests pass ``False`` so results never depend on what
        happens to be installed).
    :param strict: raise on a broken plugin (default: ``TOOLWIRE_STRICT_PLUGINS``).
    """

    def __init__(self, *, builtins: bool = True, entry_points: bool = True,
                 strict: bool | None = None) -> None:
        self._pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self._pm.add_hookspecs(hookspecs)
        self.strict = _truthy(os.environ.get("TOOLWIRE_STRICT_PLUGINS")) if strict is None \
            else strict
        self._info: dict[str, dict[str, Any]] = {}
        self._collected: dict[str, dict[str, Any]] | None = None
        self._owners: dict[str, dict[str, str]] = {}
        # The core calls each implementation itself (to give every plugin its own
        # error boundary), so pluggy's hook tracing never sees those calls.
        self._tracing = _truthy(os.environ.get("TOOLWIRE_TRACE_PLUGINS"))
        if self._tracing:
            self._pm.trace.root.setwriter(lambda text: sys.stderr.write(str(text)))
            self._pm.enable_tracing()
        if builtins:
            for module_name in BUILTIN_PLUGINS:
                self._register_module(module_name, builtin=True)
        if entry_points:
            self.load_entry_points()
        # Run the registration hooks now, so a broken plugin is reported (or, in
        # strict mode, raises) while loading rather than at first use.
        self._collect()

    # -- registration ---------------------------------------------------------

    def register(self, plugin: object, name: str | None = None) -> str:
        """Register a plugin object or module; return the name it is known by."""
        plugin_name = name or getattr(plugin, "__name__", None) or type(plugin).__name__
        if self._pm.is_registered(plugin):
            return self._pm.get_name(plugin) or plugin_name
        if self._pm.has_plugin(plugin_name):
            self._fail(plugin_name, f"another plugin is already registered as {plugin_name!r}",
                       None)
            return plugin_name
        try:
            self._pm.register(plugin, name=plugin_name)
        except BaseException as exc:
            if must_propagate(exc):
                raise
            self._fail(plugin_name, f"cannot register: {_describe(exc)}", exc)
            return plugin_name
        self._info[plugin_name] = {"distribution": None, "version": None, "builtin": False,
                                   "error": None}
        self._collected = None
        return plugin_name

    def unregister(self, name: str) -> None:
        """Remove a plugin by name (used by test fixtures)."""
        plugin = self._pm.get_plugin(name)
        if plugin is not None:
            self._pm.unregister(plugin)
        self._info.pop(name, None)
        self._collected = None

    def _register_module(self, module_name: str, *, builtin: bool,
                         dist: str | None = None, version: str | None = None,
                         name: str | None = None) -> None:
        try:
            module = importlib.import_module(module_name)
        except BaseException as exc:  # a plugin's sys.exit() must not end the host
            if must_propagate(exc):
                raise
            self._fail(name or module_name, f"cannot import {module_name}: {_describe(exc)}",
                       exc)
            return
        registered = self.register(module, name=name or module_name)
        info = self._info.get(registered)
        if info is not None:
            info.update(builtin=builtin or info["builtin"])
            if dist:
                info.update(distribution=dist, version=version)

    def load_entry_points(self) -> None:
        """Load plugins from the ``toolwire`` entry-point group, each in isolation."""
        allow_raw = os.environ.get("TOOLWIRE_LOAD_PLUGINS")
        allow = None if allow_raw is None else {p.strip() for p in allow_raw.split(",")
                                                if p.strip()}
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            if allow is not None and ep.name not in allow:
                continue
            dist = ep.dist.name if ep.dist is not None else None
            version = ep.dist.version if ep.dist is not None else None
            lookalike = _BUILTIN_SHORT_NAMES.get(ep.name)
            if lookalike is not None and ep.value.split(":")[0].strip() != lookalike:
                self._caution(ep.name, f"entry point {ep.value!r}"
                              + (f" of {dist}" if dist else "")
                              + f" is named like the built-in plugin {lookalike}; it is "
                              f"loaded as a plugin of its own, and the built-in's parsers, "
                              "backends, tools and filters keep their names")
            try:
                plugin = ep.load()
            except BaseException as exc:
                if must_propagate(exc):
                    raise
                self._fail(ep.name, f"entry point {ep.value!r} failed to load: {_describe(exc)}",
                           exc, dist=dist, version=version)
                continue
            if self._pm.is_registered(plugin):
                existing = self._pm.get_name(plugin)
                if existing in self._info and dist:
                    self._info[existing].update(distribution=dist, version=version)
                continue
            # Known by its entry-point name: the name TOOLWIRE_LOAD_PLUGINS selects
            # and every warning about it uses.
            if self._pm.has_plugin(ep.name):
                self._fail(ep.name, f"entry point {ep.value!r}: another plugin is already "
                           f"registered as {ep.name!r}", None, dist=dist, version=version)
                continue
            registered = self.register(plugin, name=ep.name)
            if registered in self._info:
                self._info[registered].update(distribution=dist, version=version)

    def _fail(self, plugin: str, message: str, exc: BaseException | None,
              dist: str | None = None, version: str | None = None) -> None:
        """Record a plugin that could not be loaded, then warn (or raise when strict)."""
        key = plugin
        taken = self._info.get(plugin)
        if taken is not None and taken["error"] is None:
            # a second plugin under a loaded plugin's name: keep the first one's record
            base = f"{plugin} ({dist})" if dist else f"{plugin} (duplicate)"
            key, n = base, 2
            while key in self._info:
                key, n = f"{base} #{n}", n + 1
        self._info[key] = {"distribution": dist, "version": version, "builtin": False,
                           "error": message}
        self._report(plugin, message, exc)

    def _skip(self, plugin: str, message: str, exc: BaseException) -> None:
        """Unregister a loaded plugin whose registration hooks failed, then report it."""
        loaded = self._pm.get_plugin(plugin)
        if loaded is not None:
            self._pm.unregister(loaded)
        info = self._info.setdefault(plugin, {"distribution": None, "version": None,
                                              "builtin": False, "error": None})
        info["error"] = message
        self._report(plugin, message, exc)

    def _caution(self, plugin: str, message: str) -> None:
        """Warn about a plugin that loads but may confuse (raise when strict)."""
        if self.strict:
            raise PluginLoadError(f"plugin {plugin!r}: {message}", plugin=plugin)
        warnings.warn(f"toolwire plugin {plugin!r}: {message}", PluginWarning, stacklevel=4)

    def _report(self, plugin: str, message: str, exc: BaseException | None) -> None:
        if self.strict:
            if isinstance(exc, PluginConflictError):
                raise exc
            raise PluginLoadError(f"plugin {plugin!r}: {message}", plugin=plugin) from exc
        warnings.warn(f"toolwire plugin {plugin!r} skipped: {message}", PluginWarning,
                      stacklevel=4)

    # -- typed accessors ------------------------------------------------------

    def _collect(self) -> dict[str, dict[str, Any]]:
        if self._collected is not None:
            return self._collected
        collected: dict[str, dict[str, Any]] = {kind: {} for kind in _REGISTRATION_HOOKS}
        owners: dict[str, dict[str, str]] = {kind: {} for kind in _REGISTRATION_HOOKS}
        by_plugin: dict[str, list[tuple[str, Any]]] = {}
        for kind, (_, hook_name) in _REGISTRATION_HOOKS.items():
            for impl in getattr(self._pm.hook, hook_name).get_hookimpls():
                by_plugin.setdefault(impl.plugin_name, []).append((kind, impl))
        # Plugins go in registration order (built-ins first), never pluggy's call
        # order, so which of two conflicting plugins is kept is predictable.
        order = [name for name in self._info if name in by_plugin]
        order += sorted(name for name in by_plugin if name not in self._info)
        for plugin_name in order:
            self._register_records(plugin_name, by_plugin[plugin_name], collected, owners)
        self._collected = collected
        self._owners = owners
        return collected

    def _register_records(self, plugin_name: str, impls: list[tuple[str, Any]],
                          collected: dict[str, dict[str, Any]],
                          owners: dict[str, dict[str, str]]) -> None:
        """Run one plugin's registration hooks; keep all its records or, if any fails, none."""
        staged: dict[str, dict[str, Any]] = {kind: {} for kind in collected}

        def make_register(kind: str) -> Callable[[Any], None]:
            record_type, _ = _REGISTRATION_HOOKS[kind]
            label = _LABELS[kind]

            def register(record: Any) -> None:
                if not isinstance(record, record_type):
                    raise TypeError(f"register_{kind} expects a {record_type.__name__}, "
                                    f"got {type(record).__name__}")
                name = getattr(record, "name", None)
                if not isinstance(name, str) or not name:
                    raise ValueError(f"a {label} needs a non-empty name, got {name!r}")
                if name in collected[kind]:
                    raise PluginConflictError(label, name, owners[kind][name], plugin_name)
                if name in staged[kind]:
                    raise ValueError(f"{label} {name!r} is registered twice")
                if not isinstance(record, Tool):  # the other records carry a plugin field
                    record = attrs.evolve(record, plugin=plugin_name)  # type: ignore[misc]
                staged[kind][name] = self._guarded(record)

            return register

        for kind, impl in impls:
            register = make_register(kind)
            try:
                self._trace(impl, "register")
                impl.function(**({"register": register} if "register" in impl.argnames else {}))
            except PluginConflictError as exc:
                self._skip(plugin_name, str(exc), exc)
                return
            except BaseException as exc:  # a registration hook's sys.exit() included
                if must_propagate(exc):
                    raise
                self._skip(plugin_name, f"{impl.function.__name__} raised {_describe(exc)}", exc)
                return
        for spec in staged["stream_filters"].values():
            # A factory that fails even for an empty context would fail every reply
            # of every family: report it now, by name, like a failing hook.
            try:
                spec.create.unguarded(FilterContext())
            except BaseException as exc:
                if must_propagate(exc):
                    raise
                self._skip(plugin_name, f"the factory of stream filter {spec.name!r} raised "
                           f"{_describe(exc)}", exc)
                return
        for kind, records in staged.items():
            for name, record in records.items():
                collected[kind][name] = record
                owners[kind][name] = plugin_name

    def _guarded(self, record: Any) -> Any:
        """``record`` with its plugin callables behind an error boundary.

        A stream filter's factory that raises is skipped for that reply and a
        parser's ``detect`` that raises scores the template 0, each with one
        :class:`PluginWarning` naming the plugin (raised as
        :class:`PluginLoadError` when strict), so one broken plugin cannot break
        the pipeline or the parser selection of every family.
        """
        if isinstance(record, StreamFilterSpec):
            return attrs.evolve(record, create=_Guarded(
                self, record.plugin, f"stream filter {record.name!r} factory", record.create,
                None))
        if isinstance(record, ParserSpec):
            return attrs.evolve(record, detect=_Guarded(
                self, record.plugin, f"parser {record.name!r} detect", record.detect, 0.0))
        if isinstance(record, ToolSourceSpec):
            return attrs.evolve(record, origin=_Guarded(
                self, record.plugin, f"tool source {record.name!r} origin", record.origin,
                None))
        return record

    def _trace(self, impl: Any, arguments: str) -> None:
        if self._tracing:
            sys.stderr.write(f"toolwire: {impl.function.__name__}({arguments}) "
                             f"[plugin {impl.plugin_name}]\n")

    def parsers(self) -> dict[str, ParserSpec]:
        """Every registered parser, by family name."""
        return dict(self._collect()["parsers"])

    def parser(self, family: str) -> ParserSpec:
        """The parser of a family.

        :raises ParserNotFoundError: no plugin registered that family.
        """
        spec: ParserSpec = self._named("parsers", family, ParserNotFoundError)
        return spec

    def backends(self) -> dict[str, BackendSpec]:
        """Every registered backend, by name."""
        return dict(self._collect()["backends"])

    def backend(self, name: str) -> BackendSpec:
        """The backend called ``name``.

        :raises BackendNotFoundError: none is registered under that name.
        """
        spec: BackendSpec = self._named("backends", name, BackendNotFoundError)
        return spec

    def tools(self) -> list[Tool]:
        """Every tool contributed by plugins."""
        return list(self._collect()["tools"].values())

    def tool_sources(self) -> dict[str, ToolSourceSpec]:
        """Every registered tool source, by name."""
        return dict(self._collect()["tool_sources"])

    def tool_source(self, name: str) -> ToolSourceSpec:
        """The tool source called ``name``.

        :raises ToolSourceNotFoundError: none is registered under that name.
        """
        spec: ToolSourceSpec = self._named("tool_sources", name, ToolSourceNotFoundError)
        return spec

    def _named(self, kind: str, name: str, missing: type[LookupError]) -> Any:
        """The record of ``kind`` called ``name``; ``missing`` names the ones there are."""
        records = self._collect()[kind]
        found = records.get(name)
        if found is None:
            known = ", ".join(sorted(records)) or "none"
            raise missing(f"no {_LABELS[kind]} {name!r} (registered: {known}); "
                          "is its extra installed?")
        return found

    def stream_filters(self) -> list[StreamFilterSpec]:
        """Every stream filter, sorted by priority then name (never by load order)."""
        specs: Iterable[StreamFilterSpec] = self._collect()["stream_filters"].values()
        return sorted(specs, key=lambda s: (s.priority, s.name))

    def notify_tool_call(self, name: str, arguments: Mapping[str, Any], call_id: str) -> None:
        """Call every ``on_tool_call`` observer; a failing one is a warning."""
        self._observe("on_tool_call", name=name, arguments=arguments, call_id=call_id)

    def notify_tool_result(self, name: str, call_id: str, content: str, is_error: bool) -> None:
        """Call every ``on_tool_result`` observer; a failing one is a warning."""
        self._observe("on_tool_result", name=name, call_id=call_id, content=content,
                      is_error=is_error)

    def _observe(self, hook_name: str, **kwargs: Any) -> None:
        self._collect()  # a plugin registered since has its registration checked first
        hook = getattr(self._pm.hook, hook_name)
        for impl in hook.get_hookimpls():
            accepted = {k: v for k, v in kwargs.items() if k in impl.argnames}
            self._trace(impl, ", ".join(f"{k}={v!r}" for k, v in accepted.items()))
            try:
                impl.function(**accepted)
            except BaseException as exc:  # an observer's sys.exit() included
                if must_propagate(exc):
                    raise
                warnings.warn(f"toolwire plugin {impl.plugin_name!r}: {hook_name} raised "
                              f"{_describe(exc)}", PluginWarning, stacklevel=3)

    def describe(self) -> list[PluginInfo]:
        """One :class:`PluginInfo` per plugin (loaded or failed), for ``toolwire plugins``."""
        collected = self._collect()
        owned: dict[str, dict[str, list[str]]] = {}
        for kind, records in collected.items():
            for name in records:
                owner = self._owners[kind][name]
                owned.setdefault(owner, {}).setdefault(kind, []).append(name)
        out = []
        for name, info in self._info.items():
            mine = owned.get(name, {})
            out.append(PluginInfo(
                name=name, distribution=info["distribution"], version=info["version"],
                builtin=info["builtin"], parsers=tuple(mine.get("parsers", ())),
                backends=tuple(mine.get("backends", ())), tools=tuple(mine.get("tools", ())),
                stream_filters=tuple(mine.get("stream_filters", ())),
                tool_sources=tuple(mine.get("tool_sources", ())), error=info["error"]))
        return out

    @property
    def pluggy(self) -> pluggy.PluginManager:
        """The underlying pluggy manager, for advanced use."""
        return self._pm


def _describe(exc: BaseException) -> str:
    """``SystemExit: 3``: an exception as a warning names it."""
    detail = str(exc)
    return f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__


class _Guarded:
    """A plugin callable behind an error boundary: on failure, warn once and return
    ``fallback`` (or raise :class:`PluginLoadError` when the manager is strict)."""

    def __init__(self, manager: PluginManager, plugin: str, what: str,
                 function: Callable[..., Any], fallback: Any) -> None:
        self._manager = manager
        self._plugin = plugin
        self._what = what
        self._function = function
        self._fallback = fallback
        self._reported = False
        functools.update_wrapper(self, function)

    def unguarded(self, *args: Any) -> Any:
        """Call the plugin's own function, letting what it raises through."""
        return self._function(*args)

    def __call__(self, *args: Any) -> Any:
        try:
            return self._function(*args)
        except BaseException as exc:
            if must_propagate(exc):
                raise
            message = f"{self._what} raised {_describe(exc)}"
            if self._manager.strict:
                raise PluginLoadError(f"plugin {self._plugin!r}: {message}",
                                      plugin=self._plugin) from exc
            if not self._reported:
                self._reported = True
                warnings.warn(f"toolwire plugin {self._plugin!r}: {message}; it is left out "
                              "where it failed", PluginWarning, stacklevel=2)
            return self._fallback


_default: PluginManager | None = None


def default_plugin_manager() -> PluginManager:
    """The process-wide plugin manager (built-ins plus entry points), made once."""
    global _default
    if _default is None:
        _default = PluginManager()
    return _default
