"""BFCL ground-truth calls as each family's template renders them: the engine tests' replies.

The same turns ``tests/families/test_bfcl_round_trip.py`` parses (every call of the
four BFCL files with ground truth, rendered as one assistant turn through a real
template of each family), here fed through the engines' parser slots. The reference
every engine path must equal is toolwire's own ``parse_reply`` of the same text,
told the same prompt tail and read the way the adapters close a reply.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Iterator
from typing import Any

import attrs

from tests.families.test_bfcl_round_trip import (
    BFCL_FILES,
    FAMILY_TEMPLATES,
    ground_truth_turns,
)
from tests.support.paths import MISSING_SCHEMAS, SHARED_SCHEMAS
from tests.support.templates import family_template, require_templates
from toolwire.testing import AssistantTurnRenderer, isolated_plugin_manager

__all__ = ["FAMILIES", "BfclTurn", "bfcl_turns", "deltas"]

PLUGINS = isolated_plugin_manager()

FAMILIES = sorted(set(PLUGINS.parsers()) & set(FAMILY_TEMPLATES) - {"harmony", "glimmer"})
"""Every family with a template: harmony and glimmer (gpt-oss's channels) are left to
vLLM's own Harmony path, which reads the tokens, not the text."""


@attrs.frozen
class BfclTurn:
    """One rendered assistant turn and what it was made from."""

    record: str
    template: str
    tools: tuple[dict[str, Any], ...]
    text: str
    prompt_tail: str


@functools.cache
def bfcl_turns(family: str, file_name: str) -> tuple[BfclTurn, ...]:
    """The family's rendered turns of one BFCL file (skips where the data is absent)."""
    require_templates()
    if not SHARED_SCHEMAS.is_dir():
        import pytest

        pytest.skip(MISSING_SCHEMAS)
    spec = PLUGINS.parser(family)
    source = family_template(FAMILY_TEMPLATES[family])
    renderer = AssistantTurnRenderer(source, make_call_id=spec.make_call_id)
    turns: list[BfclTurn] = []
    outside: set[tuple[str, str]] = set()
    for record_id, tools, turn in ground_truth_turns(file_name, renderer.parallel_calls, outside):
        rendered = renderer.render(turn, tools=tools)
        turns.append(BfclTurn(record_id, source, tuple(tools), rendered.text,
                              rendered.prompt_tail))
    return tuple(turns)


def every_file() -> Iterator[str]:
    yield from sorted(BFCL_FILES)


def deltas(text: str, rng: random.Random | None) -> list[str]:
    """``text`` in 1-character deltas, or in random deltas of 1 to 12 characters."""
    if rng is None:
        return list(text)
    out, i = [], 0
    while i < len(text):
        n = rng.randint(1, 12)
        out.append(text[i:i + n])
        i += n
    return out
