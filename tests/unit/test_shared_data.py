"""The real third-party test data is found in one place and its absence skips cleanly.

A user's fresh clone has no ``../shared`` folder; CI has it. Every test that
needs it goes through :mod:`tests.support.paths` and :mod:`tests.support.templates`
(which skip with one reason), so the suite passes either way.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support.paths import MISSING_TEMPLATES, REPO, SHARED_TEMPLATES

ONE_PLACE = {REPO / "tests" / "support" / "paths.py",
             REPO / "tests" / "unit" / "test_shared_data.py"}  # which checks the default
BUILDS_THE_SHARED_PATH = re.compile(r"""(?:REPO\.parent|parents\[\d\])\s*/\s*["']shared["']""")


def _python(code: str, **environ: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLWIRE_TEST_")}
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, env={**env, **environ}, timeout=60, check=True)
    return run.stdout.strip()


def test_only_the_paths_module_says_where_the_shared_folder_is() -> None:
    offenders = [str(path.relative_to(REPO)) for folder in ("tests", "benchmarks")
                 for path in sorted((REPO / folder).rglob("*.py"))
                 if path not in ONE_PLACE and BUILDS_THE_SHARED_PATH.search(
                     path.read_text(encoding="utf-8"))]
    assert offenders == []


def test_the_folders_follow_the_environment(tmp_path: Path) -> None:
    show = ("from tests.support.paths import SHARED_SCHEMAS, SHARED_TEMPLATES; "
            "print(SHARED_TEMPLATES, SHARED_SCHEMAS)")
    assert _python(show) == f"{REPO.parent / 'shared' / 'templates'} " \
                            f"{REPO.parent / 'shared' / 'schemas'}"
    assert _python(show, TOOLWIRE_TEST_SHARED=str(tmp_path)) == \
        f"{tmp_path / 'templates'} {tmp_path / 'schemas'}"
    assert _python(show, TOOLWIRE_TEST_SHARED=str(tmp_path),
                   TOOLWIRE_TEST_TEMPLATES=str(tmp_path / "mine")) == \
        f"{tmp_path / 'mine'} {tmp_path / 'schemas'}"


def test_without_the_templates_a_test_that_needs_them_skips_with_the_one_reason(
        tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLWIRE_TEST_")}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/unit/test_history_shape.py"], cwd=REPO, capture_output=True, text=True,
        env={**env, "TOOLWIRE_TEST_SHARED": str(tmp_path / "absent")}, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:]
    # the reason names where this run looks (wherever the outer run's variables point)
    absent = tmp_path / "absent" / "templates"
    reason = MISSING_TEMPLATES.replace(str(SHARED_TEMPLATES), str(absent))
    counted = re.search(rf"^(\d+) tests skipped: {re.escape(reason)}$", run.stdout, re.M)
    assert counted and int(counted.group(1)) > 0, run.stdout[-3000:]
    assert re.search(r"\d+ passed, \d+ skipped", run.stdout)
