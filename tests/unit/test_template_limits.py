"""Rendering a hostile chat template is bounded in time, output and memory (issues 23, 41).

Every attack from issue 23, each refused with a :class:`TemplateResourceError` that
names the bound it passed and the template; then the general rule: whatever a
template builds, a render ends with a prompt within the bounds or such an error,
its child process is replaced, the caller's data is untouched, and the child never
changes what a real template renders.
"""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any

import jinja2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedEnvironment

from tests.support.paths import MISSING_TEMPLATES, SHARED_TEMPLATES
from toolwire.errors import TemplateError, TemplateResourceError, TemplateSecurityError
from toolwire.limits import RENDER_SECONDS_VARIABLE, RenderLimits
from toolwire.templates import sandbox
from toolwire.templates.chat_template import ChatTemplate

TEMPLATES_DIR = SHARED_TEMPLATES
USER = [{"role": "user", "content": "hi"}]
QUICK = RenderLimits(max_seconds=1.0)


def refused(source: str, limits: RenderLimits = QUICK, *, lenient: bool | None = None,
            bounds: tuple[str, ...] = ("memory", "time"), **variables: Any) -> str:
    """Render ``source`` as the file ``hostile.jinja``; return the message of the
    :class:`TemplateResourceError` it must raise, which names one of ``bounds`` and the
    template's source."""
    template = ChatTemplate(source, limits=limits, lenient=lenient, name="hostile.jinja")
    with pytest.raises(TemplateResourceError) as info:
        template.render(USER, **variables)
    error = info.value
    assert error.bound in bounds, str(error)
    assert error.template == "'hostile.jinja'" and "'hostile.jinja'" in str(error)
    return str(error)


# ---------------------------------------------------------------------------
# The attacks of the issue, each refused before it costs much.

DOUBLING = {
    "integer squaring": "{% set ns = namespace(v=3) %}{% for i in range(40) %}"
                        "{% set ns.v = ns.v * ns.v %}{% endfor %}{{ ns.v > 0 }}",
    "string ~ doubling": "{% set ns = namespace(v='x') %}{% for i in range(60) %}"
                         "{% set ns.v = ns.v ~ ns.v %}{% endfor %}{{ ns.v | length }}",
    "string + doubling": "{% set ns = namespace(v='x') %}{% for i in range(60) %}"
                         "{% set ns.v = ns.v + ns.v %}{% endfor %}{{ ns.v | length }}",
    "list + doubling": "{% set ns = namespace(v=[1]) %}{% for i in range(60) %}"
                       "{% set ns.v = ns.v + ns.v %}{% endfor %}{{ ns.v | length }}",
    "list of one long string doubled": "{% set ns = namespace(v=['x' * 1000000]) %}"
                                       "{% for i in range(40) %}{% set ns.v = ns.v + ns.v %}"
                                       "{% endfor %}{{ ns.v }}",
    "literal nesting": "{% set ns = namespace(v='0123456789') %}{% for i in range(60) %}"
                       "{% set ns.v = [ns.v, ns.v] %}{% endfor %}{{ ns.v }}",
    "dict nesting": "{% set ns = namespace(v={}) %}{% for i in range(60) %}"
                    "{% set ns.v = dict(a=ns.v, b=ns.v) %}{% endfor %}{{ ns.v }}",
    "replace growth": "{% set ns = namespace(v='xx') %}{% for i in range(40) %}"
                      "{% set ns.v = ns.v.replace('x', ns.v) %}{% endfor %}",
}

