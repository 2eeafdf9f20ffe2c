"""Containers a template grows in place, each growth accounted before it happens.

A lenient template may call the methods that grow a list, dict or set
(``append``, ``extend``, ``insert``, ``update``, ``setdefault``, ``add``...).
One growth is small, but repeated they reach gigabytes while every value the
template builds stays small: ``l.extend(l)`` doubles ``l``, two lists extending
each other grow as Fibonacci numbers, and no new value is ever built.

So every method of a list, dict, set or deque goes through
:func:`guard_mutation`, the one accounting wrapper. For a method that grows
the container it computes, before the call, how many items the container would
then hold (a dict's or set's new keys only) and about how much memory the
growth takes (a list's item is a pointer, a dict's key a table entry; the items
themselves exist already, or were counted where they were built), and asks the
render's budget to :meth:`~toolwire.templates.render_budget.RenderBudget.grow`
it: a container that would then print as more than ``max_value_size``
characters (at least two for each item, four for each key: the items' own text
is not walked, so the account costs no more than the method), or a growth that
would take the process past ``max_memory_bytes``, stops the render before the
container grows. An iterable that is not a container yet (a generator from
``map``, ``select``...) is read into a list first, with its items counted as
they come, so nothing is consumed uncounted. Any method that changes the
container makes the budget forget the size it remembered of it
(:meth:`~toolwire.templates.render_budget.RenderBudget.measure` measures it
afresh when an operator next asks).

A namespace needs no such account: ``{% set ns.attr = value %}`` adds or
replaces one attribute whose name is written in the template, so a namespace
holds at most as many attributes as the template names, each a value accounted
where it was built; what a namespace prints as is measured where it is printed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Final

from .render_budget import UNCOUNTED_SIZE, RenderBudget

__all__ = ["MUTABLE_KINDS", "READING_METHODS", "collect", "guard_mutation", "items_of"]

_ITEM_SIZE: Final = 2
"""The least one more list item prints as: its separator (``text_size``'s count)."""
_KEY_SIZE: Final = 4
"""The least one more dict key prints as: ``": "`` and its separator."""
_ITEM_BYTES: Final = 16
"""Memory one more list item takes: a pointer, with the list's spare room and the
copy a resize makes."""
_KEY_BYTES: Final = 64
"""Memory one more dict or set key takes: its entry, hash and spare table room."""


def collect(budget: RenderBudget, iterable: Any, what: str) -> list[Any]:
    """``list(iterable)`` as a new value: each item counted as it comes, by what it
    prints as; past ``max_value_size`` the render stops before it reads more."""
    limit = budget.limits.max_value_size
    items: list[Any] = []
    size = 2
    for item in iterable:
        size += 2 + (len(item) if type(item) is str else budget.measure(item))
        if size > limit:
            budget.build(size, what)  # raises
        items.append(item)
    if size > UNCOUNTED_SIZE:
        budget.build(size, what)
    budget.remember(items, size)
    return items


def items_of(budget: RenderBudget, iterable: Any, what: str) -> tuple[Any, int]:
    """``(items, size)``: an iterable whose items are about to be copied, as a
    container (read with :func:`collect` when it is not one), and what its items
    print as (a list's brackets left out)."""
    kind = type(iterable)
    if kind is list or kind is tuple:
        return iterable, budget.measure(iterable) - 2
    if kind is str:
        return iterable, 3 * len(iterable)  # each character an item
    if isinstance(iterable, Mapping):  # its keys
        return iterable, sum(2 + budget.measure(key) for key in iterable)
    if kind is range:
        widest = max(len(str(iterable.start)), len(str(iterable.stop)))
        return iterable, len(iterable) * (3 + widest)
    items = collect(budget, iterable, what)
    return items, budget.measure(items) - 2


def _read(budget: RenderBudget, iterable: Any, room: int, what: str) -> Any:
    """An iterable a method will add the items of, as a sized container: a generator
    is read into a list, at most ``room`` items (more stop the render)."""
    if isinstance(iterable, list | tuple | str | range | Mapping | set | frozenset | deque):
        return iterable
    items: list[Any] = []
    for item in iterable:
        items.append(item)
        if len(items) > room:
            budget.grow(budget.limits.max_value_size + 1, 0, what)  # raises: too many
    return items


# -- one function per method that grows a container: (budget, owner, args, kwargs, what)
# -> the arguments to call it with

_Guard = Callable[[RenderBudget, Any, tuple[Any, ...], dict[str, Any], str], tuple[Any, ...]]


def _one_more(budget: RenderBudget, owner: Any, args: tuple[Any, ...],
              kwargs: dict[str, Any], what: str) -> tuple[Any, ...]:
    """``append``, ``insert``, ``appendleft``: one item more."""
    budget.grow(_ITEM_SIZE * (len(owner) + 1), _ITEM_BYTES, what)
    return args


def _extend(budget: RenderBudget, owner: Any, args: tuple[Any, ...],
            kwargs: dict[str, Any], what: str) -> tuple[Any, ...]:
    if len(args) != 1 or kwargs:
        return args  # Python's TypeError
    room = budget.limits.max_value_size // _ITEM_SIZE - len(owner)
    items = _read(budget, args[0], room, what)
    budget.grow(_ITEM_SIZE * (len(owner) + len(items)), _ITEM_BYTES * len(items), what)
    return (items,)


def _new_keys(budget: RenderBudget, owner: Any, keys: Any, what: str) -> None:
    added = sum(1 for key in keys if key not in owner)
    least = _KEY_SIZE if isinstance(owner, Mapping) else _ITEM_SIZE
    budget.grow(least * (len(owner) + added), _KEY_BYTES * added, what)


def _set_update(budget: RenderBudget, owner: Any, args: tuple[Any, ...],
                kwargs: dict[str, Any], what: str) -> tuple[Any, ...]:
    room = budget.limits.max_value_size // _ITEM_SIZE
    read = tuple(_read(budget, iterable, room, what) for iterable in args)
    _new_keys(budget, owner, (key for iterable in read for key in iterable), what)
    return read


def _set_add(budget: RenderBudget, owner: Any, args: tuple[Any, ...],
             kwargs: dict[str, Any], what: str) -> tuple[Any, ...]:
    if len(args) == 1:
        _new_keys(budget, owner, args, what)
    return args


def _dict_update(budget: RenderBudget, owner: Any, args: tuple[Any, ...],
                 kwargs: dict[str, Any], what: str) -> tuple[Any, ...]:
    if len(args) > 1:
        return args  # Python's TypeError
    keys: list[Any] = list(kwargs)
    if args:
        source = args[0]
        if not isinstance(source, Mapping):
            source = _read(budget, source, budget.limits.max_value_size // _KEY_SIZE, what)
            args = (source,)
        keys.extend(source.keys() if isinstance(source, Mapping) else (
            pair[0] for pair in source if isinstance(pair, list | tuple) and pair))
    _new_keys(budget, owner, keys, what)
    return args


def _setdefault(budget: RenderBudget, owner: Any, args: tuple[Any, ...],
                kwargs: dict[str, Any], what: str) -> tuple[Any, ...]:
    if args:
        _new_keys(budget, owner, args[:1], what)
    return args


_GROWING: Final[dict[type, dict[str, _Guard]]] = {
    list: {"append": _one_more, "insert": _one_more, "extend": _extend},
    deque: {"append": _one_more, "appendleft": _one_more, "insert": _one_more,
            "extend": _extend, "extendleft": _extend},
    dict: {"update": _dict_update, "setdefault": _setdefault},
    set: {"add": _set_add, "update": _set_update, "symmetric_difference_update": _set_update},
}
MUTABLE_KINDS: Final = tuple(_GROWING)
"""The container types whose methods :func:`guard_mutation` accounts."""

READING_METHODS: Final = frozenset({"copy", "count", "index", "get", "items", "keys", "values",
                             "difference", "intersection", "union", "symmetric_difference",
                             "isdisjoint", "issubset", "issuperset", "fromkeys"})
"""Container methods that leave the container as it is."""


def guard_mutation(budget: RenderBudget, owner: Any, name: str, args: tuple[Any, ...],
                   kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """Account a call of method ``name`` of the container ``owner`` before it runs;
    returns the arguments to call it with (a generator read into a list).

    A method that grows the container is refused when the container would then
    be over the bounds (see the module doc); every method but those that only
    read it makes the budget forget the container's remembered size.
    """
    if name in READING_METHODS:
        return args
    budget.forget(owner)
    for kind in MUTABLE_KINDS:
        if isinstance(owner, kind):
            guard = _GROWING[kind].get(name)
            if guard is None:
                return args
            return guard(budget, owner, args, kwargs, f"{type(owner).__name__}.{name}")
    return args
