"""Grammar-constrained sampling that checks the chosen token first.

llama-cpp-python's sampling chain puts the grammar before top-k, so at every
step llama.cpp matches every token of the vocabulary against the grammar: on a
150k-token vocabulary that is many milliseconds a token, as much as a small
model's own decode on a CPU (``benchmarks/grammar.py``). llama.cpp's own
server samples first and asks the grammar only about the chosen token; only
when the grammar rejects it does it filter the whole vocabulary and sample
again. :class:`CheckedGrammarSampler` does the same with llama-cpp-python's
chains: the tokens it returns are exactly the ones the grammar allows, and a
model that mostly writes what the grammar allows pays one check a token.

:func:`check_grammar_first` installs it on a loaded ``llama_cpp.Llama``: every
sampler that ``Llama.generate`` (or the backend's switch to another grammar)
builds with a grammar becomes a checked one.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable
from typing import Any

__all__ = ["CheckedGrammarSampler", "check_grammar_first"]


class CheckedGrammarSampler:
    """A grammar-constrained sampler that samples first and checks the token.

    :param build: ``Llama._init_sampler`` (keyword arguments: the sampling
        settings and ``grammar``).
    :param settings: the settings, ``grammar`` among them.
    """

    def __init__(self, build: Callable[..., Any], settings: dict[str, Any]) -> None:
        import llama_cpp

        self._llama_cpp = llama_cpp
        self.free = build(**{**settings, "grammar": None})
        self.full = build(**settings)
        chain = self.full.sampler
        self.grammar = next(
            (llama_cpp.llama_sampler_chain_get(chain, i)
             for i in range(llama_cpp.llama_sampler_chain_n(chain))
             if llama_cpp.llama_sampler_name(
                 llama_cpp.llama_sampler_chain_get(chain, i)) == b"grammar"), None)
        if self.grammar is None:  # pragma: no cover - llama-cpp-python always adds it
            raise ValueError("the sampling chain has no grammar sampler")
        self._one = (llama_cpp.llama_token_data * 1)()
        self._candidates = llama_cpp.llama_token_data_array(
            data=self._one, size=1, selected=-1, sorted=False)
        self.rejected = 0
        """How many sampled tokens the grammar rejected (each then sampled again)."""

    def sample(self, ctx: Any, idx: int = -1) -> int:
        """The next token (``Llama.sample`` calls this with its context)."""
        lib = self._llama_cpp
        token = int(lib.llama_sampler_sample(self.free.sampler, ctx.ctx, idx))
        self._one[0].id = lib.llama_token(token)
        self._one[0].logit = 0.0
        self._one[0].p = 0.0
        self._candidates.size = 1
        self._candidates.selected = -1
        lib.llama_sampler_apply(self.grammar, ctypes.byref(self._candidates))
        if not math.isinf(self._one[0].logit):
            lib.llama_sampler_accept(self.grammar, token)
            return token
        self.rejected += 1
        # the whole vocabulary filtered by the grammar; the chain accepts the token
        return int(lib.llama_sampler_sample(self.full.sampler, ctx.ctx, idx))

    def accept(self, token: int) -> None:
        """Tell both chains about a token chosen elsewhere."""
        self.free.accept(token)
        self.full.accept(token)

    def reset(self) -> None:
        """Start over (the grammar from its root)."""
        self.free.reset()
        self.full.reset()

    def close(self) -> None:
        """Free both chains."""
        self.free.close()
        self.full.close()


def check_grammar_first(model: Any) -> None:
    """Make ``model`` (a ``llama_cpp.Llama``) build :class:`CheckedGrammarSampler`
    whenever it builds a sampler with a grammar (once per model)."""
    if getattr(model, "_toolwire_checked_grammar", False):
        return
    build = model._init_sampler

    def init_sampler(**settings: Any) -> Any:
        if settings.get("grammar") is None or settings.get("logits_processor") is not None:
            return build(**settings)
        return CheckedGrammarSampler(build, settings)

    model._init_sampler = init_sampler
    model._toolwire_checked_grammar = True
