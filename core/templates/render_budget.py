"""What one chat-template render may cost: time, output and memory.

A chat template ships inside a model file and is untrusted (see
:mod:`toolwire.templates.chat_template`). The Jinja sandbox keeps it away from
the interpreter, but not from asking for a gigabyte string (``'x' * 10**9``,
``'x' | center(10**9)``, ``'{:>1000000000}'.format('')``), from doubling a value
forty times (``ns.s = ns.s ~ ns.s``, ``ns.l = ns.l + ns.l``, squaring an
integer), or from looping a hundred thousand times a hundred thousand times.
Each render therefore runs under a :class:`RenderBudget` built from
:class:`RenderLimits`, with one rule for every operation:

* **an operation that can build a value larger than its operands is checked
  before it builds it** (:mod:`toolwire.templates.bounded_ops` lists them): the
  value (characters of a string, items of a list, or what a container would
  print as when it is turned into text) may not exceed ``max_value_size``, an
  integer may not exceed ``max_int_bits``; and since many values just under
  that bound could still add up to gigabytes, the process's memory may not grow
  by more than ``max_memory_bytes`` while the template builds them;
* **every step counts against a deadline** (``max_seconds``): every call and
  every loop iteration;
* **the output is bounded** (``max_output_chars``).

One built-in operation that runs in C cannot be interrupted, so the deadline is
checked between operations, and the size rule bounds what each one works on.
"""

from __future__ import annotations

import contextvars
import math
import os
import sys
import time
from collections.abc import Iterator, Mapping
from typing import Any, Final

import attrs
from jinja2.exceptions import TemplateRuntimeError
from jinja2.utils import Namespace

__all__ = [
    "DEFAULT_MAX_OUTPUT_CHARS",
    "RENDER_SECONDS_VARIABLE",
    "UNCOUNTED_SIZE",
    "RenderBudget",
    "RenderLimits",
    "ResourceLimitError",
    "active_budget",
    "current_budget",
    "resident_bytes",
    "text_size",
]

#: Default bound on the rendered prompt, in characters.
DEFAULT_MAX_OUTPUT_CHARS: Final = 10_000_000

RENDER_SECONDS_VARIABLE: Final = "TOOLWIRE_TEMPLATE_SECONDS"
"""Environment variable: the default ``max_seconds`` of a render (read when a
template is compiled)."""

_DEFAULT_SECONDS: Final = 10.0
# How many steps pass between two looks at the clock: reading it costs about as
# much as a step.
CLOCK_EVERY: Final = 16
UNCOUNTED_SIZE: Final = 4096
"""Values up to this size (characters or items) are built without a check: building
one costs no more than the step that builds it (and steps are counted)."""
# What a number, ``None`` or another object counts for in a size estimate.
SMALL: Final = 8
# Characters built between two looks at the process's memory (a look costs a
# few microseconds; building this much costs milliseconds).
_MEMORY_CHECK_EVERY: Final = 16_000_000
# A container growing in place by this many bytes at once looks at the memory first.
_LARGE_GROWTH: Final = 1 << 20
# Steps between two looks at the memory.
_MEMORY_CHECK_STEPS: Final = 1 << 18
# How many measured containers a budget remembers (see RenderBudget.measure).
_REMEMBERED_SIZES: Final = 64
# Below this depth text_size recurses (fast); deeper values are walked with an
# explicit stack, so no value can exhaust the interpreter's stack.
_RECURSION_DEPTH: Final = 40


class ResourceLimitError(TemplateRuntimeError):
    """The template asked for more time, output or memory than its budget allows."""


def _default_seconds() -> float:
    raw = os.environ.get(RENDER_SECONDS_VARIABLE, "").strip()
    if not raw:
        return _DEFAULT_SECONDS
    try:
        seconds = float(raw)
    except ValueError:
        return _DEFAULT_SECONDS
    return seconds if seconds > 0 and math.isfinite(seconds) else _DEFAULT_SECONDS


@attrs.frozen
class RenderLimits:
    """The bounds of one render (see the module doc).

    :ivar max_output_chars: the rendered prompt's length.
    :ivar max_value_size: one value an operation builds: characters of a
        string, items of a list, or what a container prints as.
    :ivar max_memory_bytes: how much the process's resident memory may grow
        during one render (see :meth:`RenderBudget.build`).
    :ivar max_int_bits: the largest integer an operation may build.
    :ivar max_seconds: wall-clock time of one render (default: the
        ``TOOLWIRE_TEMPLATE_SECONDS`` environment variable, else 10).
    """

    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS
    max_value_size: int = attrs.field(default=10_000_000)
    max_memory_bytes: int = 1 << 30
    max_int_bits: int = 100_000
    max_seconds: float = attrs.field(factory=_default_seconds)

    @max_value_size.validator
    def _check_value_size(self, attribute: Any, value: int) -> None:
        if value < UNCOUNTED_SIZE:
            raise ValueError(f"max_value_size must be at least {UNCOUNTED_SIZE}: values up to "
                             "that size are built without being checked")


