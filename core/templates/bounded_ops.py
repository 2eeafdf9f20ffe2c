"""The template operations that can cost much, each checked against the render's budget.

The rule is :mod:`toolwire.templates.render_budget`'s: an operation that can
build a value larger than its operands is checked (and charged) before it
builds it; calls and loop iterations are steps against the deadline. This
module is the list of such operations, in four groups:

* operators and syntax: ``+`` (strings, lists), ``*`` (repetition, integer
  products), ``**``, ``%`` (string formatting), the ``~`` concatenation, list,
  tuple and dict literals, and every ``{% for %}`` iterable;
* calls: the string (and bytes, and ``Markup``) methods that pad, replace or
  join (``center``, ``ljust``, ``rjust``, ``zfill``, ``expandtabs``, ``replace``,
  ``join``, ``translate``, ``format``, ``format_map``) are checked before they
  run; every other string method's result, and the new container of a
  container's ``copy``, ``union``, ``fromkeys``..., is counted after it (they
  build at most a few times their operands); the methods that grow a list,
  dict or set in place go through
  :func:`~toolwire.templates.container_growth.guard_mutation`;
* globals: ``lipsum``, ``strftime_now``, ``dict``, and ``tojson``'s
  indentation (a namespace's attributes need no account: see
  :mod:`~toolwire.templates.container_growth`);
* what a template writes: ``{{ value }}`` of a container (measured before it is
  printed), and the text a macro, ``caller()``, block, ``{% set %}`` or
  ``{% filter %}`` block wrote (Jinja's ``concat``).

Filters are :mod:`toolwire.templates.bounded_filters`'; a container grown in
place is :mod:`toolwire.templates.container_growth`'s.

A container counts as what it prints as: a list that holds one long string a
thousand times takes little memory but becomes a huge text when printed, so
repetition, concatenation and literals measure it with
:func:`~toolwire.templates.render_budget.text_size`. Since every value a
template builds is checked this way, turning any value into text (output,
``tojson``, ``str()`` in a filter) stays within a small multiple of the
bounds.

Values below :data:`UNCOUNTED_SIZE` are not counted: building one costs no more
than the step that builds it, and steps are counted.
"""

from __future__ import annotations

import re
import types
from _string import formatter_field_name_split  # type: ignore[import-not-found]
from collections.abc import Callable, Iterable, Iterator, Mapping
from string import Formatter
from typing import Any, Final

from jinja2.utils import generate_lorem_ipsum
from markupsafe import Markup

from .container_growth import MUTABLE_KINDS, READING_METHODS, collect, guard_mutation
from .render_budget import (
    CLOCK_EVERY,
    SMALL,
    UNCOUNTED_SIZE,
    RenderBudget,
    ResourceLimitError,
    current_budget,
    text_size,
)

__all__ = [
    "GUARDED_CALLABLE_TYPES",
    "INTERCEPTED_BINOPS",
    "SIZED_RESULTS",
    "account_result",
    "account_value",
    "check_json",
    "check_percent_format",
    "check_strftime_format",
    "check_text",
    "guard_add",
    "guard_binop",
    "guard_call",
    "guard_concat",
    "guard_join",
    "guard_literal",
    "guard_output",
    "guarded_globals",
    "guarded_iterable",
    "guarded_str_format",
    "joined_size",
    "replacement_size",
]


# ---------------------------------------------------------------------------
# Operators, literals, loops.

_BINOPS: Final[dict[str, Callable[[Any, Any], Any]]] = {
    "*": lambda a, b: a * b,
    "**": lambda a, b: a**b,
    "%": lambda a, b: a % b,
}
INTERCEPTED_BINOPS: Final = frozenset(_BINOPS)
"""The binary operators the sandbox routes through :func:`guard_binop` (``+`` has its
own, faster path: :func:`guard_add`)."""


