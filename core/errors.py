"""The one error hierarchy of toolwire.

Every error toolwire raises derives from :class:`ToolwireError`; where a builtin
exception says the same thing, the toolwire error inherits it too, so callers can
catch generically (``except LookupError``)::

    ToolwireError
    ├── PluginError
    │   ├── PluginLoadError                 a plugin failed to import or register
    │   └── PluginConflictError (ValueError) two plugins registered the same name
    ├── ToolDefinitionError (TypeError)     a tool's schema or signature is unusable
    │   └── ToolSchemaBudgetError           a tool's schema is over a size budget
    ├── DuplicateToolError (ValueError)     a registry already holds that tool name
    ├── ToolCallError                       one call of the model failed; the text
    │   │                                   becomes the tool result the model reads
    │   ├── UnknownToolError (LookupError)
    │   ├── ToolArgumentsError (ValueError)
    │   ├── ToolPermissionError (PermissionError)  a write tool in a read-only session
    │   ├── ToolDeniedError (PermissionError)      the approver did not allow the call
    │   ├── ToolExecutionError
    │   ├── ToolTimeoutError (TimeoutError)
    │   ├── ToolCancelledError              the reply was cancelled while it ran
    │   └── ToolBusyError                   every tool thread is held by a hung call
    ├── ParserNotFoundError (LookupError)   no parser plugin claims a template / family
    ├── ParserConflictError (ValueError)    two parser plugins tie for a template
    ├── DerivationError (ValueError)        a template's call markup cannot be inferred
    ├── BackendNotFoundError (LookupError)
    ├── ToolSourceNotFoundError (LookupError)  no tool source of that name is registered
    ├── TemplateError (ValueError)          a chat template failed to compile or raised
    │   ├── TemplateSecurityError           a template tried to leave the sandbox
    │   └── TemplateResourceError           a render passed its memory, time or output bound
    ├── GGUFError (ValueError)              a GGUF file is malformed or hostile
    ├── GrammarError (ValueError)           no grammar can say this
    │   ├── GrammarFormatError              the family's record (or parser) cannot be
    │   │                                   written as a grammar
    │   └── GrammarSchemaError              a tool's schema uses a keyword the grammar
    │                                       cannot express, or a name the markup cannot carry
    ├── ToolChoiceError (ValueError)        a tool_choice that is not one of the OpenAI forms,
    │                                       or names a tool that is not offered
    ├── ConformanceError (AssertionError)   a parser failed check_parser (lives in
    │                                       toolwire.testing.conformance)
    ├── ChildStoppedError                   work in a supervised child process passed a
    │                                       bound, was cancelled, or ended the child
    └── BackendError                        a model backend failed (load, request, stream)
        └── ContextOverflowError            the prompt cannot fit the context window

Which errors reach whom:

* :class:`ToolCallError` and its subclasses never reach the caller of a chat: the
  dispatch loop turns them into the tool result that the model reads next (and a
  ``tool_result`` event with ``is_error`` set).
* :class:`BackendError` during a reply becomes an ``error`` event followed by a
  ``done`` event; the conversation stays usable.
* :class:`GrammarError` and :class:`ToolChoiceError` reach the caller of
  :func:`toolwire.grammar_for`; during a chat turn a backend turns a
  :class:`GrammarError` into an ``error`` event (``tool_choice`` ``"required"`` or a
  named tool) or a one-time ``grammar_unavailable`` diagnostic (``"auto"``, which then
  runs unconstrained).
* Everything else is raised to the caller, because it is a programming or setup
  mistake (a bad tool definition, a missing plugin, a broken template file).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BackendError",
    "BackendNotFoundError",
    "ChildStoppedError",
    "ContextOverflowError",
    "DerivationError",
    "DuplicateToolError",
    "GGUFError",
    "GrammarError",
    "GrammarFormatError",
    "GrammarSchemaError",
    "ParserConflictError",
    "ParserNotFoundError",
    "PluginConflictError",
    "PluginError",
    "PluginLoadError",
    "TemplateError",
    "TemplateResourceError",
    "TemplateSecurityError",
    "ToolArgumentsError",
    "ToolBusyError",
    "ToolCallError",
    "ToolCancelledError",
    "ToolChoiceError",
    "ToolDefinitionError",
    "ToolDeniedError",
    "ToolExecutionError",
    "ToolPermissionError",
    "ToolSchemaBudgetError",
    "ToolSourceNotFoundError",
    "ToolTimeoutError",
    "ToolwireError",
    "UnknownToolError",
]


class ToolwireError(Exception):
    """Base class of every error toolwire raises."""


class PluginError(ToolwireError):
    """A plugin could not be loaded or registered."""

    def __init__(self, message: str, *, plugin: str | None = None) -> None:
        super().__init__(message)
        self.plugin = plugin


class PluginLoadError(PluginError):
    """A plugin failed to import, or one of its registration hooks raised."""


class PluginConflictError(PluginError, ValueError):
    """Two plugins registered a parser, backend, tool or filter under one name."""

    def __init__(self, kind: str, name: str, first: str, second: str) -> None:
        super().__init__(
            f"{kind} {name!r} is registered by both plugin {first!r} and plugin {second!r}",
            plugin=second,
        )
        self.kind = kind
        self.name = name
        self.first = first
        self.second = second


class ToolDefinitionError(ToolwireError, TypeError):
    """A tool's schema, signature or annotations cannot describe a tool."""


