"""The shared ``<think>`` reasoning filter, registered as a built-in plugin.

The filter itself is a parsing part (:mod:`toolwire.parse.reasoning`); this module
is only its registration, so the parsing floor never imports the hook machinery.
"""

from __future__ import annotations

from collections.abc import Callable

from ..parse.protocol import StreamFilterSpec
from ..parse.reasoning import think_filter_spec
from .specs import hookimpl

__all__ = ["register_stream_filters"]


@hookimpl
def register_stream_filters(register: Callable[[StreamFilterSpec], None]) -> None:
    """Register the shared ``<think>`` reasoning filter (a built-in plugin)."""
    register(think_filter_spec())
