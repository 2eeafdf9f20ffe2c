"""``toolwire grammar``: print the GBNF grammar that constrains a family's calls."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ...errors import GrammarError, ToolChoiceError
from ...hooks.manager import PluginManager
from ...vocabulary.tool_choice import TOOL_CHOICE_MODES, named_tool_choice
from .common import check_family, fail, load_tools, template_source

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    """Add the ``grammar`` command."""
    p = subparsers.add_parser(
        "grammar", help="print the grammar that constrains a family's tool calls",
        description="Print the GBNF grammar that constrains a model family's tool calls to "
                    "the given tools (what a local model's sampler gets under --tool-choice "
                    "required, a named tool, or auto).")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--family", metavar="F", help="a parser family (toolwire plugins)")
    which.add_argument("--template", metavar="PATH",
                       help="a chat template file or .gguf: its family, as a chat selects it")
    p.add_argument("--tools", metavar="T.json", required=True,
                   help="a JSON list of OpenAI-style tool objects")
    p.add_argument("--tool-choice", metavar="CHOICE", default="required",
                   help="required (the default), auto (a lazy grammar), or a tool's name")
    p.add_argument("--no-parallel", action="store_true",
                   help="exactly one call (parallel_tool_calls false)")
    p.add_argument("--json", action="store_true",
                   help="print JSON: the grammar, its triggers and how it applies")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, plugins: PluginManager) -> int:
    """Run ``toolwire grammar``; 2 when no grammar can be written."""
    from ...families.grammar_lookup import grammar_for
    from ...vocabulary.tools import Tool

    tools = load_tools(args.tools) or []
    if not tools:
        fail(f"tools file {args.tools} lists no tools")
    offered = [Tool(t, _never) for t in tools]
    template = None
    if args.template is not None:
        template = template_source(args.template, tools=True)[1]
    else:
        check_family(args.family, plugins)
    choice: Any = args.tool_choice
    if choice == "none":
        fail('--tool-choice none offers no tools: there is no grammar to print')
    if choice not in TOOL_CHOICE_MODES:
        choice = named_tool_choice(choice)
    try:
        grammar = grammar_for(args.family, offered, template=template, tool_choice=choice,
                              parallel_tool_calls=not args.no_parallel, plugins=plugins)
    except (GrammarError, ToolChoiceError) as exc:
        print(f"toolwire: no grammar: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"family": grammar.family, "tool_choice": grammar.tool_choice,
                          "tools": list(grammar.tools), "lazy": grammar.lazy,
                          "triggers": list(grammar.triggers),
                          "trigger_patterns": list(grammar.trigger_patterns),
                          "gbnf": grammar.gbnf}, indent=2, ensure_ascii=False))
        return 0
    print(f"# {grammar.family} calls of {', '.join(grammar.tools)} "
          f"(tool_choice {grammar.tool_choice})")
    if grammar.lazy:
        shown = ", ".join(json.dumps(t, ensure_ascii=False) for t in grammar.triggers)
        print(f"# lazy: free text until the model writes {shown or 'a call at its start'}; "
              "the grammar applies from there")
    print(grammar.gbnf, end="")
    return 0


def _never(**arguments: Any) -> Any:
    raise RuntimeError("toolwire grammar never runs a tool")
