"""Which parser claims each real template: every template that renders tool calls is
claimed by exactly one plugin, and the tagged and channel families (issue 10) claim
exactly their own templates."""

from __future__ import annotations

import pytest

from tests.support.families import TAGGED_PLUGINS, plugins, template_source
from tests.support.templates import require_templates, template_names
from toolwire.errors import ParserNotFoundError
from toolwire.families.selection import score_parsers, select_parser
from toolwire.parse.protocol import FilterContext

TAGGED_TEMPLATES: dict[str, str] = {
    "ByteDance-Seed-OSS.jinja": "seed_xml",
    "GLM-4.6.jinja": "glm_xml",
    "GLM-4.7-Flash.jinja": "glm_xml",
    "poolside-Laguna-S-2.1.jinja": "glm_xml",
    "poolside-Laguna-XS-2.1.jinja": "glm_xml",
    "poolside-Laguna-XS.2.jinja": "glm_xml",
    "tencent-Hy3.jinja": "hy3_xml",
    "MiniMax-M2.jinja": "minimax_xml",
    "MiniMax-M3.jinja": "minimax_m3",
    "deepseek-ai-DeepSeek-V3.2.jinja": "dsml",
    "deepseek-ai-DeepSeek-V4.jinja": "dsml",
    "deepseek-ai-DeepSeek-V4-Flash-0731.jinja": "dsml",
    "openbmb-MiniCPM5-1B.jinja": "minicpm_xml",
    "Kimi-K2-Instruct.jinja": "kimi_k2",
    "Kimi-K2-Thinking.jinja": "kimi_k2",
    "moonshotai-Kimi-K2.jinja": "kimi_k2",
    "Kimi-K3.jinja": "kimi_k3",
    "openai-gpt-oss-120b.jinja": "harmony",
    "muse-glimmer.jinja": "glimmer",
    "google-gemma-4-31B-it.jinja": "gemma4",
    "google-gemma-4-31B-it-interleaved.jinja": "gemma4",
    "LFM2.5-8B-A1B.jinja": "pythonic",
    "upstage-Solar-Open-100B.jinja": "solar",
}
"""The templates of issue 10's families, and the family each must select."""

RENDERS_NO_CALL = frozenset({
    "HuggingFaceTB-SmolLM3-3B.jinja", "LFM2-8B-A1B.jinja", "LFM2.5-Instruct.jinja",
    "google-gemma-2-2b-it.jinja", "ibm-granite-granite-3.3-2B-Instruct.jinja",
    "llama-cpp-rwkv-world.jinja", "microsoft-Phi-3.5-mini-instruct.jinja",
})
"""Templates that drop assistant tool calls or have no tool role (see the templates README)."""


def _all_templates() -> list[str]:
    require_templates()
    return template_names()


@pytest.mark.parametrize("name", sorted(TAGGED_TEMPLATES))
def test_each_tagged_family_template_selects_its_family(name: str) -> None:
    choice = select_parser(template_source(name), plugins())
    assert choice.spec.name == TAGGED_TEMPLATES[name]


def test_tagged_family_detectors_claim_no_other_template() -> None:
    mine = {s.name for s in plugins().parsers().values()
            if any(s.plugin == m.__name__ for m in TAGGED_PLUGINS)}
    assert set(TAGGED_TEMPLATES.values()) <= mine
    others = [n for n in _all_templates() if n not in TAGGED_TEMPLATES]
    assert others
    claimed = {name: [s.name for s, score in score_parsers(template_source(name), plugins())
                      if score > 0 and s.name in mine] for name in others}
    assert {n: c for n, c in claimed.items() if c} == {}


def test_every_template_rendering_calls_is_claimed_by_exactly_one_plugin() -> None:
    unclaimed, shared = [], []
    for name in _all_templates():
        scored = [(s.name, v) for s, v in score_parsers(template_source(name), plugins())
                  if v > 0]
        if name in RENDERS_NO_CALL:
            continue
        if not scored:
            unclaimed.append(name)
        elif len(scored) > 1 and scored[0][1] == scored[1][1]:
            shared.append((name, scored[:2]))
    assert unclaimed == [] and shared == []


@pytest.mark.parametrize("name", sorted(RENDERS_NO_CALL))
def test_templates_that_render_no_call_are_not_claimed_by_a_tagged_family(name: str) -> None:
    try:
        choice = select_parser(template_source(name), plugins())
    except ParserNotFoundError:
        return
    assert not any(choice.spec.plugin == m.__name__ for m in TAGGED_PLUGINS)


FAMILY_FILTERS: dict[str, set[str]] = {
    "seed_think": {"ByteDance-Seed-OSS.jinja"}, "hy3_think": {"tencent-Hy3.jinja"},
    "minimax_m3_think": {"MiniMax-M3.jinja"}, "kimi_k3_think": {"Kimi-K3.jinja"},
    "gemma4_thought": {"google-gemma-4-31B-it.jinja", "google-gemma-4-31B-it-interleaved.jinja"},
}


def test_family_reasoning_filters_act_only_on_their_templates() -> None:
    specs = {f.name: f for f in plugins().stream_filters() if f.name in FAMILY_FILTERS}
    assert set(specs) == set(FAMILY_FILTERS)
    applied: dict[str, set[str]] = {name: set() for name in specs}
    for template in _all_templates():
        context = FilterContext(chat_template=template_source(template), prompt_tail="\n")
        for name, spec in specs.items():
            if spec.create(context) is not None:
                applied[name].add(template)
    assert applied == FAMILY_FILTERS
