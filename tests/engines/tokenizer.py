"""A real Hugging Face fast tokenizer for the engine tests, made here (nothing downloaded).

One token a byte (byte-level BPE with no merges), so any text round-trips, with the
model's chat template and an EOS token: what the engines read from a served model's
tokenizer (its ``chat_template``, ``decode``, ``eos_token_id``).
"""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

__all__ = ["BYTE_IDS", "EOS", "byte_tokenizer", "token_ids"]

EOS = "<|endoftext|>"

_ALPHABET = sorted(pre_tokenizers.ByteLevel.alphabet())
def _byte_table() -> dict[int, int]:
    printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    others = [b for b in range(256) if b not in printable]
    chars = [chr(b) for b in printable] + [chr(256 + n) for n in range(len(others))]
    by_byte = dict(zip(printable + others, chars, strict=True))
    index = {ch: i for i, ch in enumerate(_ALPHABET)}
    return {b: index[ch] for b, ch in by_byte.items()}


BYTE_IDS = _byte_table()
"""Byte -> token id of :func:`byte_tokenizer` (one token a byte)."""


def token_ids(text: str) -> list[int]:
    """The ids :func:`byte_tokenizer` gives ``text`` (without calling it: faster)."""
    return [BYTE_IDS[b] for b in text.encode("utf-8", "surrogatepass")]


def byte_tokenizer(chat_template: str | None) -> PreTrainedTokenizerFast:
    """A real HF fast tokenizer: one token a byte, the model's chat template, an EOS."""
    model = models.BPE(vocab={ch: i for i, ch in enumerate(_ALPHABET)}, merges=[])
    tokenizer = Tokenizer(model)
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=EOS)
    if chat_template is not None:
        fast.chat_template = chat_template
    return fast
