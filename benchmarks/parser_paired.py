"""Benchmark: per-delta cost of a parser change, paired runs of a base commit and this tree.

The replies (plain text, many calls, one call with a huge string argument) are
rendered once, through each family's real template, by this tree; each run is a child
process that imports ``toolwire`` from a copy of this tree's or the base commit's
``core``/``plugins`` (exported with ``git archive``; both sides laid out alike, since where
the code sits moves a case's time by several per cent), parses every reply in 4-character
deltas and reports the least CPU time of its repeats, per delta. Runs alternate (base,
this tree, this tree, base, ...) so a busy machine weighs on both alike; the table gives
each side's least time over the rounds and the change, and the change of the sides'
medians (the least is one lucky run's).

``--instructions`` counts instead, under valgrind's callgrind (one run per side; the
counts do not depend on what else the machine runs): instructions per delta, each case
counted between two dumps.

Run ``python -m benchmarks.parser_paired [--base REV] [--rounds N] [--instructions]
[family ...]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.paths import SHARED_TEMPLATES

from .harness import print_table, write_results

__all__ = ["run"]

BENCHMARK = "parser_paired"
ROOT = Path(__file__).resolve().parent.parent
DEFAULT_FAMILIES = ("qwen_xml", "kimi_k3", "gemma4", "llama4_pythonic")
TEMPLATES = {"kimi_k3": "Kimi-K3.jinja", "gemma4": "google-gemma-4-31B-it.jinja",
             "hermes_json": "Qwen-Qwen2.5-7B-Instruct.jinja",
             "deepseek": "deepseek-ai-DeepSeek-V3.1.jinja", "hy3_xml": "tencent-Hy3.jinja",
             "dsml": "deepseek-ai-DeepSeek-V3.2.jinja", "glm_xml": "GLM-4.6.jinja",
             "minimax_xml": "MiniMax-M2.jinja", "minimax_m3": "MiniMax-M3.jinja",
             "kimi_k2": "Kimi-K2-Instruct.jinja",
             "seed_xml": "ByteDance-Seed-OSS.jinja"}
OWN_TEMPLATES = {"llama4_pythonic": "llama4-pythonic-style.jinja"}
SHAPES = ("huge_argument", "many_calls", "plain_text")
SIZE = 100_000
STEP = 4


def _renderer(family: str) -> Callable[[str, dict[str, Any]], str] | None:
    from benchmarks.parser_streaming import CALL_RENDERERS, template_renderer
    from toolwire.testing import isolated_plugin_manager

    if family in CALL_RENDERERS:
        return CALL_RENDERERS[family]
    if family in OWN_TEMPLATES:
        path = ROOT / "tests" / "families" / "templates" / OWN_TEMPLATES[family]
    elif family in TEMPLATES:
        path = SHARED_TEMPLATES / TEMPLATES[family]
    else:
        return None
    if not path.exists():
        return None
    spec = isolated_plugin_manager().parser(family)
    return _closers_whole(template_renderer(path, spec), spec.format)


def _closers_whole(render: Callable[[str, dict[str, Any]], str],
                   fmt: Any) -> Callable[[str, dict[str, Any]], str]:
    """``render`` with a closing marker the generic cut of the rendered turn left unfinished
    written whole, as the model writes it: the cut ends the model's text where the turn
    differs from a plain one, at a tag's start (Kimi K3's turn ends
    ``<|close|>tools<|sep|><|close|>message...`` where a plain one has
    ``<|close|>response<|sep|><|close|>message...``, so the cut fell before the ``<|sep|>``
    that ends ``<|close|>tools<|sep|>``: a reply the real model does not write)."""
    closers = (*fmt.section_close, *fmt.call_close) if fmt is not None else ()

    def whole(name: str, args: dict[str, Any]) -> str:
        text = render(name, args)
        for closer in closers:
            for size in range(len(closer) - 1, 0, -1):
                if text.endswith(closer[:size]):
                    return text + closer[size:]
        return text

    return whole


def _replies(families: list[str]) -> dict[str, str]:
    from benchmarks.parser_streaming import _shape_text

    out = {}
    for family in families:
        render = _renderer(family)
        if render is None:
            print(f"{family}: no template here; left out", file=sys.stderr)
            continue
        for shape in SHAPES:
            out[f"{family}/{shape}"] = _shape_text(shape, SIZE, render)
    return out


def _package(core: Path, plugins: Path, into: Path) -> Path:
    """``core`` and ``plugins`` laid out as an importable ``toolwire`` in ``into/pkg``
    (the folder to put first on the path), each side of a run alike."""
    package = into / "pkg" / "toolwire"
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(core, package, ignore=ignore)
    shutil.copytree(plugins, package / "plugins", ignore=ignore)
    return into / "pkg"


def _export(base: str, into: Path) -> Path:
    """``core`` and ``plugins`` of ``base``, laid out by :func:`_package`."""
    archive = into / "base.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "-o", str(archive), base, "core",
                    "plugins"], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "src", filter="data")
    return _package(into / "src" / "core", into / "src" / "plugins", into)


def _worker(cases_path: str, repeats: int) -> None:
    """In the child: every case's least CPU time per delta, as JSON on stdout."""
    import gc

    from benchmarks.parser_streaming import TOOLS
    from toolwire.testing import isolated_plugin_manager

    cases = json.loads(Path(cases_path).read_text(encoding="utf-8"))
    plugins = isolated_plugin_manager()
    result = {}
    for key, text in cases.items():
        family = key.split("/")[0]
        spec = plugins.parser(family)
        deltas = [text[i:i + STEP] for i in range(0, len(text), STEP)]
        best = float("inf")
        for _ in range(repeats + 1):  # the first is a warm-up
            parser = spec.create(TOOLS)
            gc.collect()
            gc.disable()
            start = time.process_time()
            for delta in deltas:
                parser.feed(delta)
            parser.close()
            took = time.process_time() - start
            gc.enable()
            best = min(best, took)
        result[key] = best * 1e6 / len(deltas)
    json.dump({"toolwire": __import__("toolwire").__file__, "us_per_delta": result},
              sys.stdout)


