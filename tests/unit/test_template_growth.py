"""Templates cannot grow lists, dicts or strings without bound (issues 28 and 41).

The attacks of issue 28 (``l.extend(l)`` repeated, two lists extending each other)
and every other growth path the sandbox allows. Each render ends within the bounds
of its child process: with a prompt within the output bound, or with a
:class:`TemplateResourceError` naming the bound (memory, time, output) and the
template, the child's peak memory within its bound; and what the template built
never reaches the host, whose peak memory is measured with ``tracemalloc`` (a
memory bound, not a timing). Then the general rule, as a property: whatever a
template grows in place, a render ends within the bounds.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolwire.errors import TemplateError, TemplateResourceError
from toolwire.limits import RenderLimits
from toolwire.templates.chat_template import ChatTemplate

SMALL = RenderLimits(max_output_chars=100_000, max_memory_bytes=64 << 20, max_seconds=10)
"""Bounds small enough that a refused attack has built at most a few tens of megabytes."""
PEAK = 8 << 20
CHILD_PEAK = (64 << 20) + (128 << 20)
"""The bound plus what a child holds before a job (the interpreter, Jinja): the most a
stopped child's peak resident memory may be."""


@contextmanager
def peak_memory() -> Iterator[list[int]]:
    """The peak of Python's allocations inside the block (in the list it yields)."""
    tracemalloc.start()
    found: list[int] = []
    try:
        yield found
    finally:
        found.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()


def within_bounds(source: str, limits: RenderLimits = SMALL, *, lenient: bool | None = True,
                  **variables: Any) -> tuple[TemplateResourceError | None, int]:
    """Render ``source``: the resource error it raised (``None``: it rendered within the
    output bound, or failed otherwise: a template that errs ends too), and the host's
    peak memory meanwhile."""
    error = None
    with peak_memory() as peak:
        try:
            out = ChatTemplate(source, limits=limits, lenient=lenient, name="grow.jinja"
                               ).render([], **variables)
            assert len(out) <= limits.max_output_chars
        except TemplateResourceError as exc:
            assert exc.bound in ("memory", "time", "output") and exc.template == "'grow.jinja'"
            assert exc.peak_memory_bytes < CHILD_PEAK, exc.peak_memory_bytes
            error = exc
        except TemplateError as exc:
            assert "MemoryError" not in str(exc) and "RecursionError" not in str(exc)
    return error, peak[0]


def refused(source: str, limits: RenderLimits = SMALL, *, lenient: bool | None = True,
            **variables: Any) -> tuple[str, int]:
    """Render ``source``: the resource error it must raise, and the host's peak memory."""
    error, peak = within_bounds(source, limits, lenient=lenient, **variables)
    assert error is not None, "rendered"
    return str(error), peak


def loop(body: str, times: int = 64, setup: str = "") -> str:
    return setup + "{% for i in range(" + str(times) + ") %}" + body + "{% endfor %}done"


# ---------------------------------------------------------------------------
# The attacks of the issue.


def test_a_list_extending_itself_is_refused_before_it_holds_much() -> None:
    message, peak = refused(loop("{% set _ = l.extend(l) %}", setup="{% set l = [1] %}"))
    assert "passed its memory bound" in message and "(64 MiB)" in message
    assert peak < PEAK


def test_two_lists_extending_each_other_are_refused_before_they_hold_much() -> None:
    source = loop("{% set _ = a.extend(b) %}{% set _ = b.extend(a) %}",
                  setup="{% set a = [1] %}{% set b = [2] %}")
    message, peak = refused(source)
    assert "passed its memory bound" in message
    assert peak < PEAK


def test_under_the_default_bounds_the_self_extending_list_stays_under_the_memory_bound(
        ) -> None:
    source = loop("{% set _ = l.extend(l) %}", setup="{% set l = [1] %}")
    message, peak = refused(source, RenderLimits(max_seconds=30))
    assert "passed its memory bound" in message and "(256 MiB)" in message
    assert peak < PEAK


# ---------------------------------------------------------------------------
# Every growth path, in strict (where it exists there) and lenient mode alike.