def guard_add(left: Any, right: Any) -> Any:
    """``left + right``, after checking what it would build."""
    if isinstance(left, _TEXT_TYPES):
        if isinstance(right, _TEXT_TYPES) and len(left) + len(right) > UNCOUNTED_SIZE:
            budget = current_budget()
            budget.build(len(left) + len(right), "'+'")
            # Markup's + escapes its right side: a few times longer at most
            return account_value(budget, left + right,  # type: ignore[operator]  # str + bytes
                                 "'+'")
    elif isinstance(left, list | tuple) and isinstance(right, list | tuple):
        budget = current_budget()
        size = budget.measure(left) + budget.measure(right)
        budget.build(size, "'+'")
        joined = left + right  # type: ignore[operator]  # list + tuple: Python's TypeError
        budget.remember(joined, size)
        return joined
    return left + right


def guard_binop(operator: str, left: Any, right: Any) -> Any:
    """Apply an intercepted operator (``*``, ``**``, ``%``) after checking what it
    would build."""
    budget = current_budget()
    if operator == "*":
        _check_times(budget, left, right)
    elif operator == "**":
        _check_power(budget, left, right)
    elif operator == "%" and isinstance(left, _TEXT_TYPES):
        check_percent_format(budget, left, right)
        return account_value(budget, left % right, "'%' formatting")
    return _BINOPS[operator](left, right)


def _check_times(budget: RenderBudget, left: Any, right: Any) -> None:
    if type(left) is int and type(right) is int:
        bits = left.bit_length() + right.bit_length()
        if bits > budget.limits.max_int_bits:
            raise ResourceLimitError(f"a product of {bits} bits is over the limit of "
                                     f"{budget.limits.max_int_bits}")
        return
    count, sequence = (left, right) if isinstance(left, int) else (right, left)
    if not isinstance(count, int) or not isinstance(sequence, _SEQUENCES) or count <= 0:
        return
    limit = budget.limits.max_value_size
    if count > limit:
        raise ResourceLimitError(f"repeating a value {count} times is over the limit of "
                                 f"{limit}")
    # A list repeated holds its items many times: it prints as all of them.
    size = budget.measure(sequence)
    budget.build(count * size, "'*'")


def _check_power(budget: RenderBudget, left: Any, right: Any) -> None:
    if isinstance(left, int) and isinstance(right, int) and right > 0:
        bits = right * max(abs(left).bit_length() - 1, 0)
        if bits > budget.limits.max_int_bits:
            raise ResourceLimitError(f"{left} ** {right} is too large")


_SEQUENCES: Final = (str, bytes, bytearray, list, tuple)
_PERCENT_SPEC: Final = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d*)(?:\.(\*|\d*))?")
_BYTES_PERCENT_SPEC: Final = re.compile(rb"%(?:\([^)]*\))?[-#0 +]*(\*|\d*)(?:\.(\*|\d*))?")


def check_percent_format(budget: RenderBudget, template: str | bytes | bytearray,
                          arguments: Any) -> None:
    """``'%10s' % x``: the widths and precisions, and the values printed."""
    limit = budget.limits.max_value_size
    size = len(template)
    star = False
    specs = _PERCENT_SPEC.findall(template) if isinstance(template, str) else [
        (width.decode(), precision.decode())
        for width, precision in _BYTES_PERCENT_SPEC.findall(template)]
    for width, precision in specs:
        for number in (width, precision):
            if number == "*":
                star = True
            elif number:
                size += spec_number(number, limit)
    values = arguments.values() if isinstance(arguments, Mapping) else (
        arguments if isinstance(arguments, tuple) else (arguments,))
    for value in values:
        if star and type(value) is int:
            size += abs(value)
        size += text_size(value, limit)
        if size > limit:
            break
    budget.build(size, "'%' formatting")


def spec_number(digits: str, limit: int) -> int:
    # A width of a billion digits must not itself become a huge integer.
    return limit + 1 if len(digits) > len(str(limit)) else int(digits)


