"""The reference dashboard page and the Content-Security-Policy it is served with."""

from __future__ import annotations

import base64
import functools
import hashlib
import re
from importlib import resources
from pathlib import Path

__all__ = ["content_security_policy", "dashboard_html", "page_headers"]


@functools.cache
def dashboard_html() -> str:
    """The reference dashboard page (``static/dashboard.html`` beside this module), read once."""
    resource = resources.files("toolwire.apps.server").joinpath("static/dashboard.html")
    if resource.is_file():
        return resource.read_text(encoding="utf-8")
    # a strictly editable install links only the modules: read the source tree's copy
    return (Path(__file__).resolve().parent / "static" / "dashboard.html").read_text(
        encoding="utf-8")


def content_security_policy(html: str) -> str:
    """Allow exactly the page's own inline scripts (by hash) and nothing from elsewhere."""
    hashes = " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(body.encode("utf-8")).digest()).decode()
        + "'"
        for body in re.findall(r"<script>(.*?)</script>", html, flags=re.DOTALL))
    return (f"default-src 'none'; script-src {hashes}; style-src 'unsafe-inline'; "
            "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
            "frame-ancestors 'none'")


def page_headers(html: str) -> dict[str, str]:
    """The headers the page is served with: no caching, no sniffing, the CSP."""
    return {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": content_security_policy(html)}
