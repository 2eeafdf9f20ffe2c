"""Timing, tables and JSON output shared by the benchmarks."""

from __future__ import annotations

import atexit
import gc
import json
import math
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["RESULTS", "fit_exponent", "print_table", "scratch_folder", "time_runs",
           "write_results"]

RESULTS = Path(__file__).resolve().parent / "results"


def scratch_folder(prefix: str) -> Path:
    """A new temporary folder, removed when the benchmark's process exits (models and
    servers a benchmark keeps open till its end live in it)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def time_runs(func: Callable[[], Any], runs: int, warmup: int = 1) -> dict[str, float]:
    """Median, min and max wall time of ``func`` in milliseconds (GC off while timing)."""
    for _ in range(warmup):
        func()
    samples = []
    enabled = gc.isenabled()
    try:
        for _ in range(runs):
            gc.collect()
            gc.disable()
            start = time.perf_counter()
            func()
            samples.append((time.perf_counter() - start) * 1000)
            if enabled:
                gc.enable()
    finally:
        if enabled:
            gc.enable()
    return {"median_ms": statistics.median(samples), "min_ms": min(samples),
            "max_ms": max(samples), "runs": runs}


def fit_exponent(sizes: Sequence[float], times: Sequence[float]) -> float:
    """Least-squares slope of log(time) over log(size): 1.0 is linear, 2.0 quadratic."""
    xs = [math.log(s) for s in sizes]
    ys = [math.log(max(t, 1e-9)) for t in times]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    num = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    den = sum((x - mx) ** 2 for x in xs)
    return num / den if den else float("nan")


def print_table(rows: Sequence[dict[str, Any]], columns: Sequence[str],
                title: str = "") -> None:
    """Print rows as an aligned text table."""
    if title:
        print(f"\n{title}")
    cells = [[_fmt(row.get(c, "")) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) if cells else len(c)
              for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for r in cells:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if value == 0 or 0.01 <= abs(value) < 100000:
            return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"
        return f"{value:.3g}"
    return str(value)


def write_results(name: str, rows: Sequence[dict[str, Any]]) -> Path:
    """Write rows with machine facts to ``benchmarks/results/<name>.json``."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    payload = {"benchmark": name, "python": sys.version.split()[0],
               "machine": platform.machine(), "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
               "rows": list(rows)}
    path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return path
