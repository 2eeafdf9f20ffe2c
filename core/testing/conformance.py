"""The parser conformance suite: one call checks a parser plugin against a real template.

::

    from pathlib import Path
    from toolwire.testing import check_parser
    import my_plugin

    def test_conformance():
        check_parser(my_plugin, Path("template.jinja").read_text())

:func:`check_parser` renders assistant turns through the *real* chat template
the plugin claims, cuts out what the model would have written, and feeds that
text to the plugin's parser, through the same pipeline (stream filters, then
the parser) a chat uses. Every property is a hypothesis search; a failure
is shrunk to a small example and reported by name, with the text the parser
was given. The properties (:data:`PROPERTIES`):

``round_trip``
    One call with mapping arguments, plus text before it, rendered and parsed
    back: the same name, arguments (compared as canonical JSON, so ``1``,
    ``1.0``, ``True`` and ``-0.0`` stay distinct), text, no reasoning, no
    diagnostics; call events numbered from 0 and in order (start, deltas, call).
``chunking_invariance``
    Rendered replies and garbage, split into deltas every which way, give the
    same merged events as the whole text fed at once.
``no_markup_in_text``
    When the content held none of the template's markers, no text event holds
    one either (streamed in random deltas).
``garbage_never_raises``
    Adversarial text built from the family's markers, near misses of them,
    JSON look-alikes, unicode, very long text, and real replies cut short or
    with garbage spliced in: ``feed``/``close`` never raise, return only events,
    never report ``parser_error``; ``detect`` returns a score in ``[0, 1]``.
``argument_typing``
    Values of typed parameters come back with their JSON types (integer,
    number, boolean, null, array, object) and the arguments validate against
    the tool's schema.
``parallel_calls``
    Several calls in one turn come back in order. Skipped, with the reason,
    when the template raises on a second call (Llama 3.x) or drops it (gpt-oss).
``detection``
    ``spec.detect(template) > 0`` and :func:`toolwire.select_parser` picks this
    parser among the built-ins (and the plugins of the given plugin manager).

**Cutting out the model's text.** :class:`AssistantTurnRenderer` does it the
same way for every template, from differences between renders:

1. The conversation ``[user]`` is rendered without and with the generation
   prompt; the difference is the generation prompt (``<|im_start|>assistant\\n``,
   perhaps followed by ``<think>\\n``).
2. ``[user, assistant]`` is rendered without a generation prompt; when it begins
   with the ``[user]`` render, the rest is the assistant turn. A template that
   closes every conversation with a block of its own (Command R+ appends a
   system instruction) does not: then the turn is what lies between the parts
   both renders share at the start (cut back to a tag boundary) and at the end.
3. If the turn begins with the generation prompt, the model's text starts after
   it (so a turn rendered as ``<think>\\n\\n</think>\\n\\n...`` after a generation
   prompt ending in ``<think>\\n`` starts inside the think block, as a real reply
   does, and the stream filters are told so). Otherwise it starts after the
   header a plain-text assistant turn gets (learnt once with a sentinel
   content), or failing that after what the turn shares with either, cut back
   to a tag boundary (Cohere opens calls with ``<|START_ACTION|>``, text with
   ``<|START_TEXT|>``).
4. The end-of-turn marker is learnt from the same plain-text turn (the text
   after the sentinel) and removed when the turn ends with it; failing that,
   the part of it the turn ends with, from a tag boundary; failing that, the
   turn ends where it holds the longest end of the marker starting at a tag
   (Command R7B opens a chatbot turn of its own after a tool-call turn).

The clock is fixed while rendering, so templates that print the date or time
render alike every time.

Limits: a template whose ``[user, assistant]`` render shares nothing at the
start with its ``[user]`` render cannot be used (:class:`~toolwire.TemplateError`),
nor one that renders no tool call with mapping arguments (SmolLM3, Gemma 2,
Functionary v3.2). Templates that drop the content beside tool calls get empty
content; templates that render a call only when the content is ``None`` get
``None``.

**Markers.** The template's own markup is learnt by rendering a call whose
name, parameter, value and content are sentinels: the literal text between
them (split on whitespace, keeping pieces of 3 or more characters with a letter
or one of ``<>[]|``) plus the generation prompt's and header's pieces, and
``<think>``/``</think>`` when the template mentions ``</think>`` (the reasoning
filter acts on them); each control token inside a piece (``<...>`` without
blanks, ``[UPPER_CASE]``, a word opening a bracket at its start: ``functools[``)
is a marker on its own, since a model writes it as a special token or to open a
call, never as text. Content never contains a marker; argument strings
are free of markers unless ``keep`` says otherwise (a format may be unable to
tell a value holding its markup from markup: pass ``keep`` to test the values
your format can express).

**What no model can write** is not tried, whatever ``keep`` says, as probe
renders find it: calls holding a null on a template that leaves null members
out (MiniMax-M3); free-form objects holding anything but non-empty strings on a
template that writes different free-form values alike (MiniMax-M3's nested
tags: ``""``, ``[]`` and ``{}``); values holding a line break the template
rewrites (Command R+'s ``indent`` filter and ``\x85``). ``report.notes`` names each.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st

from ..errors import (
    ParserNotFoundError,
    PluginLoadError,
)
from ..families.selection import template_hash
from ..hooks.manager import PluginManager, PluginWarning, SpecPlugin
from ..parse.protocol import ParserSpec
from ..templates.assistant_turns import AssistantTurnRenderer, RenderedReply
from .properties import Case, Keep, PropertySuite
from .report import (
    KIT_AUDIT_EVENT,
    PROPERTIES,
    ConformanceError,
    ConformanceReport,
    PropertyResult,
)

__all__ = [
    "PROPERTIES",
    "AssistantTurnRenderer",
    "ConformanceError",
    "ConformanceReport",
    "PropertyResult",
    "RenderedReply",
    "check_parser",
]



# -- resolving the parser under test ------------------------------------------------------


def _register(manager: PluginManager, plugin: object, name: str | None) -> str:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PluginWarning)
        registered = manager.register(plugin, name=name)
        manager.parsers()  # runs the registration hooks
    info = next((i for i in manager.describe() if i.name == registered), None)
    problem = info.error if info is not None else None
    if problem is None:
        problem = next((str(w.message) for w in caught
                        if issubclass(w.category, PluginWarning)), None)
    if problem is not None:
        raise PluginLoadError(f"plugin {registered!r} could not be registered: {problem}",
                              plugin=registered)
    return registered


def _unwrapped(function: Any) -> Any:
    """A registered callable without the plugin manager's error boundary around it."""
    return getattr(function, "__wrapped__", function)