class ToolSchemaBudgetError(ToolDefinitionError):
    """A tool's schema is over one of the size limits every tool schema is held to
    (see :mod:`toolwire.vocabulary.schema_size`); the tool is refused where it
    enters (created, sent in a request, listed by an MCP server).

    :ivar tool: the tool's name.
    :ivar budget: which limit of :class:`toolwire.limits.SchemaLimits` or rule:
        ``nodes`` (JSON values in the schema), ``depth``
        (nesting), ``expansion`` (subschemas applied to one value through
        ``$ref``/``anyOf``/``allOf``/...), ``cycle`` (a subschema applied to
        a value through itself, or a schema object that contains itself) or
        ``pattern`` (a regular expression that cannot be used, see
        :mod:`toolwire.vocabulary.patterns`).
    :ivar limit: the limit's value (``0`` for ``cycle``).
    :ivar found: what the schema has; counting stops once past the limit, so it
        may be more.
    """

    def __init__(self, message: str, *, tool: str, budget: str, limit: int,
                 found: int) -> None:
        super().__init__(message)
        self.tool = tool
        self.budget = budget
        self.limit = limit
        self.found = found


class DuplicateToolError(ToolwireError, ValueError):
    """A tool registry already holds a tool of that name."""


class ToolCallError(ToolwireError):
    """One tool call of the model failed.

    The message is written for the model: it says what was wrong and how to call
    the tool correctly. The loop returns it as the tool result.
    """

    def __init__(self, message: str, *, tool: str) -> None:
        super().__init__(message)
        self.tool = tool


class UnknownToolError(ToolCallError, LookupError):
    """The model called a tool that is not offered."""


class ToolArgumentsError(ToolCallError, ValueError):
    """The model's arguments do not match the tool's schema."""

    def __init__(self, message: str, *, tool: str, problems: tuple[str, ...] = ()) -> None:
        super().__init__(message, tool=tool)
        self.problems = problems


class ToolPermissionError(ToolCallError, PermissionError):
    """The model called a write tool while the session is read-only."""


class ToolDeniedError(ToolCallError, PermissionError):
    """The session's approver did not allow a call of a tool that changes things."""


class ToolExecutionError(ToolCallError):
    """The tool itself raised; ``__cause__`` holds its exception."""


class ToolTimeoutError(ToolCallError, TimeoutError):
    """The tool did not finish within its timeout."""


class ToolCancelledError(ToolCallError):
    """The reply was cancelled while the tool ran; the dispatcher stopped waiting for it."""


class ToolBusyError(ToolCallError):
    """The call was not run: every thread of the tool pool is still running a call
    the dispatcher gave up on (see :mod:`toolwire.conversation.tool_threads`)."""


class ParserNotFoundError(ToolwireError, LookupError):
    """No parser plugin is registered for a family, or none claims a template.

    The message is one line; the reasons behind it are kept for a program to show:

    :ivar seen_markers: the known tool-call markers the template mentions.
    :ivar refusals: each parser that claimed the template but was refused, as
        ``"family: why"`` (it misread the call it rendered through the template).
    :ivar derivation: why no parser could be derived from the template ("" if not tried).
    """

    def __init__(self, message: str, *, seen_markers: tuple[str, ...] = (),
                 refusals: tuple[str, ...] = (), derivation: str = "") -> None:
        super().__init__(message)
        self.seen_markers = seen_markers
        self.refusals = refusals
        self.derivation = derivation


class ParserConflictError(ToolwireError, ValueError):
    """Two parser plugins claim one template with the same score."""


class DerivationError(ToolwireError, ValueError):
    """A template's tool-call markup could not be inferred (see ``toolwire.families.derive``).

    :ivar seen: what the template rendered, to show the user.
    """

    def __init__(self, message: str, *, seen: str = "") -> None:
        super().__init__(message)
        self.seen = seen


class BackendNotFoundError(ToolwireError, LookupError):
    """No backend plugin is registered under that name."""


