"""``toolwire detect``: which parser family a template or ``.gguf`` selects."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ...errors import ParserConflictError, ParserNotFoundError
from ...hooks.manager import PluginManager
from .common import cli_advice, template_source

__all__ = ["PROBE_SHOWN", "RUNNERS_UP_SHOWN", "register", "run"]

RUNNERS_UP_SHOWN = 3
"""Runners-up the text output shows (``--all`` shows every one)."""


def register(subparsers: Any) -> None:
    """Add the ``detect`` command."""
    p = subparsers.add_parser("detect", help="which parser family a template or .gguf selects",
                              description="Show which parser family a chat template (or the "
                                          "template of a .gguf file) selects, and why.")
    p.add_argument("path", help="chat template file or .gguf")
    p.add_argument("--json", action="store_true", help="print JSON (every family's score)")
    p.add_argument("--all", action="store_true",
                   help=f"show every runner-up, not only the best {RUNNERS_UP_SHOWN}")
    p.add_argument("--derive", action="store_true",
                   help="print the call markup inferred from the template, as the CallFormat "
                        "record a plugin can paste (--json: as data)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, plugins: PluginManager) -> int:
    """Run ``toolwire detect``; 0 when a parser is selected, 2 when none is."""
    from ...families.selection import score_parsers, select_parser, template_hash

    key, source = template_source(args.path, tools=True)
    if args.derive:
        from ...families.derive import DerivationError, derive_format

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
        result.update(family=choice.spec.name, plugin=choice.spec.plugin, score=choice.score,
                      checks=[c.to_dict() for c in choice.checks], note=choice.note)
    except (ParserNotFoundError, ParserConflictError) as exc:
        result.update(family=None, plugin=None, score=0.0, error=cli_advice(str(exc)))
        if isinstance(exc, ParserNotFoundError):
            result.update(_why_unclaimed(source, ranking, plugins))
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
    _print_checks(result.get("checks", ()), result.get("note", ""))
    if result.get("derive_error"):
        print(f"derived:  none: {result['derive_error']}")
    runners = [r for r in result["scores"] if r["family"] != result["family"]]
    shown = runners if args.all else runners[:RUNNERS_UP_SHOWN]
    if shown:
        more = len(runners) - len(shown)
        rest = f" (and {more} more, --all shows them)" if more else ""
        print("runners-up: " + ", ".join(f"{r['family']} {r['score']:g}" for r in shown)
              + rest)
    return status


def _why_unclaimed(source: str, ranking: Any, plugins: PluginManager) -> dict[str, Any]:
    """The detail behind a one-line "no parser" message: each claim's check, and why no
    parser could be derived from the template."""
    from ...errors import DerivationError
    from ...families.derive import derive_format
    from ...families.verification import check_claim

    checks = [check_claim(spec, score, source, plugins=plugins).to_dict()
              for spec, score in ranking if score > 0.0]
    try:
        derive_format(source)
        derive_error = ""
    except DerivationError as exc:
        derive_error = str(exc)
    return {"checks": checks, "derive_error": derive_error}


PROBE_SHOWN = 300
"""Characters of a refused parser's probe text the text output shows."""


def _print_checks(checks: Any, note: str) -> None:
    """Which claims read the template's own probe call back, and which did not (and on what)."""
    for check in checks:
        if check["outcome"] == "verified":
            print(f"verified: {check['family']} read the template's own probe call back")
        elif check["outcome"] == "refused":
            print(f"refused:  {check['family']} (score {check['score']:g}): {check['reason']}")
            probe = check["probe"]
            cut = "..." if len(probe) > PROBE_SHOWN else ""
            print(f"          probe: {probe[:PROBE_SHOWN]!r}{cut}")
        else:
            print(f"unverified: {check['family']}: {check['reason']}")
    if note:
        print(f"note:     {note}")
