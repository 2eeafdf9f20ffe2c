"""Shared test setup: the tests folder on sys.path, the real templates folder, profiles."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))

SHARED_TEMPLATES = TESTS.parents[1] / "shared" / "templates"

settings.register_profile("default", max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("fuzz", max_examples=2000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def shared_template(name: str) -> str:
    """The source of a real chat template, or skip when shared/ is absent."""
    path = SHARED_TEMPLATES / name
    if not path.exists():
        pytest.skip(f"real chat templates not available ({SHARED_TEMPLATES} is absent)")
    return path.read_text(encoding="utf-8")