def _resolve(plugin_or_spec: object, source: str, family: str | None,
             plugins: PluginManager | None) -> tuple[ParserSpec, PluginManager]:
    if isinstance(plugin_or_spec, ParserSpec):
        spec = plugin_or_spec
        manager = plugins or PluginManager(builtins=True, entry_points=False)
        existing = manager.parsers().get(spec.name)
        if existing is None:
            if plugins is not None:
                raise ParserNotFoundError(f"parser {spec.name!r} is not registered in the "
                                          "plugin manager given")
            _register(manager, SpecPlugin(spec), spec.plugin or f"{spec.name} (under test)")
        elif ((_unwrapped(existing.detect), existing.create)
              != (_unwrapped(spec.detect), spec.create)):  # as registered, or as written
            raise PluginLoadError(f"family {spec.name!r} is already registered by plugin "
                                  f"{existing.plugin!r}; a parser under test needs its own name",
                                  plugin=spec.plugin)
        return manager.parser(spec.name), manager
    manager = plugins or PluginManager(builtins=True, entry_points=False)
    if plugins is None or not manager.pluggy.is_registered(plugin_or_spec):
        if plugins is not None:
            raise PluginLoadError("the plugin is not registered in the plugin manager given",
                                  plugin=repr(plugin_or_spec))
        name = _register(manager, plugin_or_spec, None)
    else:
        name = manager.pluggy.get_name(plugin_or_spec) or ""
    own = [s for s in manager.parsers().values() if s.plugin == name]
    if family is not None:
        matching = [s for s in own if s.name == family]
        if not matching:
            raise ParserNotFoundError(f"plugin {name!r} registers no parser {family!r} "
                                      f"(it registers: {', '.join(s.name for s in own) or 'none'})")
        return matching[0], manager
    if not own:
        raise ParserNotFoundError(f"plugin {name!r} registers no parser")

    def score(spec: ParserSpec) -> float:
        try:
            return float(spec.detect(source))
        except Exception:
            return 0.0

    return max(own, key=lambda s: (score(s), s.name)), manager


