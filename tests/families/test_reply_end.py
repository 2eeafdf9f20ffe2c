"""The end tokens a reply ends with: the pipeline drops them before the parser, silently.

A model ends its turn with its end token; a runtime that writes it out (an
engine with ``--special``, a stored reply that kept it) hands it over as the
reply's last text. ``build_pipeline(..., end_tokens=...)`` takes the runtime's
(EOS, EOT); the template's end-of-turn token is known from the template.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.families import plugins, template_source
from tests.support.tagged_families import render
from toolwire.events import DiagnosticEvent, Event, TextEvent
from toolwire.families.pipeline import build_pipeline
from toolwire.parse.protocol import collect_reply
from toolwire.vocabulary.schema import tool_parameters_by_name

MARKERS = ("<|im_end|>", "<|eot_id|>", "</s>")
QWEN = "Qwen3.5-4B.jinja"


def read(pieces: list[str], *, template: str | None = None,
         end_tokens: tuple[str, ...] = MARKERS, family: str = "hermes_json") -> list[Event]:
    pipeline = build_pipeline(plugins().parser(family), {}, plugins=plugins(),
                              chat_template=template, end_tokens=end_tokens)
    return [*itertools.chain.from_iterable(pipeline.feed(p) for p in pieces), *pipeline.close()]


def text(events: list[Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextEvent))


def split(whole: str, cuts: list[int]) -> list[str]:
    bounds = [0, *sorted({min(c, len(whole)) for c in cuts}), len(whole)]
    return [whole[a:b] for a, b in itertools.pairwise(bounds)]


texts = st.text(alphabet=st.sampled_from(list("ab <|>/\nimend_osx")), max_size=40)


blanks = st.text(alphabet=" \t\n", max_size=12)


@given(body=texts, marker=st.sampled_from(MARKERS), tail=blanks,
       cuts=st.lists(st.integers(0, 70), max_size=12))
def test_a_final_end_token_is_dropped_whatever_the_chunking(body: str, marker: str, tail: str,
                                                             cuts: list[int]) -> None:
    events = read(split(body + marker + tail, cuts))
    assert text(events) == body
    assert not [e for e in events if isinstance(e, DiagnosticEvent) and marker in e.raw]


@given(body=texts, marker=st.sampled_from(MARKERS), gap=blanks,
       cuts=st.lists(st.integers(0, 70), max_size=12))
def test_an_end_token_with_text_after_its_blanks_stays_text(body: str, marker: str, gap: str,
                                                            cuts: list[int]) -> None:
    whole = body + marker + gap + "x"
    assert text(read(split(whole, cuts))) == text(read([whole])) == whole


def test_blanks_after_the_final_end_token_one_a_delta_are_gathered() -> None:
    """(Each blank used to be joined to the held token: quadratic in the blanks.)"""
    pieces = ["a</s>", *[" ", ""] * 2500]  # (empty deltas too, as some streams send)
    assert text(read(pieces)) == "a"
    assert text(read([*pieces, "b"])) == "a</s>" + " " * 2500 + "b"


@given(body=texts, cuts=st.lists(st.integers(0, 60), max_size=8))
def test_text_that_does_not_end_in_an_end_token_passes_unchanged(body: str,
                                                                 cuts: list[int]) -> None:
    if any(body.rstrip().endswith(m) for m in MARKERS):
        return
    assert text(read(split(body, cuts))) == body


def test_a_runtime_end_token_followed_by_more_text_is_text() -> None:
    assert text(read(["a</s>", "\nb"])) == "a</s>\nb"


def test_without_end_tokens_nothing_is_dropped() -> None:
    assert text(read(["a<|im_", "end|>"], end_tokens=())) == "a<|im_end|>"


def test_the_templates_end_of_turn_token_at_the_end_is_no_stray_but_elsewhere_is() -> None:
    source = template_source(QWEN)
    events = read(["Hello.<|im_", "end|>\n"], template=source, end_tokens=())
    assert (text(events), [e for e in events if isinstance(e, DiagnosticEvent)]) == ("Hello.", [])
    events = read(["a <|im_end|>", " b<|im_", "end|>"], template=source, end_tokens=())
    assert text(events).split() == ["a", "b"]
    assert [(e.code, e.raw) for e in events if isinstance(e, DiagnosticEvent)] == [
        ("stray_markup", "<|im_end|>")]


@pytest.mark.parametrize("step", [1, 3, 1000])
def test_a_call_followed_by_the_runtimes_end_token_is_a_call_and_no_text(step: int) -> None:
    tools = [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}}}]
    _, reply = render(QWEN, [("f", {"a": "x"})], tools)
    whole = reply + "<|endoftext|>"
    pipeline = build_pipeline(plugins().parser("qwen_xml"), tool_parameters_by_name(tools),
                              plugins=plugins(), end_tokens=("<|endoftext|>",))
    events = [e for i in range(0, len(whole), step) for e in pipeline.feed(whole[i:i + step])]
    got = collect_reply([*events, *pipeline.close()])
    assert [(c.name, dict(c.arguments)) for c in got.tool_calls] == [("f", {"a": "x"})]
    assert (got.content.strip(), got.diagnostics) == ("", ())
