"""Every string of a JSON-shaped value changed by one function, at any depth.

Two parts rewrite the strings of values from outside: text is made valid
(:mod:`toolwire.vocabulary.valid_text`) and a prompt's strings are shielded from
writing control tokens (:mod:`toolwire.backends.prompt_pieces`). Both want the
same walk: keys and strings of dicts, lists and tuples, the value given never
modified, a container copied only where something in it changed (the usual case
is no change at all, and the value itself comes back), and no recursion, since a
call's arguments can nest thousands of levels deep.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["map_strings"]


def map_strings(value: Any, change: Callable[[str], str]) -> Any:
    """``value`` with ``change`` applied to each string and string key in it.

    Each container is looked at once (one used in several places is changed once
    and shared again); what ``change`` returns as the same object counts as unchanged.

    :raises ValueError: a container holds itself (no JSON value does).
    """
    if isinstance(value, str):
        return change(value)
    if not isinstance(value, Mapping | list | tuple):
        return value
    done: dict[int, Any] = {}
    started: set[int] = set()
    kept: list[Any] = []  # ids stay valid while their objects live
    stack: list[tuple[Any, bool]] = [(value, False)]
    while stack:
        item, children_done = stack.pop()
        if id(item) in done:
            continue
        if children_done:
            done[id(item)] = _changed_container(item, done, change)
            continue
        if id(item) in started:
            raise ValueError("a value holds itself")
        started.add(id(item))
        kept.append(item)
        stack.append((item, True))
        children = item.values() if isinstance(item, Mapping) else item
        stack.extend((child, False) for child in children
                     if isinstance(child, Mapping | list | tuple) and id(child) not in done)
    return done[id(value)]


def _changed_container(item: Any, done: Mapping[int, Any], change: Callable[[str], str]) -> Any:
    """One container with ``change`` applied, its inner containers already in ``done``."""

    def inner(child: Any) -> Any:
        if isinstance(child, str):
            return change(child)
        if isinstance(child, Mapping | list | tuple):
            return done[id(child)]
        return child

    if isinstance(item, Mapping):
        changed = False
        out: dict[Any, Any] = {}
        for key, child in item.items():
            new_key, new_child = inner(key), inner(child)
            changed = changed or new_key is not key or new_child is not child
            out[new_key] = new_child
        return out if changed else item
    items = [inner(child) for child in item]
    if all(new is old for new, old in zip(items, item, strict=True)):
        return item
    return items if isinstance(item, list) else tuple(items)
