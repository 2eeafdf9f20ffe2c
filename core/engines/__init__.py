"""toolwire inside serving engines: the adapters for the engines' own parser slots.

A fleet that serves a model with vLLM or SGLang keeps the engine and swaps its
tool-call parser for toolwire's: ``vllm serve MODEL --enable-auto-tool-choice
--tool-call-parser toolwire [--reasoning-parser toolwire]`` (registered through
vLLM's ``vllm.general_plugins`` entry point, :mod:`toolwire.engines.vllm`), or
``python -m toolwire.engines.sglang ... --tool-call-parser toolwire``
(:mod:`toolwire.engines.sglang`). ``docs/engines.md`` has the operator's view.

The engine-neutral half lives here and imports no engine:
:mod:`.served_family` (the family a served model speaks, chosen once from its
chat template, and what it gives: pipelines, grammars, the prompt's tail) and
:mod:`.reply_stream` (one reply's pipeline, fed the engine's deltas, answering in
pieces an engine record is made of). The engine halves import their engine
lazily: they are loaded only by the engine itself, which is an optional extra
(``pip install -e '.[vllm]'``, ``'.[sglang]'``). Everything here reaches the core
through its two doors, ``toolwire`` and ``toolwire.plugin_api``.
"""

from __future__ import annotations

__all__: list[str] = []
