"""Benchmark: ``toolwire models``, the GGUF files already on the machine, per file.

Fake stores in each tool's layout (a Hugging Face hub cache, an Ollama store, an LM
Studio folder, a ``--models-dir``) hold ``FILES`` small GGUF files whose chat templates
are the real ones (the folder ``tests/support/paths.py`` names; some claimed by a family
plugin, some that only a derived parser reads, some neither), and one model-shaped file
with a 150,000-token vocabulary (the file of ``benchmarks.gguf_header``, a sparse 9 GB).

Cases, each per file:

* ``find`` the files in every store (walks and manifests; no file is opened);
* ``describe`` a small file: its header, quantization and the family plugin that
  scores its template highest (what ``toolwire models`` shows);
* ``describe --verify``: the family selected exactly as a chat selects it (the
  template renders probe calls the parser must read back, or a parser is derived),
  the first time (verdicts are then cached per template, as the "again" row shows);
* ``describe`` the model-shaped file (the header reader skips the vocabulary);
* the whole command, ``python -m toolwire models --json`` in a subprocess, with no
  models (starting Python and loading the plugins) and with the stores; the per-file
  figure is the difference divided by the number of files.

Target: describing a file takes milliseconds (at most ``TARGET_MS_PER_FILE``), so a
listing of a few dozen models answers in well under a second.

Run ``python -m benchmarks.local_models [--quick]``: prints a table and writes
``benchmarks/results/local_models.json``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.support.model_stores import add_hf, add_lmstudio, add_ollama, tiny_gguf
from tests.support.paths import SHARED_TEMPLATES
from toolwire.apps.local_models import describe_model, find_models, model_stores
from toolwire.hooks.manager import PluginManager

from .gguf_header import model_file
from .harness import print_table, time_runs, write_results

__all__ = ["run"]

BENCHMARK = "local_models"
FILES = 40
TARGET_MS_PER_FILE = 30.0


def _templates() -> list[str]:
    paths = sorted(SHARED_TEMPLATES.glob("*.jinja"))
    if not paths:
        raise SystemExit(f"the real chat templates are missing: {SHARED_TEMPLATES}")
    return [p.read_text(encoding="utf-8") for p in paths]


def _stores(root: Path, files: int) -> tuple[Path, dict[str, str]]:
    """Fill a home folder with ``files`` small models spread over the stores, plus the
    model-shaped one; return the home and the environment that points at it."""
    home = root / "home"
    parts = root / "parts"
    templates = _templates()
    hub = home / ".cache" / "huggingface" / "hub"
    ollama = home / ".ollama" / "models"
    lmstudio = home / ".lmstudio" / "models"
    mine = root / "mine"
    for n in range(files):
        source = tiny_gguf(parts / f"{n}.gguf", template=templates[n % len(templates)],
                           file_type=(15, 7, 1, 18)[n % 4])
        where = n % 4
        if where == 0:
            add_hf(hub, f"org{n}/Model{n}-GGUF", {f"Model{n}-Q4_K_M.gguf": source})
        elif where == 1:
            add_ollama(ollama, f"model{n}", "latest", source)
        elif where == 2:
            add_lmstudio(lmstudio, "publisher", f"Model{n}-GGUF", f"model{n}.gguf", source)
        else:
            (mine / f"sub{n}").mkdir(parents=True, exist_ok=True)
            source.rename(mine / f"sub{n}" / f"model{n}.gguf")
    big = mine / "big" / "Bench-Model-7B-Q4_K_M.gguf"
    big.parent.mkdir(parents=True, exist_ok=True)
    big.symlink_to(model_file())
    env = {"HOME": str(home), "TOOLWIRE_MODELS_DIR": str(mine), "TOOLWIRE_LOAD_PLUGINS": ""}
    return home, env


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Time each case; one row per case, with the milliseconds per file."""
    files = 12 if quick else FILES
    runs = 3 if quick else 15
    plugins = PluginManager(entry_points=False)
    with tempfile.TemporaryDirectory(prefix="toolwire-bench-models-") as temp:
        home, env = _stores(Path(temp), files)
        stores = model_stores(environ=env, home=home)
        found = find_models(stores)
        if len(found) != files + 1:
            raise AssertionError(f"found {len(found)} models, expected {files + 1}")
        small = [m for m in found if "Bench-Model" not in m.name]
        big = next(m for m in found if "Bench-Model" in m.name)
        described = [describe_model(m, plugins) for m in small]
        if any(d.architecture is None for d in described):
            raise AssertionError("a header could not be read")
        rows = []
        timing = time_runs(lambda: find_models(stores), runs)
        rows.append(_row("find (every store)", timing, len(found)))
        timing = time_runs(lambda: [describe_model(m, plugins) for m in small], runs)
        rows.append(_row("describe a small file", timing, len(small),
                         with_family=sum(1 for d in described if d.family)))
        started = time.perf_counter()
        verified = [describe_model(m, plugins, verify=True) for m in small]
        first = (time.perf_counter() - started) * 1000
        families = [d.family for d in verified]
        rows.append(_row("describe --verify, first time",
                         {"median_ms": first, "min_ms": first, "max_ms": first, "runs": 1},
                         len(small), with_family=sum(1 for f in families if f),
                         derived=families.count("derived")))
        timing = time_runs(lambda: [describe_model(m, plugins, verify=True) for m in small],
                           runs)
        rows.append(_row("describe --verify, again", timing, len(small)))
        timing = time_runs(lambda: describe_model(big, plugins), runs)
        rows.append(_row("describe a 150k-token model", timing, 1))
        command = [sys.executable, "-m", "toolwire", "models", "--json"]
        empty = Path(temp) / "empty"
        empty.mkdir()

        def listing(environment: dict[str, str], expected: int) -> None:
            done = subprocess.run(command, capture_output=True, timeout=300, check=True,
                                  env={**os.environ, **environment})
            if done.stdout.count(b'"name"') != expected:
                raise AssertionError("the command listed the wrong number of models")

        bare = time_runs(lambda: listing({"HOME": str(empty), "TOOLWIRE_MODELS_DIR": "",
                                          "TOOLWIRE_LOAD_PLUGINS": ""}, 0), 2 if quick else 5)
        rows.append({"case": "python -m toolwire models --json, no models", "files": 0,
                     **bare})
        full = time_runs(lambda: listing(env, len(found)), 2 if quick else 5)
        per_file = (full["median_ms"] - bare["median_ms"]) / len(found)
        rows.append({"case": "python -m toolwire models --json", "files": len(found), **full,
                     "ms_per_file": per_file, "meets_target": per_file <= TARGET_MS_PER_FILE})
    return rows


def _row(case: str, timing: dict[str, float], files: int, **extra: Any) -> dict[str, Any]:
    """A row; the target applies to what ``toolwire models`` does by default (not to
    ``--verify``, which renders every template)."""
    per_file = timing["median_ms"] / files
    met = None if "--verify" in case else per_file <= TARGET_MS_PER_FILE
    return {"case": case, "files": files, **timing, "ms_per_file": per_file,
            "meets_target": met, **extra}


def report(rows: list[dict[str, Any]]) -> None:
    """Print the rows as a table."""
    print_table(rows, ["case", "files", "median_ms", "min_ms", "max_ms", "ms_per_file",
                       "meets_target"],
                f"toolwire models: finding and describing local GGUF files "
                f"(target: <= {TARGET_MS_PER_FILE:g} ms per file)")


def main(argv: list[str]) -> None:
    rows = run(quick="--quick" in argv)
    report(rows)
    print(f"\nwritten: {write_results(BENCHMARK, rows)}")


if __name__ == "__main__":
    main(sys.argv[1:])
