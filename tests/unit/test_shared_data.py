"""The real third-party test data is found in one place and its absence skips cleanly.

A user's fresh clone has no shared data folder beside it; CI has one. Every test,
script and benchmark that needs it goes through :mod:`tests.support.paths` (and
:mod:`tests.support.templates`, which skips with one reason), so the suite passes
either way.
"""

from __future__ import annotations

import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import MISSING_TEMPLATES, REPO, SHARED_TEMPLATES

ONE_PLACE = "tests/support/paths.py"
SHARED = "shared"
NAMES_THE_SHARED_FOLDER = re.compile(
    # the folder's path written out (beside the checkout, or its two subfolders), or built in code
    rf"""\.\./{SHARED}\b|\b{SHARED}/(?:templates|schemas)\b"""
    rf"""|(?:\.parent|parents\[\d\])\s*/\s*["']{SHARED}["']""")


_NOT_THE_REPOSITORY = {".git", ".venv", "build", "dist", ".hypothesis", ".pytest_cache", ".nox",
                       ".mypy_cache", ".ruff_cache", "__pycache__", "node_modules",
                       "toolwire.egg-info", ".cache", ".agent-clients"}
"""What tools made or installed beside the checkout's own files (and any virtual
environment: a folder holding ``pyvenv.cfg``, such as the engines' venvs)."""


def _repository_files() -> list[str]:
    """Every file of the checkout (its own, not what tools made or installed beside it)."""
    found = []
    for folder, subfolders, files in os.walk(REPO):
        subfolders[:] = sorted(d for d in subfolders if d not in _NOT_THE_REPOSITORY
                               and not os.path.isfile(os.path.join(folder, d, "pyvenv.cfg")))
        found += [os.path.relpath(os.path.join(folder, f), REPO) for f in sorted(files)]
    return found


def test_only_the_paths_module_says_where_the_shared_folder_is() -> None:
    """No file (code, script, doc, CI step) names the shared folder's path but the one
    module: a fixed path works beside CI's data and fails in a user's fresh clone."""
    offenders = []
    for name in _repository_files():
        if name == ONE_PLACE:
            continue
        try:
            text = (REPO / name).read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # a picture, a binary
        offenders += [f"{name}:{text.count(chr(10), 0, m.start()) + 1}: {m.group()}"
                      for m in NAMES_THE_SHARED_FOLDER.finditer(text)]
    assert offenders == []


def test_the_rule_finds_a_path_written_or_built() -> None:
    for line in (f"see ../{SHARED} beside it", f"open('{SHARED}/templates/x.jinja')",
                 f"REPO.parent / '{SHARED}'", f'parents[2] / "{SHARED}" / "schemas"'):
        assert NAMES_THE_SHARED_FOLDER.search(line), line
    assert not NAMES_THE_SHARED_FOLDER.search("the shared data folder; sharedness")


def _paths(monkeypatch: pytest.MonkeyPatch, **environ: str) -> str:
    for name in [n for n in os.environ if n.startswith("TOOLWIRE_TEST_")]:
        monkeypatch.delenv(name)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    found = runpy.run_path(str(REPO / ONE_PLACE))  # the module as a fresh import reads it
    return f"{found['SHARED_TEMPLATES']} {found['SHARED_SCHEMAS']}"


def test_the_folders_follow_the_environment(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    assert _paths(monkeypatch) == f"{REPO.parent / SHARED / 'templates'} " \
                                  f"{REPO.parent / SHARED / 'schemas'}"
    assert _paths(monkeypatch, TOOLWIRE_TEST_SHARED=str(tmp_path)) == \
        f"{tmp_path / 'templates'} {tmp_path / 'schemas'}"
    assert _paths(monkeypatch, TOOLWIRE_TEST_SHARED=str(tmp_path),
                  TOOLWIRE_TEST_TEMPLATES=str(tmp_path / "mine")) == \
        f"{tmp_path / 'mine'} {tmp_path / 'schemas'}"


@pytest.mark.process
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
