"""Benchmark: what a render costs on every real template, this tree against a base commit.

Issue 41 moved every template render into a supervised child process. This measures
the cost of a cached render (a 20-turn conversation with 10 tools, the conversation of
:mod:`benchmarks.rendering`) through every real template (``tests/support/paths.py``):
this tree's :class:`~toolwire.templates.chat_template.ChatTemplate` and the base
commit's (its ``core`` unpacked from git under another package name), in turns in one
process so a busy machine weighs on both alike. Per template: the median and the 99th
percentile of ``--runs`` renders on each side; the table's last row sums the medians
and gives the added milliseconds a render. Target (issue 41): at most 0.5 ms more per
render.

Run ``python -m benchmarks.render_cost [--base REV] [--runs N]``.
"""

from __future__ import annotations

import argparse
import importlib
import io
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.support.paths import SHARED_TEMPLATES

from .harness import print_table, write_results
from .rendering import conversation

__all__ = ["BASE", "run"]

BENCHMARK = "render_cost"
BASE = "855f6cd"
"""main before issue 41 was merged: its templates rendered in-process, counted."""
TARGET_ADDED_MS = 0.5
ROOT = Path(__file__).resolve().parent.parent


def _base_templates(base: str) -> Any:
    """The ``templates.chat_template`` module of ``base``, under a package of its own."""
    folder = Path(tempfile.mkdtemp(prefix="toolwire-base-"))
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", base, "core"],
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    (folder / "core").rename(folder / "toolwire_base")
    sys.path.insert(0, str(folder))
    return importlib.import_module("toolwire_base.templates.chat_template")


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def run(*, base: str = BASE, runs: int = 200) -> list[dict[str, Any]]:
    """One row a real template that renders the conversation, then the summary row."""
    from toolwire.errors import TemplateError
    from toolwire.templates.chat_template import ChatTemplate

    before = _base_templates(base)
    messages, tools = conversation()
    pairs = []
    for path in sorted(SHARED_TEMPLATES.glob("*.jinja")):
        source = path.read_text(encoding="utf-8")
        now, old = ChatTemplate(source), before.ChatTemplate(source)
        try:
            if now.render(messages, tools=tools) != old.render(messages, tools=tools):
                print(f"{path.name}: the two renders differ", file=sys.stderr)
        except TemplateError:
            continue  # a template that refuses this conversation (e.g. no tools)
        pairs.append((path.name, now, old))
    times: dict[str, tuple[list[float], list[float]]] = {n: ([], []) for n, _, _ in pairs}
    for _ in range(runs):
        for name, now, old in pairs:
            for side, template in enumerate((now, old)):
                started = time.perf_counter()
                template.render(messages, tools=tools)
                times[name][side].append((time.perf_counter() - started) * 1000)
    rows = []
    for name, (after, previous) in times.items():
        rows.append({"benchmark": BENCHMARK, "template": name, "base": base, "runs": runs,
                     "base_median_ms": statistics.median(previous),
                     "median_ms": statistics.median(after),
                     "base_p99_ms": _p99(previous), "p99_ms": _p99(after),
                     "added_median_ms": statistics.median(after) - statistics.median(previous)})
    if rows:
        added = [r["added_median_ms"] for r in rows]
        rows.append({"benchmark": BENCHMARK, "template": f"all {len(rows)} (summed medians)",
                     "base": base, "runs": runs,
                     "base_median_ms": sum(r["base_median_ms"] for r in rows),
                     "median_ms": sum(r["median_ms"] for r in rows),
                     "base_p99_ms": max(r["base_p99_ms"] for r in rows),
                     "p99_ms": max(r["p99_ms"] for r in rows),
                     "added_median_ms": statistics.mean(added),
                     "added_median_ms_max": max(added), "target_added_ms": TARGET_ADDED_MS,
                     "meets_target": statistics.mean(added) <= TARGET_ADDED_MS})
    return rows


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default=BASE)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args(argv)
    rows = run(base=args.base, runs=args.runs)
    if not rows:
        print("no real templates here: nothing measured", file=sys.stderr)
        return
    print_table(rows, ["template", "base_median_ms", "median_ms", "base_p99_ms", "p99_ms",
                       "added_median_ms"],
                f"Cached render, 20 turns, 10 tools: base {args.base} against this tree "
                f"({args.runs} renders each, ms)")
    write_results(BENCHMARK, rows)


if __name__ == "__main__":
    main(sys.argv[1:])
