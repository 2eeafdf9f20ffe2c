"""The real chat templates and tool schemas, skipping cleanly where they are absent.

Every test that reads them goes through these helpers, so a fresh clone (which has
none) skips each such test with one reason, which pytest's summary
groups on one line (see :mod:`tests.support.paths` for where they are looked for).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .paths import MISSING_SCHEMAS, MISSING_TEMPLATES, SHARED_SCHEMAS, SHARED_TEMPLATES

__all__ = [
    "OWN_TEMPLATES",
    "SHARED_SCHEMAS",
    "SHARED_TEMPLATES",
    "family_template",
    "have_schemas",
    "have_templates",
    "require_schemas",
    "require_templates",
    "shared_schema",
    "shared_template",
    "template_names",
    "template_params",
    "template_path",
]


def have_templates() -> bool:
    """Whether the real chat templates are here."""
    return SHARED_TEMPLATES.is_dir()


def have_schemas() -> bool:
    """Whether the real tool schemas are here."""
    return SHARED_SCHEMAS.is_dir()


def require_templates() -> None:
    """Skip the calling test when the real chat templates are absent."""
    if not have_templates():
        pytest.skip(MISSING_TEMPLATES)


def require_schemas() -> None:
    """Skip the calling test when the real tool schemas are absent."""
    if not have_schemas():
        pytest.skip(MISSING_SCHEMAS)


def template_path(name: str) -> Path:
    """The path of a real chat template, or skip when the templates are absent."""
    require_templates()
    path = SHARED_TEMPLATES / name
    if not path.is_file():
        pytest.skip(f"{name} is not among the real chat templates in {SHARED_TEMPLATES}")
    return path


def shared_template(name: str) -> str:
    """The source of a real chat template, or skip when the templates are absent."""
    return template_path(name).read_text(encoding="utf-8")


OWN_TEMPLATES = Path(__file__).resolve().parent.parent / "families" / "templates"
"""The suite's own templates, for formats whose real template is not a Jinja file
(an encoder in Python) or not among the shared ones; they ship with the tests."""


def family_template(name: str) -> str:
    """A family's template by file name: the suite's own when it has one by that name
    (always present), else the real one (skipping when the real ones are absent)."""
    own = OWN_TEMPLATES / name
    if own.is_file():
        return own.read_text(encoding="utf-8")
    return shared_template(name)


def shared_schema(name: str) -> Path:
    """The path of a real schema file, or skip when the schemas are absent."""
    require_schemas()
    return SHARED_SCHEMAS / name


def template_names() -> list[str]:
    """Every real template file name (empty when the folder is absent)."""
    return sorted(p.name for p in SHARED_TEMPLATES.glob("*.jinja")) if have_templates() else []


def template_params(names: list[str] | None = None) -> list[Any]:
    """``names`` (default: every real template) as parameters; when the templates are
    absent, one parameter that skips with the one reason (pytest would otherwise skip an
    empty parameter set with a reason of its own)."""
    names = template_names() if names is None else names
    if not have_templates():
        return [pytest.param(None, marks=pytest.mark.skip(reason=MISSING_TEMPLATES))]
    return list(names)
