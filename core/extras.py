"""How a message tells a person to install one of toolwire's extras.

toolwire is not on PyPI yet: it installs from its source, so ``pip install
'toolwire[serve]'`` would fail (or find someone else's package). Every message
that names a missing extra says it the one way this module writes.
"""

from __future__ import annotations

__all__ = ["extra_hint"]


def extra_hint(extra: str) -> str:
    """How to install the extra named ``extra`` (``"serve"``, ``"local"``...)."""
    return f"pip install -e '.[{extra}]' in toolwire's source folder"
