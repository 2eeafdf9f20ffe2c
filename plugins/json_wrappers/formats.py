"""The JSON-wrapper formats: one record per family, all read by :class:`.parser.WrapperParser`.

These families differ only in the markers around their JSON and in the keys
of a call object, so each is described by data, not code: a
:class:`WrapperFormat` names the markers, the body's shape, the tokens to
drop from the text, a reasoning block if any, and the template markup that
identifies the family.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import attrs

from toolwire.parse.json_calls import CallShape

__all__ = ["FORMATS", "WrapperFormat"]

Body = Literal["wrapped", "function_tag", "recipient"]


def _all_of(*needles: str, unless: tuple[str, ...] = ()) -> Callable[[str], bool]:
    def matches(template: str) -> bool:
        return all(n in template for n in needles) and not any(u in template for u in unless)

    return matches


@attrs.frozen
class WrapperFormat:
    """One family's markup.

    :ivar family: the parser family name.
    :ivar description: one line for ``toolwire plugins``.
    :ivar claims: whether a chat template source is this family's.
    :ivar openers: the markers that open a call section.
    :ivar body: the section's reader (see :mod:`.readers`).
    :ivar close: the marker that closes a ``wrapped`` section (``""``: none).
    :ivar shape: the keys of a call object.
    :ivar drops: tokens removed from the text (echoed end-of-turn markers...).
    :ivar several_objects, fence, opened_list, plain_opener: see
        :class:`.readers.WrappedCalls`.
    :ivar at_start: the reply's first line may be a call without an opener.
    :ivar reasoning: the ``(open, close)`` tags of the family's reasoning block,
        when it is not ``<think>`` (which the core filters).
    :ivar reasoning_auto: the reasoning block may begin without its opening tag
        (the model starts thinking right away, as Apriel 1.5 does).
    """

    family: str
    description: str
    claims: Callable[[str], bool]
    openers: tuple[str, ...]
    body: Body = "wrapped"
    close: str = ""
    shape: CallShape = attrs.field(factory=CallShape)
    drops: tuple[str, ...] = ()
    several_objects: bool = False
    fence: bool = False
    opened_list: bool = False
    plain_opener: bool = False
    at_start: bool = False
    reasoning: tuple[str, str] | None = None
    reasoning_auto: bool = False


_COHERE_SHAPE = CallShape(name_keys=("tool_name", "name"), args_keys=("parameters", "arguments"))

FORMATS: tuple[WrapperFormat, ...] = (
    WrapperFormat(
        "nemotron_nano_v2", "NVIDIA Nemotron Nano v2 <TOOLCALL>[...]</TOOLCALL>",
        _all_of("<TOOLCALL>"), ("<TOOLCALL>",), close="</TOOLCALL>",
        drops=("<SPECIAL_12>",)),  # the end-of-turn token, echoed by some servers
    WrapperFormat(
        "apriel", "ServiceNow Apriel 1.5 / 1.6 <tool_calls>[...]</tool_calls>",
        _all_of("<tool_calls>[", "[BEGIN FINAL RESPONSE]"), ("<tool_calls>",),
        close="</tool_calls>", several_objects=True, drops=("[END FINAL RESPONSE]",),
        reasoning=("Here are my reasoning steps:", "[BEGIN FINAL RESPONSE]"),
        reasoning_auto=True),
    WrapperFormat(
        "minimax_m1", "MiniMax-M1 <tool_calls> one JSON call per line </tool_calls>",
        _all_of("<tool_calls>\\n", "<beginning_of_sentence>"), ("<tool_calls>",),
        close="</tool_calls>", several_objects=True, drops=("<end_of_sentence>",)),
    WrapperFormat(
        "firefunction_v2", "FireFunction v2 functools[...]",
        _all_of("functools["), ("functools[",), opened_list=True, drops=("<|eot_id|>",)),
    WrapperFormat(
        "apertus", "Swiss AI Apertus <|tools_prefix|>[{NAME: args}]<|tools_suffix|>",
        _all_of("<|tools_prefix|>"), ("<|tools_prefix|>",), close="<|tools_suffix|>",
        shape=CallShape(named=True), drops=("<|assistant_end|>",),
        reasoning=("<|inner_prefix|>", "<|inner_suffix|>")),
    WrapperFormat(
        "command_r7b", "Cohere Command R7B / Cohere2 <|START_ACTION|>[...]<|END_ACTION|>",
        _all_of("<|START_ACTION|>"), ("<|START_ACTION|>",), close="<|END_ACTION|>",
        shape=_COHERE_SHAPE,
        drops=("<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|END_OF_TURN_TOKEN|>"),
        reasoning=("<|START_THINKING|>", "<|END_THINKING|>")),
    WrapperFormat(
        "command_r_plus", "Cohere Command R+ Action: ```json [...] ```",
        _all_of("Action:", "```json", unless=("<|START_ACTION|>",)), ("Action:",),
        shape=_COHERE_SHAPE, fence=True, plain_opener=True, drops=("<|END_OF_TURN_TOKEN|>",)),
    WrapperFormat(
        "functionary_v3_1", "Functionary v3.1 <function=NAME>{json}</function>",
        _all_of("<function=", "</function>", "<|start_header_id|>", unless=("<parameter=",)),
        ("<function=",), body="function_tag", drops=("<|eom_id|>", "<|eot_id|>")),
    WrapperFormat(
        "functionary_v3_2", "Functionary v3.2 >>>NAME\\n{json}",
        _all_of(">>>all", "<|start_header_id|>"), (">>>",), body="recipient", at_start=True,
        drops=("<|eot_id|>",)),
    WrapperFormat(
        "gigachat", "GigaChat 3 / 3.1 function call<|role_sep|>{json} / <|function_call|>{json}",
        _all_of("<|role_sep|>", "<|message_sep|>", "\"arguments\""),
        ("function call<|role_sep|>", "<|function_call|>"), drops=("<|message_sep|>",)),
)
"""Every wrapper family, in the order ``toolwire plugins`` lists them."""
