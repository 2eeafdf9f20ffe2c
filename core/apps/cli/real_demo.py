"""``toolwire demo --real``: the demo's question answered by a small real model.

The model is SmolLM2-135M-Instruct (Q4_1, 98 MB, Apache-2.0) from the ``real-model``
extra (:mod:`toolwire.testing.real_model`). Nothing forces what it writes: it reads the
demo's notes folder through the real ``search_text`` tool, in the JSON markup of
toolwire's tools template (its own template has no tools), and answers from the result. The
first turn must call the tool (``tool_choice="required"``): a model this small rarely
chooses one by itself. Greedy sampling, so a run repeats.
"""

from __future__ import annotations

import argparse

from ...hooks.manager import PluginManager
from ...testing.real_model import MISSING_REAL_MODEL, real_model_path
from ...vocabulary.backend import Backend
from .common import fail

__all__ = ["REAL_TOOL", "real_demo_backend"]

REAL_TOOL = "search_text"
"""The one tool the real demo offers."""

INTRO = """\
toolwire demo --real: SmolLM2-135M-Instruct, a small real model (98 MB, Apache-2.0,
from the real-model extra) at
  {model}
It writes its own tool call: its first turn must call {tool} (tool_choice
"required"; a 135M model rarely chooses a tool by itself), then it answers from the
tool's real result. Its template has no tools, so toolwire's JSON tools template
carries them. A model this small often picks odd arguments: what you see is what it
chose, validated against the tool's schema and run for real.
"""


def real_demo_backend(args: argparse.Namespace, plugins: PluginManager) -> tuple[Backend, str]:
    """The real model's backend, and the demo's introduction to it.

    :raises UsageError: the real-model extra is not installed.
    """
    model = real_model_path()
    if model is None:
        fail(MISSING_REAL_MODEL)
    backend = plugins.backend("llama_cpp").create(
        model_path=model, n_ctx=4096, max_tokens=256, temperature=0.0, seed=1,
        plugins=plugins, progress=not args.json)
    return backend, INTRO.format(model=model, tool=REAL_TOOL)
