"""Everything a plugin author needs, in one import.

``from toolwire import plugin_api as tw`` gives the hook marker, the
registration records each hook takes, the protocols a parser, a stream filter
and a backend implement, the events they emit, and the helpers the built-in
plugins use. ``docs/plugin-api.md`` documents each name; ``toolwire.testing``
has the test kit (the conformance suite, strategies, a scripted backend).

The names are the same objects the package root and the subpackages export;
this module only gathers them.
"""

from __future__ import annotations

from .backends.protocol import (
    Backend,
    BackendSpec,
    ModelRequest,
    SamplingOverrides,
    TurnEnd,
)
from .backends.templated import (
    EncodedPrompt,
    GenerationEnd,
    GenerationSetupError,
    TemplateChoice,
    TemplatedBackend,
    TemplateSource,
)
from .conversation.cancel import CancelToken
from .conversation.dispatch import RunningCall, current_call
from .conversation.history import Message, ToolCall
from .conversation.schema import ToolSchemaIndex, coerce_text_value, json_type_of
from .conversation.tools import Tool, tool
from .events import (
    DiagnosticEvent,
    ErrorEvent,
    Event,
    ReasoningEvent,
    TextEvent,
    ToolCallDeltaEvent,
    ToolCallEvent,
    ToolCallStartEvent,
)
from .hooks.specs import hookimpl
from .parse.engine import CallParser
from .parse.family import parser_spec, reasoning_filter, register_reasoning, template_mentions
from .parse.protocol import (
    FilterContext,
    ParserSpec,
    StreamFilter,
    StreamFilterSpec,
    StreamParser,
    default_call_id,
    nine_char_call_id,
)
from .parse.readers import DONE, FAIL, MORE, BodyReader, CallContext, ReaderBase
from .parse.reasoning import family_think_filter_spec
from .parse.record import (
    CallFormat,
    CallObjects,
    GrammarArguments,
    Header,
    JsonArguments,
    PythonicCalls,
    TaggedArguments,
)
from .parse.streaming import HeldWhitespace, partial_tag_start

__all__ = [
    "DONE",
    "FAIL",
    "MORE",
    "Backend",
    "BackendSpec",
    "BodyReader",
    "CallContext",
    "CallFormat",
    "CallObjects",
    "CallParser",
    "CancelToken",
    "DiagnosticEvent",
    "EncodedPrompt",
    "ErrorEvent",
    "Event",
    "FilterContext",
    "GenerationEnd",
    "GenerationSetupError",
    "GrammarArguments",
    "Header",
    "HeldWhitespace",
    "JsonArguments",
    "Message",
    "ModelRequest",
    "ParserSpec",
    "PythonicCalls",
    "ReaderBase",
    "ReasoningEvent",
    "RunningCall",
    "SamplingOverrides",
    "StreamFilter",
    "StreamFilterSpec",
    "StreamParser",
    "TaggedArguments",
    "TemplateChoice",
    "TemplateSource",
    "TemplatedBackend",
    "TextEvent",
    "Tool",
    "ToolCall",
    "ToolCallDeltaEvent",
    "ToolCallEvent",
    "ToolCallStartEvent",
    "ToolSchemaIndex",
    "TurnEnd",
    "coerce_text_value",
    "current_call",
    "default_call_id",
    "family_think_filter_spec",
    "hookimpl",
    "json_type_of",
    "nine_char_call_id",
    "parser_spec",
    "partial_tag_start",
    "reasoning_filter",
    "register_reasoning",
    "template_mentions",
    "tool",
]
