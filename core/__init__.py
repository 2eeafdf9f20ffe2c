"""toolwire: chat with any LLM in its native tool-calling protocol.

One tool registry, one dispatch and validation loop, a parser plugin per model
family, local GGUF models through their own chat template and remote
OpenAI-compatible providers through native ``tools``.

Everything in ``__all__`` is the public API and shows ``toolwire`` as its module
(``toolwire.Chat``, not the module it is defined in), so reprs, tracebacks and
docs name the path users import. The parts live in subpackages
(``docs/architecture.md`` maps them); plugin authors find what they need in
:mod:`toolwire.plugin_api`.
"""

from __future__ import annotations

from .conversation.approval import Approval, ApprovalRequest, Approver
from .conversation.chat import Chat
from .conversation.dispatch import Dispatcher, DispatchResult
from .errors import (
    BackendError,
    BackendNotFoundError,
    ChildStoppedError,
    ContextOverflowError,
    DerivationError,
    DuplicateToolError,
    GGUFError,
    GrammarError,
    GrammarFormatError,
    GrammarSchemaError,
    ParserConflictError,
    ParserNotFoundError,
    PluginConflictError,
    PluginError,
    PluginLoadError,
    TemplateError,
    TemplateResourceError,
    TemplateSecurityError,
    ToolArgumentsError,
    ToolBusyError,
    ToolCallError,
    ToolCancelledError,
    ToolChoiceError,
    ToolDefinitionError,
    ToolDeniedError,
    ToolExecutionError,
    ToolPermissionError,
    ToolSchemaBudgetError,
    ToolSourceNotFoundError,
    ToolTimeoutError,
    ToolwireError,
    UnknownToolError,
)
from .events import (
    DiagnosticEvent,
    DoneEvent,
    ErrorEvent,
    Event,
    NoParserEvent,
    ReasoningEvent,
    TextEvent,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallEvent,
    ToolCallStartEvent,
    ToolResultEvent,
    event_from_dict,
)
from .families.derive import derive_format
from .families.grammar_lookup import grammar_for
from .families.selection import ParserChoice, build_pipeline, parse_reply, select_parser
from .grammar import ToolGrammar
from .hooks.manager import PluginInfo, PluginManager, default_plugin_manager
from .hooks.specs import hookimpl
from .parse.protocol import (
    EndReason,
    FilterContext,
    ParsedReply,
    ParserSpec,
    PromptState,
    ReplyPipeline,
    StreamFilter,
    StreamFilterSpec,
    StreamParser,
    merge_events,
)
from .parse.record import (
    CallFormat,
    CallObjects,
    GrammarArguments,
    Header,
    JsonArguments,
    PythonicCalls,
    TaggedArguments,
)
from .templates.chat_template import ChatTemplate, get_chat_template
from .vocabulary.backend import (
    Backend,
    BackendSpec,
    ModelRequest,
    ReasoningRequest,
    SamplingOverrides,
    TurnEnd,
)
from .vocabulary.cancel import CancelToken
from .vocabulary.history import (
    Message,
    ToolCall,
    from_stored,
    to_openai_messages,
    to_stored,
    to_template_messages,
)
from .vocabulary.tools import Tool, ToolRegistry, tool

__version__ = "0.1.0"

__all__ = [
    "Approval",
    "ApprovalRequest",
    "Approver",
    "Backend",
    "BackendError",
    "BackendNotFoundError",
    "BackendSpec",
    "CallFormat",
    "CallObjects",
    "CancelToken",
    "Chat",
    "ChatTemplate",
    "ChildStoppedError",
    "ContextOverflowError",
    "DerivationError",
    "DiagnosticEvent",
    "DispatchResult",
    "Dispatcher",
    "DoneEvent",
    "DuplicateToolError",
    "EndReason",
    "ErrorEvent",
    "Event",
    "FilterContext",
    "GGUFError",
    "GrammarArguments",
    "GrammarError",
    "GrammarFormatError",
    "GrammarSchemaError",
    "Header",
    "JsonArguments",
    "Message",
    "ModelRequest",
    "NoParserEvent",
    "ParsedReply",
    "ParserChoice",
    "ParserConflictError",
    "ParserNotFoundError",
    "ParserSpec",
    "PluginConflictError",
    "PluginError",
    "PluginInfo",
    "PluginLoadError",
    "PluginManager",
    "PromptState",
    "PythonicCalls",
    "ReasoningEvent",
    "ReasoningRequest",
    "ReplyPipeline",
    "SamplingOverrides",
    "StreamFilter",
    "StreamFilterSpec",
    "StreamParser",
    "TaggedArguments",
    "TemplateError",
    "TemplateResourceError",
    "TemplateSecurityError",
    "TextEvent",
    "Tool",
    "ToolArgumentsError",
    "ToolBusyError",
    "ToolCall",
    "ToolCallDeltaEvent",
    "ToolCallEndEvent",
    "ToolCallError",
    "ToolCallEvent",
    "ToolCallStartEvent",
    "ToolCancelledError",
    "ToolChoiceError",
    "ToolDefinitionError",
    "ToolDeniedError",
    "ToolExecutionError",
    "ToolGrammar",
    "ToolPermissionError",
    "ToolRegistry",
    "ToolResultEvent",
    "ToolSchemaBudgetError",
    "ToolSourceNotFoundError",
    "ToolTimeoutError",
    "ToolwireError",
    "TurnEnd",
    "UnknownToolError",
    "build_pipeline",
    "default_plugin_manager",
    "derive_format",
    "event_from_dict",
    "from_stored",
    "get_chat_template",
    "grammar_for",
    "hookimpl",
    "merge_events",
    "parse_reply",
    "select_parser",
    "to_openai_messages",
    "to_stored",
    "to_template_messages",
    "tool",
]


def _show_public_paths() -> None:
    """Set ``__module__`` of the exported classes and functions to ``toolwire``."""
    namespace = globals()
    for name in __all__:
        value = namespace[name]
        if isinstance(value, type) or (callable(value) and hasattr(value, "__code__")):
            if getattr(value, "__module__", "").startswith("toolwire."):
                value.__module__ = "toolwire"


_show_public_paths()
