"""Benchmark: the workspace tools' cost under their safety rules.

* ``search_text`` over a small tree, literal and regular-expression (a regex runs
  in the ``regex`` package with a timeout; its compile in a warm job child);
* ``read_file`` of a normal file, and of a 64 MB file that is one line (bounded
  memory: only the first bytes of the line are kept);
* the time a backtracking pattern is allowed to run before it is stopped;
* how soon the matching child is gone after its search ends some other way: the
  dispatcher's 1 s timeout (shorter than the 5 s regex_seconds), a cancelled reply,
  and its host killed with SIGKILL mid-search.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

from toolwire import CancelToken, Dispatcher, ToolCall, ToolRegistry
from toolwire.plugins import workspace_tools as wt
from toolwire.vocabulary import patterns

from .harness import print_table, time_runs, write_results

__all__ = ["run"]

BENCHMARK = "workspace_tools"
_CHILD = b"toolwire.vocabulary.patterns"  # a pattern child's command line names its handler


def _tree(root: Path) -> None:
    for folder in range(10):
        sub = root / f"pkg{folder}"
        sub.mkdir()
        for n in range(10):
            lines = [f"def function_{n}_{i}(x):\n    return x * {i}\n" for i in range(100)]
            (sub / f"mod{n}.py").write_text("".join(lines))
    (root / "notes.md").write_text("alex is a colleague\n" * 1000)


def _workers(parent: int | None = None) -> set[int]:
    """Live regex workers (of ``parent``, when given), read from /proc."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if _CHILD not in (entry / "cmdline").read_bytes():
                continue
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and (parent is None or int(fields[1]) == parent):
            found.add(int(entry.name))
    return found


def _gone_after(pids: set[int], started: float, within: float = 30.0) -> float:
    """Milliseconds from ``started`` until none of ``pids`` is alive and busy (a child
    this process keeps warm and idle in its pool is not matching)."""
    while (pids & _workers()) - set(patterns._CHILDREN.idle_children()) \
            and time.perf_counter() - started < within:
        time.sleep(0.005)
    return (time.perf_counter() - started) * 1000


_HOST = (
    "import os, sys\n"
    "os.environ['TOOLWIRE_REGEX_TIMEOUT'] = '600'\n"
    "from toolwire import Dispatcher, ToolCall, ToolRegistry\n"
    "from toolwire.plugins import workspace_tools as wt\n"
    "Dispatcher(ToolRegistry(wt.TOOLS), workspace=sys.argv[1], timeout=60).dispatch(\n"
    "    ToolCall('c', 'search_text', {'pattern': '(a+)+$', 'regex': True,\n"
    "                                  'path': 'evil.txt'}))\n")


def _cleanup_rows(root: Path, runs: int) -> list[dict[str, Any]]:
    """How long a matching child outlives a search ended by its call or its host."""
    call = ToolCall("c", "search_text", {"pattern": "(a+)+$", "regex": True,
                                         "path": "evil.txt"})
    cases: dict[str, list[float]] = {"dispatcher timeout 1 s < regex_seconds 5 s": [],
                                     "reply cancelled mid-search": [],
                                     "host killed (SIGKILL) mid-search": []}
    for _ in range(runs):
        patterns._CHILDREN.close()
        dispatcher = Dispatcher(ToolRegistry(wt.TOOLS), workspace=root, timeout=1)
        dispatcher.dispatch(call)
        started = time.perf_counter()
        cases["dispatcher timeout 1 s < regex_seconds 5 s"].append(
            _gone_after(_workers(os.getpid()), started))
        cancel = CancelToken()
        threading.Timer(0.3, cancel.cancel).start()
        Dispatcher(ToolRegistry(wt.TOOLS), workspace=root, timeout=60).dispatch(
            call, cancel=cancel)
        started = time.perf_counter()
        cases["reply cancelled mid-search"].append(_gone_after(_workers(os.getpid()), started))
        host = subprocess.Popen([sys.executable, "-c", _HOST, str(root)])
        while not _workers(host.pid) and host.poll() is None:
            time.sleep(0.01)
        children = _workers(host.pid)
        if not children:
            raise RuntimeError(f"the host exited ({host.returncode}) without a search child")
        time.sleep(0.3)
        started = time.perf_counter()
        host.send_signal(signal.SIGKILL)
        host.wait()
        cases["host killed (SIGKILL) mid-search"].append(_gone_after(children, started))
    rows = []
    for label, samples in cases.items():
        samples.sort()
        rows.append({"benchmark": BENCHMARK, "case": f"matching child gone after: {label}",
                     "median_ms": samples[len(samples) // 2], "min_ms": samples[0],
                     "max_ms": samples[-1], "peak_python_mb": 0.0, "runs": len(samples)})
    return rows


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
        wt.tools.LIMITS = wt.WorkspaceLimits(regex_seconds=1)
        started = time.perf_counter()
        result = dispatcher.dispatch(ToolCall("c", "search_text",
                                              {"pattern": "(a+)+$", "regex": True,
                                               "path": "evil.txt"}))
        elapsed = (time.perf_counter() - started) * 1000
        rows.append({"benchmark": BENCHMARK,
                     "case": "backtracking regex (a+)+$, regex_seconds 1 s (stopped: "
                             f"{result.is_error})",
                     "median_ms": elapsed, "min_ms": elapsed, "max_ms": elapsed,
                     "peak_python_mb": 0.0, "runs": 1})
        wt.tools.LIMITS = wt.WorkspaceLimits(regex_seconds=5)
        try:
            rows.extend(_cleanup_rows(root, 3 if quick else 7))
        finally:
            wt.tools.LIMITS = wt.WorkspaceLimits()
    return rows


def report(rows: list[dict[str, Any]]) -> None:
    """Print the table."""
    print_table(rows, ["case", "median_ms", "min_ms", "max_ms", "peak_python_mb", "runs"],
                "Workspace tools under their bounds")


if __name__ == "__main__":
    result = run(quick="--quick" in sys.argv)
    report(result)
    print(f"written: {write_results(BENCHMARK, result)}")