BIG = "{% set big = 'x' * 50000 %}"
IN_PLACE = {
    "append": loop("{% set _ = l.append(big) %}", 100_000, BIG + "{% set l = [] %}"),
    "append of itself": loop("{% set _ = l.append(l) %}", 100_000, "{% set l = [] %}"),
    "insert": loop("{% set _ = l.insert(0, i) %}", 100_000, "{% set l = [] %}"),
    "extend of a generator": loop("{% set _ = l.extend(range(50000) | map('string')) %}",
                                  setup="{% set l = [] %}"),
    "extend of a string": loop("{% set _ = l.extend(big) %}", 64, BIG + "{% set l = [] %}"),
    "dict update": loop("{% set _ = d.update({i: big}) %}", 100_000, BIG + "{% set d = {} %}"),
    "dict update of pairs": loop("{% set _ = d.update(range(i * 1000, i * 1000 + 1000) | "
                                 "batch(2)) %}", 1000, "{% set d = {} %}"),
    "setdefault": loop("{% set _ = d.setdefault(i, big) %}", 100_000, BIG + "{% set d = {} %}"),
}
BOTH_MODES = {
    "+ doubling a list": loop("{% set ns.l = ns.l + ns.l %}",
                              setup="{% set ns = namespace(l=[1]) %}"),
    "* of a list": "{{ (range(1000) | list) * 1000 }}",
    "namespace attribute doubled": loop("{% set ns.s = ns.s ~ ns.s %}",
                                        setup="{% set ns = namespace(s='x') %}"),
    "namespace attribute nested": loop("{% set ns.v = [ns.v, ns.v] %}",
                                       setup="{% set ns = namespace(v='0123456789') %}"),
    "list filter of a generator": "{{ range(100000) | map('center', 100) | list | length }}",
    "join filter of a generator": "{{ range(100000) | map('center', 100) | join | length }}",
    "join method of a generator": "{{ ''.join(range(100000) | map('center', 100)) | length }}",
    "batch fill": "{{ [1] | batch(1000000, 'x') | list | length }}",
    "slice count": "{{ [1] | slice(1000000) | list | length }}",
    "replace filter": "{{ ('x' * 1000) | replace('x', 'y' * 1000) }}",
    "center filter": "{{ 'x' | center(1000000) }}",
    "indent filter": "{{ ('a\\n' * 1000) | indent(1000) }}",
    "format filter": "{{ '%1000000s' | format('x') }}",
    "% formatting": "{{ '%1000000s' % 'x' }}",
    "str.format": "{{ '{:>1000000}'.format('x') }}",
    "wordwrap with a long wrapstring": "{{ ('a ' * 10000) | wordwrap(1, wrapstring='x' * 1000) }}",
    "urlize with a long target": "{{ ('www.a.com ' * 10000) | urlize(target='x' * 1000) }}",
    "forceescape of quotes": "{{ ('\"' * 60000) | forceescape }}",
    "upper of a long string": loop("{% set ns.s = (ns.s ~ ns.s) | upper %}",
                                   setup="{% set ns = namespace(s='x') %}"),
    "a range listed and repeated": "{{ (range(100000) | list) * 10 }}",
    "fromkeys": "{{ {}.fromkeys(range(50000) | list, 'x' * 100) | length }}",
    "dict of a generator": "{{ dict(range(100000) | map('center', 10) | batch(2)) | length }}",
    "macro text": BIG + "{% macro f() %}{% for i in range(1000) %}{{ big }}{% endfor %}"
                  "{% endmacro %}{% set x = f() %}{{ x | length }}",
    "set block text": BIG + "{% set x %}{% for i in range(1000) %}{{ big }}{% endfor %}"
                      "{% endset %}{{ x | length }}",
    "filter block text": BIG + "{% filter length %}{% for i in range(1000) %}{{ big }}"
                         "{% endfor %}{% endfilter %}",
    "caller text": BIG + "{% macro m() %}{{ caller() }}{% endmacro %}{% call m() %}"
                   "{% for i in range(1000) %}{{ big }}{% endfor %}{% endcall %}",
    "printing a list of one long string many times": BIG + "{{ [big] * 1000 }}",
    "Markup padding": "{{ ('x' | e).center(1000000) }}",
    "Markup + doubling": loop("{% set ns.s = ns.s + ns.s %}",
                              setup="{% set ns = namespace(s='x' | e) %}"),
    "bytes repetition": "{{ 'x'.encode() * 1000000 }}",
    "bytes padding": "{{ 'x'.encode().center(1000000) }}",
    "bytes + doubling": loop("{% set ns.b = ns.b + ns.b %}",
                             setup="{% set ns = namespace(b='x'.encode()) %}"),
    "split of a long text": "{{ ('a,' * 50000).split(',') | length }}",
}


@pytest.mark.parametrize("source", list(IN_PLACE.values()), ids=list(IN_PLACE))
@pytest.mark.parametrize("lenient", [True, None], ids=["lenient", "auto"])
def test_growing_a_container_in_place_ends_within_the_bounds(
        source: str, lenient: bool | None) -> None:
    _, peak = within_bounds(source, lenient=lenient)
    assert peak < PEAK


@pytest.mark.parametrize("source", list(BOTH_MODES.values()), ids=list(BOTH_MODES))
@pytest.mark.parametrize("lenient", [False, True], ids=["strict", "lenient"])
def test_every_way_of_building_a_large_value_ends_within_the_bounds(
        source: str, lenient: bool) -> None:
    _, peak = within_bounds(source, lenient=lenient)
    assert peak < PEAK


