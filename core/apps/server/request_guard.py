"""Who may talk to the server: the ``Host`` allowlist, same-origin POSTs, the API key.

Three checks run before any route, as one plain ASGI middleware:

* **Host** (DNS rebinding): a web page on a name the attacker controls can make
  that name resolve to 127.0.0.1; the browser then sends the attacker's name in
  ``Host``. The header is parsed strictly (a name or an IP literal, then an
  optional numeric port) and the name must be on the allowlist. An IP literal is
  never a rebinding name, so a server listening on every interface may also allow
  any IP literal (that is how LAN clients address it).
* **Origin**: a POST whose ``Origin`` is another site is refused (another page
  driving the tools).
* **Size**: the headers together stay under a bound.
* **API key**: when one is set, every ``/v1`` route needs
  ``Authorization: Bearer <key>`` (compared in constant time).
"""

from __future__ import annotations

import hmac
import ipaddress
import re
from collections.abc import Iterable
from typing import Final
from urllib.parse import urlsplit

import attrs

from .http_input import RequestError, header_value
from .responses import ASGIApp, Receive, Scope, Send, error_response

__all__ = ["LOOPBACK_HOSTS", "HostPolicy", "RequestGuard", "parse_host_header"]

LOOPBACK_HOSTS: Final[frozenset[str]] = frozenset({"127.0.0.1", "localhost", "::1"})
"""The names a server on the loopback interface answers to."""

_REG_NAME = re.compile(r"[a-z0-9](?:[a-z0-9\-_.]*[a-z0-9])?")
_PORT = re.compile(r"[0-9]{1,5}")


def parse_host_header(value: str) -> str | None:
    """The host name of a ``Host`` header (lower case), or ``None`` when malformed.

    Accepts ``name``, ``name:port``, ``1.2.3.4[:port]`` and ``[v6][:port]``, with a
    port of 1 to 5 digits. Anything else (``127.0.0.1:evil.com``, a bare IPv6
    address, user info, spaces) is malformed.
    """
    text = value.strip().lower()
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            return None
        name, rest = text[1:end], text[end + 1:]
        try:
            ipaddress.IPv6Address(name)
        except ValueError:
            return None
    else:
        name, _, port = text.partition(":")
        rest = ":" + port if _ else ""
        if not _REG_NAME.fullmatch(name):
            return None
    if rest and not (rest.startswith(":") and _PORT.fullmatch(rest[1:])
                     and int(rest[1:]) <= 65535):
        return None
    return name


def _is_ip_literal(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _names(names: Iterable[str]) -> frozenset[str]:
    return frozenset(n.strip().strip("[]").lower() for n in names)


@attrs.frozen
class HostPolicy:
    """Which ``Host`` names the server answers to.

    :ivar names: allowed names (lower case).
    :ivar any_ip_literal: also allow any IP address literal (for a server bound to
        every interface, which LAN clients reach by its address).
    """

    names: frozenset[str] = attrs.field(converter=_names, default=LOOPBACK_HOSTS)
    any_ip_literal: bool = False

    def allows(self, host_header: str) -> bool:
        """Whether a request with this ``Host`` header may be served."""
        name = parse_host_header(host_header)
        if name is None:
            return False
        return name in self.names or (self.any_ip_literal and _is_ip_literal(name))


class RequestGuard:
    """Refuse bad ``Host`` names, cross-origin POSTs and missing API keys (ASGI middleware).

    :param app: the app to guard.
    :param hosts: the ``Host`` policy; ``None`` serves any name.
    :param api_key: when set, required as a bearer token on every ``/v1`` route.
    :param max_header_bytes: the most bytes of headers a request may have (``431``;
        the HTTP parser bounds only a head that arrives in pieces).
    """

    def __init__(self, app: ASGIApp, hosts: HostPolicy | None = None,
                 api_key: str | None = None, max_header_bytes: int | None = None) -> None:
        self.app = app
        self.hosts = hosts
        self.api_key = api_key.encode() if api_key else None
        self.max_header_bytes = max_header_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check the request; pass it on or answer with the refusal."""
        if scope["type"] == "http":
            refusal = self.refusal(scope["method"], scope["path"], scope["headers"])
            if refusal is not None:
                headers = ([("WWW-Authenticate", "Bearer")] if refusal.status == 401 else [])
                await error_response(scope["path"], refusal, headers)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def refusal(self, method: str, path: str,
                headers: Iterable[tuple[bytes, bytes]]) -> RequestError | None:
        """Why this request is refused, or ``None`` when it may go on."""
        headers = list(headers)
        if self.max_header_bytes is not None and \
                sum(len(k) + len(v) + 4 for k, v in headers) > self.max_header_bytes:
            return RequestError(431, f"the request headers are larger than "
                                     f"{self.max_header_bytes} bytes", code="headers_too_large")
        host = header_value(headers, b"host") or ""
        if self.hosts is not None and not self.hosts.allows(host):
            return RequestError(403, f"host {host!r} is not allowed", code="host_not_allowed")
        if method not in ("GET", "HEAD", "OPTIONS"):
            origin = header_value(headers, b"origin")
            if origin is not None and urlsplit(origin).netloc.lower() != host.strip().lower():
                return RequestError(403, f"cross-origin request from {origin!r} refused",
                                    code="cross_origin")
        if self.api_key is not None and (path == "/v1" or path.startswith("/v1/")):
            given = header_value(headers, b"authorization") or ""
            scheme, _, token = given.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                    token.strip().encode("latin-1"), self.api_key):
                return RequestError(401, "this server needs an API key: send "
                                         "'Authorization: Bearer <key>'",
                                    code="invalid_api_key")
        return None
