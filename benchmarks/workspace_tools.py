"""Benchmark: the workspace tools' cost under their safety rules.

* ``search_text`` over a small tree, literal and regular-expression (the regex
  runs in a reused child process: the cost is a pipe round trip per file);
* ``read_file`` of a normal file, and of a 64 MB file that is one line (bounded
  memory: only the first bytes of the line are kept);
* the time a backtracking pattern is allowed to run before it is stopped.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from toolwire import Dispatcher, ToolCall, ToolRegistry
from toolwire.plugins import workspace_tools as wt

from .harness import print_table, time_runs, write_results

__all__ = ["run"]

BENCHMARK = "workspace_tools"


def _tree(root: Path) -> None:
    for folder in range(10):
        sub = root / f"pkg{folder}"
        sub.mkdir()
        for n in range(10):
            lines = [f"def function_{n}_{i}(x):\n    return x * {i}\n" for i in range(100)]
            (sub / f"mod{n}.py").write_text("".join(lines))
    (root / "notes.md").write_text("alex is a colleague\n" * 1000)


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Median milliseconds per tool call for each case."""
    runs = 3 if quick else 9
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _tree(root)
        with (root / "one-line.txt").open("wb") as handle:
            handle.truncate(64 * 1024 * 1024)
        dispatcher = Dispatcher(ToolRegistry(wt.TOOLS), workspace=root, timeout=None)
        cases = [
            ("search_text literal, 101 files", "search_text",
             {"pattern": "return x * 99", "max_results": 500}),
            ("search_text regex, 101 files", "search_text",
             {"pattern": r"return x \* 9\d", "regex": True, "max_results": 500}),
            ("read_file 2000 lines", "read_file", {"path": "notes.md"}),
            ("read_file 64 MB one-line file", "read_file", {"path": "one-line.txt"}),
        ]
        for label, name, args in cases:
            call = ToolCall("c", name, args)
            timing = time_runs(lambda call=call: dispatcher.dispatch(call), runs=runs)
            tracemalloc.start()
            dispatcher.dispatch(call)
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            rows.append({"benchmark": BENCHMARK, "case": label,
                         "median_ms": timing["median_ms"], "min_ms": timing["min_ms"],
                         "max_ms": timing["max_ms"], "peak_python_mb": peak / 2**20,
                         "runs": runs})
        (root / "evil.txt").write_text("a" * 40 + "!\n")
        os.environ["TOOLWIRE_REGEX_TIMEOUT"] = "1"
        started = time.perf_counter()
        result = dispatcher.dispatch(ToolCall("c", "search_text",
                                              {"pattern": "(a+)+$", "regex": True,
                                               "path": "evil.txt"}))
        elapsed = (time.perf_counter() - started) * 1000
        del os.environ["TOOLWIRE_REGEX_TIMEOUT"]
        rows.append({"benchmark": BENCHMARK,
                     "case": "backtracking regex (a+)+$, budget 1 s (stopped: "
                             f"{result.is_error})",
                     "median_ms": elapsed, "min_ms": elapsed, "max_ms": elapsed,
                     "peak_python_mb": 0.0, "runs": 1})
    return rows


def report(rows: list[dict[str, Any]]) -> None:
    """Print the table."""
    print_table(rows, ["case", "median_ms", "min_ms", "max_ms", "peak_python_mb", "runs"],
                "Workspace tools under their bounds")


if __name__ == "__main__":
    result = run(quick="--quick" in sys.argv)
    report(result)
    print(f"written: {write_results(BENCHMARK, result)}")
