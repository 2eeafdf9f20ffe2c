"""Every Jinja filter a template can use, each bounded by the render's budget.

The rule is :mod:`toolwire.templates.render_budget`'s, and this module holds it
for filters: every filter of Jinja's default set is either

* **replaced** by a bounded version (those that can build far more than their
  input: ``center``, ``indent``, ``format``, ``replace``, ``join``, ``pprint``,
  ``string``, ``list``, ``batch``, ``slice``, ``sum``; ``tojson`` is
  :mod:`~toolwire.templates.chat_template`'s own), each checking what it would
  build before it builds it; and the three templates use most (``trim``,
  ``upper``, ``lower``), written out for speed;
* **accounted**: the filters that build a new string of at most a few times
  their input's size (``title``, ``escape``, ``wordwrap``...). Their input is
  held to the value bound before it is turned into text (``str()`` of a
  container builds its whole text), the ones whose growth depends on their
  arguments or their input's characters (``escape``, ``forceescape``,
  ``urlencode``, ``wordwrap``, ``urlize``) are checked against what they would
  build first, and every result is counted after;
* or **passed through**, in :data:`PASSED_THROUGH`: filters that return a part
  of their input, its items rearranged, a number, or a lazy iterator whose
  items are counted where they are read (``first``, ``length``, ``dictsort``,
  ``map``, ``select``...).

:func:`guarded_filters` gives the first two groups; a test holds every filter of
both environments to one of the three.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Final

from jinja2 import filters as jinja_filters
from jinja2 import pass_environment, pass_eval_context
from jinja2.exceptions import FilterArgumentError
from jinja2.filters import FILTERS as DEFAULT_FILTERS
from jinja2.utils import _PassArg

from .bounded_ops import (
    account_value,
    check_percent_format,
    check_text,
    joined_size,
    replacement_size,
)
from .container_growth import collect, items_of
from .render_budget import UNCOUNTED_SIZE, RenderBudget, current_budget, text_size

__all__ = ["ACCOUNTED", "PASSED_THROUGH", "REPLACED", "guarded_filters"]


# ---------------------------------------------------------------------------
# Replaced: filters that can build far more than their input.


def _filter_center(value: Any, width: int = 80) -> str:
    text = _as_text(value, "center")
    if isinstance(width, int):
        current_budget().build(max(width, len(text)), "the center filter")
    return jinja_filters.do_center(text, width)


def _filter_indent(s: Any, width: int | str = 4, first: bool = False,
                   blank: bool = False) -> str:
    text = _as_text(s, "indent")
    step = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
    current_budget().build(len(text) + (text.count("\n") + 1) * max(step, 0),
                           "the indent filter")
    return jinja_filters.do_indent(text, width, first, blank)


def _filter_format(value: Any, *args: Any, **kwargs: Any) -> str:
    if args and kwargs:
        raise FilterArgumentError(
            "can't handle positional and keyword arguments at the same time")
    text = _as_text(value, "format")
    check_percent_format(current_budget(), text, kwargs or args)
    return jinja_filters.do_format(text, *args, **kwargs)


@pass_eval_context
def _filter_replace(eval_ctx: Any, s: Any, old: Any, new: Any, count: int | None = None) -> str:
    text = _as_text(s, "replace")
    size = replacement_size(text, str(old), str(new), -1 if count is None else count)
    if size:
        current_budget().build(size, "the replace filter")
    return jinja_filters.do_replace(eval_ctx, s, old, new, count)


@pass_eval_context
def _filter_join(eval_ctx: Any, value: Any, d: str = "", attribute: Any = None) -> str:
    budget = current_budget()
    items = value if isinstance(value, list | tuple) else collect(budget, value,
                                                                  "the join filter")
    budget.build(joined_size(items, str(d), budget.limits.max_value_size), "the join filter")
    return jinja_filters.sync_do_join(eval_ctx, items, d, attribute)


def _filter_pprint(value: Any) -> str:
    budget = current_budget()
    budget.build(2 * text_size(value, budget.limits.max_value_size), "the pprint filter")
    return jinja_filters.do_pprint(value)


def _filter_string(value: Any) -> str:
    return value if type(value) is str else _as_text(value, "string")


def _filter_list(value: Any) -> list[Any]:
    budget = current_budget()
    items, added = items_of(budget, value, "the list filter")
    if added + 2 > UNCOUNTED_SIZE:
        budget.build(added + 2, "the list filter")
    copied = list(items)
    budget.remember(copied, added + 2)
    return copied


def _filter_batch(value: Any, linecount: int, fill_with: Any = None) -> Any:
    if fill_with is not None and isinstance(linecount, int):
        current_budget().build(linecount, "the batch filter")
    return jinja_filters.do_batch(value, linecount, fill_with)


def _filter_slice(value: Any, slices: int, fill_with: Any = None) -> Any:
    if isinstance(slices, int):  # the filter loops once per slice
        current_budget().build(slices, "the slice filter")
    return jinja_filters.sync_do_slice(value, slices, fill_with)


@pass_environment
def _filter_sum(environment: Any, iterable: Any, attribute: Any = None, start: Any = 0) -> Any:
    if type(start) not in (list, tuple):
        return jinja_filters.sync_do_sum(environment, iterable, attribute, start)
    if attribute is not None:
        iterable = map(jinja_filters.make_attrgetter(environment, attribute), iterable)
    items = collect(current_budget(), iterable, "the sum filter")
    if not all(type(item) is type(start) for item in items):
        return sum(items, start)  # Python's own TypeError
    # In linear time, where sum() would copy the growing list once per item.
    current_budget().build(len(start) + sum(len(item) for item in items), "the sum filter")
    joined: list[Any] = list(start)
    for item in items:
        joined.extend(item)
    return joined if type(start) is list else tuple(joined)


def _as_text(value: Any, what: str) -> str:
    if type(value) is str:
        return value
    check_text(value, f"the {what} filter")
    return str(value)


def _filter_trim(value: Any, chars: str | None = None) -> str:
    # (the filters templates use most are written out: the generic wrapper would
    # cost more than the filter)
    return value.strip(chars) if type(value) is str else \
        jinja_filters.do_trim(_as_text(value, "trim"), chars)


def _case_mapped(text: str, mapped: str) -> str:
    # a character's case mapping is at most three characters
    if 3 * len(text) > UNCOUNTED_SIZE:
        account_value(current_budget(), mapped, "a case mapping filter")
    return mapped


def _filter_upper(s: Any) -> str:
    text = s if type(s) is str else _as_text(s, "upper")
    return _case_mapped(text, jinja_filters.do_upper(text))


def _filter_lower(s: Any) -> str:
    text = s if type(s) is str else _as_text(s, "lower")
    return _case_mapped(text, jinja_filters.do_lower(text))


REPLACED: Final[dict[str, Callable[..., Any]]] = {
    "center": _filter_center,
    "indent": _filter_indent,
    "format": _filter_format,
    "replace": _filter_replace,
    "join": _filter_join,
    "pprint": _filter_pprint,
    "string": _filter_string,
    "list": _filter_list,
    "batch": _filter_batch,
    "slice": _filter_slice,
    "sum": _filter_sum,
    "trim": _filter_trim,
    "upper": _filter_upper,
    "lower": _filter_lower,
}
"""Filters replaced by bounded versions (``tojson`` and ``from_json`` are the
environments' own)."""


# ---------------------------------------------------------------------------
# Accounted: filters that build at most a few times their input.

_Projection = Callable[[RenderBudget, Any, tuple[Any, ...], dict[str, Any]], int]


def _escaped_size(budget: RenderBudget, text: Any, args: tuple[Any, ...],
                  kwargs: dict[str, Any]) -> int:
    # each of & < > " ' becomes an entity of at most five characters
    rendered = str(text)
    return len(rendered) + 4 * sum(rendered.count(c) for c in "&<>\"'")


def _urlencoded_size(budget: RenderBudget, value: Any, args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> int:
    # every UTF-8 byte may become %XX (a mapping's items are its keys and values)
    return 3 * 4 * text_size(value, budget.limits.max_value_size)


def _wrapped_size(budget: RenderBudget, text: Any, args: tuple[Any, ...],
                  kwargs: dict[str, Any]) -> int:
    rendered = str(text)
    width = args[0] if args else kwargs.get("width", 79)
    wrapstring = args[3] if len(args) > 3 else kwargs.get("wrapstring")
    separator = len(wrapstring) if isinstance(wrapstring, str) else 1
    # Greedy wrapping: two lines in a row hold more than `width` characters.
    lines = len(rendered) if not isinstance(width, int) or width < 1 else \
        2 * len(rendered) // width + 2
    return len(rendered) + min(lines, len(rendered) + 1) * separator


def _urlized_size(budget: RenderBudget, text: Any, args: tuple[Any, ...],
                  kwargs: dict[str, Any]) -> int:
    # Each link (a word of at least four characters and a space) is written twice
    # in an <a> tag with its attributes (and a scheme or mailto: before it).
    rendered = str(text)
    extra = sum(len(v) for v in (*args[2:], *kwargs.values()) if isinstance(v, str))
    return 3 * len(rendered) + (len(rendered) // 5 + 1) * (64 + extra)


_PROJECTIONS: Final[dict[str, _Projection]] = {
    "escape": _escaped_size,
    "e": _escaped_size,
    "forceescape": _escaped_size,
    "urlencode": _urlencoded_size,
    "wordwrap": _wrapped_size,
    "urlize": _urlized_size,
}

ACCOUNTED: Final = frozenset({
    "capitalize", "e", "escape", "forceescape", "safe", "striptags", "title", "truncate",
    "urlencode", "urlize", "wordcount", "wordwrap", "xmlattr",
})
"""Filters wrapped in the accounting (see the module doc)."""

_TEXT_INPUT: Final = frozenset({
    "capitalize", "e", "escape", "forceescape", "safe", "striptags", "title", "truncate",
    "urlize", "wordcount", "wordwrap",
})
"""Accounted filters that turn their input into text first."""

PASSED_THROUGH: Final = frozenset({
    "abs", "attr", "count", "d", "default", "dictsort", "filesizeformat", "first", "float",
    "groupby", "int", "items", "last", "length", "map", "max", "min", "random", "reject",
    "rejectattr", "reverse", "round", "select", "selectattr", "sort", "unique",
})
"""Filters that return a part of their input, its items in another order or grouped
(as many as it has), a number or a short text, or a lazy iterator (whose items are
counted where they are read: a loop, ``list``, ``join``)."""


def _accounted(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    projection = _PROJECTIONS.get(name)
    text_input = name in _TEXT_INPUT
    # a filter that is passed the environment or context first has its value second
    value_at = 0 if _PassArg.from_obj(function) is None else 1
    what = f"the {name} filter"

    @functools.wraps(function)
    def accounted(*args: Any, **kwargs: Any) -> Any:
        budget = current_budget()
        if len(args) > value_at:
            value = args[value_at]
            if text_input and type(value) is not str:
                check_text(value, what)
            if projection is not None:
                size = projection(budget, value, args[value_at + 1:], kwargs)
                if size > UNCOUNTED_SIZE:
                    budget.build(size, what)
        result = function(*args, **kwargs)
        kind = type(result)
        if kind is int or kind is bool or result is None:
            return result
        if kind is str and len(result) <= UNCOUNTED_SIZE:
            return result
        if isinstance(result, str | list | tuple | dict):
            account_value(budget, result, what)
        return result

    return accounted


def guarded_filters() -> dict[str, Callable[..., Any]]:
    """Jinja's filters as templates get them: replaced, accounted (the module doc)."""
    filters = dict(REPLACED)
    for name in ACCOUNTED:
        filters[name] = _accounted(name, DEFAULT_FILTERS[name])
    return filters
