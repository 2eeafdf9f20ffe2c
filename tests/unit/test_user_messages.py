"""Messages a person who installed toolwire can act on.

A user has no ``docs/`` or ``tests/`` folder (those are the repository's), and
toolwire is not on PyPI, so ``pip install 'toolwire[serve]'`` does not work: every
string the library, the apps and the built-in plugins may show (each string literal
that is not a docstring) names no repository file, and the one wording of "install
this extra" is :func:`toolwire.extras.extra_hint`'s.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.paths import REPO
from toolwire.extras import extra_hint

REPOSITORY_PATH = re.compile(r"(?<![\w.])(docs|tests)/")
PYPI_EXTRA = re.compile(r"toolwire\[|pip install (-e )?'?\.\[")
HINT_MODULE = REPO / "core" / "extras.py"


def _messages(path: Path) -> Iterator[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    documentation = {id(node.value) for node in ast.walk(tree)
                     if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in documentation:
            yield node.lineno, node.value


def _offenders(pattern: re.Pattern[str], *, skip: Path | None = None) -> list[str]:
    return [f"{path.relative_to(REPO)}:{line}: {text!r}"
            for folder in ("core", "plugins") for path in sorted((REPO / folder).rglob("*.py"))
            if path != skip for line, text in _messages(path) if pattern.search(text)]


def test_messages_point_at_no_repository_file() -> None:
    assert _offenders(REPOSITORY_PATH) == []


def test_only_the_shared_helper_says_how_to_install_an_extra() -> None:
    assert _offenders(PYPI_EXTRA, skip=HINT_MODULE) == []


def test_the_install_hint_says_how_toolwire_really_installs() -> None:
    """It matches the README's own install command (from the source folder)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "not on PyPI" in readme
    assert "pip install -e '.[" in readme
    assert extra_hint("mcp") == "pip install -e '.[mcp]' in toolwire's source folder"


def test_the_docs_install_extras_from_the_source_too() -> None:
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    assert [f"{page.relative_to(REPO)}:{number}: {line}" for page in pages
            for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
            if "toolwire[" in line] == []


@pytest.mark.process
def test_a_plugin_missing_its_extra_says_the_shared_hint() -> None:
    """The real import failure, in a fresh interpreter: the openai package is hidden."""
    script = ("import sys; sys.modules['openai'] = None\n"
              "from toolwire.plugins.openai_compat.backend import _make_client\n"
              "from toolwire.errors import BackendError\n"
              "try:\n    _make_client('OpenAI', {})\n"
              "except BackendError as exc:\n    print(exc.kind, exc)\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, check=True)
    assert run.stdout.strip() == ("config the openai_compat backend needs the openai package: "
                                  + extra_hint("remote"))
