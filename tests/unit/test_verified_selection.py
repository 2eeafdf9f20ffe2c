"""Parser selection verifies each claim against the template's own rendered call.

Made-up variants keep one family's markers (so its detector claims them) and put
another body between them; the claiming plugin must be refused and the right
family, or the derived parser, must pick the template up. On every real template
the verified choice is the choice scores alone made.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.paths import SHARED_TEMPLATES
from tests.support.templates import template_names, template_params
from toolwire import parse_reply, select_parser
from toolwire.errors import ParserNotFoundError
from toolwire.families import selection
from toolwire.families.verification import PROBE_CALLS, PROBE_TOOLS, check_claim
from toolwire.hooks.manager import default_plugin_manager

# -- made-up templates ---------------------------------------------------------------------

_FRAME = (
    "{%- if tools %}<|system|>MENTION{{ tools | tojson }}<|end|>{% endif -%}"
    "{%- for message in messages -%}"
    "{%- if message.role == 'user' -%}<|user|>{{ message.content }}<|end|>"
    "{%- elif message.role == 'assistant' -%}<|assistant|>{{ message.content or '' }}"
    "{%- if message.tool_calls -%}BLOCK{%- endif -%}<|end|>"
    "{%- elif message.role == 'tool' -%}<|tool|>{{ message.content }}<|end|>"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|assistant|>{%- endif -%}")

_ARGS = "{{ tc.function.arguments | tojson }}"
_JSON_LIST = ("[{%- for tc in message.tool_calls -%}{\"name\": \"{{ tc.function.name }}\", "
              "\"arguments\": " + _ARGS + "}{% if not loop.last %}, {% endif %}"
              "{%- endfor -%}]")
_XML_CALL = ("<function={{ tc.function.name }}>\n"
             "{%- for k, v in tc.function.arguments.items() %}\n<PARAM={{ k }}>\n"
             "{{ v if v is string else v | tojson }}\n</PARAM>{%- endfor %}\n</function>")


def _per_call(open_: str, body: str, close: str) -> str:
    return ("{%- for tc in message.tool_calls -%}" + open_ + body + close + "{%- endfor -%}")


def _json_object(tc_open: str, tc_close: str) -> str:
    return _per_call(tc_open, "\n{\"name\": \"{{ tc.function.name }}\", \"arguments\": "
                     + _ARGS + "}\n", tc_close)


def _template(mention: str, block: str) -> str:
    return _FRAME.replace("MENTION", mention).replace("BLOCK", block)


VARIANTS: dict[str, tuple[str, str, set[str]]] = {
    # the issue's case: LFM2.5's markers, a JSON list of calls inside
    "pythonic markers, JSON list body": (
        _template("", "<|tool_call_start|>" + _JSON_LIST + "<|tool_call_end|>"),
        "pythonic", {"derived"}),
    # Qwen's tags named in the instructions, Hermes JSON objects rendered
    "qwen tags, JSON body": (
        _template("Call tools with <function=NAME><parameter=P>. ",
                  _json_object("<tool_call>", "</tool_call>")),
        "qwen_xml", {"derived", "hermes_json"}),
    # Qwen's XML with the parameter tag renamed
    "qwen xml, renamed parameter tag": (
        _template("Write <parameter=P> for each argument. ",
                  _per_call("<tool_call>\n", _XML_CALL.replace("PARAM", "arg"), "\n</tool_call>")),
        "qwen_xml", {"derived"}),
    # Hermes instructions, the call tag renamed in what is rendered
    "hermes instructions, renamed call tag": (
        _template("Reply with <tool_call>{\"name\": ..., \"arguments\": ...}</tool_call>. ",
                  _json_object("<toolcall>", "</toolcall>")),
        "hermes_json", {"derived"}),
    # Mistral's marker, but each call wrapped in Hermes tags after it
    "mistral marker, hermes body": (
        _template("", "[TOOL_CALLS]" + _json_object("<tool_call>", "</tool_call>")),
        "mistral", {"derived", "hermes_json"}),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_a_variant_is_refused_by_the_marker_matching_plugin(name: str) -> None:
    source, claimant, accepted = VARIANTS[name]
    plugins = default_plugin_manager()
    assert plugins.parser(claimant).detect(source) > 0, "the variant must fool the detector"
    choice = select_parser(source, plugins)
    refused = {c.family: c for c in choice.checks if c.outcome == "refused"}
    assert claimant in refused, choice.checks
    assert refused[claimant].probe, "a refusal shows the probe it failed on"
    assert choice.spec.name in accepted
    # and the chosen parser really reads the template's calls
    rendered = selection.select_parser(source, plugins)
    assert rendered.spec.name == choice.spec.name  # cached verdicts agree
    reply_text = _rendered_calls(source)
    got = parse_reply(reply_text, chat_template=source, tools=list(PROBE_TOOLS))
    assert [(c.name, dict(c.arguments)) for c in got.tool_calls] == \
        [(n, a) for n, a in PROBE_CALLS]


def _rendered_calls(source: str) -> str:
    from toolwire.testing import AssistantTurnRenderer

    renderer = AssistantTurnRenderer(source)
    return renderer.render([(n, dict(a)) for n, a in PROBE_CALLS], tools=PROBE_TOOLS).text


def test_the_claimant_reads_none_of_the_variants_calls_when_forced() -> None:
    source, claimant, _ = VARIANTS["pythonic markers, JSON list body"]
    forced = select_parser(source, family=claimant)
    assert forced.spec.name == claimant and forced.checks == ()  # family= is not verified
    got = parse_reply(_rendered_calls(source), family=claimant, tools=list(PROBE_TOOLS))
    assert got.tool_calls == ()


def test_a_template_that_cannot_render_the_probe_keeps_selection_by_score() -> None:
    # mentions pythonic markers but renders assistant tool calls as nothing at all
    source = _template("Use <|tool_call_start|>[f(x=1)]<|tool_call_end|>. ", "")
    choice = select_parser(source)
    assert choice.spec.name == "pythonic"
    assert [c.outcome for c in choice.checks] == ["unverifiable"]
    assert "could not be verified" in choice.note


def test_when_nothing_verifies_and_nothing_derives_the_error_names_each_refusal() -> None:
    # Hermes instructions; calls rendered as prose the derivation cannot read
    source = _template(
        "Reply with <tool_call>{\"name\": ..., \"arguments\": ...}</tool_call>. ",
        _per_call("I would call {{ tc.function.name }} ", "with {{ tc.function.arguments "
                  "| length }} arguments", ". "))
    with pytest.raises(ParserNotFoundError) as caught:
        select_parser(source)
    message = str(caught.value)
    assert "'hermes_json' claimed it but misread" in message and "\n" not in message
    (refusal,) = caught.value.refusals
    assert refusal.startswith("hermes_json: ") and len(refusal) > len("hermes_json: ")
    assert caught.value.derivation


def test_derive_false_refuses_instead_of_deriving() -> None:
    source, claimant, _ = VARIANTS["pythonic markers, JSON list body"]
    with pytest.raises(ParserNotFoundError, match=claimant):
        select_parser(source, derive=False)


def test_the_verdict_is_cached_per_template(monkeypatch: pytest.MonkeyPatch) -> None:
    source = VARIANTS["qwen tags, JSON body"][0] + "{# cache probe #}"
    calls: list[str] = []

    def counting(spec, score, src, *, plugins):  # type: ignore[no-untyped-def]
        calls.append(spec.name)
        return check_claim(spec, score, src, plugins=plugins)

    monkeypatch.setattr(selection, "check_claim", counting)
    first = select_parser(source)
    assert calls
    before = len(calls)
    second = select_parser(source)
    assert len(calls) == before
    assert second.spec.name == first.spec.name and second.checks == first.checks


def test_verify_false_is_selection_by_score() -> None:
    source, claimant, _ = VARIANTS["pythonic markers, JSON list body"]
    assert select_parser(source, verify=False).spec.name == claimant


def test_a_check_is_json_ready() -> None:
    source = VARIANTS["pythonic markers, JSON list body"][0]
    checks = select_parser(source).checks
    data = json.loads(json.dumps([c.to_dict() for c in checks]))
    assert data[0]["family"] == "pythonic" and data[0]["outcome"] == "refused"


# -- real templates --------------------------------------------------------------------------

REAL = [SHARED_TEMPLATES / name for name in template_names()] or template_params()


def _choice_name(source: str, verify: bool) -> str:
    try:
        return select_parser(source, verify=verify).spec.name
    except ParserNotFoundError:
        return "(none)"


@pytest.mark.parametrize("path", REAL, ids=lambda p: getattr(p, "name", "absent"))
def test_on_every_real_template_the_verified_choice_is_the_scored_choice(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    assert _choice_name(source, verify=True) == _choice_name(source, verify=False)
    try:
        checks = select_parser(source).checks
    except ParserNotFoundError:
        return
    assert all(c.outcome != "refused" for c in checks), checks
