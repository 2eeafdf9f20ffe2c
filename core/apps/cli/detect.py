"""``toolwire detect``: which parser family a template or ``.gguf`` selects."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ...errors import ParserConflictError, ParserNotFoundError
from ...hooks.manager import PluginManager
from .common import template_source

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    """Add the ``detect`` command."""
    p = subparsers.add_parser("detect", help="which parser family a template or .gguf selects",
                              description="Show which parser family a chat template (or the "
                                          "template of a .gguf file) selects, and why.")
    p.add_argument("path")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--derive", action="store_true",
                   help="print the call markup inferred from the template, as the CallFormat "
                        "record a plugin can paste (--json: as data)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, plugins: PluginManager) -> int:
    from ...templates.selection import score_parsers, select_parser, template_hash

    key, source = template_source(args.path, tools=True)
    if args.derive:
        from ...templates.derive import DerivationError, derive_format

        try:
            derived = derive_format(source)
        except DerivationError as exc:
            print(f"toolwire: cannot derive a parser from {args.path}: {exc}", file=sys.stderr)
            if exc.seen:
                print(f"seen: {exc.seen!r}", file=sys.stderr)
            return 2
        if args.json:
            print(json.dumps(derived.describe(), indent=2, ensure_ascii=False))
        else:
            from ...parse.record_source import format_source

            print("from toolwire.parse.record import *  # noqa: F403\n")
            print(format_source(derived, name="DERIVED_FORMAT"), end="")
        return 0
    ranking = score_parsers(source, plugins)
    result: dict[str, Any] = {"path": args.path, "source_key": key,
                              "sha256": template_hash(source),
                              "scores": [{"family": s.name, "plugin": s.plugin, "score": score}
                                         for s, score in ranking]}
    status = 0
    try:
        choice = select_parser(source, plugins)
        result.update(family=choice.spec.name, plugin=choice.spec.plugin, score=choice.score)
    except (ParserNotFoundError, ParserConflictError) as exc:
        result.update(family=None, plugin=None, score=0.0, error=str(exc))
        status = 2
    if args.json:
        print(json.dumps(result, indent=2))
        return status
    print(f"template: {args.path} ({key}), sha256 {result['sha256']}")
    if result["family"]:
        print(f"family:   {result['family']}  (plugin {result['plugin']}, "
              f"score {result['score']:g})")
    else:
        print(f"family:   none: {result['error']}")
    runners = [r for r in result["scores"] if r["family"] != result["family"]]
    if runners:
        print("runners-up: " + ", ".join(f"{r['family']} {r['score']:g}" for r in runners))
    return status