ONE_STEP = {
    "center filter 10**9": "{{ 'x' | center(1000000000) }}",
    "center method 10**9": "{{ 'x'.center(10 ** 9) }}",
    "ljust method": "{{ 'x'.ljust(10 ** 9) }}",
    "zfill method": "{{ '1'.zfill(10 ** 9) }}",
    "format width 10**9": "{{ '{:>1000000000}'.format('x') }}",
    "format nested width": "{{ '{:>{}}'.format('x', 10 ** 9) }}",
    "format precision": "{{ '{:.1000000000f}'.format(1.0) }}",
    "format_map width": "{{ '{a:>1000000000}'.format_map({'a': 1}) }}",
    "percent width": "{{ '%1000000000s' % 'x' }}",
    "percent star width": "{{ '%*s' % (10 ** 9, 'x') }}",
    "format filter width": "{{ '%1000000000s' | format('x') }}",
    "tojson indent 10**8": "{{ messages | tojson(indent=100000000) }}",
    "indent filter": "{{ ('a\\n' * 1000) | indent(100000000) }}",
    "replace filter": "{{ ('x' * 10000) | replace('x', 'y' * 10000) }}",
    "join filter": "{{ ('x' * 1000000) | list | join('y' * 100) }}",
    "join method": "{{ ('y' * 100).join(('x' * 1000000) | list) }}",
    "expandtabs": "{{ ('\\t' * 1000000).expandtabs(1000) }}",
    "translate": "{{ ('a' * 100000).translate(''.maketrans({'a': 'b' * 100000})) }}",
    "repetition of a long string": "{{ 'a' * 10 ** 10 }}",
    "repetition of a list of long strings": "{{ ['x' * 1000000] * 1000 }}",
    "power": "{{ 7 ** 10000000 }}",
    "lipsum": "{{ lipsum(1000000, max=1000000) }}",
    "slice count": "{{ [1] | slice(1000000000) | list | length }}",
    "batch fill": "{{ [1] | batch(1000000000, 'x') | list | length }}",
    "strftime_now format": "{{ strftime_now('%c' * 1000000) }}",
}

SLOW = {
    "nested large loops": "{% for i in range(100000) %}{% for j in range(100000) %}"
                          "{% endfor %}{% endfor %}",
    "six nested short loops": "".join("{% for a" + str(n) + " in range(100) %}" for n in range(6))
                              + "{% endfor %}" * 6,
    "exponential macro recursion": "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}"
                                   "{% endif %}{% endmacro %}{{ f(40) }}",
    "exponential recursive loop": "{% for x in [1, 1] recursive %}{% if loop.depth < 40 %}"
                                  "{{ loop([1, 1]) }}{% endif %}{% endfor %}",
}


@pytest.mark.parametrize("source", list(DOUBLING.values()), ids=list(DOUBLING))
def test_doubling_a_value_stops_at_the_memory_or_time_bound(source: str) -> None:
    assert "passed its" in refused(source)


@pytest.mark.parametrize("source", list(ONE_STEP.values()), ids=list(ONE_STEP))
def test_one_operation_asking_for_a_huge_value_is_refused(source: str) -> None:
    refused(source, bounds=("memory", "time", "output"))


@pytest.mark.parametrize("source", list(SLOW.values()), ids=list(SLOW))
def test_a_template_that_runs_long_stops_at_the_deadline(source: str) -> None:
    message = refused(source, RenderLimits(max_seconds=0.3), bounds=("time",))
    assert "passed its time bound" in message and "(0.3 s)" in message


def test_many_values_each_under_the_bound_stop_at_the_memory_bound() -> None:
    source = ("{% set kept = [] %}{% set big = 'x' * 4000000 %}{% for i in range(100000) %}"
              "{% set _ = kept.append(big ~ i) %}{% endfor %}{{ kept | length }}")
    message = refused(source, RenderLimits(max_memory_bytes=64 << 20, max_seconds=60),
                      lenient=True, bounds=("memory",))
    assert "passed its memory bound" in message and "(64 MiB)" in message


