"""docs/agents.md's tables of request fields are what the two request parsers do (issue 38,
item 6), as docs/openai-server.md's table is for chat completions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.apps.test_openai_docs import ReadFields, documented_fields
from toolwire.apps.server import messages_request, responses_request
from toolwire.apps.server.http_input import RequestError
from toolwire.limits import ServerLimits

APIS: dict[str, tuple[str, dict[str, str], Callable[..., Any], dict[str, Any]]] = {
    "responses": ("## The Responses request", responses_request.REQUEST_FIELDS,
                  responses_request.parse_responses_request, {"model": "m", "input": "hi"}),
    "messages": ("## The Messages request", messages_request.REQUEST_FIELDS,
                 messages_request.parse_messages_request,
                 {"model": "m", "max_tokens": 8, "messages": [{"role": "user",
                                                               "content": "hi"}]}),
}
REFUSED_VALUES = {"responses": {"previous_response_id": "resp_1", "conversation": "conv_1",
                                "background": True, "prompt": {"id": "pmpt_1"}},
                  "messages": {"container": "container_1",
                               "mcp_servers": [{"type": "url", "url": "https://x"}]}}


@pytest.mark.parametrize("api", sorted(APIS))
def test_every_field_the_parser_reads_is_in_the_table_with_its_status(api: str) -> None:
    heading, fields, parse, minimal = APIS[api]
    body = ReadFields(dict(minimal))
    parse(body, ServerLimits())
    assert body.asked == set(fields)
    assert documented_fields("agents.md", heading) == fields
    assert set(fields.values()) <= {"supported", "mapped", "no effect", "refused"}


@pytest.mark.parametrize("api", sorted(APIS))
def test_a_refused_field_asking_for_something_is_a_400_naming_it(api: str) -> None:
    _, fields, parse, minimal = APIS[api]
    assert set(REFUSED_VALUES[api]) == {f for f, s in fields.items() if s == "refused"}
    for field, value in REFUSED_VALUES[api].items():
        with pytest.raises(RequestError) as refused:
            parse({**minimal, field: value}, ServerLimits())
        assert refused.value.status == 400 and refused.value.param == field


def test_no_effect_fields_are_accepted() -> None:
    responses_request.parse_responses_request(
        {"model": "m", "input": "hi", "store": True, "metadata": {"k": "v"},
         "prompt_cache_key": "k", "prompt_cache_retention": "24h", "safety_identifier": "s",
         "service_tier": "auto", "user": "u", "truncation": "auto",
         "stream_options": {"include_obfuscation": False}, "context_management": [],
         "client_metadata": {"a": "b"}}, ServerLimits())
    messages_request.parse_messages_request(
        {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}],
         "metadata": {"user_id": "u"}, "service_tier": "auto", "speed": "standard",
         "inference_geo": "us", "context_management": {"edits": []},
         "cache_control": {"type": "ephemeral"}}, ServerLimits())
