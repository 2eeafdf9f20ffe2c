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
import sys
import time
from pathlib import Path

from ...conversation.chat import Chat
from ...events import DoneEvent
from ...hooks.manager import PluginManager
from ...testing.real_model import MISSING_REAL_MODEL, real_model_path
from .common import fail
from .event_printer import EventPrinter

__all__ = ["REAL_TOOL", "run_real_demo"]

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


def run_real_demo(base: Path, args: argparse.Namespace, plugins: PluginManager,
                  notes: dict[str, str], question: str) -> int:
    """Write ``notes`` under ``base/workspace``, ask ``question``; return 0 on an answer.

    :raises UsageError: the real-model extra is not installed.
    """
    model = real_model_path()
    if model is None:
        fail(MISSING_REAL_MODEL)
    started = time.perf_counter()
    workspace = base / "workspace"
    for name, text in notes.items():
        (workspace / name).parent.mkdir(parents=True, exist_ok=True)
        (workspace / name).write_text(text, encoding="utf-8")
    tools = [t for t in plugins.tools() if t.name == REAL_TOOL]
    backend = plugins.backend("llama_cpp").create(
        model_path=model, n_ctx=4096, max_tokens=256, temperature=0.0, seed=1,
        plugins=plugins, progress=not args.json)
    out = sys.stdout
    if not args.json:
        out.write(INTRO.format(model=model, tool=REAL_TOOL))
        out.write(f"\nworkspace: {workspace}\n> {question}\n")
    chat = Chat(backend, tools=tools, workspace=workspace, read_only=True, max_tool_iters=3,
                plugins=plugins, tool_choice="required")
    printer = EventPrinter(out, as_json=args.json, show_reasoning=True,
                           color=out.isatty() and not args.json)
    done: DoneEvent | None = None
    try:
        for event in chat.send(question):
            printer.show(event)
            if isinstance(event, DoneEvent):
                done = event
    finally:
        close = getattr(backend, "close", None)
        if close is not None:
            close()
    if not args.json:
        out.write(f"\n(done: {done.reason if done else '?'}, "
                  f"{time.perf_counter() - started:.1f} s including loading the model)\n")
    return 0 if done is not None and done.reason == "stop" else 1
