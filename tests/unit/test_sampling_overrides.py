"""``SamplingOverrides``: a turn's own sampling settings, carried on ``ModelRequest``."""

from __future__ import annotations

import math
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

import toolwire
from toolwire import ModelRequest, SamplingOverrides, plugin_api
from toolwire.vocabulary.history import Message


def test_a_request_without_overrides_changes_nothing() -> None:
    request = ModelRequest((Message("user", "hi"),))
    assert request.sampling == SamplingOverrides()
    assert request.sampling.is_empty
    assert request.sampling.fields() == {}


def test_fields_names_only_what_is_set() -> None:
    overrides = SamplingOverrides(temperature=0.0, max_tokens=3)
    assert not overrides.is_empty
    assert overrides.fields() == {"temperature": 0.0, "max_tokens": 3}


def test_the_record_is_frozen_and_exported_where_model_request_is() -> None:
    overrides = SamplingOverrides(seed=1)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        overrides.seed = 2  # type: ignore[misc]
    assert toolwire.SamplingOverrides is plugin_api.SamplingOverrides is SamplingOverrides
    assert "SamplingOverrides" in toolwire.__all__ and "SamplingOverrides" in plugin_api.__all__
    assert SamplingOverrides.__module__ == "toolwire"


@pytest.mark.parametrize("bad, words", [
    ({"temperature": -0.1}, "temperature must be at least 0"),
    ({"temperature": math.inf}, "temperature must be a finite number"),
    ({"temperature": math.nan}, "temperature must be a finite number"),
    ({"temperature": "hot"}, "temperature must be a finite number"),
    ({"top_p": 1.01}, "top_p must be between 0 and 1"),
    ({"top_p": -0.5}, "top_p must be between 0 and 1"),
    ({"top_p": True}, "top_p must be a finite number"),
    ({"max_tokens": 0}, "max_tokens must be at least 1"),
    ({"max_tokens": 2.0}, "max_tokens must be an integer"),
    ({"seed": False}, "seed must be an integer"),
    ({"seed": -(2 ** 63) - 1}, "seed must be at least"),
    ({"top_k": 0}, "top_k must be at least 1"),
    ({"top_k": 2.5}, "top_k must be an integer"),
])
def test_an_out_of_range_value_is_a_value_error_naming_the_field(bad: dict[str, Any],
                                                                 words: str) -> None:
    with pytest.raises(ValueError, match=words):
        SamplingOverrides(**bad)


@given(temperature=st.none() | st.floats(0, 2), top_p=st.none() | st.floats(0, 1),
       max_tokens=st.none() | st.integers(1, 1 << 20),
       seed=st.none() | st.integers(-(2 ** 63), 2 ** 64),
       top_k=st.none() | st.integers(1, 1 << 16))
def test_every_value_the_endpoint_accepts_makes_a_record(
        temperature: float | None, top_p: float | None, max_tokens: int | None,
        seed: int | None, top_k: int | None) -> None:
    overrides = SamplingOverrides(temperature, top_p, max_tokens, seed, top_k)
    given_fields = {"temperature": temperature, "top_p": top_p, "max_tokens": max_tokens,
                    "seed": seed, "top_k": top_k}
    assert overrides.fields() == {k: v for k, v in given_fields.items() if v is not None}
    assert overrides.is_empty == all(v is None for v in given_fields.values())


def test_a_reasoning_request_sets_only_the_template_switches_it_asks_for() -> None:
    from toolwire import ReasoningRequest

    assert ReasoningRequest().template_switches() == {}
    assert ReasoningRequest(enabled=False).template_switches() == {
        "enable_thinking": False, "thinking": False}
    assert ReasoningRequest(enabled=True, effort="high", budget=9).template_switches() == {
        "enable_thinking": True, "thinking": True, "reasoning_effort": "high"}
    for bad in ({"effort": "max"}, {"budget": 0}, {"budget": 1.5}):
        with pytest.raises(ValueError):
            ReasoningRequest(**bad)
    assert ReasoningRequest.__module__ == "toolwire" and "ReasoningRequest" in plugin_api.__all__
