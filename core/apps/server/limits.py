"""The server's bounds: how much one request may ask for and how long a client may take.

Every HTTP client is untrusted, so each of these has a default far above what a
real conversation needs and below what would tie the server up. ``toolwire
serve`` sets them from its options (``docs/openai-server.md`` lists each with the
option that changes it).
"""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["ServerLimits"]


def _positive(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value <= 0:
        raise ValueError(f"{attribute.name} must be positive, not {value!r}")


@attrs.frozen
class ServerLimits:
    """The bounds one server applies to every request and connection.

    :ivar max_body_bytes: the largest request body (``413`` above it).
    :ivar max_messages: the most messages one request may carry (``413``).
    :ivar max_chars: the most characters of message text (contents, reasoning,
        call arguments) one request may carry (``413``).
    :ivar max_json_depth: the deepest nesting of arrays and objects in a body
        (``400``).
    :ivar max_tools: the most tools one chat-completions request may offer (``400``).
    :ivar max_waiting: requests that may wait for the model while it is busy;
        one more is refused with ``429``.
    :ivar body_timeout: seconds a client has to send the whole body (``408``).
    :ivar header_timeout: seconds a client has to send a request's headers once
        the connection is open (or its first byte has come); then it is closed.
    :ivar keep_alive_timeout: seconds an idle keep-alive connection stays open.
    :ivar max_connections: requests being answered at once (their request has
        fully arrived); a request arriving past it gets ``503``. Connections that
        wait on their client do not count (the next two bound them).
    :ivar max_idle_connections: connections waiting on their client (idle, a
        request head or body half-sent, or closing after an answer), all clients
        together; past it the ones that have waited longest are closed.
    :ivar max_idle_per_client: such connections from one client address (an
        IPv6 ``/64``); past it that client's longest-waiting ones are closed.
    :ivar send_timeout: seconds a client may leave unread what the server sent
        (while more than 64 KiB waits to be sent); then the connection is cut.
    :ivar linger_timeout: seconds a connection closed after an answer, while
        its client may still be sending, keeps reading and discarding (so the
        answer is not lost to a reset) before it is cut.
    :ivar max_header_bytes: the largest request head (request line and headers);
        a larger one gets ``400``.
    """

    max_body_bytes: int = attrs.field(default=8 * 1024 * 1024, validator=_positive)
    max_messages: int = attrs.field(default=2_000, validator=_positive)
    max_chars: int = attrs.field(default=2_000_000, validator=_positive)
    max_json_depth: int = attrs.field(default=100, validator=_positive)
    max_tools: int = attrs.field(default=128, validator=_positive)
    max_waiting: int = attrs.field(default=16, validator=_positive)
    body_timeout: float = attrs.field(default=30.0, validator=_positive)
    header_timeout: float = attrs.field(default=10.0, validator=_positive)
    keep_alive_timeout: float = attrs.field(default=5.0, validator=_positive)
    max_connections: int = attrs.field(default=64, validator=_positive)
    max_idle_connections: int = attrs.field(default=256, validator=_positive)
    max_idle_per_client: int = attrs.field(default=32, validator=_positive)
    send_timeout: float = attrs.field(default=30.0, validator=_positive)
    linger_timeout: float = attrs.field(default=5.0, validator=_positive)
    max_header_bytes: int = attrs.field(default=16 * 1024, validator=_positive)
