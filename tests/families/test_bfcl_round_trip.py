"""Every BFCL ground-truth call, rendered through a real template of each family, parses back.

The Berkeley Function Calling Leaderboard files among the real schemas
(:mod:`tests.support.paths`) hold real tool schemas (with their quirks: ``"type":
"dict"``, ``"float"``, dotted names) and ground-truth calls. For every parser family
registered, each record's calls are rendered as one assistant turn through a real chat
template of that family (one call per turn where the template renders no parallel
calls), cut out with :class:`toolwire.testing.AssistantTurnRenderer`, and parsed; names
and arguments must come back exactly (canonical JSON, so ``1``, ``1.0`` and ``True``
differ).

A family plugin added later must add a template to :data:`FAMILY_TEMPLATES`;
the test fails until it does.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import jsonschema
import pytest

from tests.support.paths import (
    MISSING_SCHEMAS,
    MISSING_TEMPLATES,
    SHARED_SCHEMAS,
    SHARED_TEMPLATES,
)
from tests.support.templates import family_template
from toolwire.families.selection import build_pipeline
from toolwire.parse.protocol import collect_reply
from toolwire.testing import AssistantTurnRenderer, isolated_plugin_manager
from toolwire.testing.strategies import json_dumps
from toolwire.vocabulary.schema import normalize_schema, tool_parameters_by_name

# the kit's round-trip property at volume (every BFCL call through every family): not the loop
pytestmark = pytest.mark.kit

SCHEMAS = SHARED_SCHEMAS
TEMPLATES = SHARED_TEMPLATES

PLUGINS = isolated_plugin_manager()

FAMILY_TEMPLATES: dict[str, str] = {
    "qwen_xml": "Qwen3.5-4B.jinja",
    "apertus": "Apertus-8B-Instruct.jinja",
    "apriel": "unsloth-Apriel-1.5.jinja",
    "command_r7b": "Cohere2MoE.jinja",
    "deepseek": "deepseek-ai-DeepSeek-V3.1.jinja",
    "dsml": "deepseek-ai-DeepSeek-V3.2.jinja",
    "firefunction_v2": "fireworks-ai-llama-3-firefunction-v2.jinja",
    "functionary_v3_1": "meetkai-functionary-medium-v3.1.jinja",
    "gemma4": "google-gemma-4-31B-it.jinja",
    "gigachat": "GigaChat3.1-10B-A1.8B.jinja",
    "glimmer": "muse-glimmer.jinja",
    "glm_xml": "GLM-4.6.jinja",
    "harmony": "openai-gpt-oss-120b.jinja",
    "hermes_json": "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
    "hy3_xml": "tencent-Hy3.jinja",
    "kimi_k2": "Kimi-K2-Instruct.jinja",
    "kimi_k3": "Kimi-K3.jinja",
    "llama3_json": "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "minicpm_xml": "openbmb-MiniCPM5-1B.jinja",
    "minimax_m1": "MiniMax-M1.jinja",
    "minimax_xml": "MiniMax-M2.jinja",
    "mistral": "mistralai-Ministral-3-14B-Reasoning-2512.jinja",
    "nemotron_nano_v2": "NVIDIA-Nemotron-Nano-v2.jinja",
    "pythonic": "LFM2.5-8B-A1B.jinja",
    "llama4_pythonic": "llama4-pythonic-style.jinja",  # the suite's own (tests/families/templates)
    "olmo3": "olmo3-style.jinja",  # the suite's own
    "seed_xml": "ByteDance-Seed-OSS.jinja",
    "solar": "upstage-Solar-Open-100B.jinja",
}
"""One real template per parser family (the suite's own where none is shared, see
:func:`tests.support.templates.family_template`); a new family plugin adds its entry here."""

COVERED_ELSEWHERE: dict[str, str] = {
    "minimax_m3": "tests/test_family_invoke_xml.py: the template drops None and cannot "
                  "tell '5' from 5 in free-form objects, so its round trip leaves those out",
    "command_r_plus": "tests/test_family_json_wrappers.py: the template needs every "
                      "parameter's description and additionalProperties on nested schemas",
    "functionary_v3_2": "tests/test_family_json_wrappers.py: the template renders only "
                        "JSON-string arguments",
}
"""Families whose template cannot take BFCL schemas as they are: their own test files
run the round trip with the adjustments their template needs."""

BFCL_FILES: dict[str, int] = {
    "BFCL_v4_simple_python.json": 400,
    "BFCL_v4_multiple.json": 200,
    "BFCL_v4_parallel.json": 540,
    "BFCL_v4_parallel_multiple.json": 607,
}
"""The files with ground-truth calls, and how many calls each holds (schemas/README.md)."""

OUTSIDE_SCHEMA: dict[tuple[str, str], str] = {
    ("simple_python_307", "venue"):
        "the first acceptable value is boolean true for the string parameter 'venue' (a BFCL "
        "slip); no format can send a boolean there",
    ("parallel_152", "mod"):
        "the first acceptable value is null for the number parameter 'mod' (its description "
        "says 'Default is None'; the schema does not admit null)",
    ("parallel_multiple_12", "permeability"):
        "'permeability' is not a parameter of calculate_voltage_difference (it belongs to "
        "calculate_magnetic_field); qwen_xml reads <parameter=NAME> of an undeclared parameter "
        "as text of the previous value, by design",
    ("parallel_multiple_26", "type"):
        "'type' is not a parameter of bank.calculate_balance (it is a property of its "
        "transaction items)",
}
"""Ground-truth values outside their own schema. The README's rule (first acceptable value
that is not ``""``) would send them; each also accepts ``""``, so the call leaves the
parameter out instead. Listed, not silently dropped: the test checks this list is exact."""


def _records(name: str) -> Iterator[tuple[str, list[dict[str, Any]], list[Any]]]:
    questions = {}
    for line in (SCHEMAS / name).read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            questions[record["id"]] = record["function"]
    for line in (SCHEMAS / "possible_answer" / name).read_text(encoding="utf-8").splitlines():
        if line.strip():
            answer = json.loads(line)
            yield answer["id"], questions[answer["id"]], answer["ground_truth"]


def _tools(functions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "function",
             "function": {**f, "parameters": normalize_schema(f.get("parameters") or {})}}
            for f in functions]


def _concrete_call(record_id: str, name: str, acceptable: Mapping[str, list[Any]],
                   parameters: Mapping[str, Any], outside: set[tuple[str, str]]
                   ) -> dict[str, Any]:
    """One call per the README: the first acceptable value that is not ``""``.

    A value outside the parameter's schema (or for an undeclared parameter) is
    left out when ``""`` is acceptable too, and recorded in ``outside``.
    """
    declared = parameters.get("properties", {})
    arguments = {}
    for param, values in acceptable.items():
        chosen = [v for v in values if v != ""]
        if not chosen:
            continue
        schema = declared.get(param)
        fits = schema is not None and not any(
            jsonschema.Draft202012Validator(schema).iter_errors(chosen[0]))
        if not fits and "" in values:
            outside.add((record_id, param))
            continue
        arguments[param] = chosen[0]
    return arguments


@pytest.fixture(scope="module")
def bfcl_available() -> None:
    if not SCHEMAS.is_dir() or not TEMPLATES.is_dir():
        pytest.skip(MISSING_TEMPLATES if not TEMPLATES.is_dir() else MISSING_SCHEMAS)


def ground_truth_turns(file_name: str, parallel_calls: bool, outside: set[tuple[str, str]]
                       ) -> Iterator[tuple[str, list[dict[str, Any]], list[tuple[str, Any]]]]:
    """``(record id, tools, calls of one assistant turn)`` for every ground-truth call of
    a BFCL file: a record's calls in one turn where the template writes parallel calls,
    else one turn each; ``outside`` collects the values the schema does not admit."""
    for record_id, functions, ground_truth in _records(file_name):
        tools = _tools(functions)
        parameters = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
        calls = []
        for entry in ground_truth:
            ((name, acceptable),) = entry.items()
            calls.append((name, _concrete_call(record_id, name, acceptable,
                                               parameters[name], outside)))
        for turn in ([calls] if parallel_calls else [[call] for call in calls]):
            yield record_id, tools, turn



def test_every_registered_family_has_a_template() -> None:
    missing = sorted(set(PLUGINS.parsers()) - set(FAMILY_TEMPLATES) - set(COVERED_ELSEWHERE))
    assert not missing, (f"add a real template rendering {missing} to FAMILY_TEMPLATES in "
                         "tests/test_bfcl_round_trip.py")


@pytest.mark.usefixtures("bfcl_available")
@pytest.mark.parametrize("family", sorted(set(PLUGINS.parsers()) & set(FAMILY_TEMPLATES)))
@pytest.mark.parametrize("file_name", sorted(BFCL_FILES))
def test_bfcl_ground_truth_calls_round_trip(family: str, file_name: str) -> None:
    spec = PLUGINS.parser(family)
    source = family_template(FAMILY_TEMPLATES[family])
    renderer = AssistantTurnRenderer(source, make_call_id=spec.make_call_id)
    outside: set[tuple[str, str]] = set()
    tried, failures = 0, []
    for record_id, tools, turn in ground_truth_turns(file_name, renderer.parallel_calls, outside):
        tried += len(turn)
        rendered = renderer.render(turn, tools=tools)
        pipeline = build_pipeline(spec, tool_parameters_by_name(tools), plugins=PLUGINS,
                                  chat_template=source, prompt_tail=rendered.prompt_tail)
        reply = collect_reply(pipeline.feed(rendered.text) + pipeline.close())
        got = [(c.name, json_dumps(dict(c.arguments))) for c in reply.tool_calls]
        want = [(n, json_dumps(a)) for n, a in turn]
        if got != want or reply.diagnostics or reply.content.strip():
            failures.append(f"{record_id}:\n  sent {want}\n  got  {got}\n  "
                            f"text {reply.content!r} diagnostics {reply.diagnostics}")
    assert tried == BFCL_FILES[file_name]
    assert not failures, f"{len(failures)} of {tried} turns differ:\n" + "\n".join(failures[:5])
    category = file_name.removeprefix("BFCL_v4_").removesuffix(".json")
    expected_outside = {key for key in OUTSIDE_SCHEMA if key[0].rsplit("_", 1)[0] == category}
    assert outside == expected_outside, "update OUTSIDE_SCHEMA (with the reason)"
