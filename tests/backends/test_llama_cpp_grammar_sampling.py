"""The local backend's grammar sampling checks the sampled token first (real llama.cpp,
the tiny random-weight model): what it returns is exactly what the grammar allows."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.tiers import needs
from toolwire.testing import write_tiny_gguf

llama_cpp = pytest.importorskip("llama_cpp")

from llama_cpp.llama_grammar import LlamaGrammar  # noqa: E402

from toolwire.plugins.llama_cpp import LlamaCppBackend  # noqa: E402
from toolwire.plugins.llama_cpp.grammar_sampling import CheckedGrammarSampler  # noqa: E402

GRAMMAR = 'root ::= "<ok>" [a-c ]{4,60} "</ok>" ("," [0-9]{1,3})*'
SHAPE = re.compile(r"<ok>[a-c ]{4,60}</ok>(,[0-9]{1,3})*")
CUT = re.compile(r"<ok>[a-c ]{4,60}</ok>(,[0-9]{1,3})*,?")
"""A reply cut at the token limit: by then the letters (at most 64 tokens) are done."""
LIMIT = 150


@pytest.fixture(scope="module")
@needs("model")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    path = write_tiny_gguf(tmp_path_factory.mktemp("sampling") / "m.gguf", sample_bytes=False)
    backend = LlamaCppBackend(path, n_ctx=1024, max_tokens=200, n_threads=1)
    yield backend.llama
    backend.close()


def sample(llama: Any, seed: int, grammar: str | None = GRAMMAR) -> tuple[str, Any]:
    llama.set_seed(seed)
    prompt = llama.tokenize(b"<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
                            special=True)
    compiled = LlamaGrammar.from_string(grammar, verbose=False) if grammar else None
    tokens = []
    for token in llama.generate(prompt, temp=1.0, top_p=0.95, top_k=40, min_p=0.05,
                                reset=True, grammar=compiled):
        if llama_cpp.llama_vocab_is_eog(llama._model.vocab, token):
            break
        tokens.append(token)
        if len(tokens) >= LIMIT:
            break
    return llama.detokenize(tokens, special=True).decode("utf-8", "replace"), llama._sampler


@pytest.mark.parametrize("seed", range(6))
def test_every_token_the_checked_sampler_returns_is_one_the_grammar_allows(
        llama: Any, seed: int) -> None:
    text, sampler = sample(llama, seed)
    assert isinstance(sampler, CheckedGrammarSampler)
    assert SHAPE.fullmatch(text) or CUT.fullmatch(text), text


def test_random_weights_make_the_grammar_reject_tokens_and_the_sampler_resamples(
        llama: Any) -> None:
    rejected = sum(sample(llama, seed)[1].rejected for seed in range(3))
    assert rejected > 0


def test_without_a_grammar_the_model_samples_as_llama_cpp_python_does(llama: Any) -> None:
    _, sampler = sample(llama, 0, grammar=None)
    assert not isinstance(sampler, CheckedGrammarSampler)

