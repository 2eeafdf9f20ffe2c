"""The real chat templates in ``../shared/templates``, skipping cleanly where it is absent."""

from __future__ import annotations

import pytest

from .paths import SHARED_TEMPLATES

__all__ = ["SHARED_TEMPLATES", "shared_template"]


def shared_template(name: str) -> str:
    """The source of a real chat template, or skip when shared/ is absent."""
    path = SHARED_TEMPLATES / name
    if not path.exists():
        pytest.skip(f"real chat templates not available ({SHARED_TEMPLATES} is absent)")
    return path.read_text(encoding="utf-8")