def guard_concat(operands: tuple[Any, ...]) -> str:
    """The ``~`` operator: every operand as text, joined, within the value bound."""
    size = 0
    for operand in operands:
        if type(operand) is not str:
            return _concat_any(operands)
        size += len(operand)
    if size > UNCOUNTED_SIZE:
        current_budget().build(size, "'~'")
    return "".join(operands)


def _concat_any(operands: tuple[Any, ...]) -> str:
    budget = current_budget()
    parts: list[str] = []
    size = 0
    for operand in operands:
        if type(operand) is not str:
            if type(operand) not in _SCALARS and operand is not None:
                budget.text(operand, "'~'")  # before str() builds it
            operand = str(operand)
        parts.append(operand)
        size += len(operand)
    budget.build(size, "'~'")
    return "".join(parts)


def guard_join(pieces: Iterable[str]) -> str:
    """Jinja's ``concat``: the text a macro, a ``caller()``, a block, a
    ``{% set %}`` or ``{% filter %}`` block wrote, joined within the value bound
    (it holds each piece once, but the joined text holds it once per time written)."""
    if type(pieces) is list:
        if len(pieces) > 1:
            size = sum(map(len, pieces))
            if size > UNCOUNTED_SIZE:
                current_budget().build(size, "the text of a macro or block")
        return "".join(pieces)
    budget = current_budget()
    limit = budget.limits.max_value_size
    parts = []
    size = 0
    for piece in pieces:
        size += len(piece)
        if size > limit:
            budget.build(size, "the text of a macro or block")  # raises
        parts.append(piece)
    if size > UNCOUNTED_SIZE:
        budget.build(size, "the text of a macro or block")
    return "".join(parts)


def guard_output(value: Any) -> Any:
    """``{{ value }}`` of a value that is not a string: what it prints as stays within
    the bound before ``str()`` builds it."""
    if type(value) not in _SCALARS and value is not None and not isinstance(value, str):
        current_budget().text(value, "printing a value")
    return value


def guard_literal(value: Any) -> Any:
    """A list, tuple or dict literal: what it would print as stays within the bound."""
    size = 0
    for item in value.values() if type(value) is dict else value:
        kind = type(item)
        if kind is str:
            size += len(item)
        elif kind is tuple or kind is list:  # a pair, a short row: measured here too
            for part in item:
                if type(part) is str:
                    size += len(part)
                elif type(part) in _SCALARS or part is None:
                    size += SMALL
                else:
                    size = -1
                    break
            else:
                continue
            break
        elif kind in _SCALARS or item is None:
            size += SMALL
        else:
            size = -1
            break
    if 0 <= size <= UNCOUNTED_SIZE:
        return value
    budget = current_budget()
    size = _contents_size(budget, value.items() if type(value) is dict else value)
    budget.build(size, "a literal")
    budget.remember(value, size)
    return value


_SCALARS: Final = frozenset({int, float, bool})


def _contents_size(budget: RenderBudget, items: Iterable[Any]) -> int:
    """What a container of ``items`` prints as (pairs for a dict's items)."""
    limit = budget.limits.max_value_size
    size = 2
    for item in items:
        if type(item) is tuple and len(item) == 2 and type(item[0]) is str:  # a dict item
            size += 4 + len(item[0]) + budget.measure(item[1])
        else:
            size += 2 + budget.measure(item)
        if size > limit:
            break
    return size


class _SizedLoop:
    """A loop's iterable whose items are counted; keeps ``len`` for ``loop.length``."""

    __slots__ = ("_budget", "_source")

    def __init__(self, source: Any, budget: RenderBudget) -> None:
        self._source = source
        self._budget = budget

    def __len__(self) -> int:
        return len(self._source)

    def __iter__(self) -> Iterator[Any]:
        return _counted(self._source, self._budget)


