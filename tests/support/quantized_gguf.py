"""A tiny llama model whose matrices are Q4_0: a file llama.cpp repacks on a CPU with AVX2.

:func:`toolwire.testing.tiny_gguf.write_tiny_gguf` writes F32 weights, which no
extra buffer type takes, so that model never goes through weight repacking. This
one does (its load log shows a ``CPU_REPACK`` buffer where the build has one), so the
repack probe and the load without repacking run on a real quantized file.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter, LlamaFileType
from gguf.quants import quantize

from toolwire.testing.tiny_gguf import CHATML_TEMPLATE, _vocabulary

__all__ = ["write_q4_0_gguf"]

_N_EMBD = 256  # Q4_0 packs 32 values a block, repacking 8 rows at once: room for both
_N_FF = 512
_N_HEAD = 4


def write_q4_0_gguf(path: Path, *, seed: int = 0) -> Path:
    """Write a one-layer llama GGUF with Q4_0 matrices (about 0.8 MB) to ``path``."""
    tokens, types = _vocabulary(())
    rng = np.random.default_rng(seed)
    n_vocab = len(tokens)
    writer = GGUFWriter(str(path), "llama")
    writer.add_name("toolwire-tiny-q4_0")
    writer.add_context_length(2048)
    writer.add_embedding_length(_N_EMBD)
    writer.add_block_count(1)
    writer.add_feed_forward_length(_N_FF)
    writer.add_head_count(_N_HEAD)
    writer.add_head_count_kv(_N_HEAD)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(_N_EMBD // _N_HEAD)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(LlamaFileType.MOSTLY_Q4_0)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * n_vocab)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    writer.add_add_bos_token(False)
    writer.add_add_eos_token(False)
    writer.add_add_space_prefix(False)
    writer.add_chat_template(CHATML_TEMPLATE)

    def add_quantized(name: str, rows: int, columns: int, scale: float = 0.2) -> None:
        values = (rng.standard_normal((rows, columns)) * scale).astype(np.float32)
        writer.add_tensor(name, quantize(values, GGMLQuantizationType.Q4_0),
                          raw_dtype=GGMLQuantizationType.Q4_0)

    writer.add_tensor("token_embd.weight",
                      rng.standard_normal((n_vocab, _N_EMBD)).astype(np.float32))
    writer.add_tensor("output_norm.weight", np.ones(_N_EMBD, dtype=np.float32))
    add_quantized("output.weight", n_vocab, _N_EMBD, scale=1.0)
    writer.add_tensor("blk.0.attn_norm.weight", np.ones(_N_EMBD, dtype=np.float32))
    for part in ("attn_q", "attn_k", "attn_v", "attn_output"):
        add_quantized(f"blk.0.{part}.weight", _N_EMBD, _N_EMBD)
    writer.add_tensor("blk.0.ffn_norm.weight", np.ones(_N_EMBD, dtype=np.float32))
    add_quantized("blk.0.ffn_gate.weight", _N_FF, _N_EMBD)
    add_quantized("blk.0.ffn_up.weight", _N_FF, _N_EMBD)
    add_quantized("blk.0.ffn_down.weight", _N_EMBD, _N_FF)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
