"""Where the repository, the docs and the shared real templates are."""

from __future__ import annotations

from pathlib import Path

__all__ = ["DOCS", "REPO", "SHARED", "SHARED_TEMPLATES"]

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
SHARED = REPO.parent / "shared"
SHARED_TEMPLATES = SHARED / "templates"