def _counted(source: Any, budget: RenderBudget) -> Iterator[Any]:
    count = 0
    for item in source:
        count += 1
        if not count % CLOCK_EVERY:  # budget.step() per item, inlined
            budget.steps += CLOCK_EVERY
            if budget.steps >= budget.next_clock:
                budget.checkpoint()
        yield item


def guarded_iterable(source: Any) -> Any:
    """The iterable of a ``{% for %}``: its items are steps of the budget.

    A short loop is charged all its steps when it starts (and runs unwrapped);
    a long one, or one of unknown length, counts its items as they come.
    """
    budget = current_budget()
    if type(source) in _SHORT_LOOP_TYPES and len(source) <= _SHORT_LOOP:
        budget.steps += len(source) + 1
        if budget.steps >= budget.next_clock:
            budget.checkpoint()
        return source
    budget.step()
    if hasattr(source, "__len__"):
        return _SizedLoop(source, budget)
    return _counted(source, budget)


# Loops this short are charged up front: between two looks at the clock they
# run their body at most this many times, and a loop nested in that body is
# charged when it starts.
_SHORT_LOOP: Final = 256
_SHORT_LOOP_TYPES: Final = frozenset({list, tuple, range, dict, str})


# ---------------------------------------------------------------------------
# Calls.

GUARDED_CALLABLE_TYPES: Final = frozenset({types.BuiltinMethodType, types.MethodType})
"""The types of callables :func:`guard_call` looks into (other calls are only steps): the
methods of strings, bytes and containers (built in, or Python's, as ``Markup``'s)."""

_TEXT_TYPES: Final = (str, bytes, bytearray)


