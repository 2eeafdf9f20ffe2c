"""docs/openai-server.md's table of request fields is what the request parser does."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from tests.support.paths import DOCS
from toolwire.apps.server.completion_request import REQUEST_FIELDS, parse_completion_request
from toolwire.limits import ServerLimits


class ReadFields(Mapping[str, Any]):
    """A request body that records every field the parser asks for."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.asked: set[str] = set()

    def __getitem__(self, key: str) -> Any:
        self.asked.add(key)
        return self.body[key]

    def __contains__(self, key: object) -> bool:
        self.asked.add(str(key))
        return key in self.body

    def __iter__(self) -> Iterator[str]:
        raise AssertionError("the parser reads fields by name, never all of them")

    def __len__(self) -> int:
        return len(self.body)


def documented_fields(page: str = "openai-server.md",
                      heading: str = "## The request") -> dict[str, str]:
    """``field -> status`` from the table under ``heading`` of ``docs/<page>``."""
    text = (DOCS / page).read_text(encoding="utf-8")
    section = text.split(heading, 1)[1].split("\n#", 1)[0]
    table: dict[str, str] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].startswith("`"):
            for name in re.findall(r"`([a-z_]+)`", cells[0]):
                table[name] = cells[1]
    return table


def test_every_field_the_parser_reads_is_in_the_table_with_its_status() -> None:
    body = ReadFields({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    parse_completion_request(body, ServerLimits())
    assert body.asked == set(REQUEST_FIELDS)
    assert documented_fields() == REQUEST_FIELDS


def test_the_table_names_only_the_four_statuses() -> None:
    assert set(REQUEST_FIELDS.values()) == {"supported", "mapped", "no effect", "refused"}


REFUSED_VALUES = {"logit_bias": {"42": 5},
                  "presence_penalty": 0.5, "frequency_penalty": -1, "modalities": ["audio"],
                  "audio": {"voice": "alloy"}, "prediction": {"type": "content"},
                  "web_search_options": {}, "reasoning_effort": "low", "verbosity": "low"}
NEUTRAL_VALUES = {"logit_bias": {}, "presence_penalty": 0,
                  "frequency_penalty": 0.0, "modalities": ["text"]}


def test_a_refused_field_asking_for_something_is_a_400_naming_it() -> None:
    import pytest

    from toolwire.apps.server.http_input import RequestError

    assert set(REFUSED_VALUES) == {f for f, s in REQUEST_FIELDS.items() if s == "refused"}
    base = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    for field, value in REFUSED_VALUES.items():
        with pytest.raises(RequestError) as refused:
            parse_completion_request({**base, field: value}, ServerLimits())
        assert refused.value.status == 400 and refused.value.param == field
    parse_completion_request({**base, **NEUTRAL_VALUES, "user": "u", "store": False,
                              "metadata": {"k": "v"}}, ServerLimits())
