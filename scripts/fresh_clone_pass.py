"""The suite's second pass: a fresh clone of the committed tree, with nothing beside it.

A user's fresh clone has no shared test data beside it, no ``.hypothesis``, no
pytest cache and no build leftovers. This pass makes exactly that: ``git clone``
of HEAD into a new empty temporary folder, then, with the same ``.venv`` importing
toolwire from the clone (a copy of its ``core/`` and ``plugins/`` laid out as the
installed package, first on ``PYTHONPATH``):

1. collects the whole suite (every module imports and parametrizes without the data);
2. runs exactly the tests the first pass recorded as reading the shared data
   (``--record-shared``: by the test, or the whole module where its collection read
   it), which must pass or skip with the one reason; the folder where the working
   tree's data is stays forbidden (an audit hook fails a test that reads it by a
   path of its own instead of :mod:`tests.support.paths`).

Usage (``scripts/test`` runs it after the first pass)::

    python scripts/fresh_clone_pass.py RECORD_FILE
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # for the one module that says where the shared data is

from tests.support.paths import SHARED, SHARED_SCHEMAS, SHARED_TEMPLATES  # noqa: E402


def recorded(record: Path) -> list[str]:
    """The pytest arguments for what the first pass recorded: whole modules where their
    collection read the data, and single tests elsewhere (one argument each)."""
    modules: set[str] = set()
    tests: set[str] = set()
    for line in record.read_text(encoding="utf-8").splitlines():
        kind, _, node = line.partition(" ")
        (modules if kind == "module" else tests).add(node)
    return sorted(modules) + sorted(t for t in tests if t.split("::")[0] not in modules)


def _environment(site: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLWIRE_TEST_")}
    env["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [env.get("PYTHONPATH")])])
    env["TOOLWIRE_TEST_FORBIDDEN_DATA"] = os.pathsep.join(
        str(p) for p in (SHARED, SHARED_TEMPLATES, SHARED_SCHEMAS) if p.exists())
    env.pop("HYPOTHESIS_PROFILE", None)
    return env


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python scripts/fresh_clone_pass.py RECORD_FILE", file=sys.stderr)
        return 2
    selected = recorded(Path(argv[0]))
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                           cwd=REPO, capture_output=True, text=True, check=True).stdout
    if dirty:
        print("fresh_clone_pass: the clone holds the committed tree (HEAD); uncommitted "
              "changes are not in it", flush=True)
    with tempfile.TemporaryDirectory(prefix="toolwire-fresh-") as folder:
        clone, site = Path(folder) / "toolwire", Path(folder) / "site"
        subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(clone)],
                       check=True)
        # the installed layout: toolwire is core/, toolwire.plugins is plugins/
        shutil.copytree(clone / "core", site / "toolwire")
        shutil.copytree(clone / "plugins", site / "toolwire" / "plugins")
        python = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"]
        env = _environment(site)
        where = subprocess.run([sys.executable, "-c", "import toolwire; print(toolwire.__file__)"],
                               cwd=clone, env=env, capture_output=True, text=True, check=True)
        if not where.stdout.startswith(str(site)):
            print(f"fresh_clone_pass: toolwire was imported from {where.stdout.strip()}, not "
                  "the clone", file=sys.stderr)
            return 1
        print(f"== collecting the whole suite in a fresh clone ({clone})", flush=True)
        collected = subprocess.run([*python, "-q", "--collect-only"], cwd=clone, env=env,
                                   capture_output=True, text=True, check=False)
        if collected.returncode != 0:
            print(collected.stdout[-5000:], collected.stderr[-3000:], sep="\n")
            return collected.returncode
        print(collected.stdout.strip().splitlines()[-1], flush=True)
        if not selected:
            print("fresh_clone_pass: the first pass recorded no test reading the shared data")
            return 0
        print(f"== the {len(selected)} tests and modules that read the shared data, without it",
              flush=True)
        return subprocess.run([*python, "-q", "-rfE", *selected], cwd=clone, env=env,
                              check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
