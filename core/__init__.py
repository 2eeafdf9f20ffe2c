"""toolwire: chat with any LLM in its native tool-calling protocol.

One tool registry, one dispatch and validation loop, a parser plugin per model
family (Qwen XML built in), local GGUF models through their own chat template
and remote OpenAI-compatible providers through native ``tools``.
"""

from __future__ import annotations

from .backends import Backend, BackendSpec, ModelRequest, TurnEnd
from .cancel import CancelToken
from .chat import Chat
from .chat_template import ChatTemplate, get_chat_template
from .derive import DerivedFormat, derive_format
from .dispatch import Dispatcher, DispatchResult
from .errors import (
    BackendError,
    BackendNotFoundError,
    ContextOverflowError,
    DerivationError,
    DuplicateToolError,
    GGUFError,
    ParserConflictError,
    ParserNotFoundError,
    PluginConflictError,
    PluginError,
    PluginLoadError,
    TemplateError,
    TemplateSecurityError,
    ToolArgumentsError,
    ToolCallError,
    ToolDefinitionError,
    ToolExecutionError,
    ToolPermissionError,
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
    ToolCallEvent,
    ToolCallStartEvent,
    ToolResultEvent,
    event_from_dict,
)
from .history import (
    Message,
    ToolCall,
    from_stored,
    to_openai_messages,
    to_stored,
    to_template_messages,
)
from .hookspecs import hookimpl
from .parsing import (
    FilterContext,
    ParsedReply,
    ParserSpec,
    ReplyPipeline,
    StreamFilter,
    StreamFilterSpec,
    StreamParser,
    merge_events,
)
from .plugin_manager import PluginInfo, PluginManager, default_plugin_manager
from .selection import ParserChoice, build_pipeline, parse_reply, select_parser
from .tools import Tool, ToolRegistry, tool

__version__ = "0.1.0"

__all__ = [
    "Backend",
    "BackendError",
    "BackendNotFoundError",
    "BackendSpec",
    "CancelToken",
    "Chat",
    "ChatTemplate",
    "ContextOverflowError",
    "DerivationError",
    "DerivedFormat",
    "DiagnosticEvent",
    "DispatchResult",
    "Dispatcher",
    "DoneEvent",
    "DuplicateToolError",
    "ErrorEvent",
    "Event",
    "FilterContext",
    "GGUFError",
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
    "ReasoningEvent",
    "ReplyPipeline",
    "StreamFilter",
    "StreamFilterSpec",
    "StreamParser",
    "TemplateError",
    "TemplateSecurityError",
    "TextEvent",
    "Tool",
    "ToolArgumentsError",
    "ToolCall",
    "ToolCallDeltaEvent",
    "ToolCallError",
    "ToolCallEvent",
    "ToolCallStartEvent",
    "ToolDefinitionError",
    "ToolExecutionError",
    "ToolPermissionError",
    "ToolRegistry",
    "ToolResultEvent",
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
    "hookimpl",
    "merge_events",
    "parse_reply",
    "select_parser",
    "to_openai_messages",
    "to_stored",
    "to_template_messages",
    "tool",
]

