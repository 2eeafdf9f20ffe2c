"""What toolwire refuses: every bound on untrusted input, in one place.

Model output, GGUF files, chat templates, tool schemas, HTTP clients, MCP servers and
the workspace are untrusted (``docs/security.md``). One record here holds the bounds of
each; every field is declared by :func:`_bound` with its unit, its one-line meaning and
what sets it, which :func:`bounds` reads back: ``toolwire serve`` builds its options
from it, and ``tests/unit/test_limits.py`` holds docs/security.md's tables to it. The
built-in plugins' records are here too (they take them through ``toolwire.plugin_api``),
so the one table is complete without loading a plugin.

Not limits of this kind, though sized in tokens: the context fit
(:mod:`toolwire.backends.context_fit`, what fits the model's window) and a request's
reasoning budget (:class:`toolwire.ReasoningRequest`).

.. versionadded:: 0.2
"""

from __future__ import annotations

import functools
import math
import os
from typing import Any, Final

import attrs

__all__ = ["LIMIT_RECORDS", "PATTERN_LIMITS", "RENDER_SECONDS_VARIABLE", "Bound",
           "DispatchLimits", "GgufLimits", "McpLimits", "PatternLimits", "PromptLimits",
           "RenderLimits", "SchemaLimits", "ServerLimits", "WorkspaceLimits", "bound", "bounds"]

RENDER_SECONDS_VARIABLE: Final = "TOOLWIRE_TEMPLATE_SECONDS"
"""Environment variable: the default ``max_seconds`` of a render."""


@attrs.frozen
class Bound:
    """One bound as the command line and the docs show it: the ``record`` and field
    (``name``) holding it, its ``default`` (before any environment variable), its
    ``unit`` (``bytes``, ``s`` or what is counted), its one-line ``meaning``, and the
    command-line ``flag``, environment variable (``env``) or ``python`` argument that
    sets it, if any."""

    record: str
    name: str
    default: int | float
    unit: str
    meaning: str
    flag: str | None = None
    env: str | None = None
    python: str | None = None

    @property
    def shown(self) -> str:
        """The default as people read it: ``8 MiB``, ``30 s``, ``2,000 messages``."""
        value = self.default
        if self.unit == "bytes":
            for size, name in ((1 << 20, "MiB"), (1 << 10, "KiB")):
                if value >= size and value % size == 0:
                    return f"{value // size:,} {name}"
            return f"{value:,} bytes"
        return f"{value:g} s" if self.unit == "s" else f"{value:,} {self.unit}".rstrip()

    @property
    def help(self) -> str:
        """Its command-line option's help: the meaning and the default, without the
        Markdown code marks the docs' tables show (a terminal prints them as they are)."""
        return f"{self.meaning.replace('`', '')} (default: {self.shown})"