def _count_worker(cases_path: str) -> None:
    """In the child, under callgrind: each case fed once between two ``time.sleep(0)``
    (callgrind dumps its counts before each). The cyclic collector is off while the cases
    run, as in the timed runs: when it ran, and over how large a heap (every case's deltas,
    made before), depended on the cases counted before, not on the parser (a case measured
    alone and among thirteen families differed by up to 6 %)."""
    import gc

    from benchmarks.parser_streaming import TOOLS
    from toolwire.testing import isolated_plugin_manager

    cases = json.loads(Path(cases_path).read_text(encoding="utf-8"))
    plugins = isolated_plugin_manager()
    split = {key: [text[i:i + STEP] for i in range(0, len(text), STEP)]
             for key, text in cases.items()}
    specs = {key: plugins.parser(key.split("/")[0]) for key in cases}
    gc.collect()
    gc.disable()
    time.sleep(0)  # the dump of everything before the cases
    for key in cases:
        parser = specs[key].create(TOOLS)
        for delta in split[key]:
            parser.feed(delta)
        parser.close()
        time.sleep(0)


def _instructions(tree: Path | None, cases_path: Path, keys: list[str],
                  folder: Path) -> dict[str, float]:
    """Instructions per delta of each case, counted by callgrind."""
    out = folder / ("cg-base" if tree is not None else "cg-branch")
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONPATH=os.pathsep.join(
        [str(tree), str(ROOT)] if tree is not None else [str(ROOT)]))  # (hashing: counts)
    subprocess.run(["valgrind", "--tool=callgrind", "--dump-before=time_sleep",
                    f"--callgrind-out-file={out}", sys.executable, "-m",
                    "benchmarks.parser_paired", "--count-worker", str(cases_path)],
                   cwd=tempfile.gettempdir(), env=env, capture_output=True, check=True)
    cases = json.loads(cases_path.read_text(encoding="utf-8"))
    result = {}
    for index, key in enumerate(keys):  # dump 1 is the setup, then one per case
        text = Path(f"{out}.{index + 2}").read_text(encoding="utf-8")
        total = next(int(line.split()[1]) for line in text.splitlines()
                     if line.startswith("summary:"))
        result[key] = total / len(range(0, len(cases[key]), STEP))
    return result


