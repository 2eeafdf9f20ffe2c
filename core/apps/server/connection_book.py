"""Which connections wait on their client, which are being answered, and which to close.

A connection *waits on its client* while it is idle (open, no request in
progress), while its client has sent part of a request head or body, and while
it is closing after an answer. Such a connection costs the server a socket and
nothing the client must earn, so each client may keep only so many waiting, and
all clients together only so many: past a bound the connections that have waited
longest are closed (a client's own first, so one client's flood closes its own
connections, not another's), passing over those the caller spares (the protocol
spares a connection whose bytes have come but are not read yet). A connection
whose request has fully arrived is *being answered*; those are bounded separately
(a new request past that bound is refused with ``503``), and a connection that
waits on its client never counts against it, so idle and half-sent connections
cannot lock anyone out.

The book only keeps the accounts; the HTTP protocol tells it each connection's
state and closes what :meth:`ConnectionBook.evictions` names.
"""

from __future__ import annotations

import ipaddress
import itertools
from collections.abc import Callable, Hashable, Iterable
from typing import Generic, TypeVar

__all__ = ["ConnectionBook", "client_key"]

C = TypeVar("C", bound=Hashable)

_IPV6_CLIENT_PREFIX = 64


def _oldest(conns: Iterable[C], count: int, spare: Callable[[C], bool]) -> list[C]:
    """The first ``count`` of ``conns`` (oldest first) that are not spared."""
    if count <= 0:
        return []
    return list(itertools.islice((c for c in conns if not spare(c)), count))


def client_key(host: str | None) -> str:
    """The client a peer address belongs to, for the per-client bound.

    An IPv4 address is one client; an IPv6 address counts with its ``/64``
    network (one host commonly holds a whole ``/64``, so single addresses would
    be free for the asking); an IPv4-mapped IPv6 address is its IPv4 address.
    Anything else (a Unix socket, no address) is the client ``""``.
    """
    if not host:
        return ""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, _IPV6_CLIENT_PREFIX), strict=False))
    return str(address)


class ConnectionBook(Generic[C]):
    """The accounts of one server's connections.

    :param max_running: requests being answered at once; one more is refused.
    :param max_idle: connections waiting on their client, all clients together.
    :param max_idle_per_client: connections waiting on their client, per client.
    """

    def __init__(self, *, max_running: int, max_idle: int, max_idle_per_client: int) -> None:
        self.max_running = max_running
        self.max_idle = max_idle
        self.max_idle_per_client = max_idle_per_client
        # dicts keep insertion order: the first entry has waited longest
        self._waiting: dict[C, str] = {}
        self._by_client: dict[str, dict[C, None]] = {}
        self._crowded: set[str] = set()  # clients over their bound
        self._running: set[C] = set()

    @property
    def waiting(self) -> int:
        """How many connections wait on their client."""
        return len(self._waiting)

    @property
    def running(self) -> int:
        """How many connections are being answered."""
        return len(self._running)

    def wait(self, conn: C, client: str) -> None:
        """``conn`` waits on ``client``; it keeps its place if it already did."""
        if conn in self._waiting:
            return
        self._running.discard(conn)
        self._waiting[conn] = client
        conns = self._by_client.setdefault(client, {})
        conns[conn] = None
        if len(conns) > self.max_idle_per_client:
            self._crowded.add(client)

    def run(self, conn: C) -> None:
        """``conn`` has a request that has fully arrived and is being answered."""
        self._drop_waiting(conn)
        self._running.add(conn)

    def forget(self, conn: C) -> None:
        """``conn`` is closed."""
        self._drop_waiting(conn)
        self._running.discard(conn)

    def admits(self, conn: C) -> bool:
        """Whether a new request on ``conn`` may be answered: fewer than ``max_running``
        other connections are being answered."""
        return len(self._running) - (conn in self._running) < self.max_running

    def over_bounds(self) -> bool:
        """Whether some client, or all together, keep more waiting connections than allowed."""
        return len(self._waiting) > self.max_idle or bool(self._crowded)

    def evictions(self, spare: Callable[[C], bool] = lambda conn: False) -> list[C]:
        """The connections to close to get back within the bounds, which the book forgets.

        First each client over its bound loses the connections it has kept waiting
        longest; then, while all together are still over theirs, the connections
        that have waited longest of all.

        :param spare: connections not to close this time (those with bytes come
            and not yet read: they are about to move on); the bounds may then
            stay passed until the next call.
        """
        chosen: list[C] = []
        for client in list(self._crowded):
            conns = self._by_client[client]
            chosen.extend(_oldest(conns, len(conns) - self.max_idle_per_client, spare))
        for conn in chosen:
            self._drop_waiting(conn)
        oldest = _oldest(self._waiting, len(self._waiting) - self.max_idle, spare)
        for conn in oldest:
            self._drop_waiting(conn)
        return chosen + oldest

    def _drop_waiting(self, conn: C) -> None:
        client = self._waiting.pop(conn, None)
        if client is None:
            return
        conns = self._by_client[client]
        del conns[conn]
        if len(conns) <= self.max_idle_per_client:
            self._crowded.discard(client)
        if not conns:
            del self._by_client[client]
