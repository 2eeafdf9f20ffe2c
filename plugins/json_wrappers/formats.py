"""The JSON-wrapper families: one :class:`~toolwire.parse.record.CallFormat` each.

These families differ only in the markers around their JSON and in the keys of
a call object, so each is a record the one engine runs, plus the template
markup that identifies the family (:data:`CLAIMS`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from toolwire.plugin_api import CallFormat, CallObjects, JsonArguments

__all__ = ["CLAIMS", "FORMATS"]


def _all_of(*needles: str, unless: tuple[str, ...] = ()) -> Callable[[str], bool]:
    def matches(template: str) -> bool:
        return all(n in template for n in needles) and not any(u in template for u in unless)

    return matches


_COHERE = CallObjects(name_keys=("tool_name", "name"), args_keys=("parameters", "arguments"))

FORMATS: tuple[CallFormat, ...] = (
    CallFormat(
        family="nemotron_nano_v2", description="NVIDIA Nemotron Nano v2 <TOOLCALL>[...]</TOOLCALL>",
        section_open="<TOOLCALL>", section_close="</TOOLCALL>", arguments=CallObjects(),
        drops="<SPECIAL_12>"),  # the end-of-turn token, echoed by some servers
    CallFormat(
        family="apriel", description="ServiceNow Apriel 1.5 / 1.6 <tool_calls>[...]</tool_calls>",
        section_open="<tool_calls>", section_close="</tool_calls>", arguments=CallObjects(),
        drops="[END FINAL RESPONSE]",
        reasoning=("Here are my reasoning steps:", "[BEGIN FINAL RESPONSE]"),
        reasoning_unopened=True),
    CallFormat(
        family="minimax_m1",
        description="MiniMax-M1 <tool_calls> one JSON call per line </tool_calls>",
        section_open="<tool_calls>", section_close="</tool_calls>", arguments=CallObjects(),
        drops="<end_of_sentence>"),
    CallFormat(
        family="firefunction_v2", description="FireFunction v2 functools[...]",
        section_open="functools[", arguments=CallObjects(container="list", opened_list=True),
        drops="<|eot_id|>"),
    CallFormat(
        family="apertus",
        description="Swiss AI Apertus <|tools_prefix|>[{NAME: args}]<|tools_suffix|>",
        section_open="<|tools_prefix|>", section_close="<|tools_suffix|>",
        arguments=CallObjects(named=True), drops="<|assistant_end|>",
        reasoning=("<|inner_prefix|>", "<|inner_suffix|>")),
    CallFormat(
        family="command_r7b",
        description="Cohere Command R7B / Cohere2 <|START_ACTION|>[...]<|END_ACTION|>",
        section_open="<|START_ACTION|>", section_close="<|END_ACTION|>", arguments=_COHERE,
        drops=("<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|END_OF_TURN_TOKEN|>"),
        reasoning=("<|START_THINKING|>", "<|END_THINKING|>")),
    CallFormat(
        family="command_r_plus", description="Cohere Command R+ Action: ```json [...] ```",
        section_open="Action:", arguments=CallObjects(name_keys=_COHERE.name_keys,
                                                      args_keys=_COHERE.args_keys, fence=True),
        strict_open=False,  # "Action:" also occurs in prose: without JSON after it, it is text
        drops="<|END_OF_TURN_TOKEN|>"),
    CallFormat(
        family="functionary_v3_1", description="Functionary v3.1 <function=NAME>{json}</function>",
        call_open="<function=", header_end=">", call_close="</function>",
        arguments=JsonArguments(), drops=("<|eom_id|>", "<|eot_id|>")),
    CallFormat(
        family="functionary_v3_2", description="Functionary v3.2 >>>NAME\\n{json}",
        call_open=">>>", header_end="\n", text_headers="all", at_start=True, strict_open=False,
        arguments=JsonArguments(), drops="<|eot_id|>"),
    CallFormat(
        family="gigachat",
        description="GigaChat 3 / 3.1 function call<|role_sep|>{json} / <|function_call|>{json}",
        section_open=("function call<|role_sep|>", "<|function_call|>"),
        arguments=CallObjects(container="object"), drops="<|message_sep|>"),
)
"""Every wrapper family, in the order ``toolwire plugins`` lists them."""

CLAIMS: Mapping[str, Callable[[str], bool]] = {
    "nemotron_nano_v2": _all_of("<TOOLCALL>"),
    "apriel": _all_of("<tool_calls>[", "[BEGIN FINAL RESPONSE]"),
    "minimax_m1": _all_of("<tool_calls>\\n", "<beginning_of_sentence>"),
    "firefunction_v2": _all_of("functools["),
    "apertus": _all_of("<|tools_prefix|>"),
    "command_r7b": _all_of("<|START_ACTION|>"),
    "command_r_plus": _all_of("Action:", "```json", unless=("<|START_ACTION|>",)),
    "functionary_v3_1": _all_of("<function=", "</function>", "<|start_header_id|>",
                                unless=("<parameter=",)),
    "functionary_v3_2": _all_of(">>>all", "<|start_header_id|>"),
    "gigachat": _all_of("<|role_sep|>", "<|message_sep|>", "\"arguments\""),
}
"""Whether a chat template source renders each family's markup."""
