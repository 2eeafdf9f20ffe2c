"""``temperature``, ``top_p``, ``max_tokens`` and ``seed`` on ``/v1/chat/completions``
change how the served model samples.

A real llama.cpp tiny model (random weights, ChatML) sampling at temperature 1.0
with no seed of its own, behind a real uvicorn server on 127.0.0.1, spoken to by
the real ``openai`` SDK. Random weights make every reply a random walk through the
vocabulary, so only the request's own settings can make two replies agree. A
stand-in backend checks that each field reaches the backend's request as sent.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.apps.test_server import running_server, scripted_app, serving_backend
from toolwire import SamplingOverrides
from toolwire.testing import ScriptedBackend, write_tiny_gguf
from toolwire.testing.tiny_gguf import TINY_BACKEND_OPTIONS

pytest.importorskip("llama_cpp")
from tests.support.tiers import needs
from toolwire.plugins.llama_cpp import LlamaCppBackend

MODEL_ID = "tiny-sampling"
MESSAGES: list[Any] = [{"role": "user", "content": "Tell me something."}]
REPLY_TOKENS = 24
OWN_MAX_TOKENS = 64  # the greedy reply (119 tokens) is longer


@pytest.fixture(scope="module")
@needs("model")
def tiny_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The tiny model, sampling at 1.0 with a random seed, behind ``create_app``."""
    path: Path = write_tiny_gguf(tmp_path_factory.mktemp("sampling") / "tiny.gguf")
    backend = LlamaCppBackend(path, n_ctx=512, max_tokens=OWN_MAX_TOKENS, temperature=1.0,
                              top_p=1.0, **TINY_BACKEND_OPTIONS)  # type: ignore[arg-type]

    with serving_backend(backend, model=MODEL_ID) as base:
        yield base


def sdk(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=120)


def reply(base: str, **options: Any) -> tuple[str, str | None, int]:
    """The reply's text, finish reason and completion tokens."""
    answer = sdk(base).chat.completions.create(model=MODEL_ID, messages=MESSAGES, **options)
    choice = answer.choices[0]
    assert answer.usage is not None
    return choice.message.content or "", choice.finish_reason, answer.usage.completion_tokens


def test_max_tokens_cuts_the_reply_with_finish_reason_length(tiny_server: str) -> None:
    for field in ("max_tokens", "max_completion_tokens"):
        text, finish, tokens = reply(tiny_server, temperature=0, **{field: 3})
        assert finish == "length", (field, text)
        assert 1 <= tokens <= 3, (field, tokens)


def test_max_tokens_streamed_ends_with_length_and_counts_at_most_that(tiny_server: str) -> None:
    stream = sdk(tiny_server).chat.completions.create(
        model=MODEL_ID, messages=MESSAGES, max_tokens=3, temperature=0, stream=True,
        stream_options={"include_usage": True})
    finish = None
    usage = None
    for chunk in stream:
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
        usage = chunk.usage or usage
    assert finish == "length"
    assert usage is not None and usage.completion_tokens <= 3


def test_max_tokens_above_the_served_limit_is_capped_by_it(tiny_server: str) -> None:
    # greedy, the tiny model writes no end token before the served limit
    _, finish, tokens = reply(tiny_server, temperature=0, max_tokens=OWN_MAX_TOKENS * 10)
    assert (finish, tokens) == ("length", OWN_MAX_TOKENS)


def test_the_same_seed_gives_the_same_reply_at_temperature_one(tiny_server: str) -> None:
    options: dict[str, Any] = {"temperature": 1.0, "max_tokens": REPLY_TOKENS}
    first = reply(tiny_server, seed=1234, **options)
    # another request in between must not disturb the seeded one
    reply(tiny_server, **options)
    assert reply(tiny_server, seed=1234, **options) == first
    assert first[0], "the tiny model wrote nothing"


def test_different_seeds_give_different_replies(tiny_server: str) -> None:
    options: dict[str, Any] = {"temperature": 1.0, "max_tokens": REPLY_TOKENS}
    replies = {reply(tiny_server, seed=seed, **options)[0] for seed in (1, 2, 3)}
    # three random walks of 24 tokens through a vocabulary at temperature 1 agreeing
    # would mean the seed reaches nothing
    assert len(replies) > 1, replies


def test_a_seed_of_any_size_is_accepted_and_reproducible(tiny_server: str) -> None:
    options: dict[str, Any] = {"temperature": 1.0, "max_tokens": 8}
    for seed in (-1, 2 ** 32 - 1, 2 ** 62):
        assert reply(tiny_server, seed=seed, **options) == reply(tiny_server, seed=seed,
                                                                 **options)


def test_temperature_zero_is_deterministic_without_a_seed(tiny_server: str) -> None:
    options: dict[str, Any] = {"temperature": 0, "max_tokens": REPLY_TOKENS}
    assert reply(tiny_server, **options) == reply(tiny_server, **options)


def test_top_p_zero_keeps_only_the_likeliest_token_at_temperature_one(tiny_server: str) -> None:
    options: dict[str, Any] = {"temperature": 1.0, "top_p": 0, "max_tokens": REPLY_TOKENS}
    assert reply(tiny_server, **options) == reply(tiny_server, **options)
    assert reply(tiny_server, **options)[0] == reply(tiny_server, temperature=0,
                                                     max_tokens=REPLY_TOKENS)[0]


def test_without_a_seed_the_served_models_random_sampling_holds(tiny_server: str) -> None:
    # the backend has no seed and samples at 1.0: unseeded replies differ
    options: dict[str, Any] = {"max_tokens": REPLY_TOKENS}
    replies = {reply(tiny_server, **options)[0] for _ in range(3)}
    assert len(replies) > 1, replies


@pytest.mark.parametrize("sent, received", [
    ({}, SamplingOverrides()),
    ({"temperature": 0.25, "top_p": 0.5, "max_tokens": 7, "seed": -3},
     SamplingOverrides(temperature=0.25, top_p=0.5, max_tokens=7, seed=-3)),
    ({"max_completion_tokens": 9, "max_tokens": 100}, SamplingOverrides(max_tokens=9)),
    ({"temperature": 2}, SamplingOverrides(temperature=2.0)),
])
def test_sampling_fields_reach_the_backend_as_sent(sent: dict[str, Any],
                                                   received: SamplingOverrides) -> None:
    backend = ScriptedBackend(["plain"])
    with running_server(scripted_app(backend, model_id=MODEL_ID)) as base:
        sdk(base).chat.completions.create(model=MODEL_ID, messages=MESSAGES, **sent)
    assert backend.requests[0].sampling == received
