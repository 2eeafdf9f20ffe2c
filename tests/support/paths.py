"""Where the repository, the docs and the real third-party test data are.

The real chat templates and tool schemas are not part of the repository (they are
other projects' files): CI has them in ``../shared`` beside the checkout, a user's
fresh clone does not. This module is the one place that says where they are:

* ``TOOLWIRE_TEST_SHARED``: the folder holding ``templates/`` and ``schemas/``
  (default: ``shared`` beside the checkout);
* ``TOOLWIRE_TEST_TEMPLATES`` / ``TOOLWIRE_TEST_SCHEMAS``: either folder on its own.

Tests that need them go through :mod:`tests.support.templates`, which skips with
:data:`MISSING_TEMPLATES` / :data:`MISSING_SCHEMAS` as the one reason.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["DOCS", "MISSING_SCHEMAS", "MISSING_TEMPLATES", "REPO", "SHARED", "SHARED_SCHEMAS",
           "SHARED_TEMPLATES"]

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def _folder(variable: str, default: Path) -> Path:
    value = os.environ.get(variable, "").strip()
    return Path(value).expanduser() if value else default


SHARED = _folder("TOOLWIRE_TEST_SHARED", REPO.parent / "shared")
SHARED_TEMPLATES = _folder("TOOLWIRE_TEST_TEMPLATES", SHARED / "templates")
SHARED_SCHEMAS = _folder("TOOLWIRE_TEST_SCHEMAS", SHARED / "schemas")

MISSING_TEMPLATES = (f"real chat templates not available: {SHARED_TEMPLATES} is absent "
                     "(set TOOLWIRE_TEST_TEMPLATES to a folder of them)")
"""The one skip reason of every test that needs the real chat templates."""
MISSING_SCHEMAS = (f"real tool schemas not available: {SHARED_SCHEMAS} is absent "
                   "(set TOOLWIRE_TEST_SCHEMAS to a folder of them)")
"""The one skip reason of every test that needs the real (BFCL) tool schemas."""
