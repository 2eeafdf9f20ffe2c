"""Who may talk to the server: the ``Host`` allowlist, same-origin POSTs, the API key, and
the browser origins allowed across sites (CORS).

These checks run before any route, as one plain ASGI middleware:

* **Host** (DNS rebinding): a web page on a name the attacker controls can make
  that name resolve to 127.0.0.1; the browser then sends the attacker's name in
  ``Host``. The header is parsed strictly (a name or an IP literal, then an
  optional numeric port) and the name must be on the allowlist. An IP literal is
  never a rebinding name, so a server listening on every interface may also allow
  any IP literal (that is how LAN clients address it).
* **Origin**: a POST whose ``Origin`` is another site is refused (another page
  driving the tools), unless that origin is one the server was told to allow
  (``--allow-origin``): for those origins only, a CORS preflight (``OPTIONS``
  with ``Access-Control-Request-Method``) is answered and every answer carries
  ``Access-Control-Allow-Origin``. The ``Host`` check and the API key hold for
  them as for everyone.
* **Size**: the headers together stay under a bound.
* **API key**: when one is set, every ``/v1`` route and ``/metrics`` need it, as
  ``Authorization: Bearer <key>`` (OpenAI's clients) or ``x-api-key: <key>``
  (Anthropic's), compared in constant time.
"""

from __future__ import annotations

import hmac
import ipaddress
import re
from collections.abc import Iterable, MutableMapping
from typing import Any, Final
from urllib.parse import urlsplit

import attrs

from .http_input import RequestError, header_value
from .responses import ASGIApp, Receive, Scope, Send, error_response

__all__ = ["LOOPBACK_HOSTS", "HostPolicy", "RequestGuard", "parse_host_header", "parse_origin"]

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


def parse_origin(text: str) -> str:
    """An origin as browsers send it (``scheme://host[:port]``, lower case), from
    ``--allow-origin``.

    :raises ValueError: not an ``http``/``https`` origin: a path, a query, user
        info, ``*`` and ``null`` are refused (an origin is named, never a pattern).
    """
    value = text.strip()
    parts = urlsplit(value)
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc \
            or parts.path not in ("", "/") or parts.query or parts.fragment \
            or "@" in parts.netloc or parse_host_header(parts.netloc) is None:
        raise ValueError(f"{text!r} is not an origin: give scheme://host[:port], such as "
                         "https://app.example or http://localhost:5173")
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}"


_CORS_METHODS: Final = "GET, POST, OPTIONS"
_CORS_EXPOSED: Final = "X-Toolwire-Chat, Retry-After"
_CORS_MAX_AGE: Final = "600"
_TOKEN_LIST = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+(\s*,\s*[A-Za-z0-9!#$%&'*+.^_`|~-]+)*")


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
    :param origins: browser origins allowed to call across sites (CORS), as
        :func:`parse_origin` writes them.
    """

    def __init__(self, app: ASGIApp, hosts: HostPolicy | None = None,
                 api_key: str | None = None, max_header_bytes: int | None = None,
                 origins: Iterable[str] = ()) -> None:
        self.app = app
        self.hosts = hosts
        self.api_key = api_key.encode() if api_key else None
        self.max_header_bytes = max_header_bytes
        self.origins = frozenset(parse_origin(o) for o in origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check the request; pass it on or answer with the refusal."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = scope["headers"]
        allowed = self._allowed_origin(headers)
        if allowed is not None:
            send = _with_cors(send, allowed)
        refusal = self.refusal(scope["method"], scope["path"], headers)
        if refusal is None and allowed is not None and scope["method"] == "OPTIONS" \
                and header_value(headers, b"access-control-request-method") is not None:
            await self._preflight(send, headers)
            return
        if refusal is not None:
            extra = [("WWW-Authenticate", "Bearer")] if refusal.status == 401 else []
            await error_response(scope["path"], refusal, extra)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _allowed_origin(self, headers: Iterable[tuple[bytes, bytes]]) -> str | None:
        """The request's ``Origin`` when it is one the server allows across sites."""
        if not self.origins:
            return None
        origin = header_value(headers, b"origin")
        if origin is None:
            return None
        try:
            normal = parse_origin(origin)
        except ValueError:
            return None
        return origin if normal in self.origins else None

    async def _preflight(self, send: Send, headers: Iterable[tuple[bytes, bytes]]) -> None:
        """``204`` with what the browser may send: the methods, the headers it asked for."""
        asked = (header_value(headers, b"access-control-request-headers") or "").strip()
        answer = [(b"access-control-allow-methods", _CORS_METHODS.encode()),
                  (b"access-control-max-age", _CORS_MAX_AGE.encode()),
                  (b"content-length", b"0")]
        if asked and _TOKEN_LIST.fullmatch(asked):
            answer.append((b"access-control-allow-headers", asked.encode("latin-1")))
        await send({"type": "http.response.start", "status": 204, "headers": answer})
        await send({"type": "http.response.body", "body": b""})

    def refusal(self, method: str, path: str,
                headers: Iterable[tuple[bytes, bytes]]) -> RequestError | None:
        """Why this request is refused, or ``None`` when it may go on (a CORS preflight
        from an allowed origin is never asked for the API key: browsers send none)."""
        headers = list(headers)
        if self.max_header_bytes is not None and \
                sum(len(k) + len(v) + 4 for k, v in headers) > self.max_header_bytes:
            return RequestError(431, f"the request headers are larger than "
                                     f"{self.max_header_bytes} bytes", code="headers_too_large")
        host = header_value(headers, b"host") or ""
        if self.hosts is not None and not self.hosts.allows(host):
            return RequestError(403, f"host {host!r} is not allowed", code="host_not_allowed")
        allowed = self._allowed_origin(headers)
        if method not in ("GET", "HEAD", "OPTIONS") and allowed is None:
            origin = header_value(headers, b"origin")
            if origin is not None and urlsplit(origin).netloc.lower() != host.strip().lower():
                return RequestError(403, f"cross-origin request from {origin!r} refused",
                                    code="cross_origin")
        preflight = method == "OPTIONS" and allowed is not None and \
            header_value(headers, b"access-control-request-method") is not None
        if self.api_key is not None and not preflight and (
                path in ("/v1", "/metrics") or path.startswith("/v1/")) \
                and not self._key_given(headers):
            return RequestError(401, "this server needs an API key: send "
                                     "'Authorization: Bearer <key>' (or 'x-api-key: <key>')",
                                code="invalid_api_key")
        return None

    def _key_given(self, headers: Iterable[tuple[bytes, bytes]]) -> bool:
        """Whether the request carries the key: ``Authorization: Bearer`` (OpenAI's
        clients) or ``x-api-key`` (Anthropic's)."""
        assert self.api_key is not None
        headers = list(headers)
        scheme, _, token = (header_value(headers, b"authorization") or "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode("latin-1"),
                                                              self.api_key):
            return True
        other = header_value(headers, b"x-api-key")
        return other is not None and hmac.compare_digest(other.strip().encode("latin-1"),
                                                         self.api_key)


def _with_cors(send: Send, origin: str) -> Send:
    """``send`` with the CORS headers of an allowed ``origin`` on the response start."""
    cors = [(b"access-control-allow-origin", origin.encode("latin-1")), (b"vary", b"Origin"),
            (b"access-control-expose-headers", _CORS_EXPOSED.encode())]

    async def sending(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *cors]}
        await send(message)

    return sending
