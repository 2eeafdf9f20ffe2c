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

from .backends.prompt_pieces import PromptPiece, SpecialTokens
from .backends.remote import (
    ProviderPreset,
    RequestContext,
    ResolvedConnection,
    SDKErrors,
    classify_exception,
    rejects_stream_options,
    server_message,
)
from .backends.repeated_calls import aend_at_repeated_call, end_at_repeated_call
from .backends.stream_pump import Broken, OpenedStream, RetryNotice, RetryPolicy, StreamPump
from .backends.templated import (
    EncodedPrompt,
    GenerationEnd,
    GenerationSetupError,
    TemplateChoice,
    TemplatedBackend,
    TemplateSource,
)
from .conversation.dispatch import RunningCall, current_call
from .conversation.validation import ValidationStepsExceeded, checked_validator, value_problems
from .errors import BackendError, ChildStoppedError, TemplateError, ToolCallError
from .events import (
    DiagnosticEvent,
    ErrorEvent,
    Event,
    ReasoningEvent,
    TextEvent,
    TokenLogprobEvent,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallEvent,
    ToolCallStartEvent,
)
from .extras import extra_hint
from .gguf.metadata import GGUFMetadata, read_gguf_metadata
from .grammar import ToolGrammar
from .grammar.lazy import TriggerWatch
from .hooks.manager import PluginManager
from .hooks.specs import (
    RegisterBackend,
    RegisterParser,
    RegisterStreamFilter,
    RegisterTool,
    RegisterToolSource,
    hookimpl,
)
from .isolation.supervisor import ChildEnd, SupervisedChild, find_program, host_bound_command
from .limits import McpLimits, WorkspaceLimits
from .parse.engine import CallParser
from .parse.family import parser_spec, reasoning_filter, register_reasoning, template_mentions
from .parse.json_readers import double_encoded_note
from .parse.literal_reader import LiteralObjectReader, read_object_literal
from .parse.markers import TokenSet, valid_name
from .parse.protocol import (
    EndReason,
    FilterContext,
    ParserSpec,
    PromptState,
    StreamFilter,
    StreamFilterSpec,
    StreamParser,
)
from .parse.pythonic_reader import calls_from_source
from .parse.readers import DONE, FAIL, GO, MORE, BodyReader, CallContext, ReaderBase
from .parse.reasoning import family_think_filter_spec
from .parse.record import (
    CallFormat,
    CallObjects,
    GrammarArguments,
    Header,
    JsonArguments,
    ObjectLiteral,
    PythonicCalls,
    TaggedArguments,
)
from .parse.streaming import HeldWhitespace, partial_tag_start
from .parse.values import json_arguments
from .templates.chat_template import ChatTemplate, get_chat_template
from .templates.default_template import DEFAULT_CHAT_TEMPLATE, JSON_TOOLS_TEMPLATE
from .vocabulary.backend import (
    Backend,
    BackendSpec,
    ModelRequest,
    ReasoningRequest,
    SamplingOverrides,
    TurnEnd,
)
from .vocabulary.call_ids import default_call_id, nine_char_call_id
from .vocabulary.cancel import CancelToken
from .vocabulary.history import Message, ToolCall, to_openai_messages
from .vocabulary.patterns import PatternError, check_patterns, compile_pattern, match_lines
from .vocabulary.schema import ToolSchemaIndex, coerce_text_value, json_type_of
from .vocabulary.tool_sources import ToolSource, ToolSourceSpec
from .vocabulary.tools import Tool, tool

__all__ = [
    "DEFAULT_CHAT_TEMPLATE",
    "DONE",
    "FAIL",
    "GO",
    "JSON_TOOLS_TEMPLATE",
    "MORE",
    "Backend",
    "BackendError",
    "BackendSpec",
    "BodyReader",
    "Broken",
    "CallContext",
    "CallFormat",
    "CallObjects",
    "CallParser",
    "CancelToken",
    "ChatTemplate",
    "ChildEnd",
    "ChildStoppedError",
    "DiagnosticEvent",
    "EncodedPrompt",
    "EndReason",
    "ErrorEvent",
    "Event",
    "FilterContext",
    "GGUFMetadata",
    "GenerationEnd",
    "GenerationSetupError",
    "GrammarArguments",
    "Header",
    "HeldWhitespace",
    "JsonArguments",
    "LiteralObjectReader",
    "McpLimits",
    "Message",
    "ModelRequest",
    "ObjectLiteral",
    "OpenedStream",
    "ParserSpec",
    "PatternError",
    "PluginManager",
    "PromptPiece",
    "PromptState",
    "ProviderPreset",
    "PythonicCalls",
    "ReaderBase",
    "ReasoningEvent",
    "ReasoningRequest",
    "RegisterBackend",
    "RegisterParser",
    "RegisterStreamFilter",
    "RegisterTool",
    "RegisterToolSource",
    "RequestContext",
    "ResolvedConnection",
    "RetryNotice",
    "RetryPolicy",
    "RunningCall",
    "SDKErrors",
    "SamplingOverrides",
    "SpecialTokens",
    "StreamFilter",
    "StreamFilterSpec",
    "StreamParser",
    "StreamPump",
    "SupervisedChild",
    "TaggedArguments",
    "TemplateChoice",
    "TemplateError",
    "TemplateSource",
    "TemplatedBackend",
    "TextEvent",
    "TokenLogprobEvent",
    "TokenSet",
    "Tool",
    "ToolCall",
    "ToolCallDeltaEvent",
    "ToolCallEndEvent",
    "ToolCallError",
    "ToolCallEvent",
    "ToolCallStartEvent",
    "ToolGrammar",
    "ToolSchemaIndex",
    "ToolSource",
    "ToolSourceSpec",
    "TriggerWatch",
    "TurnEnd",
    "ValidationStepsExceeded",
    "WorkspaceLimits",
    "aend_at_repeated_call",
    "calls_from_source",
    "check_patterns",
    "checked_validator",
    "classify_exception",
    "coerce_text_value",
    "compile_pattern",
    "current_call",
    "default_call_id",
    "double_encoded_note",
    "end_at_repeated_call",
    "extra_hint",
    "family_think_filter_spec",
    "find_program",
    "get_chat_template",
    "hookimpl",
    "host_bound_command",
    "json_arguments",
    "json_type_of",
    "match_lines",
    "nine_char_call_id",
    "parser_spec",
    "partial_tag_start",
    "read_gguf_metadata",
    "read_object_literal",
    "reasoning_filter",
    "register_reasoning",
    "rejects_stream_options",
    "server_message",
    "template_mentions",
    "to_openai_messages",
    "tool",
    "valid_name",
    "value_problems",
]