class RenderBudget:
    """The running account of one render (or of one compile's constant folding).

    :param limits: the bounds.
    :param timed: check time and memory; ``False`` checks sizes only (the
        budget in force outside any render).
    """

    __slots__ = ("baseline", "built", "deadline", "limits", "next_check", "next_clock",
                 "next_step_check", "sizes", "steps", "timed")

    def __init__(self, limits: RenderLimits, *, timed: bool = True) -> None:
        self.limits = limits
        self.timed = timed
        self.deadline = time.monotonic() + limits.max_seconds if timed else math.inf
        self.steps = 0
        self.next_clock = CLOCK_EVERY
        self.built = 0
        self.next_check = _MEMORY_CHECK_EVERY if timed else math.inf
        self.next_step_check = _MEMORY_CHECK_STEPS
        self.baseline: int | None = None
        # id -> (container, its size): the last few containers built or measured
        # (see measure); each is kept, so its id stays its own.
        self.sizes: dict[int, tuple[object, int]] = {}

    def step(self) -> None:
        """Count one step (a call, a loop iteration); past the deadline, stop the render."""
        self.steps += 1
        if self.steps >= self.next_clock:
            self.checkpoint()

    def checkpoint(self) -> None:
        """Every :data:`CLOCK_EVERY` steps: the deadline, and now and then the memory.

        Steps also check the memory (every :data:`_MEMORY_CHECK_STEPS`), since a
        loop that keeps many small values builds nothing large.
        """
        self.next_clock = self.steps + CLOCK_EVERY
        if time.monotonic() > self.deadline:
            self.overtime()
        if self.steps >= self.next_step_check:
            self.next_step_check = self.steps + _MEMORY_CHECK_STEPS
            self._check_memory()

    def overtime(self) -> None:
        """Stop the render: it ran past its deadline."""
        raise ResourceLimitError(
            f"rendering took longer than {self.limits.max_seconds:g} seconds")

    def build(self, size: int, what: str) -> None:
        """Allow an operation to build a value of ``size``, or stop the render.

        One value may not exceed ``max_value_size``. What a render builds in
        all is not bounded by itself, since templates that build the prompt by
        ``out = out ~ piece`` copy it once per piece and free the copies at
        once; instead, every :data:`_MEMORY_CHECK_EVERY` characters built, the
        process's resident memory is compared with what it was at the first
        check, and growth beyond ``max_memory_bytes`` stops the render. (A
        render that builds little never fails this check, whatever other
        threads allocate meanwhile.)
        """
        if size > self.limits.max_value_size:
            raise self._over(size, what)
        self.built += size
        if self.built >= self.next_check:
            self._check_memory()

    def grow(self, size: int, added_bytes: int, what: str) -> None:
        """Allow a container to grow in place to where it prints as at least ``size``
        characters (two for each item of a list, four for each key of a dict),
        taking about ``added_bytes`` more memory, or stop the render.

        The size is held to ``max_value_size``, and the memory the growth would
        take to ``max_memory_bytes``, before it grows: a large growth
        (:data:`_LARGE_GROWTH` bytes or more) compares the process's memory plus
        what it adds with the bound; a small one counts as built (see
        :meth:`build`).
        """
        if size > self.limits.max_value_size:
            raise self._over(size, what)
        self.built += added_bytes
        if added_bytes >= _LARGE_GROWTH or self.built >= self.next_check:
            self._check_memory(added_bytes)

    def _over(self, size: int, what: str) -> ResourceLimitError:
        return ResourceLimitError(
            f"{what} would build a value of {size} characters or items, over the "
            f"limit of {self.limits.max_value_size}")

    def _check_memory(self, coming: int = 0) -> None:
        if not self.timed:
            return
        self.next_check = self.built + _MEMORY_CHECK_EVERY
        resident = resident_bytes()
        if resident is None:
            return
        if self.baseline is None:
            self.baseline = resident
        grown = resident + coming - self.baseline
        if grown > self.limits.max_memory_bytes:
            raise ResourceLimitError(
                f"rendering grew the process's memory by {grown} bytes"
                f"{' (counting what it was about to add)' if coming else ''}, over the limit "
                f"of {self.limits.max_memory_bytes}")

    def measure(self, value: Any) -> int:
        """:func:`text_size` of ``value``, remembering containers.

        A template that grows a value step by step (``acc = acc + [item]``,
        ``ns.l = [ns.l, ns.l]``, ``l.append(item)``) hands each step the
        previous one's result: remembering the last few sizes measures each
        step once, not once per step per step. A container changed in place is
        forgotten (:meth:`forget`: every method that changes one does it), and
        measured afresh when next asked for.
        """
        kind = type(value)
        if kind is str:
            return len(value)
        if kind in _REMEMBERED_KINDS:
            known = self.sizes.get(id(value))
            if known is not None and known[0] is value:
                return known[1]
            size = text_size(value, self.limits.max_value_size)
            self.remember(value, size)
            return size
        return text_size(value, self.limits.max_value_size)

    def remember(self, value: Any, size: int) -> None:
        """Note the size of a container just built or measured."""
        sizes = self.sizes
        sizes.pop(id(value), None)  # the newest last: the oldest is the one dropped
        sizes[id(value)] = (value, size)
        if len(sizes) > _REMEMBERED_SIZES:
            del sizes[next(iter(sizes))]

    def forget(self, value: Any) -> None:
        """Drop what is remembered of ``value`` (it shrank or changed in place)."""
        known = self.sizes.get(id(value))
        if known is not None and known[0] is value:
            del self.sizes[id(value)]

    def text(self, value: Any, what: str) -> None:
        """Allow ``value`` to be turned into text (``str()``, JSON...)."""
        if type(value) is not str:
            self.build(text_size(value, self.limits.max_value_size), what)