def test_a_refused_render_leaves_the_callers_data_and_the_next_render_alone() -> None:
    messages = [{"role": "user", "content": "hi", "tags": ["a"]}]
    kept = json.loads(json.dumps(messages))
    with pytest.raises(TemplateResourceError):
        ChatTemplate("{% set _ = messages.append(1) %}{{ 'x' * 10 ** 10 }}",
                     lenient=True).render(messages)
    assert messages == kept
    # the child that passed its bound was killed: the next render gets a new one
    assert ChatTemplate("{{ messages[0].content }}").render(messages) == "hi"


def test_a_smaller_memory_bound_is_honoured() -> None:
    source = "{{ (messages[0].content * 50000000) | length }}"  # 50 MB
    assert ChatTemplate(source).render(USER) == "100000000"
    refused(source, RenderLimits(max_memory_bytes=16 << 20), bounds=("memory",))


def test_output_is_bounded() -> None:
    source = "{% for i in range(100000) %}0123456789{% endfor %}"
    with pytest.raises(TemplateResourceError, match="output exceeds 1000 characters") as info:
        ChatTemplate(source, limits=RenderLimits(max_output_chars=1000)).render([])
    assert info.value.bound == "output"


def test_a_huge_constant_is_not_built_while_compiling() -> None:
    # Jinja folds constant expressions at compile time: that runs in the child too.
    template = ChatTemplate("{{ 'x' | center(1000000000) }}{{ 'y' * 1000000000 }}")
    with pytest.raises(TemplateResourceError) as info:
        template.render([])
    assert info.value.bound == "memory"


# ---------------------------------------------------------------------------
# Refused attributes raise, whatever the template does with them.

DUNDER_USES = [
    "{{ ''.__class__ | default('empty') }}",
    "{{ ''.__class__ is defined }}",
    "{% if ''.__class__ %}yes{% else %}no{% endif %}",
    "{{ 'a' ~ ''.__class__ }}",
    "{% set x = messages.__class__ %}ok",
    "{{ (messages | first).__init__ is none }}",
    "{{ ''['__class__'] | default('') }}",
]


@pytest.mark.parametrize("lenient", [None, False, True], ids=["auto", "strict", "lenient"])
@pytest.mark.parametrize("source", DUNDER_USES)
def test_a_refused_attribute_raises_instead_of_rendering_empty(source: str,
                                                               lenient: bool | None) -> None:
    with pytest.raises(TemplateSecurityError, match="unsafe"):
        ChatTemplate(source, lenient=lenient).render(USER)


# ---------------------------------------------------------------------------
# The general rule.

GROWTH_STEPS = [
    "{% set ns.s = ns.s ~ ns.s %}",
    "{% set ns.s = ns.s + ns.s %}",
    "{% set ns.s = ns.s * 3 %}",
    "{% set ns.s = ns.s.replace('a', 'aa') %}",
    "{% set ns.s = ns.s | center(ns.s | length * 2) %}",
    "{% set ns.s = ns.s | indent(8, true) %}",
    "{% set ns.s = '%s%s' % (ns.s, ns.s) %}",
    "{% set ns.s = '{}{}'.format(ns.s, ns.s) %}",
    "{% set ns.l = ns.l + ns.l %}",
    "{% set ns.l = [ns.l, ns.l, ns.s] %}",
    "{% set ns.l = ns.l * 2 %}",
    "{% set ns.l = dict(a=ns.l, b=ns.l) %}",
    "{% set ns.s = ns.l | tojson %}",
    "{% set ns.s = ns.l | string %}",
    "{% set ns.s = ns.l | join(ns.s) if ns.l is sequence and ns.l is not mapping "
    "else ns.s %}",
]
SMALL_VALUES = RenderLimits(max_output_chars=20_000, max_memory_bytes=64 << 20,
                            max_seconds=10)


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(st.sampled_from(GROWTH_STEPS), min_size=1, max_size=6),
       rounds=st.integers(min_value=1, max_value=40))