def run_instructions(*, base: str = "f0bfb37", families: list[str] | None = None
                     ) -> list[dict[str, Any]]:
    """Callgrind instruction counts per delta, base and this tree; one row per case."""
    families = families or list(DEFAULT_FAMILIES)
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        cases_path = folder / "cases.json"
        cases = _replies(families)
        cases_path.write_text(json.dumps(cases), encoding="utf-8")
        tree = _export(base, folder)
        keys = list(cases)
        before = _instructions(tree, cases_path, keys, folder)
        after = _instructions(None, cases_path, keys, folder)
    rows = []
    for key in keys:
        family, shape = key.split("/")
        rows.append({"benchmark": BENCHMARK, "case": "instructions", "family": family,
                     "shape": shape, "size": SIZE, "delta": STEP, "base": base,
                     "base_ir": before[key], "branch_ir": after[key],
                     "change_pct": (after[key] - before[key]) / before[key] * 100})
    return rows


def _measure(tree: Path, cases_path: Path, repeats: int) -> dict[str, float]:
    # the side's package first on the path
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), str(ROOT)]))
    done = subprocess.run([sys.executable, "-m", "benchmarks.parser_paired", "--worker",
                           str(cases_path), "--repeats", str(repeats)],
                          cwd=tempfile.gettempdir(), env=env, capture_output=True, text=True,
                          check=True)
    answer = json.loads(done.stdout)
    assert answer["toolwire"].startswith(str(tree)), answer["toolwire"]  # (that side's)
    return dict(answer["us_per_delta"])


def run(quick: bool = False, *, base: str = "f0bfb37", rounds: int = 5, repeats: int = 5,
        families: list[str] | None = None) -> list[dict[str, Any]]:
    """Paired runs of ``base`` and this tree; one row per case."""
    families = families or list(DEFAULT_FAMILIES)
    if quick:
        rounds, repeats = 2, 2
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        cases_path = folder / "cases.json"
        cases_path.write_text(json.dumps(_replies(families)), encoding="utf-8")
        # this tree's side from a plain folder too, not through the editable install: where
        # the code sits then differs no more between the sides than between two runs
        trees = {"base": _export(base, folder),
                 "branch": _package(ROOT / "core", ROOT / "plugins", folder / "branch")}
        runs: dict[str, list[dict[str, float]]] = {"base": [], "branch": []}
        for index in range(rounds):
            order = ("base", "branch") if index % 2 == 0 else ("branch", "base")
            for side in order:
                runs[side].append(_measure(trees[side], cases_path, repeats))
                print(f"round {index + 1}/{rounds}: {side} measured", file=sys.stderr)
    rows = []
    for key in runs["base"][0]:
        before = min(r[key] for r in runs["base"])
        after = min(r[key] for r in runs["branch"])
        # the least of each side is one lucky run's; the medians say what is typical
        typical = [statistics.median(r[key] for r in runs[side]) for side in ("base", "branch")]
        family, shape = key.split("/")
        rows.append({"benchmark": BENCHMARK, "family": family, "shape": shape, "size": SIZE,
                     "delta": STEP, "base": base, "rounds": rounds, "repeats": repeats,
                     "base_us": before, "branch_us": after,
                     "change_pct": (after - before) / before * 100,
                     "median_change_pct": (typical[1] - typical[0]) / typical[0] * 100,
                     "base_runs_us": [r[key] for r in runs["base"]],
                     "branch_runs_us": [r[key] for r in runs["branch"]]})
    return rows


def report(rows: list[dict[str, Any]]) -> None:
    """Print the rows as a table."""
    print_table(rows, ["family", "shape", "base_us", "branch_us", "change_pct",
                       "median_change_pct"],
                f"Per-delta CPU time, {STEP}-character deltas of {SIZE:,}-character replies "
                "(least over paired runs, microseconds; the change of the least and of the "
                "medians)")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--base", default="f0bfb37")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--instructions", action="store_true")
    parser.add_argument("--count-worker")
    parser.add_argument("families", nargs="*")
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args.worker, args.repeats)
        return
    if args.count_worker:
        _count_worker(args.count_worker)
        return
    if args.instructions:
        rows = run_instructions(base=args.base, families=args.families or None)
        print_table(rows, ["family", "shape", "base_ir", "branch_ir", "change_pct"],
                    f"Instructions per delta (callgrind), {STEP}-character deltas of "
                    f"{SIZE:,}-character replies")
        print(f"\nwritten: {write_results(BENCHMARK + '_instructions', rows)}")
        return
    rows = run(args.quick, base=args.base, rounds=args.rounds, repeats=args.repeats,
               families=args.families or None)
    report(rows)
    print(f"\nwritten: {write_results(BENCHMARK, rows)}")


if __name__ == "__main__":
    main(sys.argv[1:])
