"""Benchmark: dispatch + validation per call, excluding the tool's own time.

The tool returns at once, so what is measured is toolwire's work: the workspace
rule, the read-only check, schema validation with the cached validator, running
the tool (inline, or on the timeout pool) and formatting the result. Also the
failure path (invalid arguments), whose message the model reads. Target: <= 50 us.

Hostile calls (issue 23, item 9), each through the default bounds: a tool that
returns 50 MB (cut to 100,000 characters with a note) and an argument nested
5,000 deep (refused before validation). Target: each well under 1 s, and the cut
result no longer than the cap plus its note.
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


BIG_RESULT = "x" * 50_000_000


@tool(read_only=True)
def flood(query: str) -> str:
    """Return 50 MB of text.

    :param query: ignored
    """
    return BIG_RESULT


@tool(read_only=True)
def nested(value: Any) -> str:
    """Take any JSON value.

    :param value: anything
    """
    return "ok"


def _deep(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


def _hostile(runs: int) -> list[dict[str, Any]]:
    dispatcher = Dispatcher(ToolRegistry([flood, nested]), timeout=None, workspace="/tmp")
    rows = []
    for case, call in (("50 MB result, cut with a note", ToolCall("c", "flood", {"query": "x"})),
                       ("argument nested 5,000 deep, refused",
                        ToolCall("c", "nested", {"value": _deep(5000)}))):
        result = dispatcher.dispatch(call)
        timing = time_runs(lambda call=call: dispatcher.dispatch(call), runs=runs)
        rows.append({"benchmark": BENCHMARK, "case": case,
                     "median_us": timing["median_ms"] * 1000, "min_us": timing["min_ms"] * 1000,
                     "max_us": timing["max_ms"] * 1000, "runs": runs, "calls_per_run": 1,
                     "result_chars": len(result.content), "is_error": result.is_error,
                     "meets_target": timing["max_ms"] < 1000})
    return rows


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
    return rows + _hostile(runs)


def report(rows: list[dict[str, Any]]) -> None:
    """Print the table."""
    print_table(rows, ["case", "median_us", "min_us", "max_us", "runs", "calls_per_run",
                       "result_chars", "is_error"],
                "Dispatch + validation per call (target <= 50 us; hostile calls < 1 s)")


if __name__ == "__main__":
    result = run(quick="--quick" in sys.argv)
    report(result)
    print(f"written: {write_results(BENCHMARK, result)}")