def _positive(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value <= 0:
        raise ValueError(f"{attribute.name} must be positive, not {value!r}")


def _from_environment(variable: str, default: int | float) -> int | float:
    """``variable`` when it is a positive number (of ``default``'s type), else ``default``:
    a bad value never loosens a bound, nor stops the program."""
    try:
        value = type(default)(os.environ.get(variable, "").strip() or default)
    except ValueError:
        return default
    return value if value > 0 and math.isfinite(value) else default


def _bound(default: int | float, unit: str, meaning: str, *, flag: str | None = None,
           env: str | None = None, python: str | None = None) -> Any:
    """A positive field that :func:`bounds` describes; with ``env``, its default is read
    from that variable when the record is made."""
    metadata = {"bound": (default, unit, meaning, flag, env, python)}
    if env is None:
        return attrs.field(default=default, validator=_positive, metadata=metadata)
    return attrs.field(factory=functools.partial(_from_environment, env, default),
                       validator=_positive, metadata=metadata)


def bounds(record: type) -> tuple[Bound, ...]:
    """Every bound of a limits record, in the record's order."""
    return tuple(Bound(record.__name__, field.name, *field.metadata["bound"])
                 for field in attrs.fields(record))


def bound(record: type, name: str) -> Bound:
    """The bound ``name`` of a limits record."""
    return next(found for found in bounds(record) if found.name == name)


@attrs.frozen
class RenderLimits:
    """One chat-template render in its child process (:mod:`toolwire.templates`), set as
    ``ChatTemplate(source, limits=...)``; its CPU time is ``max_seconds``, rounded up, + 1."""

    max_output_chars: int = _bound(10_000_000, "characters", "rendered output")
    max_memory_bytes: int = _bound(256 << 20, "bytes", "address space a render may add to its "
                                   "child (`RLIMIT_AS`), whatever builds it")
    max_seconds: float = _bound(10.0, "s", "wall-clock time of one render",
                                env=RENDER_SECONDS_VARIABLE)


@attrs.frozen
class PatternLimits:
    """A regular expression from outside: a schema's ``pattern`` or ``patternProperties``
    key, a workspace search (:mod:`toolwire.vocabulary.patterns`); fixed."""

    max_chars: int = _bound(4_096, "characters", "one regular expression of a schema")
    compile_memory_bytes: int = _bound(16 << 20, "bytes", "address space compiling it may "
                                       "take, in the pattern child first (`a{1000000}`: 1 GB)")
    compile_seconds: float = _bound(2.0, "s", "time compiling it there may take")
    kept_bytes: int = _bound(64 << 20, "bytes", "compiled patterns one process keeps (the "
                             "least recently used are dropped)")
    match_seconds: float = _bound(1.0, "s", "matching in one validation of a value (then the "
                                  "arguments could not be checked)")
    search_memory_bytes: int = _bound(256 << 20, "bytes", "address space one workspace search "
                                      "may add to the pattern child")


PATTERN_LIMITS: Final = PatternLimits()
"""The bounds every pattern from outside is held to."""


@attrs.frozen
class SchemaLimits:
    """Every tool schema where its tool enters (:mod:`toolwire.vocabulary.schema_size`),
    a validation of a call's arguments, the call grammar's counts; fixed."""

    max_nodes: int = _bound(20_000, "JSON values", "JSON values in one tool's parameters, as "
                            "given and as the tool holds them")
    max_depth: int = _bound(64, "levels", "nesting of objects and arrays in it")
    max_expansion: int = _bound(1_000, "subschemas", "subschemas applied to one value (`$ref`, "
                                "`allOf`, `anyOf`, `oneOf`, `not`, `if`...)")
    validation_steps: int = _bound(20_000, "keywords", "keywords one validation of a call's "
                                   "arguments may apply, plus the next")
    validation_steps_per_value: int = _bound(100, "keywords", "more for each JSON value of the "
                                             "arguments")
    grammar_repeat: int = _bound(1_999, "", "a repetition count the call grammar writes "
                                 "(llama.cpp refuses 2,000); past it relaxed")


@attrs.frozen
class GgufLimits:
    """Reading one GGUF file's header (:mod:`toolwire.gguf`); fixed."""

    max_keys: int = _bound(16_384, "keys", "key/value pairs in one file")
    max_string_value_bytes: int = _bound(16 << 20, "bytes", "one string value (a template)")
    max_string_bytes: int = _bound(32 << 20, "bytes", "keys and string values kept, in all")
    max_array_strings: int = _bound(1 << 21, "strings", "string-array elements walked, in all")


@attrs.frozen
class PromptLimits:
    """The prompt a local model is given (:mod:`toolwire.backends`); fixed."""

    special_tokens_per_piece: int = _bound(64, "special tokens", "special tokens in one "
                                           "tokenizer call (llama.cpp's partitioning is "
                                           "quadratic in them)")


@attrs.frozen
class DispatchLimits:
    """Running the model's tool calls (:mod:`toolwire.conversation`)."""

    tool_seconds: float = _bound(60.0, "s", "one call's running time", flag="--timeout",
                                 python="`Chat(tool_timeout=...)`, `@tool(timeout=...)`")
    tool_threads: int = _bound(32, "threads", "threads running calls with a timeout (all "
                               "abandoned: calls refused, `busy`)", env="TOOLWIRE_TOOL_THREADS",
                               python="`Dispatcher(threads=ToolThreadPool(n))`")
    max_output_chars: int = _bound(100_000, "characters", "one result the model and the history "
                                   "get (then a note)", python="`Chat(max_tool_output_chars=...)`")
    max_argument_depth: int = _bound(100, "levels", "nesting of a call's arguments")
    max_tool_iters: int = _bound(10, "turns", "model turns per message; the last answers "
                                 "without tools", flag="--max-tool-iters",
                                 python="`Chat(max_tool_iters=...)`")


@attrs.frozen
class ServerLimits:
    """Every request and connection of one server, set as ``create_app(limits=...)``."""

    max_body_bytes: int = _bound(8 << 20, "bytes", "request body (413)", flag="--max-body-bytes")
    max_messages: int = _bound(2_000, "messages", "messages in one request, each unanswered "
                               "call's result too (413)", flag="--max-messages")
    max_chars: int = _bound(2_000_000, "characters", "message text (contents, reasoning, "
                            "arguments) in one request (413)", flag="--max-chars")
    max_json_depth: int = _bound(100, "levels", "nesting of the body and of each call's "
                                 "arguments (400)")
    max_tools: int = _bound(128, "tools", "tools in one request (400)")
    max_waiting: int = _bound(16, "requests", "requests waiting while the model is busy (429)",
                              flag="--queue-size")
    body_timeout: float = _bound(30.0, "s", "time to send the body (408)", flag="--body-timeout")
    header_timeout: float = _bound(10.0, "s", "time to send the request head (then closed)",
                                   flag="--header-timeout")
    keep_alive_timeout: float = _bound(5.0, "s", "an idle keep-alive connection",
                                       flag="--keep-alive-timeout")
    max_connections: int = _bound(64, "requests", "requests being answered at once, all "
                                  "arrived (503)", flag="--max-connections")
    max_idle_connections: int = _bound(256, "connections", "idle or half-sent connections of all "
                                       "clients (the longest-waiting closed)",
                                       flag="--max-idle-connections")
    max_idle_per_client: int = _bound(32, "connections", "idle or half-sent connections of one "
                                      "address, an IPv6 `/64` (its longest-waiting closed)",
                                      flag="--max-idle-per-client")
    send_timeout: float = _bound(30.0, "s", "time a client may leave its answer unread (then "
                                 "cut)", flag="--send-timeout")
    linger_timeout: float = _bound(5.0, "s", "draining a client's body after an early answer, "
                                   "at most a body's worth (then cut)", flag="--linger-timeout")
    max_header_bytes: int = _bound(16 << 10, "bytes", "request head (400, 431 for the headers)")
    max_stop: int = _bound(4, "strings", "`stop` strings of a chat completions request (400)")
    max_stop_sequences: int = _bound(16, "strings", "`stop_sequences` of a Messages request (400)")
    max_top_logprobs: int = _bound(20, "", "`top_logprobs` a request may ask for (400)")
    approval_body_bytes: int = _bound(4 << 10, "bytes", "body of an approval answer (413)")
    approval_timeout: float = _bound(600.0, "s", "time a write call waits for approval under "
                                     "`--approvals` (then denied)")


@attrs.frozen
class WorkspaceLimits:
    """The workspace tools (``toolwire.plugins.workspace_tools``): replace that plugin's
    ``tools.LIMITS`` with your own instance to change them."""

    max_entries: int = _bound(500, "entries", "entries `list_dir` shows")
    max_read_lines: int = _bound(2_000, "lines", "lines one `read_file` returns")
    max_read_bytes: int = _bound(256 << 10, "bytes", "bytes one `read_file` returns")
    max_line_bytes: int = _bound(8 << 10, "bytes", "one line shown (the rest cut, with a note)")
    max_search_file_bytes: int = _bound(2 << 20, "bytes", "a file `search_text` reads (larger: "
                                        "skipped)")
    max_search_bytes: int = _bound(64 << 20, "bytes", "what one `search_text` reads in all")
    max_search_files: int = _bound(5_000, "files", "files one `search_text` opens")
    max_search_depth: int = _bound(64, "levels", "folder depth `search_text` descends")
    max_match_line_chars: int = _bound(4_096, "characters", "of a line a pattern is matched on")
    max_pattern_chars: int = _bound(1_000, "characters", "one search pattern")
    max_results: int = _bound(500, "lines", "result lines, whatever the model asks")
    max_write_bytes: int = _bound(8 << 20, "bytes", "content `write_file` writes")
    max_path_depth: int = _bound(64, "folders", "folders one path goes through, links followed "
                                 "(and `write_file` creates)")
    regex_seconds: float = _bound(5.0, "s", "matching of one search, or less: the call's deadline "
                                  "or its cancellation", env="TOOLWIRE_REGEX_TIMEOUT")


@attrs.frozen
class McpLimits:
    """The defaults of each MCP tool source (``toolwire.plugins.mcp_tools``)."""

    max_message_bytes: int = _bound(4 << 20, "bytes", "one message from a server kept while "
                                    "read: a result is cut with a note, else an error",
                                    python="`MCPServers(max_message_bytes=...)`")
    max_result_chars: int = _bound(100_000, "characters", "one result the model reads, note "
                                   "included", python="`MCPServers(max_result_chars=...)`")
    connect_timeout: float = _bound(30.0, "s", "a server's start, handshake and tool list",
                                    python="`MCPServers(connect_timeout=...)`")
    call_timeout: float = _bound(300.0, "s", "a call when the session sets no timeout",
                                 python="`MCPServers(call_timeout=...)`")
    max_list_pages: int = _bound(100, "pages", "pages of a server's tool list read")


LIMIT_RECORDS: Final = (RenderLimits, PatternLimits, SchemaLimits, GgufLimits, PromptLimits,
                        DispatchLimits, ServerLimits, WorkspaceLimits, McpLimits)
"""Every limits record, in the order ``docs/security.md`` gives them."""
