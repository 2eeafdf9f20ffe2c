"""A tiny, real GGUF model for tests: random weights, any chat template.

:func:`write_tiny_gguf` writes a complete GGUF model of the ``llama``
architecture with random weights: a few kilobytes of tensors that llama.cpp
loads in milliseconds and runs at thousands of tokens a second. Its output is
noise, which makes it an adversarial generator: under a grammar it writes every
shape the grammar allows, and with its real chat template it lets a plugin
author or a user test a family end to end without downloading a model::

    from toolwire.testing import write_tiny_gguf

    path = write_tiny_gguf(tmp_path / "tiny.gguf", chat_template=open("model.jinja").read())
    backend = LlamaCppBackend(path, n_threads=1)

The vocabulary is SentencePiece-style ("llama" tokenizer model) with byte
fallback: the 256 byte tokens ``<0x00>``..``<0xFF>``, one normal token per
printable ASCII character (``▁`` for the space), the specials ``<unk>``, ``<s>``,
``</s>``, the ChatML control tokens ``<|im_start|>``, ``<|im_end|>``,
``<|endoftext|>`` and the Qwen markup tags (``<think>``, ``<tool_call>``, ...)
as user-defined tokens, as real Qwen files have them. Every other character
(``é``, ``中``, emoji) is spelled in UTF-8 bytes, one token per byte, so a
multi-byte character is always split across tokens: the case a detokenizer must
get right. Token counts are therefore much larger than a real model's.

llama.cpp's grammar engine works on code points decoded from those bytes and
lets some invalid sequences through (overlong forms, surrogates, lead bytes
beyond U+10FFFF), which a real model never writes but random weights do; with
``sample_bytes=False`` the byte tokens stay in the vocabulary (prompts still
tokenize) but can never be sampled under a grammar, and the characters given
as ``extra_tokens`` are the only non-ASCII text the model can write.

Only :mod:`gguf` and :mod:`numpy` (which :mod:`gguf` needs) are used to write
the file; llama.cpp is only needed to run it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

import numpy as np
from gguf import GGUFWriter, TokenType

from ..grammar.gbnf import literal

__all__ = [
    "CHATML_TEMPLATE",
    "CONTROL_TOKENS",
    "TAG_TOKENS",
    "TINY_BACKEND_OPTIONS",
    "forcing_grammar",
    "write_tiny_gguf",
]

CHATML_TEMPLATE: Final = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
"""A plain ChatML template (no tools): the default of :func:`write_tiny_gguf`."""

CONTROL_TOKENS: Final = ("<|im_start|>", "<|im_end|>", "<|endoftext|>")
"""Chat markup written as CONTROL tokens (never split, hidden unless asked for)."""

TAG_TOKENS: Final = (
    "<think>", "</think>", "<tool_call>", "</tool_call>",
    "<tool_response>", "</tool_response>",
)
"""Markup written as USER_DEFINED tokens: one token each, but ordinary text on output."""

TINY_BACKEND_OPTIONS: Final[Mapping[str, object]] = {"n_threads": 1}
"""Backend options that suit the tiny model: one thread. Its matrices are so small
that synchronising threads costs more than the arithmetic (ten times more on a
busy two-core machine)."""

_UNK, _BOS, _EOS = "<unk>", "<s>", "</s>"
_SPACE: Final = "\u2581"  # SentencePiece's visible space


def _vocabulary(extra: Sequence[str], control: Sequence[str] = (), *,
                sample_bytes: bool = True) -> tuple[list[str], list[int]]:
    tokens: list[str] = [_UNK, _BOS, _EOS]
    types: list[int] = [TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL]
    for text in (*CONTROL_TOKENS, *control):
        if text not in tokens:
            tokens.append(text)
            types.append(TokenType.CONTROL)
    for text in (*TAG_TOKENS, *extra):
        if text not in tokens:
            tokens.append(text)
            types.append(TokenType.USER_DEFINED)
    for byte in range(256):
        tokens.append(f"<0x{byte:02X}>")
        # an UNUSED token has no text, so no grammar ever lets it be sampled
        types.append(TokenType.BYTE if sample_bytes or byte < 0x80 else TokenType.UNUSED)
    # a duplicate token text makes llama.cpp abort while loading: each text once
    for text in (_SPACE, *(chr(code) for code in range(0x21, 0x7F))):
        if text not in tokens:
            tokens.append(text)
            types.append(TokenType.NORMAL)
    return tokens, types


def write_tiny_gguf(
    path: str | os.PathLike[str],
    chat_template: str | None = CHATML_TEMPLATE,
    *,
    seed: int = 0,
    named_chat_templates: Mapping[str, str] | None = None,
    context_length: int = 4096,
    n_embd: int = 32,
    n_layer: int = 1,
    n_head: int = 2,
    n_ff: int = 64,
    eos_token: str = "<|im_end|>",
    add_bos: bool = False,
    extra_tokens: Sequence[str] = (),
    control_tokens: Sequence[str] = (),
    name: str = "toolwire-tiny",
    sample_bytes: bool = True,
) -> Path:
    """Write a tiny llama-architecture GGUF model with random weights to ``path``.

    :param chat_template: stored as ``tokenizer.chat_template``; ``None`` writes
        a file without one.
    :param seed: seeds the weights (the same seed writes the same file).
    :param named_chat_templates: extra ``tokenizer.chat_template.<name>`` keys.
    :param context_length: ``llama.context_length``.
    :param eos_token: the token stored as end of sequence (one of the specials).
    :param add_bos: whether llama.cpp should put ``<s>`` before a prompt.
    :param extra_tokens: more USER_DEFINED tokens (markup of other families).
    :param control_tokens: more CONTROL tokens (another family's turn markup,
        such as ``<|eot_id|>``): one token each, parsed only as special tokens.
    :param name: ``general.name``.
    :param sample_bytes: ``False``: the byte tokens of non-ASCII bytes cannot be
        sampled under a grammar (see the module doc); non-ASCII text comes only
        from ``extra_tokens``.
    :returns: the path written.
    :raises ValueError: ``eos_token`` is not in the vocabulary or the sizes do
        not divide.
    """
    if n_embd % n_head:
        raise ValueError("n_embd must be a multiple of n_head")
    tokens, types = _vocabulary(extra_tokens, control_tokens, sample_bytes=sample_bytes)
    if eos_token not in tokens:
        raise ValueError(f"eos_token {eos_token!r} is not in the tiny vocabulary")
    target = Path(path)
    rng = np.random.default_rng(seed)
    n_vocab = len(tokens)
    writer = GGUFWriter(str(target), "llama")
    writer.add_name(name)
    writer.add_context_length(context_length)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(n_embd // n_head)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(0)  # all F32

    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * n_vocab)
    writer.add_token_types(types)
    writer.add_unk_token_id(tokens.index(_UNK))
    writer.add_bos_token_id(tokens.index(_BOS))
    writer.add_eos_token_id(tokens.index(eos_token))
    writer.add_add_bos_token(add_bos)
    writer.add_add_eos_token(False)
    # Without this, llama.cpp's SPM tokenizer writes a space after every special token.
    writer.add_add_space_prefix(False)
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    for key, template in (named_chat_templates or {}).items():
        writer.add_string(f"tokenizer.chat_template.{key}", template)

    def weights(*shape: int, scale: float = 0.2) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    # numpy shapes are (rows, columns): ggml's (columns, rows) reversed.
    writer.add_tensor("token_embd.weight", weights(n_vocab, n_embd, scale=1.0))
    writer.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    writer.add_tensor("output.weight", weights(n_vocab, n_embd, scale=1.0))
    for layer in range(n_layer):
        prefix = f"blk.{layer}."
        writer.add_tensor(prefix + "attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        for part in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(prefix + part + ".weight", weights(n_embd, n_embd))
        writer.add_tensor(prefix + "ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        writer.add_tensor(prefix + "ffn_gate.weight", weights(n_ff, n_embd))
        writer.add_tensor(prefix + "ffn_up.weight", weights(n_ff, n_embd))
        writer.add_tensor(prefix + "ffn_down.weight", weights(n_embd, n_ff))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return target


def forcing_grammar(text: str) -> str:
    """A GBNF grammar whose only sentence is ``text``.

    The tiny model's output is noise; under this grammar llama.cpp samples only
    tokens that keep the output a prefix of ``text``, and once it is complete only
    end-of-generation tokens, so the model ends its turn by itself, as a real model
    does. An empty ``text`` allows only ending at once.
    """
    if not text:
        return 'root ::= ""\n'
    return f"root ::= {literal(text)}\n"
