"""What the library is told from outside a reply's text: the prompt state and the end reason.

A stored reply parses as its live turn did when it is given how the generation
prompt ended (``prompt_tail``, or a :class:`toolwire.PromptState`), and a call
still open when the token limit cut the reply is never a call: ``parse_reply``,
the pipeline's ``close(end_reason=...)``, the templated backend and the chat loop
all hold to it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import toolwire
from toolwire import (
    Chat,
    DiagnosticEvent,
    Event,
    PromptState,
    ReplyPipeline,
    TextEvent,
    ToolCallEndEvent,
    parse_reply,
)
from toolwire.backends.templated import (
    EncodedPrompt,
    GenerationEnd,
    TemplatedBackend,
    TemplateSource,
)
from toolwire.templates.default_template import DEFAULT_CHAT_TEMPLATE
from toolwire.vocabulary.backend import ModelRequest
from toolwire.vocabulary.cancel import CancelToken

OPEN_CALL = "<tool_call>\n<function=note>\n<parameter=text>\nbuy milk and eg"
CLOSED_ARGUMENT = "<tool_call>\n<function=note>\n<parameter=text>\nbuy milk\n</parameter>\n"


def test_a_call_open_at_the_end_is_recovered_only_when_the_reply_ended_by_itself() -> None:
    stopped = parse_reply(CLOSED_ARGUMENT, family="qwen_xml")
    assert [(c.name, dict(c.arguments)) for c in stopped.tool_calls] == \
        [("note", {"text": "buy milk"})]
    for chunk in (0, 1, 5):
        cut = parse_reply(CLOSED_ARGUMENT, family="qwen_xml", end_reason="length",
                          chunk_size=chunk)
        assert not cut.tool_calls
        assert cut.content == CLOSED_ARGUMENT
        assert [d.code for d in cut.diagnostics] == ["truncated_call"]


def test_a_call_closed_before_the_cut_is_still_a_call() -> None:
    reply = CLOSED_ARGUMENT + "</function>\n</tool_call>\nAnd now some more te"
    cut = parse_reply(reply, family="qwen_xml", end_reason="length")
    assert [c.name for c in cut.tool_calls] == ["note"]


def test_an_unknown_end_reason_is_refused() -> None:
    with pytest.raises(ValueError, match="end_reason"):
        parse_reply("hi", family="qwen_xml", end_reason="tokens")  # type: ignore[arg-type]


class _LegacyParser:
    """A hand-written parser of before the end reason: its ``close`` takes nothing."""

    def __init__(self) -> None:
        self._text = ""

    def feed(self, text: str) -> list[Event]:
        self._text += text
        return []

    def close(self) -> list[Event]:
        return [TextEvent("before "), ToolCallEndEvent("f", {"a": self._text}, index=0)]


def test_a_parser_that_cannot_be_told_the_end_reason_has_its_last_calls_withheld() -> None:
    pipeline = ReplyPipeline([], _LegacyParser())
    pipeline.feed("x")
    events = pipeline.close(end_reason="length")
    assert not [e for e in events if isinstance(e, ToolCallEndEvent)]
    assert [e.code for e in events if isinstance(e, DiagnosticEvent)] == ["truncated_call"]
    assert [e.text for e in events if isinstance(e, TextEvent)] == ["before "]
    stopped = ReplyPipeline([], _LegacyParser())
    assert [e.name for e in stopped.close() if isinstance(e, ToolCallEndEvent)] == ["f"]


@pytest.mark.parametrize(("state", "tail", "reasoning"), [
    (PromptState.THINK_OPEN, "", "Let me think."),
    (None, "<|im_start|>assistant\n<think>\n", "Let me think."),
    (PromptState.THINK_CLOSED, "<|im_start|>assistant\n<think>\n", ""),
])
def test_a_stored_reply_reads_as_its_live_turn_given_the_prompt_state(
        state: PromptState | None, tail: str, reasoning: str) -> None:
    reply = "Let me think.</think>\nThe answer is 4."
    template = "{{ '<think>' }}{{ '</think>' }}"
    got = parse_reply(reply, family="qwen_xml", chat_template=template, prompt_state=state,
                      prompt_tail=tail)
    assert got.reasoning == reasoning
    assert got.content.endswith("The answer is 4.")


def test_without_the_prompt_state_a_stored_reply_is_undecided_until_a_lone_close() -> None:
    got = parse_reply("Let me think.</think>\nThe answer is 4.", family="qwen_xml")
    assert (got.reasoning, got.content) == ("Let me think.", "The answer is 4.")


class _CutBackend(TemplatedBackend):
    """A text-completion runtime that writes given replies, the first ending for a given
    reason, the others by themselves."""

    def __init__(self, replies: list[str], first_reason: str) -> None:
        super().__init__(templates=lambda tools: TemplateSource("test", DEFAULT_CHAT_TEMPLATE),
                         n_ctx=4096, max_tokens=64)
        self._replies = replies
        self._reason = first_reason

    def encode_prompt(self, text: str) -> EncodedPrompt:
        return EncodedPrompt(text, len(text) // 4 + 1)

    def generate(self, prompt: EncodedPrompt, request: ModelRequest, options: Any,
                 cancel: CancelToken) -> Iterator[str | GenerationEnd]:
        reply = self._replies.pop(0)
        for start in range(0, len(reply), 3):
            yield reply[start:start + 3]
        reason, self._reason = self._reason, "stop"
        yield GenerationEnd(reason, completion_tokens=64)


@pytest.mark.parametrize(("reason", "runs"), [("stop", True), ("length", False)])
def test_the_chat_loop_never_runs_a_call_the_token_limit_cut(reason: str, runs: bool) -> None:
    written: list[str] = []

    @toolwire.tool
    def note(text: str) -> str:
        """Write a note.

        :param text: the note.
        """
        written.append(text)
        return "saved"

    chat = Chat(_CutBackend([CLOSED_ARGUMENT, "Saved."], reason), [note])
    events = list(chat.send("note: buy milk"))
    assert written == (["buy milk"] if runs else [])
    truncated = [e for e in events if isinstance(e, DiagnosticEvent)
                 and e.code == "truncated_call"]
    assert bool(truncated) is not runs
    assert events[-1].reason == reason  # type: ignore[union-attr]
