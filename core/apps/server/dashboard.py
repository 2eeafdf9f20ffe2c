"""The reference dashboard page, its vendored scripts, and the Content-Security-Policy.

The page (``static/dashboard.html``) has one inline script of its own and loads
two vendored libraries from ``static/vendor/`` (a Markdown renderer and an HTML
sanitizer, copied unchanged from their npm packages; see the README there). When
the page is served, each ``<script src="/static/vendor/...">`` gets an
``integrity`` attribute with the file's SHA-256, and the policy allows exactly
those hashes and the inline script's: no other script can run on the page.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import re
from importlib import resources
from pathlib import Path
from typing import Final

from .responses import JsonResponse, Receive, Scope, Send

__all__ = ["VENDOR_FILES", "VENDOR_PREFIX", "VendorEndpoint", "content_security_policy",
           "dashboard_html", "page_headers", "vendor_file"]

VENDOR_PREFIX: Final = "/static/vendor/"
"""Where the vendored files are served."""

VENDOR_FILES: Final[dict[str, str]] = {
    "marked.umd.js": "text/javascript; charset=utf-8",
    "purify.min.js": "text/javascript; charset=utf-8",
    "marked.LICENSE.md": "text/plain; charset=utf-8",
    "dompurify.LICENSE": "text/plain; charset=utf-8",
    "dompurify.LICENSE-MPL": "text/plain; charset=utf-8",
    "README.md": "text/plain; charset=utf-8",
}
"""The files under ``static/vendor/`` the server serves, with their content types."""

_VENDOR_SCRIPT = re.compile(r'<script src="/static/vendor/([A-Za-z0-9._-]+)"></script>')


def _static_bytes(relative: str) -> bytes:
    resource = resources.files("toolwire.apps.server").joinpath("static/" + relative)
    if resource.is_file():
        return resource.read_bytes()
    # a strictly editable install links only the modules: read the source tree's copy
    return (Path(__file__).resolve().parent / "static" / relative).read_bytes()


@functools.cache
def vendor_file(name: str) -> bytes:
    """The bytes of a vendored file (one of :data:`VENDOR_FILES`), read once.

    :raises KeyError: ``name`` is not a vendored file.
    """
    if name not in VENDOR_FILES:
        raise KeyError(name)
    return _static_bytes("vendor/" + name)


def _sha256(data: bytes) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(data).digest()).decode()


@functools.cache
def dashboard_html() -> str:
    """The dashboard page, its vendored scripts pinned by ``integrity``, read once."""
    html = _static_bytes("dashboard.html").decode("utf-8")
    return _VENDOR_SCRIPT.sub(
        lambda m: f'<script src="{VENDOR_PREFIX}{m.group(1)}" '
                  f'integrity="{_sha256(vendor_file(m.group(1)))}"></script>', html)


def content_security_policy(html: str) -> str:
    """Allow exactly the page's own inline scripts and its pinned scripts (by hash)."""
    inline = [_sha256(body.encode("utf-8"))
              for body in re.findall(r"<script>(.*?)</script>", html, flags=re.DOTALL)]
    pinned = re.findall(r'<script src="[^"]*" integrity="(sha256-[A-Za-z0-9+/=]+)">', html)
    hashes = " ".join(f"'{h}'" for h in [*inline, *pinned])
    return (f"default-src 'none'; script-src {hashes}; style-src 'unsafe-inline'; "
            "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
            "frame-ancestors 'none'")


def page_headers(html: str) -> dict[str, str]:
    """The headers the page is served with: no caching, no sniffing, the CSP."""
    return {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": content_security_policy(html)}


class VendorEndpoint:
    """``GET /static/vendor/{name}``: one of :data:`VENDOR_FILES` (an ASGI app)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Send the file, or ``404``."""
        name = scope["path_params"]["name"]
        if name not in VENDOR_FILES:
            await JsonResponse(404, {"error": "no such file"})(scope, receive, send)
            return
        body = vendor_file(name)
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", VENDOR_FILES[name].encode()),
            (b"content-length", str(len(body)).encode()),
            (b"cache-control", b"no-cache"),
            (b"x-content-type-options", b"nosniff"),
            (b"content-security-policy", b"default-src 'none'; frame-ancestors 'none'")]})
        await send({"type": "http.response.body", "body": body})
