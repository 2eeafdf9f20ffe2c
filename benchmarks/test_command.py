"""The README's test command, timed as a newcomer runs it: in a fresh clone.

Clones the committed tree (HEAD) into a new empty temporary folder, optionally gives
it the real test data (``TOOLWIRE_TEST_SHARED``, read by tests/support/paths.py, as CI
gives it its data), runs ``bash .ci/run``
there and reads its output: the wall time of each step, the passed and skipped counts
of each pass, and the ten slowest tests of the first pass. With ``--fast``, it also
times the developer's loop (``pytest -m fast -n 2``) in the same clone afterwards.

Usage::

    python -m benchmarks.test_command [--data DIR] [--fast] [--keep]

Prints a table and writes ``benchmarks/results/test_command.json``. The clone's own
``.venv`` is built by the command itself (pip's cache decides how long that takes);
the engines' venvs go where ``.ci/run`` keeps them (``TOOLWIRE_ENGINES_DIR``).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import print_table, write_results

__all__ = ["main", "read_run"]

REPO = Path(__file__).resolve().parents[1]
DATA_VARIABLE = "TOOLWIRE_TEST_SHARED"  # the variable tests/support/paths.py reads
SUMMARY = re.compile(r"^(?:=+ )?(?P<counts>(?:\d+ \w+(?:, )?)+) in (?P<seconds>[\d.]+)s")
SLOW = re.compile(r"^(?P<seconds>[\d.]+)s (?P<phase>call|setup|teardown)\s+(?P<test>\S+)")


def read_run(output: str) -> dict[str, Any]:
    """The pytest summaries (in order), the ten slowest tests and the steps' marks."""
    summaries: list[dict[str, Any]] = []
    slowest: list[dict[str, Any]] = []
    for line in output.splitlines():
        if match := SUMMARY.match(line.strip()):
            counts = dict((word, int(number)) for number, word in
                          (part.split(" ", 1) for part in match["counts"].split(", ")))
            summaries.append({**counts, "seconds": float(match["seconds"])})
        elif (match := SLOW.match(line.strip())) and len(slowest) < 10:
            slowest.append({"seconds": float(match["seconds"]), "phase": match["phase"],
                            "test": match["test"]})
    return {"summaries": summaries, "slowest": slowest}


def _run(command: list[str], cwd: Path, log: Path, env: dict[str, str]
         ) -> tuple[int, float, str]:
    start = time.monotonic()
    with log.open("w") as out:
        status = subprocess.run(command, cwd=cwd, env=env, stdout=out,
                                stderr=subprocess.STDOUT).returncode
    return status, time.monotonic() - start, log.read_text(errors="replace")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path,
                        help="the real test data (templates/, schemas/), given to the run")
    parser.add_argument("--fast", action="store_true", help="also time pytest -m fast -n 2")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="toolwire-fresh-"))
    clone = folder / "toolwire"
    head = _head()
    try:
        subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
        environment = dict(os.environ)
        if args.data:
            environment[DATA_VARIABLE] = str(args.data.resolve())
        rows: list[dict[str, Any]] = []
        status, seconds, output = _run(["bash", ".ci/run"], clone, folder / "ci.log",
                                       environment)
        run = read_run(output)
        rows.append({"step": "bash .ci/run", "status": status, "seconds": round(seconds),
                     "data": bool(args.data),
                     "passes": ", ".join(_counts(s) for s in run["summaries"])})
        if args.fast:
            status, seconds, output = _run(
                [str(clone / ".venv/bin/python"), "-m", "pytest", "-q", "-m", "fast", "-n", "2",
                 "-p", "no:cacheprovider"], clone, folder / "fast.log", environment)
            fast = read_run(output)
            rows.append({"step": "pytest -m fast -n 2", "status": status,
                         "seconds": round(seconds), "data": bool(args.data),
                         "passes": ", ".join(_counts(s) for s in fast["summaries"])})
        print_table(rows, ["step", "status", "seconds", "data", "passes"],
                    title=f"the README's test command in a fresh clone of {head}")
        print_table(run["slowest"], ["seconds", "phase", "test"], title="ten slowest tests")
        path = write_results("test_command", [*rows, {"slowest": run["slowest"],
                                                      "summaries": run["summaries"]}])
        print(f"\nwrote {path}; logs in {folder}" if args.keep else f"\nwrote {path}")
        return 0 if all(row["status"] == 0 for row in rows) else 1
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


def _counts(summary: dict[str, Any]) -> str:
    words = [f"{value} {key}" for key, value in summary.items() if key != "seconds"]
    return f"{' '.join(words)} ({summary['seconds']:.0f} s)"


def _head() -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, text=True,
                          capture_output=True).stdout.strip()


if __name__ == "__main__":
    sys.exit(main())
