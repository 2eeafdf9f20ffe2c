"""The backends' test tiers."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "real_model: runs the small real model of the real-model extra "
                   "(SmolLM2-135M); deselect with -m 'not real_model'")