def resident_bytes() -> int | None:
    """The process's resident memory in bytes (``None`` where it cannot be read).

    Linux: the current figure from ``/proc/self/statm``; elsewhere the peak
    from ``getrusage``, which can only grow and so still bounds growth.
    """
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE_SIZE
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


_REMEMBERED_KINDS: Final = frozenset({list, tuple, dict, set})

_PAGE_SIZE: Final = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

_UNTIMED: Final = RenderBudget(RenderLimits(max_seconds=math.inf), timed=False)
_ACTIVE: contextvars.ContextVar[RenderBudget] = contextvars.ContextVar(
    "toolwire_render_budget", default=_UNTIMED)


class active_budget:
    """``with active_budget(budget):`` makes ``budget`` the one guards charge."""

    __slots__ = ("_budget", "_token")

    def __init__(self, budget: RenderBudget) -> None:
        self._budget = budget
        self._token: contextvars.Token[RenderBudget] | None = None

    def __enter__(self) -> RenderBudget:
        self._token = _ACTIVE.set(self._budget)
        return self._budget

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _ACTIVE.reset(self._token)


current_budget = _ACTIVE.get
"""The budget of the render running in this context (a size-only one outside)."""


def text_size(value: Any, limit: int, indent: int = 0) -> int:
    """About how many characters ``value`` prints as; stops counting past ``limit``.

    Strings count their length, containers their items plus separators (and
    ``indent`` per item and level, as ``json.dumps(indent=...)`` writes). A
    container reached twice counts twice, as printing it would, so a value that
    shares itself exponentially is caught; and the count stops as soon as it
    passes ``limit``, so the walk itself costs at most about ``limit`` steps.
    """
    if type(value) is str:
        return len(value)
    return _size(value, limit, indent, 0)


def _size(value: Any, limit: int, indent: int, depth: int) -> int:
    kind = type(value)
    if kind is str or kind is bytes:
        return len(value)
    if kind is int:
        return int(value.bit_length()) // 3 + 1
    if value is None or kind is float or kind is bool:
        return SMALL
    if isinstance(value, str | bytes | bytearray):  # Markup, a subclass
        return len(value)
    if depth >= _RECURSION_DEPTH:
        return _walk(value, limit, indent, depth)
    if kind is dict or isinstance(value, Mapping):
        per_item = 4 + indent * (depth + 1)
        total = 2
        for key, item in value.items():
            total += per_item + (len(key) if type(key) is str else
                                 _size(key, limit - total, indent, depth + 1))
            total += len(item) if type(item) is str else _size(item, limit - total, indent,
                                                                depth + 1)
            if total > limit:
                break
        return total
    if kind is list or kind is tuple or isinstance(value, list | tuple | set | frozenset):
        per_item = 2 + indent * (depth + 1)
        total = 2
        for item in value:
            total += per_item + (len(item) if type(item) is str else
                                 _size(item, limit - total, indent, depth + 1))
            if total > limit:
                break
        return total
    if isinstance(value, Namespace):
        return _size(object.__getattribute__(value, "_Namespace__attrs"), limit, indent, depth)
    return SMALL


def _walk(value: Any, limit: int, indent: int, depth: int) -> int:
    """:func:`_size` without recursion, for deeply nested values."""
    total = 0
    stack: list[tuple[Iterator[Any], int]] = [(iter((value,)), depth)]
    while stack and total <= limit:
        items, level = stack[-1]
        item: Any = next(items, _END)
        if item is _END:
            stack.pop()
            continue
        kind = type(item)
        if kind is str or kind is bytes or isinstance(item, str | bytes | bytearray):
            total += len(item)
        elif isinstance(item, Mapping):
            total += 2 + len(item) * (4 + indent * (level + 1))
            stack.append((_keys_and_values(item), level + 1))
        elif isinstance(item, list | tuple | set | frozenset):
            total += 2 + len(item) * (2 + indent * (level + 1))
            stack.append((iter(item), level + 1))
        elif isinstance(item, Namespace):
            stack.append((iter((object.__getattribute__(item, "_Namespace__attrs"),)), level))
        elif kind is int:
            total += item.bit_length() // 3 + 1
        else:
            total += SMALL
    return total


_END: Final = object()


def _keys_and_values(mapping: Mapping[Any, Any]) -> Iterator[Any]:
    for key, item in mapping.items():
        yield key
        yield item