def test_a_growth_the_memory_cannot_take_is_refused() -> None:
    # Each list is small; together they pass the memory bound.
    source = loop("{% set _ = kept.append(range(40000) | list) %}", 1000,
                  "{% set kept = [] %}")
    message, _ = refused(source, RenderLimits(max_memory_bytes=32 << 20, max_seconds=30))
    assert "passed its memory bound" in message


def test_a_refused_renders_peak_memory_is_its_own_not_what_the_warm_child_held_before(
        ) -> None:
    # the child that renders next has just held a 128 MiB string for another render:
    # the peak a refusal reports is the refused render's (found by the suite in one
    # process, where earlier tests had made the warm children large)
    doubled = "{% set ns = namespace(v='x') %}{% for i in range(27) %}" \
              "{% set ns.v = ns.v ~ ns.v %}{% endfor %}{{ ns.v | length }}"
    roomy = RenderLimits(max_memory_bytes=1 << 30, max_seconds=60)
    assert ChatTemplate(doubled, limits=roomy, name="big.jinja").render([]) == str(1 << 27)
    message, _ = refused(loop("{% set ns.v = ns.v ~ ns.v %}", 60,
                              "{% set ns = namespace(v='x') %}"))
    assert "passed its memory bound" in message


# ---------------------------------------------------------------------------
# The general rule.


GROWTH_STEPS = [
    "{% set _ = l.append(s) %}",
    "{% set _ = l.extend(l) %}",
    "{% set _ = l.insert(0, l) %}",
    "{% set _ = l.extend(l | map('string')) %}",
    "{% set _ = d.update({i: l}) %}",
    "{% set _ = d.update(d) %}",
    "{% set _ = d.setdefault(s, d) %}",
    "{% set _ = l.pop() if l else none %}",
    "{% set s = s ~ s %}",
    "{% set s = l | join(s) %}",
    "{% set l = l + l %}",
    "{% set l = [l, d, s] %}",
    "{% set s = l | tojson %}",
    "{{ l }}{{ d }}",
]


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(st.sampled_from(GROWTH_STEPS), min_size=1, max_size=6),
       rounds=st.integers(min_value=1, max_value=40))
def test_whatever_a_template_grows_in_place_the_render_ends_within_the_bounds(
        steps: list[str], rounds: int) -> None:
    source = ("{% set l = ['ab'] %}{% set d = {} %}{% set s = 'ab' %}"
              "{% for i in range(" + str(rounds) + ") %}" + "".join(steps) + "{% endfor %}")
    # any bound may end it: 2 s, not 10, so the draws that grow by repr-ing containers that
    # hold themselves (about 8 s to reach 64 MiB, nine draws in sixty) end at the time bound
    limits = RenderLimits(max_output_chars=20_000, max_memory_bytes=64 << 20, max_seconds=2)
    _, peak = within_bounds(source, limits)  # a step that does not apply ends it too
    assert peak < 4 << 20


SMALL_CASES = {
    "{% set l = [1] %}{% set _ = l.append(2) %}{% set _ = l.extend([3, 4]) %}"
    "{% set _ = l.insert(0, 0) %}{{ l }}": "[0, 1, 2, 3, 4]",
    "{% set l = [] %}{% set _ = l.extend(range(3) | map('string')) %}{{ l }}":
        "['0', '1', '2']",
    "{% set d = {'a': 1} %}{% set _ = d.update({'a': 2}, b=3) %}{% set _ = d.update([['c', 4]]) %}"
    "{{ d.setdefault('a', 9) }}{{ d }}": "2{'a': 2, 'b': 3, 'c': 4}",
    "{% set l = [1, 2] %}{% set _ = l.pop() %}{% set _ = l.extend(l) %}{{ l }}": "[1, 1]",
    "{{ ('<a>' | e) + '&' }}|{{ ('x' | e).center(5) }}|{{ 'ab'.encode() * 2 }}":
        "&lt;a&gt;&amp;|  x  |b'abab'",
    "{{ ['x', 'y'] }}{{ {}.fromkeys('ab', 0) }}{{ 'a,b'.split(',') }}":
        "['x', 'y']{'a': 0, 'b': 0}['a', 'b']",
    "{% macro f(x) %}<{{ x }}>{% endmacro %}{{ f(1) }}{% set y %}{{ f(2) }}{% endset %}{{ y }}":
        "<1><2>",
    "{{ 'Ab' | upper }}{{ 'Ab' | lower }}{{ '  a ' | trim }}{{ 'a\"' | forceescape }}":
        "ABabaa&#34;",
    "{{ 'a b c' | wordwrap(2) }}|{{ 'www.x.com' | urlize }}":
        'a\nb\nc|<a href="https://www.x.com" rel="noopener">www.x.com</a>',
}


@pytest.mark.parametrize(("source", "expected"), list(SMALL_CASES.items()))
def test_accounted_operations_under_the_bounds_give_their_usual_result(source: str,
                                                                      expected: str) -> None:
    assert ChatTemplate(source, lenient=True).render([]) == expected
