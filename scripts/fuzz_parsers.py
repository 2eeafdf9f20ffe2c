"""Fuzz every registered parser family at volume (``nox -s fuzz`` runs it at 100,000).

Each family is fuzzed through a real template that selects it (the first by name in
the folder of real templates that ``tests/support/paths.py`` names); a family no
template selects is fuzzed from its record's markers. Prints a table (family,
template, replies, seconds, failures), the replay of each failure, and writes the
reports as JSON. Exit status 1 when a reply broke a rule. Usage::

    python scripts/fuzz_parsers.py [--replies N] [--seed S] [--jobs J] [--json OUT] [family ...]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from pathlib import Path
from typing import Any

from toolwire.errors import ParserConflictError, ParserNotFoundError
from toolwire.families.selection import select_parser
from toolwire.hooks.manager import default_plugin_manager
from toolwire.testing.fuzz import fuzz_parser

# the repository root, so the one module that says where the shared data is can be imported
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.paths import SHARED_TEMPLATES as TEMPLATES


def family_templates() -> dict[str, Path | None]:
    """Every registered family and a real template that selects it (``None``: none does)."""
    plugins = default_plugin_manager()
    chosen: dict[str, Path | None] = dict.fromkeys(sorted(plugins.parsers()))
    for path in sorted(TEMPLATES.glob("*.jinja")) if TEMPLATES.is_dir() else []:
        try:
            family = select_parser(path.read_text(encoding="utf-8"), plugins, derive=False
                                   ).spec.name
        except (ParserNotFoundError, ParserConflictError):
            continue
        if chosen.get(family, 0) is None:
            chosen[family] = path
    return chosen


def _run(job: tuple[str, str | None, int, int]) -> dict[str, Any]:
    family, template_path, replies, seed = job
    source = Path(template_path).read_text(encoding="utf-8") if template_path else None
    report = fuzz_parser(family, template=source, replies=replies, seed=seed)
    row = report.to_dict()
    row["template"] = Path(template_path).name if template_path else "(record markers)"
    row["replays"] = [f.replay() for f in report.failures]
    return row


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--replies", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=multiprocessing.cpu_count())
    parser.add_argument("--json", dest="json_out")
    parser.add_argument("families", nargs="*")
    args = parser.parse_args(argv)
    templates = family_templates()
    families = args.families or list(templates)
    unknown = [f for f in families if f not in templates]
    if unknown:
        print(f"unknown families: {', '.join(unknown)}", file=sys.stderr)
        return 2
    jobs = [(f, str(templates[f]) if templates[f] else None, args.replies, args.seed)
            for f in families]
    started = time.perf_counter()
    with multiprocessing.Pool(max(1, args.jobs)) as pool:
        rows = []
        for row in pool.imap_unordered(_run, jobs):
            rows.append(row)
            print(f"{row['family']:18} {row['template']:48} {row['replies']:>8} replies "
                  f"{row['seconds']:>8.1f} s  {row['failed']} failed", flush=True)
    total = time.perf_counter() - started
    failed = [r for r in rows if r["failed"]]
    for row in failed:
        print(f"\n{row['family']}: {row['failed']} of {row['replies']} replies broke a rule")
        for replay in row["replays"]:
            print("  " + replay.replace("\n", "\n  "))
    count = sum(r["replies"] for r in rows)
    print(f"\n{len(rows)} families, {count:,} replies in {total:.0f} s "
          f"({args.jobs} processes); {len(failed)} families with failures")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"seconds": round(total, 1), "rows": rows},
                                                  indent=1), encoding="utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
