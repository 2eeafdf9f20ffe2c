"""Benchmark: dispatch + validation per call, excluding the tool's own time.

The tool returns at once, so what is measured is toolwire's work: the workspace
rule, the read-only check, schema validation with the cached validator, running
the tool (inline, or on the timeout pool) and formatting the result. Also the
failure path (invalid arguments), whose message the model reads. Target: <= 50 us.
"""

from __future__ import annotations

import sys
from typing import Any

from toolwire import Dispatcher, ToolCall, ToolRegistry, tool

from .harness import print_table, time_runs, write_results

__all__ = ["run"]

BENCHMARK = "dispatch"
CALLS = 2000


@tool(read_only=True)
def search(query: str, limit: int = 10, flags: list[str] | None = None) -> str:
    """Search.

    :param query: words
    :param limit: how many
    :param flags: options
    """
    return "ok"


def _per_call(dispatcher: Dispatcher, call: ToolCall, runs: int) -> dict[str, Any]:
    def batch() -> None:
        for _ in range(CALLS):
            dispatcher.dispatch(call)

    timing = time_runs(batch, runs=runs)
    return {key: (value * 1000 / CALLS if key.endswith("_ms") else value)
            for key, value in timing.items()}


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Median microseconds per dispatched call, for several paths."""
    runs = 3 if quick else 9
    good = ToolCall("c", "search", {"query": "alex", "limit": 5, "flags": ["x"]})
    bad = ToolCall("c", "search", {"limit": "five", "extra": 1})
    rows = []
    for label, timeout in (("inline (no timeout)", None), ("with timeout (pool)", 60.0)):
        dispatcher = Dispatcher(ToolRegistry([search]), timeout=timeout, workspace="/tmp")
        for case, call in (("valid call", good), ("invalid arguments", bad)):
            stats = _per_call(dispatcher, call, runs)
            rows.append({"benchmark": BENCHMARK, "case": f"{case}, {label}",
                         "median_us": stats["median_ms"], "min_us": stats["min_ms"],
                         "max_us": stats["max_ms"], "runs": runs, "calls_per_run": CALLS})
    return rows


def report(rows: list[dict[str, Any]]) -> None:
    """Print the table."""
    print_table(rows, ["case", "median_us", "min_us", "max_us", "runs", "calls_per_run"],
                "Dispatch + validation per call (target <= 50 us)")


if __name__ == "__main__":
    result = run(quick="--quick" in sys.argv)
    report(result)
    print(f"written: {write_results(BENCHMARK, result)}")
