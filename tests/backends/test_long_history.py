"""One long history does not tie up the backend (issue 23, item 4).

Fitting renders only prompts bounded by the one that fits (never the whole of a
history that cannot fit), finds the same prompt an exhaustive search would,
checks the cancel token between its trials, and a cancelled turn ends at once.
The real llama.cpp tokenizer runs in the last tests (the tiny model).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolwire import CancelToken, Message, ModelRequest, TurnEnd
from toolwire.backends.context_fit import FittingCancelled, prune_history, removal_order
from toolwire.vocabulary.history import ToolCall


def history(exchanges: int, *, tool_every: int = 3, text: str = "x") -> list[Message]:
    messages = [Message.system("Be brief.")]
    for i in range(exchanges):
        messages.append(Message.user(f"q{i} {text}"))
        if i % tool_every == 0:
            call = ToolCall(f"c{i}", "t", {"i": i})
            messages += [Message.assistant("", (call,)), Message.tool_result(call, f"r{i}")]
        messages.append(Message.assistant(f"a{i} {text}"))
    messages.append(Message.user("last"))
    return messages


def size(messages: Sequence[Message]) -> int:
    """Tokens, roughly: a few per message plus one per four characters."""
    return sum(4 + len(m.content) // 4 + 6 * len(m.tool_calls) for m in messages)


def test_a_32000_message_history_renders_only_prompts_near_the_one_that_fits() -> None:
    messages = history(12_000)  # 32,000 messages
    rendered: list[int] = []

    def count(kept: Sequence[Message]) -> int:
        rendered.append(len(kept))
        return size(kept)

    result = prune_history(messages, count, 3000)
    assert result.fits and len(messages) > 32_000
    assert max(rendered) <= 4 * len(result.messages)  # never the whole history
    assert sum(rendered) <= 4 * len(result.messages) * math.log2(len(messages))


@settings(max_examples=150, deadline=None)
@given(exchanges=st.integers(0, 60), tool_every=st.integers(1, 5),
       text=st.text(alphabet="ab ", max_size=40), budget=st.integers(0, 2000),
       final=st.booleans())
def test_fitting_finds_the_prompt_an_exhaustive_search_finds(
        exchanges: int, tool_every: int, text: str, budget: int, final: bool) -> None:
    messages = history(exchanges, tool_every=tool_every, text=text)
    order = removal_order(messages, final_answer_prompt=final)

    def kept(k: int) -> tuple[Message, ...]:
        dropped = {i for group in order[:k] for i in group}
        return tuple(m for i, m in enumerate(messages) if i not in dropped)

    fitting = [k for k in range(len(order) + 1) if size(kept(k)) <= budget]
    expected = kept(fitting[0]) if fitting else kept(len(order))
    result = prune_history(messages, size, budget, final_answer_prompt=final)
    assert result.messages == expected
    assert result.fits == bool(fitting)


def test_cancel_is_checked_before_every_trial() -> None:
    cancel = CancelToken()
    calls: list[int] = []

    def count(kept: Sequence[Message]) -> int:
        calls.append(len(kept))
        if len(calls) == 2:
            cancel.cancel()
        return size(kept)

    with pytest.raises(FittingCancelled):
        prune_history(history(5000), count, 1000, cancel=cancel)
    assert len(calls) == 2


def test_a_prompt_too_large_to_render_counts_as_too_large_to_fit() -> None:
    def count(kept: Sequence[Message]) -> int | None:
        return None if len(kept) > 50 else size(kept)

    result = prune_history(history(300), count, 10**9)
    assert result.fits and 40 <= len(result.messages) <= 50


# -- the real tokenizer --------------------------------------------------------------


llama_cpp = pytest.importorskip("llama_cpp")


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> object:
    from tests.support.templates import shared_template
    from toolwire.plugins.llama_cpp.backend import LlamaCppBackend
    from toolwire.testing import isolated_plugin_manager
    from toolwire.testing.tiny_gguf import TINY_BACKEND_OPTIONS, write_tiny_gguf

    template = shared_template("Qwen3.5-4B.jinja")
    path: Path = write_tiny_gguf(tmp_path_factory.mktemp("long") / "tiny.gguf", template)
    made = LlamaCppBackend(path, n_ctx=4096, max_tokens=512, progress=False,
                           plugins=isolated_plugin_manager(), **TINY_BACKEND_OPTIONS)
    yield made
    made.close()


@pytest.mark.llama
def test_a_32000_message_history_is_fitted_with_the_real_tokenizer(backend: object) -> None:
    from toolwire.plugins.llama_cpp.backend import LlamaCppBackend

    assert isinstance(backend, LlamaCppBackend)
    request = ModelRequest(tuple(history(12_000)))
    fitted, prompt = backend.fit_prompt(request)
    assert fitted.fits and fitted.removed > 31_000
    assert prompt.n_tokens <= backend.prompt_room
    assert prompt.tokens == tuple(backend.tokenize(prompt.text))


@pytest.mark.llama
def test_a_turn_cancelled_while_fitting_ends_without_generating(backend: object) -> None:
    from toolwire.plugins.llama_cpp.backend import LlamaCppBackend

    assert isinstance(backend, LlamaCppBackend)

    class CancelledAfter(CancelToken):
        """Cancelled once it has been asked ``reads`` times (the fitting's first trials)."""

        def __init__(self, reads: int) -> None:
            super().__init__()
            self.reads = reads

        @property
        def cancelled(self) -> bool:
            self.reads -= 1
            return self.reads < 0

    started = time.perf_counter()
    events = list(backend.stream_turn(ModelRequest(tuple(history(12_000))), CancelledAfter(3)))
    assert events[-1] == TurnEnd("cancelled")
    assert time.perf_counter() - started < 60  # a hang would be caught, not timed