def check_parser(plugin_or_spec: object, chat_template: str | os.PathLike[str], *,
                 examples: int | None = None, family: str | None = None,
                 tools_strategy: st.SearchStrategy[Case] | None = None,
                 keep: Keep | None = None, raise_on_failure: bool = True,
                 markers: Sequence[str] | None = None, plugins: PluginManager | None = None,
                 template_name: str | None = None, seed: int | None = None,
                 progress: Callable[[str], None] | None = None) -> ConformanceReport:
    """Run the parser conformance suite (:data:`PROPERTIES`) through a real chat template.

    :param plugin_or_spec: a plugin (a module or object with
        ``@toolwire.hookimpl def register_parsers``) or a :class:`ParserSpec`.
    :param chat_template: the template source, or a path to the template file.
    :param examples: hypothesis examples per property (default: the active
        hypothesis profile's ``max_examples``).
    :param family: which parser, when the plugin registers several (default: the
        plugin's parser that scores the template highest).
    :param tools_strategy: draws ``(tools, calls)`` as
        :func:`~toolwire.testing.strategies.tool_calls_with_schemas` does (default:
        that strategy with adversarial string values holding the family's markup).
    :param keep: ``keep(function_schema, arguments)`` says whether the format can
        express a call; calls it rejects are not tried. Default: refuse arguments
        holding a marker of the template.
    :param raise_on_failure: raise :class:`ConformanceError` when a property failed.
    :param markers: the family's markup, instead of what is learnt from the template.
    :param plugins: select among this manager's plugins (the parser must be
        registered in it). Default: the built-ins plus the plugin, no entry points.
    :param template_name: the label used in the report (default: the file name or
        the sha256 prefix).
    :param seed: make the hypothesis search reproducible.
    :param progress: called with each property's name as it starts.
    :returns: the :class:`ConformanceReport`.
    :raises ConformanceError: a property failed (and ``raise_on_failure``).
    :raises PluginLoadError: the plugin could not be registered.
    :raises ParserNotFoundError: the plugin registers no (such) parser.
    :raises ValueError: ``chat_template`` is a file name given as a string.
    """
    if isinstance(chat_template, os.PathLike):
        path = Path(chat_template)
        source = path.read_text(encoding="utf-8")
        label = template_name or path.name
    else:
        source = chat_template
        label = template_name or f"sha256:{template_hash(source)[:12]}"
        if "\n" not in source and len(source) < 1024 and Path(source).is_file():
            raise ValueError(f"chat_template {source!r} is a file name; pass "
                             "Path(...) or the file's text")
    spec, manager = _resolve(plugin_or_spec, source, family, plugins)
    count = examples if examples is not None else settings().max_examples
    suite = PropertySuite(spec, manager, source, examples=max(count, 1),
                          tools_strategy=tools_strategy, keep=keep, markers=markers, seed=seed,
                          progress=progress)
    sys.audit(KIT_AUDIT_EVENT, spec.name, label)
    results = suite.run()
    report = ConformanceReport(spec.name, spec.plugin, label, tuple(results),
                               suite.markers, tuple(suite.notes))
    if raise_on_failure and not report.passed:
        raise ConformanceError(report)
    return report

