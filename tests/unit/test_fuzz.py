"""The volume fuzzer (``toolwire.testing.fuzz_parser``): every family holds its rules on
mutated replies cut at random, and a parser that breaks a rule is caught with a replay."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

import toolwire
from toolwire.events import Event, TextEvent
from toolwire.parse.engine import CallParser
from toolwire.plugin_api import JSON_TOOLS_TEMPLATE
from toolwire.plugins.hermes_json import HERMES_FORMAT
from toolwire.testing import fuzz_parser, isolated_plugin_manager

pytestmark = pytest.mark.kit

_FAMILIES = sorted(isolated_plugin_manager().parsers())


def _templates() -> dict[str, str | None]:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    from fuzz_parsers import family_templates

    return {f: (p.read_text(encoding="utf-8") if p else None)
            for f, p in family_templates().items()}


TEMPLATES = _templates()

BROKEN_TEMPLATE = JSON_TOOLS_TEMPLATE
"""The template the broken parsers are fuzzed through: toolwire's own hermes-style fallback,
present in every clone (a real template would make these tests depend on the shared data).
Whether a broken parser is caught depends on what the fuzzer happens to draw, so each test
uses a fixed seed: with these seeds the drawn replies are known to expose both breakages."""


@pytest.mark.parametrize("family", _FAMILIES)
def test_every_family_keeps_its_rules_on_fuzzed_replies(family: str) -> None:
    report = fuzz_parser(family, template=TEMPLATES.get(family), replies=150, seed=3)
    assert report.replies == 150
    assert report.passed, report.failures[0].replay()


class _StripsEachDelta:
    """A parser that trims every text delta: its events depend on the cuts."""

    def __init__(self, tools: Mapping[str, Any]) -> None:
        self._inner = CallParser(HERMES_FORMAT, tools)

    def feed(self, text: str) -> list[Event]:
        return [TextEvent(e.text.strip()) if isinstance(e, TextEvent) else e
                for e in self._inner.feed(text)]

    def close(self) -> list[Event]:
        return self._inner.close()


class _Raises:
    def __init__(self, tools: Mapping[str, Any]) -> None:
        pass

    def feed(self, text: str) -> list[Event]:
        if "<" in text:
            raise RuntimeError("boom")
        return [TextEvent(text)]

    def close(self) -> list[Event]:
        return []


@pytest.mark.parametrize(("create", "rule"), [(_StripsEachDelta, "chunking"),
                                              (_Raises, "parser_error")])
def test_a_parser_that_breaks_a_rule_is_caught_with_a_replay(create: Any, rule: str) -> None:
    spec = toolwire.ParserSpec(name=f"broken_{rule}", detect=lambda t: 0.0, create=create)
    report = fuzz_parser(spec, template=BROKEN_TEMPLATE, replies=300, seed=1,
                         max_failures=3)
    assert not report.passed
    assert 1 <= len(report.failures) == min(3, report.failed)
    failure = report.failures[0]
    assert failure.rule == rule
    assert repr(failure.reply) in failure.replay()
    assert report.to_dict()["failed"] == report.failed


def test_a_run_is_reproducible_by_its_seed() -> None:
    spec = toolwire.ParserSpec(name="broken", detect=lambda t: 0.0, create=_StripsEachDelta)

    def run(seed: int) -> tuple[int, list[str]]:
        report = fuzz_parser(spec, template=BROKEN_TEMPLATE, replies=200, seed=seed)
        return report.failed, [f.replay() for f in report.failures]

    first = run(9)
    assert first[0] > 0
    assert run(9) == first
    assert run(10) != first
