"""The engine tests run against the real vLLM and SGLang from PyPI.

``scripts/ensure_engines`` installs each engine into a venv of its own
(``.venv-engines/vllm``, ``.venv-engines/sglang``) and ``scripts/test_engines``
runs this folder in each. Where an engine is not importable, its tests fail with
the reason (the install's own, when ``ensure_engines`` left one) wherever
``TOOLWIRE_REQUIRE_ENGINES`` names the engine (CI, ``scripts/test_engines``), and
skip with it elsewhere (a developer's main venv, which has no engine).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.paths import REPO

# where scripts/ensure_engines put the venvs and their install logs
ENGINES_DIR = Path(os.environ.get("TOOLWIRE_ENGINES_DIR") or REPO / ".venv-engines")


def required_engines() -> set[str]:
    """The engines this run must have (``TOOLWIRE_REQUIRE_ENGINES``, comma-separated)."""
    value = os.environ.get("TOOLWIRE_REQUIRE_ENGINES", "")
    return {name.strip() for name in value.split(",") if name.strip()}


def engine(name: str, module: str | None = None) -> ModuleType:
    """Import ``module`` (default: the engine itself); fail or skip with the reason."""
    try:
        return importlib.import_module(module or name)
    except Exception as exc:  # an install that half-worked raises more than ImportError
        reason = f"{name} cannot be imported here: {type(exc).__name__}: {exc}"
        failed = ENGINES_DIR / f"{name}.failed"
        if failed.is_file():
            reason += "\n" + failed.read_text(encoding="utf-8", errors="replace")
        if name in required_engines():
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason + " (scripts/ensure_engines installs it)", allow_module_level=True)
