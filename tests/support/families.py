"""What every family's tests share.

* a plugin manager with every family plugin, so detection is always tested
  among all of them;
* parsing a reply through a family's pipeline (stream filters, then the parser);
* ``keep`` rules (which argument values a test may draw);
* BFCL ground-truth cases and their schema check;
* the conformance budget.

The JSON-argument families add their harness in :mod:`tests.support.json_families`,
the tagged and channel families theirs in :mod:`tests.support.tagged_families`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
from hypothesis import settings

import toolwire
from tests.support.templates import SHARED_SCHEMAS, require_schemas, shared_template
from toolwire.events import Event
from toolwire.families.selection import build_pipeline
from toolwire.hooks.manager import PluginManager
from toolwire.parse.protocol import collect_reply
from toolwire.plugins import (
    deepseek,
    gemma4,
    glm_xml,
    harmony,
    hermes_json,
    invoke_xml,
    json_wrappers,
    kimi,
    llama3_json,
    mistral,
    pythonic,
    seed_xml,
    solar,
)
from toolwire.testing import isolated_plugin_manager
from toolwire.testing import strategies as tws
from toolwire.vocabulary.schema import normalize_schema, tool_parameters_by_name

TAGGED_PLUGINS: tuple[ModuleType, ...] = (seed_xml, glm_xml, invoke_xml, kimi, harmony, gemma4,
                                          pythonic, solar)
JSON_PLUGINS: tuple[ModuleType, ...] = (hermes_json, llama3_json, mistral, deepseek,
                                        json_wrappers)
SCHEMAS = SHARED_SCHEMAS
BFCL_KINDS = ("simple_python", "multiple", "parallel", "parallel_multiple")

Call = tuple[str, dict[str, Any]]
Case = tuple[list[dict[str, Any]], list[Call]]
Keep = Callable[[dict[str, Any], dict[str, Any]], bool]


@functools.cache
def plugins() -> PluginManager:
    """The built-ins plus every family plugin, so detection is always tested among all."""
    return isolated_plugin_manager(*TAGGED_PLUGINS, *JSON_PLUGINS)


def strings_in(value: Any) -> Iterator[str]:
    """Every string inside an argument value (dict keys included)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield str(key)
            yield from strings_in(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from strings_in(item)


def without(tokens: Sequence[str]) -> Keep:
    """A ``keep``: no argument string holds one of ``tokens``."""

    def keep(schema: dict[str, Any], arguments: dict[str, Any]) -> bool:
        return not any(t in s for s in strings_in(arguments) for t in tokens)

    return keep


def all_of(*keeps: Keep) -> Keep:
    """A ``keep`` that every one of ``keeps`` accepts."""

    def keep(schema: dict[str, Any], arguments: dict[str, Any]) -> bool:
        return all(k(schema, arguments) for k in keeps)

    return keep


def parse(family: str, pieces: Iterable[str], tools: Sequence[Any] = (), *,
          template: str | None = None, prompt_tail: str = "") -> list[Event]:
    """Feed ``pieces`` through the family's pipeline (stream filters, then the parser)."""
    spec = plugins().parser(family)
    pipeline = build_pipeline(spec, tool_parameters_by_name(list(tools)), plugins=plugins(),
                              chat_template=template, prompt_tail=prompt_tail)
    events: list[Event] = []
    for piece in pieces:
        events.extend(pipeline.feed(piece))
    events.extend(pipeline.close())
    return events


def parse_text(family: str, text: str, tools: Sequence[Any] = (), chunk: int = 0,
               **kwargs: Any) -> toolwire.ParsedReply:
    """Parse a whole reply (in deltas of ``chunk`` characters when given)."""
    step = chunk or max(len(text), 1)
    pieces = [text[i:i + step] for i in range(0, len(text), step)] or [""]
    return collect_reply(parse(family, pieces, tools, **kwargs))


def canonical(calls: Iterable[tuple[str, Mapping[str, Any]]]) -> list[tuple[str, str]]:
    """Calls as ``(name, canonical JSON)`` pairs, for exact comparison."""
    return [(name, tws.json_dumps(dict(arguments))) for name, arguments in calls]


def schema_valid(schema: dict[str, Any], arguments: dict[str, Any]) -> bool:
    """Whether a call's arguments are declared by, and valid against, its tool's schema."""
    parameters = schema.get("parameters") or {}
    if any(name not in parameters.get("properties", {}) for name in arguments):
        return False
    return bool(jsonschema.Draft202012Validator(parameters).is_valid(arguments))


def bfcl_invalid_calls() -> list[tuple[str, str]]:
    """``(kind, tool)`` of every BFCL ground-truth call its own schema refuses.

    Formats that write values as text type them by the schema and tell a
    literal tag from a real one by the schema's parameter names, so such calls
    (an undeclared parameter, a list for a string) cannot come back unchanged.
    """
    out: list[tuple[str, str]] = []
    for kind in BFCL_KINDS:
        for tools, calls in bfcl_cases(kind):
            schemas = {t["function"]["name"]: t["function"] for t in tools}
            out.extend((kind, n) for n, a in calls if not schema_valid(schemas[n], a))
    return out


def conformance_examples() -> int:
    """Examples per property: 6 by default, 200 under the ``fuzz`` profile."""
    return max(4, settings().max_examples // 10)


def template_source(name: str) -> str:
    """The source of a real template."""
    return shared_template(name)


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def _first_value(values: list[Any]) -> tuple[bool, Any]:
    for value in values:
        if value != "":
            return True, value
    return False, None


@functools.cache
def bfcl_cases(kind: str) -> list[tuple[list[dict[str, Any]], list[Call]]]:
    """``(tools, calls)`` for every record of ``BFCL_v4_<kind>.json``.

    Each call takes the first acceptable value of every parameter (a parameter
    whose only value is ``""`` is left out); schemas are normalised (``dict`` ->
    ``object``), as the leaderboard does before sending them.
    """
    require_schemas()
    questions = {r["id"]: r for r in _jsonl(SCHEMAS / f"BFCL_v4_{kind}.json")}
    cases = []
    for answer in _jsonl(SCHEMAS / "possible_answer" / f"BFCL_v4_{kind}.json"):
        record = questions[answer["id"]]
        tools = [{"type": "function",
                  "function": {**f, "parameters": normalize_schema(f.get("parameters") or {})}}
                 for f in record["function"]]
        calls: list[Call] = []
        for entry in answer["ground_truth"]:
            ((name, params),) = entry.items()
            arguments = {}
            for param, values in params.items():
                present, value = _first_value(values)
                if present:
                    arguments[param] = value
            calls.append((name, arguments))
        cases.append((tools, calls))
    return cases


def bfcl_sample(kind: str, every: int) -> list[tuple[list[dict[str, Any]], list[Call]]]:
    """Every ``every``-th BFCL case (all of them under the fuzz profile)."""
    cases = bfcl_cases(kind)
    step = 1 if settings().max_examples >= 1000 else every
    return cases[::step]


canonical_calls = canonical


def without_dropped(text: str, reply: toolwire.ParsedReply | Mapping[str, Any]) -> str:
    """``text`` less the markup the parser dropped (its ``stray_markup`` diagnostics: an
    empty section, a section's closing marker with none open), each once, in order."""
    diagnostics = reply.to_dict()["diagnostics"] if isinstance(reply, toolwire.ParsedReply) \
        else reply["diagnostics"]
    for raw in (d["raw"] for d in diagnostics if d["code"] == "stray_markup"):
        assert raw.strip() and raw in text, (raw, text)
        text = text.replace(raw, "", 1)
    return text
