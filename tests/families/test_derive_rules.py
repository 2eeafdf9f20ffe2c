"""Each derivation rule of docs/derived.md, on a made-up family no plugin knows.

Every template here is invented, so a rule that passes only learnt the real templates
would fail here; each derived record is then run on text the template renders, whole
and in random deltas (hypothesis).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolwire.errors import DerivationError
from toolwire.events import DiagnosticEvent, ToolCallEndEvent
from toolwire.families.derive import clear_derivation_cache, derive_format
from toolwire.families.derive_probe import ProbeRenderer
from toolwire.parse.engine import CallParser
from toolwire.parse.literal_reader import read_object_literal
from toolwire.parse.record import (
    CallFormat,
    CallObjects,
    GrammarArguments,
    ObjectLiteral,
    PythonicCalls,
    TaggedArguments,
)
from toolwire.testing import strategies as tws

_TURNS = """\
{%- for m in messages -%}
<|{{ m.role }}|>{{ m.content or '' }}
{%- if m.tool_calls %}{% for c in m.tool_calls %}CALLS{% endfor %}{% endif %}<|end|>
{% endfor -%}
{%- if add_generation_prompt %}<|assistant|>{% endif -%}"""


def _family(calls: str) -> str:
    """A chat template that writes each call as ``calls`` (Jinja, ``c`` is the call)."""
    return _TURNS.replace("CALLS", calls)


SCHEMA = {"type": "object", "properties": {
    "query": {"type": "string"}, "limit": {"type": "integer"}, "ok": {"type": "boolean"},
    "note": {"type": ["string", "null"]}}}
TOOLS = {"search": SCHEMA, "lookup": SCHEMA}

_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
_arguments = st.fixed_dictionaries({}, optional={
    "query": _text, "limit": st.integers(-10**6, 10**6), "ok": st.booleans(),
    "note": st.none() | _text})


def _parse(fmt: CallFormat, pieces: list[str]) -> tuple[list[tuple[str, dict[str, Any]]], str]:
    parser = CallParser(fmt, TOOLS)
    events = [e for p in pieces for e in parser.feed(p)] + parser.close()
    assert not [e for e in events if isinstance(e, DiagnosticEvent)], events
    calls = [(e.name, dict(e.arguments)) for e in events if isinstance(e, ToolCallEndEvent)]
    text = "".join(e.text for e in events if e.type == "text")
    return calls, text


def _round_trip(template: str, calls: list[tuple[str, dict[str, Any]]],
                data: st.DataObject) -> None:
    fmt = derive_format(template)
    reply = ProbeRenderer(template).text(calls)
    got, text = _parse(fmt, data.draw(tws.chunkings(reply)))
    assert got == calls
    assert not text.strip()


# -- 1 and 3: values without closing markers, Python-literal bodies ------------------------

PYTHON_DICT = _family("<call>{{ c.function.name }} {{ c.function.arguments }}</call>")
QUOTE_TOKEN = _family(
    "[[call {{ c.function.name }}]]{{ '{' }}"
    "{%- for k, v in c.function.arguments | dictsort %}{{ k }}:"
    "{%- if v is string %}~~{{ v }}~~{% elif v is none %}nil{% else %}{{ v | tojson }}"
    "{%- endif %}{% if not loop.last %},{% endif %}{% endfor %}{{ '}' }}[[/call]]")


def test_python_str_of_a_mapping_is_read_as_a_python_literal() -> None:
    fmt = derive_format(PYTHON_DICT)
    assert isinstance(fmt.arguments, GrammarArguments)
    assert fmt.arguments.reader == ObjectLiteral(quote="'", escapes=True)
    assert fmt.call_open == ("<call>",) and fmt.call_close == ("</call>",)


@settings(max_examples=40)
@given(calls=st.lists(st.tuples(st.sampled_from(["search", "lookup"]), _arguments),
                      min_size=1, max_size=3), data=st.data())
def test_python_literal_bodies_round_trip(calls: list[tuple[str, dict[str, Any]]],
                                          data: st.DataObject) -> None:
    calls = [(n, a) for n, a in calls if not any("</call>" in str(v) for v in a.values())]
    if calls:
        _round_trip(PYTHON_DICT, calls, data)


def test_a_family_quote_token_is_read_off_the_probes() -> None:
    fmt = derive_format(QUOTE_TOKEN)
    assert isinstance(fmt.arguments, GrammarArguments)
    assert fmt.arguments.reader == ObjectLiteral(quote="~~", escapes=False)
    assert fmt.header_end == ("]]",)
    # toolwire detect --derive --json shows the notation, not just its name
    assert fmt.describe()["arguments"][0]["reader"] == {"quote": "~~", "escapes": False}


@settings(max_examples=40)
@given(query=_text.filter(lambda s: "~~" not in s and not s.endswith("~")),
       limit=st.integers(-1000, 1000), data=st.data())
def test_raw_strings_between_quote_tokens_round_trip(query: str, limit: int,
                                                     data: st.DataObject) -> None:
    _round_trip(QUOTE_TOKEN, [("search", {"limit": limit, "query": query})], data)


def test_object_literal_null_stays_null_only_where_the_schema_allows_it() -> None:
    syntax = ObjectLiteral(quote="'", escapes=True)
    assert read_object_literal(syntax, "{'a': None, 'b': 'it\\'s', 'c': [1, True]}") == \
        {"a": None, "b": "it's", "c": [1, True]}
    fmt = CallFormat(family="x", call_open="<c>", header_stop="{", call_close="</c>",
                     arguments=GrammarArguments(reader=syntax))
    calls, _ = _parse(fmt, ["<c>search{'query': None, 'note': None}</c>"])
    assert calls == [("search", {"query": "None", "note": None})]


@given(text=tws.adversarial_text(max_size=120, fragments=(
    "[[call ", "]]", "[[/call]]", "{", "}", "~~", ":", ",", "[", "]")))
def test_object_literal_garbage_never_raises(text: str) -> None:
    parser = CallParser(derive_format(QUOTE_TOKEN), TOOLS)
    events = parser.feed(text) + parser.close()
    assert not any(isinstance(e, DiagnosticEvent) and e.code == "parser_error" for e in events)


PRINTED_VALUES = _family('<fn name="{{ c.function.name }}">'
                         '{% for k, v in c.function.arguments | items %}<p name="{{ k }}">{{ v }}'
                         "</p>{% endfor %}</fn>")


def test_tagged_values_printed_with_str_are_python_literals() -> None:
    fmt = derive_format(PRINTED_VALUES)
    assert isinstance(fmt.arguments, TaggedArguments) and fmt.arguments.python_values
    calls, _ = _parse(fmt, ['<fn name="search"><p name="ok">True</p><p name="note">None</p>'
                            "</fn>"])
    assert calls == [("search", {"ok": True, "note": None})]


# -- 2: pythonic calls ---------------------------------------------------------------------

PYTHONIC_LINES = _TURNS.replace(
    "{% for c in m.tool_calls %}CALLS{% endfor %}",
    "<tool_calls>\n{% for c in m.tool_calls %}{{ c.function.name }}("
    "{%- for k, v in c.function.arguments | items %}{{ k }}={{ v | tojson }}"
    "{%- if not loop.last %}, {% endif %}{% endfor %})\n{% endfor %}</tool_calls>")
PYTHONIC_LIST = _TURNS.replace(
    "{% for c in m.tool_calls %}CALLS{% endfor %}",
    "<|calls|>[{% for c in m.tool_calls %}{{ c.function.name }}("
    "{%- for k, v in c.function.arguments | items %}{{ k }}={{ v | tojson }}"
    "{%- if not loop.last %}, {% endif %}{% endfor %})"
    "{%- if not loop.last %}, {% endif %}{% endfor %}]<|/calls|>")


def test_pythonic_calls_one_per_line_inside_tags() -> None:
    fmt = derive_format(PYTHONIC_LINES)
    assert fmt.arguments == PythonicCalls(bare=True)
    assert (fmt.section_open, fmt.section_close) == (("<tool_calls>",), ("</tool_calls>",))


def test_pythonic_call_lists_inside_section_markers() -> None:
    fmt = derive_format(PYTHONIC_LIST)
    assert fmt.arguments == PythonicCalls()
    assert fmt.section_open == ("<|calls|>",)


@settings(max_examples=30)
@given(calls=st.lists(st.tuples(st.sampled_from(["search", "lookup"]), _arguments),
                      min_size=1, max_size=3), data=st.data())
def test_pythonic_calls_round_trip(calls: list[tuple[str, dict[str, Any]]],
                                   data: st.DataObject) -> None:
    _round_trip(PYTHONIC_LIST, calls, data)


# -- 4: counters and ids -------------------------------------------------------------------

COUNTED = _family('<call n="{{ loop.index }}" fn="{{ c.function.name }}">'
                  "{{ c.function.arguments | tojson }}</call>")
COUNTED_OBJECTS = _TURNS.replace(
    "{% for c in m.tool_calls %}CALLS{% endfor %}",
    "<acts>[{% for c in m.tool_calls %}{\"seq\": \"{{ loop.index0 }}\", \"tool\": "
    "\"{{ c.function.name }}\", \"args\": {{ c.function.arguments | tojson }}}"
    "{% if not loop.last %}, {% endif %}{% endfor %}]</acts>")


def test_a_counter_from_any_start_is_an_id_hole() -> None:
    fmt = derive_format(COUNTED)
    assert fmt.header.patterns == ('{id}" fn="{name}',) or "{id}" in fmt.call_open[0] + \
        fmt.header.patterns[0]
    calls, _ = _parse(fmt, ['<call n="7" fn="search">{"limit": 1}</call>'])
    assert calls == [("search", {"limit": 1})]


def test_call_objects_with_a_counter_key_in_any_order() -> None:
    fmt = derive_format(COUNTED_OBJECTS)
    assert isinstance(fmt.arguments, CallObjects)
    assert fmt.arguments.name_keys == ("tool",) and fmt.arguments.args_keys == ("args",)
    assert "seq" in fmt.arguments.extra_keys


TYPE_WORDS = _family(
    '<call name="{{ c.function.name }}">{% for k, v in c.function.arguments | items %}'
    '<arg key="{{ k }}" type="{{ "text" if v is string else "json" }}">'
    "{{ v if v is string else v | tojson }}</arg>{% endfor %}</call>")


def test_a_type_word_in_the_value_header_is_a_kind_hole() -> None:
    fmt = derive_format(TYPE_WORDS)
    assert isinstance(fmt.arguments, TaggedArguments)
    assert fmt.arguments.header.patterns == ('{name}" type="{kind}',)
    assert fmt.arguments.header.kinds == {"text": "string", "*": "json"}
    # the word, not the schema, says how to read the value: a string "7" stays a string
    calls, _ = _parse(fmt, ['<call name="search"><arg key="query" type="text">7</arg>'
                            '<arg key="limit" type="json">7</arg></call>'])
    assert calls == [("search", {"query": "7", "limit": 7})]


# -- 5: the name written twice -------------------------------------------------------------

NAME_TWICE = _family("@{{ c.function.name }}: <invoke name=\"{{ c.function.name }}\">"
                     "{{ c.function.arguments | tojson }}</invoke>")


def test_the_name_written_twice_is_one_checked_value() -> None:
    fmt = derive_format(NAME_TWICE)
    assert fmt.header.patterns[0].count("{name}") == 2
    calls, _ = _parse(fmt, ['@search: <invoke name="search">{"limit": 2}</invoke>'])
    assert calls == [("search", {"limit": 2})]
    parser = CallParser(fmt, TOOLS)  # the copies disagree: not a call
    events = parser.feed('@search: <invoke name="lookup">{"limit": 2}</invoke>') + \
        parser.close()
    assert not [e for e in events if isinstance(e, ToolCallEndEvent)]


# -- 6: content-dependent wrapping ---------------------------------------------------------

CDATA = _family(
    '<fn name="{{ c.function.name }}">{% for k, v in c.function.arguments | items %}'
    '<p name="{{ k }}">{% if v is string and ("<" in v or "&" in v) %}<![CDATA[{{ v }}]]>'
    "{% elif v is string %}{{ v }}{% else %}{{ v | tojson }}{% endif %}</p>"
    "{% endfor %}</fn>")
REOPENED = """\
{%- for m in messages -%}
<|{{ m.role }}|>
{%- if m.tool_calls %}{% if m.content %}{{ m.content }}<|end|><|assistant|>{% endif %}
{%- for c in m.tool_calls %}<<{{ c.function.name }}>>{{ c.function.arguments | tojson }}
{%- endfor %}<|end|>
{% else %}{{ m.content or '' }}<|end|>
{% endif %}{% endfor -%}
{%- if add_generation_prompt %}<|assistant|>{% endif -%}"""


def test_cdata_only_where_a_value_needs_it() -> None:
    fmt = derive_format(CDATA)
    assert isinstance(fmt.arguments, TaggedArguments) and fmt.arguments.cdata
    calls, _ = _parse(fmt, ['<fn name="search"><p name="query"><![CDATA[a < b]]></p>'
                            '<p name="limit">3</p></fn>'])
    assert calls == [("search", {"query": "a < b", "limit": 3})]


def test_a_turn_reopened_for_the_calls_is_turn_markup() -> None:
    fmt = derive_format(REOPENED)
    assert "<|end|>" in fmt.drops and "<|assistant|>" in fmt.drops
    calls, text = _parse(fmt, ['Sure.<|end|><|assistant|><<search>>{"limit": 1}'])
    assert calls == [("search", {"limit": 1})] and text == "Sure."


NESTED = (
    "{%- macro el(v) -%}{%- if v is mapping %}{% for k, x in v | items %}"
    "@@<{{ k }}>{{ el(x) }}@@</{{ k }}>{% endfor %}{%- elif v is string %}{{ v }}"
    "{%- elif v is iterable %}{% for x in v %}@@<item>{{ el(x) }}@@</item>{% endfor %}"
    "{%- else %}{{ v | tojson }}{% endif %}{%- endmacro -%}"
    + _family('@@<call name="{{ c.function.name }}">{{ el(c.function.arguments) }}@@</call>'))
PROMPT_OPENS = """\
{%- for m in messages -%}
<|{{ m.role }}|>
{%- if m.tool_calls %}{% if m.content %}%%%all
{{ m.content }}{% endif %}{% for c in m.tool_calls %}%%%{{ c.function.name }}
{{ c.function.arguments | tojson }}{% endfor %}{% else %}%%%all
{{ m.content or '' }}{% endif %}<|end|>
{% endfor -%}
{%- if add_generation_prompt %}<|assistant|>%%%{% endif -%}"""


def test_object_values_written_as_nested_elements_are_read_back() -> None:
    fmt = derive_format(NESTED)
    assert isinstance(fmt.arguments, TaggedArguments) and fmt.arguments.nested == "@@"
    assert fmt.arguments.close == "@@</{name}>"
    tools = {"search": {"type": "object", "properties": {
        "query": {"type": "string"},
        "filter": {"type": "object", "properties": {"tags": {"type": "array"}}}}}}
    parser = CallParser(fmt, tools)
    reply = ('@@<call name="search">@@<query>x@@</query>@@<filter>@@<tags>@@<item>a@@</item>'
             "@@<item>b@@</item>@@</tags>@@</filter>@@</call>")
    events = parser.feed(reply) + parser.close()
    got = [(e.name, dict(e.arguments)) for e in events if isinstance(e, ToolCallEndEvent)]
    assert got == [("search", {"query": "x", "filter": {"tags": ["a", "b"]}})]


def test_a_generation_prompt_that_opens_the_call_lets_a_reply_begin_with_one() -> None:
    fmt = derive_format(PROMPT_OPENS)
    assert fmt.at_start and fmt.call_open == ("%%%",)
    assert fmt.text_headers == ("all",)  # the word addressing the user, not a tool
    calls, text = _parse(fmt, ['search\n{"limit": 1}%%%lookup\n{"ok": true}'])
    assert calls == [("search", {"limit": 1}), ("lookup", {"ok": True})] and not text
    calls, text = _parse(fmt, ['all\nHello.%%%search\n{"limit": 2}'])
    assert calls == [("search", {"limit": 2})] and text.strip() == "Hello."


# -- 7: probe shapes -----------------------------------------------------------------------

STRING_ARGUMENTS = _family("{{ '<fn ' + c.function.name + '>' + c.function.arguments + '</fn>' }}")
READS_SCHEMA = _TURNS.replace(
    "{% for c in m.tool_calls %}CALLS{% endfor %}",
    "{% for c in m.tool_calls %}<fn {{ c.function.name }}>"
    "{{ c.function.arguments | tojson }}</fn>{% endfor %}").replace(
    "{%- if add_generation_prompt %}",
    "{%- for t in tools or [] %}{% for k, p in t.function.parameters.properties | items %}"
    "{% if p.type == 'object' %}{{ p.additionalProperties.type }}{% endif %}{% endfor %}"
    "{% endfor %}{%- if add_generation_prompt %}")


def test_a_template_that_concatenates_arguments_gets_a_json_string() -> None:
    fmt = derive_format(STRING_ARGUMENTS)
    assert fmt.call_open == ("<fn",) and fmt.call_close == ("</fn>",)


def test_a_template_that_reads_schema_fields_gets_them() -> None:
    fmt = derive_format(READS_SCHEMA)
    assert fmt.call_open == ("<fn",)


# -- refusals and the cache ----------------------------------------------------------------

UNENDED = _family("<call {{ c.function.name }}>{% for k, v in c.function.arguments | items %}"
                  "{{ k }}={{ v }}{% if not loop.last %};{% endif %}{% endfor %}</call>")


def test_a_refusal_names_the_missing_rule() -> None:
    with pytest.raises(DerivationError, match=r"\[missing rule: value grammar"):
        derive_format(UNENDED)
    with pytest.raises(DerivationError, match=r"\[missing rule: probe shapes"):
        derive_format(_family("{{ raise_exception('calls are not supported') }}"))


def test_a_template_that_drops_calls_is_refused_as_having_no_call_markup() -> None:
    # it renders every probe shape, and writes nothing for the calls: no rule can help
    with pytest.raises(DerivationError, match=r"\[missing rule: call markup: none can apply"):
        derive_format("{% for m in messages %}{{ m.content }}{% endfor %}")
    # a template that lists the tools in its prompt but drops the calls, and raises
    # on a None content (as Granite 3.3 and Phi-3.5 do), is refused the same way
    lists_tools = ("{% for t in tools or [] %}{{ t.function.name }}{% endfor %}"
                   "{% for m in messages %}{{ '<' + m.role + '>' + m.content }}{% endfor %}")
    with pytest.raises(DerivationError, match=r"\[missing rule: call markup"):
        derive_format(lists_tools)


def test_derivation_is_cached_by_template_hash() -> None:
    clear_derivation_cache()
    first = derive_format(COUNTED)
    assert derive_format(COUNTED) is first
    clear_derivation_cache()
    assert derive_format(COUNTED) == first
    for _ in range(2):  # a refusal is cached too, and raised afresh each time
        with pytest.raises(DerivationError, match="missing rule"):
            derive_format(UNENDED)


@pytest.mark.parametrize("template", [PYTHON_DICT, QUOTE_TOKEN, PYTHONIC_LINES, PYTHONIC_LIST,
                                      COUNTED, COUNTED_OBJECTS, TYPE_WORDS, NAME_TWICE, CDATA,
                                      NESTED, REOPENED, PROMPT_OPENS, STRING_ARGUMENTS,
                                      READS_SCHEMA],
                         ids=["python_dict", "quote_token", "pythonic_lines", "pythonic_list",
                              "counted", "counted_objects", "type_words", "name_twice",
                              "cdata", "nested", "reopened", "prompt_opens",
                              "string_arguments", "reads_schema"])
def test_each_derived_record_prints_as_python_that_evaluates_back(template: str) -> None:
    from toolwire.parse import record
    from toolwire.parse.record_source import format_source

    fmt = derive_format(template)
    namespace: dict[str, Any] = {n: getattr(record, n) for n in record.__all__}
    exec(format_source(fmt), namespace)
    assert namespace["FORMAT"] == fmt


_CALL_PIECES = ("<call>", "</call>", "[[", "]]", "{", "}", " ", "\n", ":", "<|x|>",
                "{{ c.function.name }}", "{{ c.function.arguments | tojson }}",
                "{{ c.function.arguments }}", "{{ c.id }}", "{{ loop.index }}",
                "{% for k, v in c.function.arguments | items %}<{{ k }}>{{ v }}</{{ k }}>"
                "{% endfor %}", "{{ raise_exception('no') }}", "{% if loop.first %}<s>{% endif %}")


@settings(max_examples=60, deadline=None)
@given(parts=st.lists(st.sampled_from(_CALL_PIECES), max_size=10))
def test_any_template_derives_or_is_refused_with_a_rule(parts: list[str]) -> None:
    try:
        fmt = derive_format(_family("".join(parts)))
    except DerivationError as exc:
        assert "[missing rule: " in str(exc)
    else:
        assert isinstance(fmt, CallFormat)