class ToolSourceNotFoundError(ToolwireError, LookupError):
    """No tool source of that name is registered (its plugin or extra is missing)."""


class TemplateError(ToolwireError, ValueError):
    """A chat template failed to compile, or raised while rendering.

    A template's own ``raise_exception(msg)`` arrives here with ``msg`` as the message.
    """


class TemplateSecurityError(TemplateError):
    """A chat template tried to reach outside the Jinja sandbox."""


class TemplateResourceError(TemplateError):
    """A render passed one of its bounds (:class:`toolwire.limits.RenderLimits`): the
    memory or time of the child process it runs in, or the prompt's length.

    :ivar bound: ``memory``, ``time`` or ``output`` (``crash``: the render ended its
        process otherwise, a signal the message names).
    :ivar template: where the template came from (a GGUF file's name, a file, or
        the hash of its source).
    :ivar peak_memory_bytes: the peak resident memory of the process the render ran
        in, when the process was stopped (``0``: not known, or not stopped).
    """

    def __init__(self, message: str, *, bound: str = "", template: str = "",
                 peak_memory_bytes: int = 0) -> None:
        super().__init__(message)
        self.bound = bound
        self.template = template
        self.peak_memory_bytes = peak_memory_bytes


class ChildStoppedError(ToolwireError):
    """Work sent to a supervised child process (:mod:`toolwire.isolation`) did not
    finish: it passed a bound, was cancelled, or the child ended under it. The child
    is gone; the next job gets a new one.

    :ivar bound: ``memory``, ``cpu time``, ``wall time``, ``cancelled``, ``output``
        (it wrote more than its pipe takes) or ``crash`` (a signal, an exit).
    :ivar how: how the child ended, for people.
    :ivar peak_memory_bytes: the child's peak resident memory (``0``: not known).
    """

    def __init__(self, message: str, *, bound: str, how: str, peak_memory_bytes: int = 0
                 ) -> None:
        super().__init__(message)
        self.bound = bound
        self.how = how
        self.peak_memory_bytes = peak_memory_bytes


class GGUFError(ToolwireError, ValueError):
    """A GGUF file is truncated, malformed or hostile.

    :ivar path: the file that was read.
    :ivar offset: the byte offset at which reading failed.
    """

    def __init__(self, message: str, *, path: str, offset: int) -> None:
        super().__init__(f"{path}: at byte {offset}: {message}")
        self.path = path
        self.offset = offset
        self.reason = message


class BackendError(ToolwireError):
    """A model backend failed to load, to accept a request, or mid-stream.

    :ivar kind: a short machine-readable category (``auth``, ``not_found``,
        ``rate_limit``, ``server``, ``timeout``, ``connection``, ``stream_cut``,
        ``tools_rejected``, ``load``, ``template``, ``context``, ...).
    """

    def __init__(self, message: str, *, kind: str = "backend", **context: Any) -> None:
        super().__init__(message)
        self.kind = kind
        self.context = context


class ContextOverflowError(BackendError):
    """The prompt does not fit the context window, even after pruning history."""

    def __init__(self, message: str, *, needed: int, available: int) -> None:
        super().__init__(message, kind="context", needed=needed, available=available)
        self.needed = needed
        self.available = available

class GrammarError(ToolwireError, ValueError):
    """No grammar can be written for this family, these tools and this choice.

    :ivar family: the family whose calls were to be constrained.
    """

    def __init__(self, message: str, *, family: str = "") -> None:
        super().__init__(message)
        self.family = family


class GrammarFormatError(GrammarError):
    """The family's record (or its hand-written parser) cannot be written as a grammar.

    :ivar feature: what the grammar cannot say (``GrammarArguments``, ``no record``...).
    """

    def __init__(self, message: str, *, family: str = "", feature: str = "") -> None:
        super().__init__(message, family=family)
        self.feature = feature


class GrammarSchemaError(GrammarError):
    """A tool's schema cannot be written as a grammar.

    :ivar tool: the tool's name.
    :ivar path: where in its parameters (``/properties/tags/items``).
    :ivar keyword: the JSON-schema keyword (``patternProperties``...), or ``name``
        for a tool or parameter name the family's markup cannot carry.
    """

    def __init__(self, message: str, *, family: str = "", tool: str = "", path: str = "",
                 keyword: str = "") -> None:
        super().__init__(message, family=family)
        self.tool = tool
        self.path = path
        self.keyword = keyword


class ToolChoiceError(ToolwireError, ValueError):
    """A ``tool_choice`` that is not ``"auto"``, ``"required"``, ``"none"`` or
    ``{"type": "function", "function": {"name": ...}}`` naming an offered tool."""
