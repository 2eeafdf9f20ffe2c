"""Reasoning filters for families whose reasoning tags are not ``<think>``.

Mistral writes ``[THINK]...[/THINK]``, Cohere ``<|START_THINKING|>...<|END_THINKING|>``,
Apertus ``<|inner_prefix|>...<|inner_suffix|>``, Apriel ends its reasoning with
``[BEGIN FINAL RESPONSE]``. The factory lives in :mod:`toolwire.reasoning`
(:func:`~toolwire.reasoning.family_think_filter_spec`), shared with the tagged
families; this module keeps the name the JSON families import.
"""

from __future__ import annotations

from .reasoning import family_think_filter_spec

__all__ = ["family_reasoning_filter_spec"]

family_reasoning_filter_spec = family_think_filter_spec
"""See :func:`toolwire.reasoning.family_think_filter_spec`."""