def guard_call(budget: RenderBudget, function: Any, args: tuple[Any, ...],
               kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """Check a call of a method from a template before it runs; returns the
    arguments to use.

    A string method that can build more than its operands is checked against
    what it would build; a container's method against what the container would
    grow to (:func:`~toolwire.templates.container_growth.guard_mutation`).
    ``str.join`` of a generator, ``list.extend`` of one..., get the generator's
    items as a list (they must be counted, and a generator can be read only once).
    """
    owner = function.__self__
    kind = type(owner)
    if kind is str or (kind is not dict and isinstance(owner, _TEXT_TYPES)):
        guard = _STRING_METHODS.get(function.__name__)
        if guard is not None:
            return guard(budget, owner, args, kwargs)
    elif kind is dict or isinstance(owner, MUTABLE_KINDS):
        name = function.__name__
        if name in READING_METHODS:
            return args
        if kwargs:  # the keywords Jinja adds for its own use are not the method's
            kwargs = {key: value for key, value in kwargs.items() if key not in _JINJA_KEYWORDS}
        return guard_mutation(budget, owner, name, args, kwargs)
    return args


_JINJA_KEYWORDS: Final = frozenset({"_loop_vars", "_block_vars"})


SIZED_RESULTS: Final = frozenset({str, bytes, bytearray, list, tuple, dict, set, Markup})
"""The types of call results :func:`account_result` may have to count."""
_BUILDING_METHODS: Final = frozenset({"copy", "fromkeys", "union", "intersection",
                                      "difference", "symmetric_difference"})
"""Container methods whose result is a new container (the others return what the
container holds)."""


def account_result(budget: RenderBudget, function: Any, result: Any) -> Any:
    """Count what a method call built: the new string of a string method (``upper``,
    ``strip``..., which build at most a few times their operands), the list of
    ``split``, a container's ``copy``; a result over the value bound stops the render."""
    owner = function.__self__
    name = function.__name__
    if isinstance(owner, _TEXT_TYPES):
        # split() and the like: pieces of the text, each printed with two more characters
        if 3 * len(owner) + 4 <= UNCOUNTED_SIZE:
            return result
    elif not (name in _BUILDING_METHODS and (isinstance(owner, MUTABLE_KINDS) or owner is dict)):
        return result
    account_value(budget, result, f"{type(owner).__name__}.{name}")
    return result


def account_value(budget: RenderBudget, value: Any, what: str) -> Any:
    """Count ``value``, just built by ``what``: past the value bound, stop the render."""
    size = len(value) if isinstance(value, _TEXT_TYPES) else budget.measure(value)
    if size > UNCOUNTED_SIZE:
        budget.build(size, what)
    return value


def _charge_arguments(budget: RenderBudget, args: tuple[Any, ...], kwargs: Mapping[str, Any],
                      what: str) -> int:
    size = _contents_size(budget, (*args, *kwargs.items()))
    if size > UNCOUNTED_SIZE:
        budget.build(size, what)
    return size


def _dict(*args: Any, **kwargs: Any) -> dict[Any, Any]:
    """The ``dict`` global: what the new dict prints as stays within the bound (an
    iterable of pairs is read with each pair counted)."""
    budget = current_budget()
    if args and not isinstance(args[0], Mapping | list | tuple):
        args = (collect(budget, args[0], "dict"), *args[1:])
    size = _charge_arguments(budget, args, kwargs, "dict")
    made = dict(*args, **kwargs)
    budget.remember(made, size)
    return made


def _argument(args: tuple[Any, ...], kwargs: Mapping[str, Any], index: int, name: str,
              default: Any) -> Any:
    return args[index] if len(args) > index else kwargs.get(name, default)


def _padding(budget: RenderBudget, owner: str, args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> tuple[Any, ...]:
    width = _argument(args, kwargs, 0, "width", 0)
    if isinstance(width, int):
        budget.build(max(width, len(owner)), "padding a string")
    return args


def _expandtabs(budget: RenderBudget, owner: str, args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> tuple[Any, ...]:
    tabsize = _argument(args, kwargs, 0, "tabsize", 8)
    if isinstance(tabsize, int):
        budget.build(len(owner) + owner.count("\t") * max(tabsize, 0), "expandtabs")
    return args


def replacement_size(text: str | bytes | bytearray, old: Any, new: Any, count: Any) -> int:
    """How long ``text.replace(old, new, count)`` can be (0: surely short, or
    arguments Python refuses)."""
    if not isinstance(old, _TEXT_TYPES) or not isinstance(new, _TEXT_TYPES) \
            or isinstance(old, str) != isinstance(text, str) or len(new) <= len(old):
        return 0
    growth = len(new) - len(old)
    if len(text) + (len(text) + 1) * growth <= UNCOUNTED_SIZE:
        return 0  # even a replacement at every position stays short
    found = len(text) + 1 if not old else text.count(old)  # type: ignore[arg-type]
    if isinstance(count, int) and count >= 0:
        found = min(found, count)
    return len(text) + found * growth


def _replace(budget: RenderBudget, owner: str, args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> tuple[Any, ...]:
    size = replacement_size(owner, _argument(args, kwargs, 0, "old", None),
                             _argument(args, kwargs, 1, "new", None),
                             _argument(args, kwargs, 2, "count", -1))
    if size > UNCOUNTED_SIZE:
        budget.build(size, "replace")
    return args


def _join(budget: RenderBudget, owner: str, args: tuple[Any, ...],
          kwargs: dict[str, Any]) -> tuple[Any, ...]:
    if len(args) != 1:
        return args
    items = args[0] if isinstance(args[0], list | tuple) else collect(budget, args[0], "join")
    budget.build(joined_size(items, owner, budget.limits.max_value_size), "join")
    return (items,)


def joined_size(items: Iterable[Any], separator: str, limit: int) -> int:
    size = 0
    count = 0
    for item in items:
        size += len(item) if type(item) is str else text_size(item, limit)
        count += 1
        if size > limit:
            return size
    return size + max(count - 1, 0) * len(separator)


def _translate(budget: RenderBudget, owner: str, args: tuple[Any, ...],
               kwargs: dict[str, Any]) -> tuple[Any, ...]:
    table = args[0] if args else None
    widest = 1
    if isinstance(table, Mapping):
        widest = max((len(v) for v in table.values() if isinstance(v, str)), default=1)
    budget.build(len(owner) * max(widest, 1), "translate")
    return args


_StringGuard = Callable[[RenderBudget, str, tuple[Any, ...], dict[str, Any]], tuple[Any, ...]]
_STRING_METHODS: Final[dict[str, _StringGuard]] = {
    "center": _padding,
    "ljust": _padding,
    "rjust": _padding,
    "zfill": _padding,
    "expandtabs": _expandtabs,
    "replace": _replace,
    "join": _join,
    "translate": _translate,
}


class _BoundedFormatter(Formatter):
    """``str.format`` for templates: attribute look-ups go through the sandbox
    (as Jinja's own formatter does), and every field is within the value bound."""

    def __init__(self, getattr_: Callable[[Any, str], Any]) -> None:
        super().__init__()
        self._getattr = getattr_
        self._size = 0

    def get_field(self, field_name: str, args: Any, kwargs: Any) -> Any:
        first, rest = formatter_field_name_split(field_name)
        obj = self.get_value(first, args, kwargs)
        for is_attr, index in rest:
            obj = self._getattr(obj, index) if is_attr else obj[index]
        return obj, first

    def format_field(self, value: Any, format_spec: str) -> Any:
        budget = current_budget()
        limit = budget.limits.max_value_size
        size = text_size(value, limit)
        for digits in re.findall(r"\d+", format_spec):
            size = max(size, spec_number(digits, limit))
        self._size += size
        budget.build(self._size, "str.format")
        return super().format_field(value, format_spec)


def guarded_str_format(value: Any, getattr_: Callable[[Any, str], Any]) -> Any:
    """The sandbox's ``wrap_str_format``: a bounded ``str.format``/``format_map``.

    Returns ``None`` when ``value`` is not one of those two methods of a string.
    """
    if not isinstance(value, types.MethodType | types.BuiltinMethodType):
        return None
    name = value.__name__
    owner = getattr(value, "__self__", None)
    if name not in ("format", "format_map") or not isinstance(owner, str):
        return None
    text_type = type(owner)

    def bounded(*args: Any, **kwargs: Any) -> str:
        if name == "format_map":
            if kwargs or len(args) != 1:
                raise TypeError("format_map() takes exactly one positional argument")
            mapping: Any = args[0]
            return text_type(_BoundedFormatter(getattr_).vformat(owner, (), mapping))
        return text_type(_BoundedFormatter(getattr_).vformat(owner, args, kwargs))

    return bounded


# ---------------------------------------------------------------------------
# Turning values into text.


def check_text(value: Any, what: str) -> None:
    """Allow ``value`` to be turned into text by ``what``."""
    current_budget().text(value, what)


# ---------------------------------------------------------------------------
# Globals.


def _lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:
    words = n * max if isinstance(n, int) and isinstance(max, int) else 0
    current_budget().build(words * 12, "lipsum")
    return str(generate_lorem_ipsum(n=n, html=html, min=min, max=max))


def guarded_globals() -> dict[str, Any]:
    """Globals that replace Jinja's defaults where those can build large values."""
    return {"lipsum": _lipsum, "dict": _dict}


def check_strftime_format(fmt: Any) -> None:
    """``strftime_now(fmt)``: a directive prints up to a few dozen characters."""
    if isinstance(fmt, str) and len(fmt) * 32 > UNCOUNTED_SIZE:
        current_budget().build(len(fmt) * 32, "strftime_now")


def check_json(value: Any, indent: Any) -> None:
    """``tojson`` with an indentation: the indented text stays within the value bound.

    (Without one, the text is a small multiple of the value's size, which is
    bounded where the value was built.)"""
    width = len(indent) if isinstance(indent, str) else indent if isinstance(indent, int) else 0
    if width <= 0:
        return
    budget = current_budget()
    budget.build(text_size(value, budget.limits.max_value_size, width), "tojson")
