"""Infer a model family's tool-call markup from its chat template.

A chat template already says how the model writes a call: it renders an
assistant's ``tool_calls`` in the model's own markup. :func:`derive_format`
renders synthetic conversations that differ in one thing at a time (no call vs
one call, one vs two calls, name A vs B, one vs two arguments, a string vs a
number value, no arguments) and reads the markers off the differences. The
result is the same :class:`~toolwire.parse.record.CallFormat` a plugin author
writes (``toolwire detect --derive`` prints it as Python), run by the one engine;
:mod:`.derive_record` says how markers become the record.

When the differences do not fit the model (no call rendered, a name written
twice, values without closing markers), :class:`DerivationError` says what was
seen. :func:`derive_format` finally checks itself: it renders a richer
conversation (three calls, several value types) and parses it back with the
record; markers that do not reproduce the template's own output are an error,
never a wrong parser.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import attrs

from ..errors import DerivationError, TemplateError
from ..parse.record import CallFormat
from .derive_probe import (
    ID_HOLE,
    KEY_A,
    KEY_B,
    NAME_A,
    NAME_B,
    NUMBER_VALUE,
    TEXT_VALUE,
    Call,
    ProbeRenderer,
    refusal,
)
from .derive_record import (
    CHECK_CALLS,
    KEY_HOLE,
    InferredMarkup,
    to_call_format,
    verify_format,
)

__all__ = ["DerivationError", "clear_derivation_cache", "derive_format"]


def _call(name: str, args: dict[str, Any]) -> Call:
    return (name, dict(args))


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _common_suffix(a: str, b: str, limit: int) -> int:
    i = 0
    limit = min(limit, len(a), len(b))
    while i < limit and a[-1 - i] == b[-1 - i]:
        i += 1
    return i


def _json_object_at(text: str, key: str, expected: Mapping[str, Any]) -> tuple[int, int] | None:
    """Find a JSON object equal to ``expected`` around ``key``: (start, end)."""
    decoder = json.JSONDecoder()
    start = text.rfind("{", 0, text.find(key) + 1)
    while start >= 0:
        try:
            value, end = decoder.raw_decode(text, start)
        except ValueError:
            value, end = None, -1
        if value == dict(expected):
            return start, end
        start = text.rfind("{", 0, start)
    return None


def _reasoning_markers(source: str) -> tuple[str, str]:
    for open_tag, close_tag in (("<think>", "</think>"), ("<seed:think>", "</seed:think>")):
        if close_tag in source:
            return open_tag, close_tag
    return "", ""


_CACHE: OrderedDict[tuple[str, bool], CallFormat | DerivationError] = OrderedDict()
_CACHE_LIMIT = 64
_CACHE_LOCK = threading.Lock()


def clear_derivation_cache() -> None:
    """Forget every derived record and refusal (for benchmarks and tests)."""
    with _CACHE_LOCK:
        _CACHE.clear()


def derive_format(source: str, *, verify: bool = True) -> CallFormat:
    """Infer the call markup a template renders, as the engine's record.

    The outcome (the record, or the refusal) is cached by the template's sha256, so
    a template is probed once per process; the least recently used of more than 64
    outcomes is dropped.

    :param verify: parse a richer rendered conversation back with the record and
        refuse one that does not reproduce it.
    :raises DerivationError: the markup could not be inferred, or failed the check.
    """
    key = (hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest(), verify)
    with _CACHE_LOCK:
        cached = _CACHE.get(key)
        if cached is not None:
            _CACHE.move_to_end(key)
    if cached is None:
        try:
            cached = _derive_format(source, verify)
        except DerivationError as exc:
            cached = exc
        except TemplateError as exc:
            cached = refusal(f"the template failed while rendering probe calls: {exc}",
                             rule="probe shapes")
        except (ValueError, TypeError, LookupError, RecursionError) as exc:
            # an untrusted template rendered something no probe expects: refused, never
            # a traceback in the caller's chat
            cached = refusal(f"the probes came out in a shape derivation cannot read "
                             f"({type(exc).__name__}: {exc})",
                             rule="a drift the probes do not model")
        with _CACHE_LOCK:
            _CACHE[key] = cached
            while len(_CACHE) > _CACHE_LIMIT:
                _CACHE.popitem(last=False)
    if isinstance(cached, DerivationError):
        raise DerivationError(str(cached), seen=cached.seen)  # a fresh one each time
    return cached


def _derive_format(source: str, verify: bool) -> CallFormat:
    renderer = ProbeRenderer(source, probes=_PROBES)
    inferred = _derive(renderer, source)
    fmt = to_call_format(_snap_boundaries(inferred), drops=renderer.drops(),
                         prompt_opens=renderer.prompt_opens,
                         content_prefix=renderer.content_prefix)
    if verify:
        problem = verify_format(fmt, renderer)
        if problem:
            raise refusal(f"the inferred record does not reproduce the template's "
                          f"output: {problem}", seen=repr(fmt),
                          rule="a drift the probes do not model")
    return fmt


def _index_hole(first: str, second: str) -> str | None:
    """``first`` with the one place where one call writes a number ``n`` and the next
    ``n + 1`` replaced by ``{id}`` (a counter: the parser reads it as the call's id),
    else ``None``."""
    prefix = _common_prefix(first, second)
    start = prefix
    while start > 0 and first[start - 1].isdigit():
        start -= 1
    end_first, end_second = _digits_end(first, prefix), _digits_end(second, prefix)
    if start in (end_first, end_second) or end_first - start > 9 or end_second - start > 9:
        return None
    if int(second[start:end_second]) != int(first[start:end_first]) + 1:
        return None
    if first[end_first:end_first + 64] != second[end_second:end_second + 64] and \
            not second.startswith(first[end_first:], end_second):
        return None
    return first[:start] + ID_HOLE + first[end_first:]


def _counter_context(first: str, second: str) -> str:
    """The text written right before the counter :func:`_index_hole` found."""
    start = _common_prefix(first, second)
    while start > 0 and first[start - 1].isdigit():
        start -= 1
    return first[max(0, start - 24):start]


def _opening_counter(head: str, middle: str) -> str:
    """The text before a counter written in the call's opening (``<call n="1" fn=`` then
    ``<call n="2" fn=``), where the first call's opening ends ``head`` and the second's
    ends ``middle``; ``""`` when there is none."""
    reversed_hole = _index_hole(head[::-1], middle[::-1])
    if reversed_hole is None:
        return ""
    after = _common_suffix(head, middle, len(head))
    start = len(head) - after
    while start > 0 and head[start - 1].isdigit():
        start -= 1
    # the probes' counters are one digit long, so the reversed digits read the same
    return head[max(0, start - 24):start]


def _digits_end(text: str, at: int) -> int:
    while at < len(text) and text[at].isdigit():
        at += 1
    return at


def _leading_run(marker: str, other: str) -> str:
    """The end of the previous tag a character diff left at the start of ``marker`` and of
    ``other`` (both follow the same text): the characters through a ``>`` that comes
    before any ``<``, the whole tags both begin with (``<|sep|>`` of
    ``<|sep|><|open|>argument`` and ``<|sep|><|close|>call``), or the characters before
    the first ``<``."""
    at, gt = marker.find("<"), marker.find(">")
    if 0 <= gt and (at < 0 or gt < at):
        run = marker[:gt + 1]
        return run if other.startswith(run) and len(run) < len(marker) else ""
    if at == 0:
        shared = marker[:_common_prefix(marker, other)]
        whole = shared.rfind(">") + 1
        return shared[:whole] if 0 < whole < len(marker) else ""
    return marker[:at] if at > 0 and other.startswith(marker[:at]) else ""


def _snap_boundaries(fmt: InferredMarkup) -> InferredMarkup:
    """Move tag endings (``>``, ``|>``) split off by character diffs back onto the tag
    they close, wherever every context the marker appears in agrees.

    Only cosmetic for the parser (the concatenations stay the same), but the
    record a person reads says ``<calls>`` rather than ``<calls``.
    """
    run = _leading_run(fmt.call_open, fmt.section_close)
    if run and not fmt.call_separator and fmt.section_open and \
            fmt.section_close.startswith(run):
        fmt = attrs.evolve(fmt, section_open=fmt.section_open + run,
                           call_close=fmt.call_close + run,
                           call_open=fmt.call_open[len(run):],
                           section_close=fmt.section_close[len(run):])
    if fmt.arguments == "tagged":
        run = _leading_run(fmt.arg_open, fmt.call_close)
        if run and not fmt.arg_separator and fmt.call_close.startswith(run) and \
                ID_HOLE not in run:
            fmt = attrs.evolve(fmt, name_close=fmt.name_close + run,
                               value_close=fmt.value_close + run,
                               string_value_close=fmt.string_value_close + run,
                               arg_open=fmt.arg_open[len(run):],
                               call_close=fmt.call_close[len(run):])
    return fmt


def _split_call(block: str, name: str, echo: str = "") -> tuple[str, str]:
    """``block`` before and after the call's name (both copies where it is written
    twice, ``echo`` between them)."""
    at = block.find(name)
    if at < 0:
        raise refusal("the template does not render the function name",
                      seen=block[:300], rule="call openings")
    end = at + len(name)
    if echo and block.startswith(echo + name, end):
        end += len(echo) + len(name)
    if block.find(name, end) >= 0:
        raise refusal("the template writes the function name more than twice in a "
                      "call, or twice with different text between", seen=block[:300],
                      rule="the name written twice")
    return block[:at], block[end:]


def _name_echo(one: str) -> str:
    """The text between the two copies of a name written twice in a call (Muse Glimmer's
    ``to=NAME<|message|>...<atem:invoke name="NAME"``), or ``""``."""
    first = one.find(NAME_A)
    second = one.find(NAME_A, first + len(NAME_A))
    if second < 0:
        return ""
    echo = one[first + len(NAME_A):second]
    if KEY_A in echo or TEXT_VALUE in echo or not echo.strip():
        raise refusal("the template writes the function name twice around the "
                      "arguments (no rule reads that)", seen=one[:300],
                      rule="the name written twice")
    return echo


def _call_object(block: str, name: str,
                 start_at: int = 0) -> tuple[int, int, dict[str, Any]] | None:
    """The JSON object around the first ``name`` after ``start_at`` that holds it as a
    string value: ``(start, end, object)``."""
    at = block.find(name, start_at)
    decoder = json.JSONDecoder()
    start = block.rfind("{", start_at, at)
    while start >= start_at:
        try:
            value, end = decoder.raw_decode(block, start)
        except ValueError:
            value, end = None, -1
        if isinstance(value, dict) and end > at and name in value.values():
            return start, end, value
        start = block.rfind("{", start_at, start)
    return None


def _derive_objects(r: ProbeRenderer, one: str, source: str) -> InferredMarkup | None:
    """Whole calls written as JSON objects (``{"name": ..., "arguments": {...}}`` in any
    key order, with ids or counters beside them), or ``None``."""
    found = _call_object(one, NAME_A)
    if found is None:
        return None
    start, end, obj = found
    name_keys = [k for k, v in obj.items() if v == NAME_A]
    args_keys = [k for k, v in obj.items() if v == {KEY_A: TEXT_VALUE}]
    if len(name_keys) != 1 or len(args_keys) != 1:
        return None
    head, tail, separator = one[:start], one[end:], ""
    parallel = r.parallel
    if parallel:
        two = r.block([_call(NAME_A, {KEY_A: TEXT_VALUE}), _call(NAME_B, {KEY_A: TEXT_VALUE})])
        first, second = _call_object(two, NAME_A), None
        if first is not None:
            second = _call_object(two, NAME_B, first[1])
        if first is None or second is None or two[:first[0]] != head or \
                two[second[1]:] != tail:
            return None
        between = two[first[1]:second[0]]
        if between.startswith(tail.rstrip()) and between.endswith(head.lstrip()) and \
                tail.strip():
            separator = ""  # each call in a section of its own
        else:
            separator = between
    reasoning = _reasoning_markers(source)
    return InferredMarkup(
        section_open=head, section_close=tail, call_open="", name_close="", call_close="",
        call_separator=separator, arguments="objects", parallel=parallel,
        reasoning_open=reasoning[0], reasoning_close=reasoning[1], name_key=name_keys[0],
        args_key=args_keys[0], extra_keys=tuple(k for k in obj if k not in
                                                (name_keys[0], args_keys[0])))


def _derive(r: ProbeRenderer, source: str) -> InferredMarkup:
    inferred = _derive_markers(r, source)
    if inferred.call_separator.strip() and not inferred.section_open.strip():
        # calls rendered as turns of their own (Muse Glimmer): what is written between
        # them ends one turn and opens the next, turn markup the record drops
        r.collect(inferred.call_separator)
        inferred = attrs.evolve(inferred, call_separator="")
    return attrs.evolve(inferred, name_echo=r.name_echo)


_PYTHONIC_START = re.compile(r"\s*\(\s*" + KEY_A + r"\s*=")
_QUOTED_VALUE = "zq'q\\b"


def _derive_pythonic(r: ProbeRenderer, one: str, source: str) -> InferredMarkup | None:
    """Calls written as Python, ``name(key=value, ...)``: in a list (``[f(...), g(...)]``)
    or bare, inside section markers or not, or ``None``."""
    at = one.find(NAME_A)
    tail = one[at + len(NAME_A):]
    if _PYTHONIC_START.match(tail) is None:
        return None
    value = tail.find(TEXT_VALUE)
    close = tail.find(")", value + len(TEXT_VALUE))
    if value < 0 or close < 0:
        return None
    head, after = one[:at].rstrip(), tail[close + 1:]
    in_list = head.endswith("[") and after.lstrip().startswith("]")
    if in_list:
        head, after = head[:-1], after.lstrip()[1:]
    separator = ""
    if r.parallel:
        two = r.block([_call(NAME_A, {KEY_A: TEXT_VALUE}), _call(NAME_B, {KEY_A: TEXT_VALUE})])
        first_end = two.find(")", two.find(TEXT_VALUE)) + 1
        between = two[first_end:two.find(NAME_B)]
        if in_list and between.strip() != ",":
            return None
        if not in_list and between.strip() and between.strip() != (after + head).strip():
            separator = between  # calls one per line inside one section
    quoted = r.block([_call(NAME_A, {KEY_A: _QUOTED_VALUE})])
    reasoning = _reasoning_markers(source)
    return InferredMarkup(
        section_open=head, section_close=after, call_open="", name_close="", call_close="",
        call_separator=separator, arguments="pythonic", parallel=r.parallel,
        reasoning_open=reasoning[0], reasoning_close=reasoning[1],
        raw_strings=f"'{_QUOTED_VALUE}'" in quoted or f'"{_QUOTED_VALUE}"' in quoted,
        bare=not in_list)


def _derive_markers(r: ProbeRenderer, source: str) -> InferredMarkup:
    one = r.block([_call(NAME_A, {KEY_A: TEXT_VALUE})])
    if NAME_A not in one:
        raise refusal("the template renders no tool call for an assistant message",
                      seen=one[:300], rule="probe shapes")
    whole = _derive_objects(r, one, source) or _derive_pythonic(r, one, source)
    if whole is not None:
        return whole
    echo = r.name_echo = _name_echo(one)
    head, tail = _split_call(one, NAME_A, echo)

    section_open, section_close, call_open, call_tail, separator = "", "", head, tail, ""
    parallel = r.parallel
    two = r.block([_call(NAME_A, {KEY_A: TEXT_VALUE}), _call(NAME_B, {KEY_A: TEXT_VALUE})]) \
        if parallel else ""
    if parallel and NAME_B in two:
        head2, rest = _split_call(two, NAME_A, echo)
        middle, tail2 = _split_call(rest, NAME_B, echo)
        context = _opening_counter(head, middle)
        if context:  # a counter in the call's opening: read every probe with its hole
            r.count_after(context)
            one = r.block([_call(NAME_A, {KEY_A: TEXT_VALUE})])
            two = r.block([_call(NAME_A, {KEY_A: TEXT_VALUE}), _call(NAME_B, {KEY_A: TEXT_VALUE})])
            head, tail = _split_call(one, NAME_A, echo)
            head2, rest = _split_call(two, NAME_A, echo)
            middle, tail2 = _split_call(rest, NAME_B, echo)
        if head2 != head:
            raise refusal("the first of two calls opens differently from a single call",
                          seen=two[:300], rule="call openings")
        call_open = head[len(head) - _common_suffix(head, middle, len(head)):]
        section_open = head[:len(head) - len(call_open)]
        rest_a = middle[:len(middle) - len(call_open)]
        shared = _common_prefix(tail, rest_a)
        call_tail, separator, section_close = tail[:shared], rest_a[shared:], tail[shared:]
        if tail2 != tail and not section_close and tail2.startswith(tail):
            # the section's end is written only after several calls (R1 distills): the
            # engine accepts a section that the reply ends without closing
            section_close = tail2[len(tail):]
        elif tail2 != tail:
            # the call's position may be written in it (Kimi's ``functions.NAME:0``)
            indexed = _index_hole(tail, tail2)
            if indexed is None or _index_hole(rest_a, tail2) is None:
                raise refusal("two calls end differently from one", seen=two[:300],
                              rule="counters and ids")
            r.count_after(_counter_context(tail, tail2))
            tail = indexed
            call_tail, separator = _index_hole(rest_a, tail2) or "", ""
            shared = _common_prefix(tail, call_tail)
            call_tail, separator, section_close = tail[:shared], call_tail[shared:], \
                tail[shared:]
    else:
        parallel = False
    if not call_open.strip():
        raise refusal("nothing marks where a call begins", seen=one[:300], rule="call openings")

    bare = r.block([_call(NAME_A, {})])
    if not bare.startswith(head) or NAME_A not in bare:
        raise refusal("the call's opening changes with its arguments", seen=bare[:300],
                      rule="call openings")
    bare_tail = _split_call(bare, NAME_A, echo)[1]
    if section_close and bare_tail.endswith(section_close):
        bare_tail = bare_tail[:len(bare_tail) - len(section_close)]
    reasoning = _reasoning_markers(source)

    found = _json_object_at(call_tail, KEY_A, {KEY_A: TEXT_VALUE})
    if found is not None:
        start, end = found
        return InferredMarkup(
            section_open=section_open, section_close=section_close, call_open=call_open,
            name_close=call_tail[:start], call_close=call_tail[end:],
            call_separator=separator, arguments="json", parallel=parallel,
            reasoning_open=reasoning[0], reasoning_close=reasoning[1])
    literal = _object_literal(r, call_tail)
    if literal is not None:
        start, end, quote, escapes = literal
        return InferredMarkup(
            section_open=section_open, section_close=section_close, call_open=call_open,
            name_close=call_tail[:start], call_close=call_tail[end:],
            call_separator=separator, arguments="literal", parallel=parallel,
            reasoning_open=reasoning[0], reasoning_close=reasoning[1], quote=quote,
            escapes=escapes)
    return _derive_tagged(r, reasoning, section_open, section_close, call_open, call_tail,
                          bare_tail, separator, parallel)


_LITERAL_KEY = re.compile(r"\{\s*(['\"]?)" + KEY_A + r"\1\s*:\s*")
_ESCAPED_VALUE = "zq\\b"


def _object_literal(r: ProbeRenderer, tail: str) -> tuple[int, int, str, bool] | None:
    """The arguments as an object literal that is not JSON: ``(start, end, quote,
    escapes)``, or ``None``.

    The value grammar is read off the probes: the string quote is what the template
    writes around a string value (Gemma 4's ``<|"|>``, Python's ``'``); a string
    holding a backslash shows whether strings are escaped (Python's ``str()`` doubles
    it) or raw; the body ends at its matching ``}``.
    """
    brace = tail.find("{")
    key = _LITERAL_KEY.match(tail, brace) if brace >= 0 else None
    if key is None:
        return None
    value = tail.find(TEXT_VALUE, key.end())
    quote = tail[key.end():value]
    after = value + len(TEXT_VALUE)
    if value < 0 or not quote or not tail.startswith(quote, after):
        return None
    end = tail.find("}", after + len(quote))
    if end < 0 or tail[after + len(quote):end].strip():
        return None
    written = r.block([_call(NAME_A, {KEY_A: _ESCAPED_VALUE})])
    escapes = _ESCAPED_VALUE.replace("\\", "\\\\") in written
    if not escapes and _ESCAPED_VALUE not in written:
        return None
    return brace, end + 1, quote, escapes


def _value_markers(r: ProbeRenderer, value: Any, name_close_and_open: str, call_close: str,
                   section_close: str) -> tuple[str, str]:
    """(key_close, value_close) around a value of this type in a one-argument call."""
    block = r.block([_call(NAME_A, {KEY_A: value})])
    _, tail = _split_call(block, NAME_A, r.name_echo)
    if section_close and tail.endswith(section_close):
        tail = tail[:len(tail) - len(section_close)]
    text = value if isinstance(value, str) else json.dumps(value)
    k = tail.find(KEY_A)
    v = tail.find(text, k + len(KEY_A))
    if k < 0 or v < 0 or tail[:k] != name_close_and_open or not tail.endswith(call_close):
        raise refusal(f"a {type(value).__name__} argument is written in another "
                      "structure", seen=tail[:300], rule="argument layout")
    value_close = tail[v + len(text):len(tail) - len(call_close)]
    return tail[k + len(KEY_A):v], value_close.replace(KEY_A, KEY_HOLE)


def _derive_tagged(r: ProbeRenderer, reasoning: tuple[str, str], section_open: str,
                   section_close: str, call_open: str, tail: str, bare_tail: str,
                   separator: str, parallel: bool) -> InferredMarkup:
    k = tail.find(KEY_A)
    if k < 0:
        raise refusal("the argument name is not rendered", seen=tail[:300], rule="argument layout")
    v = tail.find(TEXT_VALUE, k)
    if v < 0:
        raise refusal("the argument value is not rendered after its name",
                      seen=tail[:300], rule="argument layout")
    after_value = tail[v + len(TEXT_VALUE):].replace(KEY_A, KEY_HOLE)
    if KEY_A in tail[k + len(KEY_A):v] or KEY_A in tail[:k]:
        raise refusal("the argument name is written more than once before its value",
                      seen=tail[:300], rule="argument layout")
    # The call without arguments is name_close + call_close; the suffix wins overlaps.
    suffix = _common_suffix(bare_tail, after_value, len(bare_tail))
    call_close = bare_tail[len(bare_tail) - suffix:]
    name_close = bare_tail[:len(bare_tail) - suffix]
    if not tail[:k].startswith(name_close):
        raise refusal("the call's name is closed differently with arguments",
                      seen=tail[:300], rule="call openings")
    arg_open = tail[len(name_close):k]
    string_key_close, string_value_close = _value_markers(
        r, TEXT_VALUE, name_close + arg_open, call_close, section_close)
    key_close, value_close = _value_markers(r, NUMBER_VALUE, name_close + arg_open,
                                            call_close, section_close)
    if not value_close.strip() or not string_value_close.strip():
        raise refusal("a value has no closing marker (its end could only be found "
                      "with a grammar for values)", seen=tail[:300], rule="value grammar")

    both = r.block([_call(NAME_A, {KEY_A: TEXT_VALUE, KEY_B: NUMBER_VALUE})])
    first_end = both.find(TEXT_VALUE)
    second = both.find(KEY_B)
    closing = string_value_close.replace(KEY_HOLE, KEY_A)
    if first_end < 0 or second < 0 or not both.startswith(closing, first_end + len(TEXT_VALUE)):
        raise refusal("two arguments are not written one after the other",
                      seen=both[:300], rule="argument layout")
    between = both[first_end + len(TEXT_VALUE) + len(closing):second]
    if not between.endswith(arg_open):
        raise refusal("the second argument opens differently from the first",
                      seen=both[:300], rule="argument layout")
    cdata = _wrapped_in_cdata(r, string_key_close, string_value_close)
    nested = _nested_token(r)
    # a template that prints non-string values with str() writes Python literals
    python = _written_value(r, True, key_close, value_close) == "True"
    return InferredMarkup(
        section_open=section_open, section_close=section_close, call_open=call_open,
        name_close=name_close, call_close=call_close, call_separator=separator,
        arguments="tagged", arg_open=arg_open, key_close=key_close, value_close=value_close,
        string_key_close=string_key_close, string_value_close=string_value_close,
        arg_separator=between[:len(between) - len(arg_open)], parallel=parallel,
        reasoning_open=reasoning[0], reasoning_close=reasoning[1], cdata=cdata, nested=nested,
        python_values=python)


_INNER_KEY = "zqkeyin"


def _nested_token(r: ProbeRenderer) -> str:
    """The token before every tag of an object value written as nested elements
    (MiniMax-M3's ``]<]minimax[>[<key>...]<]minimax[>[</key>``), or ``""``.

    An object value is rendered; when its key is written as a tag ``<key>`` ...
    ``</key>`` and the same token precedes both tags, values are nested elements.
    """
    try:
        block = r.block([_call(NAME_A, {"zqkeythree": {_INNER_KEY: TEXT_VALUE}})])
    except TemplateError:
        return ""
    opened, closed = block.find(f"<{_INNER_KEY}>"), block.find(f"</{_INNER_KEY}>")
    if opened < 0 or closed < opened:
        return ""
    return block[opened - _common_suffix(block[:opened], block[:closed], 64):opened]


_MARKUP_VALUE = "zq<v&l>\nue"


def _written_value(r: ProbeRenderer, value: Any, key_close: str, value_close: str) -> str:
    """How a one-argument call writes ``value`` between its tagged markers (``""``: not
    found)."""
    block = r.block([_call(NAME_A, {KEY_A: value})])
    start = block.find(key_close, block.find(KEY_A))
    end = block.find(value_close.replace(KEY_HOLE, KEY_A), start + len(key_close))
    return block[start + len(key_close):end] if start >= 0 and end >= 0 else ""


def _wrapped_in_cdata(r: ProbeRenderer, key_close: str, value_close: str) -> bool:
    """Whether a string holding markup characters is wrapped in ``<![CDATA[...]]>`` (the
    template wraps only the values that need it, as MiniCPM 5 does)."""
    written = _written_value(r, _MARKUP_VALUE, key_close, value_close)
    if not written or written == _MARKUP_VALUE:
        return False
    if written == f"<![CDATA[{_MARKUP_VALUE}]]>":
        return True
    raise refusal("a string holding markup characters is written escaped in a way "
                  "no rule reads (known: raw, or wrapped in CDATA)", seen=written[:300],
                  rule="content-dependent wrapping")


_PROBES: tuple[list[Call], ...] = (
    [_call(NAME_A, {KEY_A: TEXT_VALUE}), _call(NAME_B, {KEY_A: TEXT_VALUE})],
    [_call(NAME_A, {KEY_A: _QUOTED_VALUE})], [_call(NAME_A, {KEY_A: _ESCAPED_VALUE})],
    [_call(NAME_A, {})], [_call(NAME_A, {KEY_A: NUMBER_VALUE})],
    [_call(NAME_A, {KEY_A: TEXT_VALUE, KEY_B: NUMBER_VALUE})],
    [_call(NAME_A, {"zqkeythree": {_INNER_KEY: TEXT_VALUE}})], [_call(NAME_A, {KEY_A: True})],
    [_call(NAME_A, {KEY_A: _MARKUP_VALUE})], [_call(*CHECK_CALLS[0])], list(CHECK_CALLS))
"""The call turns derivation reads (each also with content), rendered in one job."""