def test_whatever_a_template_builds_the_render_ends_within_the_bounds(steps: list[str],
                                                                      rounds: int) -> None:
    source = ("{% set ns = namespace(s='ab', l=['ab']) %}{% for i in range(" + str(rounds) +
              ") %}" + "".join(steps) + "{% endfor %}{{ ns.s }}{{ ns.l }}")
    tracemalloc.start()
    try:
        out = ChatTemplate(source, limits=SMALL_VALUES).render([])
        assert len(out) <= SMALL_VALUES.max_output_chars
    except TemplateResourceError as exc:  # a bound: its child held no more than it
        assert exc.bound in ("memory", "time", "output"), str(exc)
        assert exc.peak_memory_bytes < (64 << 20) + (128 << 20)
    except TemplateError as exc:  # a step that does not apply (dict + dict)
        assert "MemoryError" not in str(exc)
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    # What the template built stayed in its child: the host holds the prompt at most.
    assert peak < 4 << 20


SMALL_CASES = {
    "{{ 'ab' * 3 }}": "ababab",
    "{{ [1, 2] * 2 }}": "[1, 2, 1, 2]",
    "{{ 2 ** 10 }}{{ 3 * 4 }}": "102412",
    "{{ 'a' ~ 1 ~ none ~ 2.5 }}": "a1None2.5",
    "{{ 'x' | center(5) }}": "  x  ",
    "{{ '{:>4}'.format('y') }}{{ '{a}'.format_map({'a': 1}) }}": "   y1",
    "{{ '%3s' % 'z' }}{{ '%*d' % (3, 7) }}{{ '%s' | format('w') }}": "  z  7w",
    "{{ 'a-b' | replace('-', '+') }}{{ 'a-b'.replace('-', '++') }}": "a+ba++b",
    "{{ ['a', 'b'] | join(',') }}{{ ','.join(('c', 'd')) }}": "a,bc,d",
    "{{ 'q'.ljust(3) }}|{{ 'q'.rjust(3) }}|{{ '7'.zfill(3) }}": "q  |  q|007",
    "{{ [[1], [2]] | sum(start=[]) }}{{ ((1,), (2,)) | sum(start=()) }}{{ [1, 2] | sum }}":
        "[1, 2](1, 2)3",
    "{{ [1, 2, 3] | batch(2, 0) | list }}": "[[1, 2], [3, 0]]",
    "{{ [1, 2, 3] | slice(2) | list }}": "[[1, 2], [3]]",
    "{{ {'k': [1]} | tojson(indent=2) }}": '{\n  "k": [\n    1\n  ]\n}',
    "{{ 'a\nb' | indent(2) }}": "a\n  b",
    "{{ dict(a=1) }}{{ [1, (2, 3), {'x': 4}] }}": "{'a': 1}[1, (2, 3), {'x': 4}]",
    "{{ 'a\tb'.expandtabs(4) }}": "a   b",
    "{% for x in range(3) %}{{ x }}{% endfor %}{% for k in {'a': 1} %}{{ k }}{% endfor %}": "012a",
}


@pytest.mark.parametrize(("source", "expected"), list(SMALL_CASES.items()))
def test_guarded_operations_under_the_bounds_give_their_usual_result(source: str,
                                                                     expected: str) -> None:
    assert ChatTemplate(source).render([]) == expected


def test_the_deadline_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RENDER_SECONDS_VARIABLE, "0.25")
    assert RenderLimits().max_seconds == 0.25
    assert ChatTemplate("x").limits.max_seconds == 0.25
    monkeypatch.setenv(RENDER_SECONDS_VARIABLE, "not a number")
    assert RenderLimits().max_seconds == 10.0


# ---------------------------------------------------------------------------
# Real templates: the child changes nothing, and long histories stay in bounds.


def _real_templates() -> list[Any]:
    if not TEMPLATES_DIR.is_dir():
        return [pytest.param(None, marks=pytest.mark.skip(reason=MISSING_TEMPLATES))]
    return [pytest.param(p, id=p.stem) for p in sorted(TEMPLATES_DIR.glob("*.jinja"))]


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "days": {"type": "integer"}},
                   "required": ["city"]}}}]


