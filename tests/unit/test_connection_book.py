"""The connection book: who waits on their client, who is being answered, whom to close.

Any sequence of state changes, then the evictions: the bounds hold again, only
waiting connections are closed, a client loses its own longest-waiting ones first,
and a client within its bound loses none unless all together are over theirs.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from toolwire.apps.server.connection_book import ConnectionBook, client_key

CLIENTS = ("10.0.0.1", "10.0.0.2", "10.0.0.3")

operations = st.lists(st.tuples(st.sampled_from(["wait", "run", "forget"]),
                                st.integers(0, 20), st.sampled_from(CLIENTS)),
                      min_size=10, max_size=120)


@given(operations, st.integers(1, 10), st.integers(1, 4))
def test_evictions_restore_the_bounds_closing_the_longest_waiting_first(
        ops: list[tuple[str, int, str]], max_idle: int, per_client: int) -> None:
    book: ConnectionBook[int] = ConnectionBook(max_running=4, max_idle=max_idle,
                                               max_idle_per_client=per_client)
    client_of: dict[int, str] = {}
    entered: dict[int, int] = {}  # when each waiting connection began to wait
    running: set[int] = set()
    for step, (op, conn, client) in enumerate(ops):
        client = client_of.setdefault(conn, client)  # a connection keeps its client
        if op == "wait":
            book.wait(conn, client)
            entered.setdefault(conn, step)
            running.discard(conn)
        elif op == "run":
            book.run(conn)
            entered.pop(conn, None)
            running.add(conn)
        else:
            book.forget(conn)
            entered.pop(conn, None)
            running.discard(conn)
    assert book.waiting == len(entered) and book.running == len(running)
    per = {c: [k for k in entered if client_of[k] == c] for c in CLIENTS}
    within_own = sum(min(len(v), per_client) for v in per.values())
    assert book.over_bounds() == (len(entered) > max_idle
                                  or any(len(v) > per_client for v in per.values()))

    evicted = book.evictions()

    assert not book.over_bounds()
    assert set(evicted) <= set(entered) and not set(evicted) & running
    assert book.waiting == len(entered) - len(evicted)
    survivors = set(entered) - set(evicted)
    for gone in evicted:
        for kept in survivors:
            if client_of[kept] == client_of[gone]:
                assert entered[gone] < entered[kept]
    if within_own <= max_idle:
        for conns in per.values():
            if len(conns) <= per_client:
                assert not set(conns) & set(evicted)
    assert book.evictions() == []


def test_a_connection_that_keeps_waiting_keeps_its_place() -> None:
    book: ConnectionBook[str] = ConnectionBook(max_running=1, max_idle=2,
                                               max_idle_per_client=5)
    for conn in ("first", "second", "third"):
        book.wait(conn, "a")
    book.wait("first", "a")  # still waiting (a trickled byte): still the oldest
    assert book.evictions() == ["first"]
    book.run("second")
    book.wait("second", "a")  # answered, idle again: now the newest
    book.wait("fourth", "b")
    assert book.evictions() == ["third"]


def test_a_clients_flood_closes_its_own_oldest_and_spares_the_others() -> None:
    book: ConnectionBook[str] = ConnectionBook(max_running=1, max_idle=6,
                                               max_idle_per_client=3)
    book.wait("b1", "b")
    for n in range(6):
        book.wait(f"a{n}", "a")
    book.wait("b2", "b")
    assert book.evictions() == ["a0", "a1", "a2"]
    assert book.waiting == 5


def test_a_spared_connection_is_passed_over_for_the_next_oldest() -> None:
    book: ConnectionBook[str] = ConnectionBook(max_running=1, max_idle=10,
                                               max_idle_per_client=2)
    for conn in ("a0", "a1", "a2", "a3"):
        book.wait(conn, "a")
    assert book.evictions(spare=lambda conn: conn == "a0") == ["a1", "a2"]
    assert book.evictions(spare=lambda conn: True) == []
    assert not book.over_bounds()


def test_admission_counts_the_requests_being_answered_and_not_the_waiting() -> None:
    book: ConnectionBook[int] = ConnectionBook(max_running=2, max_idle=100,
                                               max_idle_per_client=100)
    for conn in range(50):
        book.wait(conn, "a")
    assert book.admits(99)
    book.run(1)
    book.run(2)
    assert not book.admits(99) and not book.admits(3)
    assert book.admits(1)  # a connection being answered does not count against itself
    book.forget(2)
    assert book.admits(99)


def test_a_client_is_an_ipv4_address_or_an_ipv6_slash_64() -> None:
    assert client_key("192.0.2.7") == "192.0.2.7"
    assert client_key("2001:db8:1:2:aaaa::1") == client_key("2001:db8:1:2:ffff::9")
    assert client_key("2001:db8:1:2::1") == "2001:db8:1:2::/64"
    assert client_key("2001:db8:1:3::1") != client_key("2001:db8:1:2::1")
    assert client_key("::ffff:192.0.2.7") == "192.0.2.7"
    assert client_key("fe80::1%eth0") == "fe80::/64"
    assert client_key(None) == "" and client_key("") == ""