def _history(exchanges: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    for i in range(exchanges):
        call_id = f"c{i:08d}"
        messages += [
            {"role": "user", "content": f"Weather in city {i}?"},
            {"role": "assistant", "content": "", "tool_calls": [{
                "id": call_id, "type": "function",
                "function": {"name": "get_weather", "arguments": {"city": f"C{i}", "days": i}}}]},
            {"role": "tool", "tool_call_id": call_id, "name": "get_weather",
             "content": f"sunny, {i} C"},
            {"role": "assistant", "content": f"It is sunny in city {i}."},
        ]
    messages.append({"role": "user", "content": "Thanks."})
    return messages


def _plain_environment(lenient: bool) -> jinja2.Environment:
    """Toolwire's environment in this process: Jinja's own sandbox, same options."""
    cls = SandboxedEnvironment if lenient else ImmutableSandboxedEnvironment
    env = cls(trim_blocks=True, lstrip_blocks=True,
              extensions=["jinja2.ext.loopcontrols", sandbox._GenerationTag])
    env.filters["tojson"] = sandbox._tojson_lenient if lenient else sandbox._tojson_strict
    env.filters["from_json"] = env.filters["fromjson"] = sandbox._from_json
    env.globals["raise_exception"] = sandbox._raise_exception
    env.globals["strftime_now"] = sandbox._strftime_now
    return env


@pytest.mark.parametrize("path", _real_templates())
def test_a_real_template_renders_as_in_jinjas_own_sandbox(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    messages = _history(3)
    template = ChatTemplate(source)
    try:
        ours = template.render(messages, tools=TOOLS, datetime="D", functions="[]")
    except TemplateError:
        ours = None
    plain = _plain_environment(template.uses_lenient).from_string(source)
    variables = {"messages": messages, "tools": TOOLS, "add_generation_prompt": True,
                 "bos_token": "", "eos_token": "", "datetime": "D", "functions": "[]"}
    try:
        theirs = plain.render(**variables)
    except Exception:
        theirs = None
    assert ours == theirs


@pytest.mark.parametrize("path", _real_templates())
def test_a_real_template_renders_a_long_history_within_the_default_bounds(path: Path) -> None:
    template = ChatTemplate(path.read_text(encoding="utf-8"))
    try:
        template.render(_history(150), tools=TOOLS)
    except TemplateError as exc:
        assert not isinstance(exc, TemplateResourceError), str(exc)


def test_plus_evaluates_each_operand_once_left_first_whatever_their_types() -> None:
    source = (
        "{% set ns = namespace(log='') %}"
        "{% macro a() %}{% set ns.log = ns.log ~ 'a' %}1{% endmacro %}"
        "{% macro b() %}{% set ns.log = ns.log ~ 'b' %}2{% endmacro %}"
        "{{ a() + b() }}|{{ (a() | int) + (b() | int) }}|{{ [a()] + [b()] }}|{{ ns.log }}"
    )
    assert ChatTemplate(source).render([]) == "12|3|['1', '2']|ababab"
    with pytest.raises(TemplateError, match="TypeError"):
        ChatTemplate("{{ 'x' + 1 }}").render([])


def test_a_conversation_as_large_as_the_server_takes_renders_within_the_default_bounds() -> None:
    """2,000 messages of 2,000,000 characters in all (``toolwire serve``'s defaults), text
    outside the Basic Multilingual Plane included: well within the memory bound."""
    from toolwire.templates.default_template import DEFAULT_CHAT_TEMPLATE

    piece = "日本語 text 🙂 " * 83
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": piece[:1000]}
                for i in range(2_000)]
    out = ChatTemplate(DEFAULT_CHAT_TEMPLATE).render(messages, tools=TOOLS)
    assert out.count("🙂") == sum(m["content"].count("🙂") for m in messages)
