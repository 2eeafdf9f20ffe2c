"""Render a model's Jinja chat template, safely.

A chat template is a Jinja program shipped inside a model file (GGUF metadata,
``tokenizer_config.json``). Templates are untrusted input: CVE-2024-34359 in
llama-cpp-python was remote code execution through a template rendered with an
unsandboxed Jinja environment. Every template here therefore runs in a Jinja
sandbox, which refuses ``_``-prefixed and interpreter-internal attributes
(``__globals__``, ``__class__.__mro__``, ``cycler.__init__.__globals__``,
``self._TemplateReference__context``, ...), has no loader (no ``include`` or
``import`` of files) and exposes no module such as ``os`` or ``subprocess``.

Two environments exist:

* **strict** copies Hugging Face ``apply_chat_template``: an
  :class:`~jinja2.sandbox.ImmutableSandboxedEnvironment` (lists and dicts cannot be
  mutated), ``trim_blocks``, ``lstrip_blocks``, ``loopcontrols``, a ``tojson`` that
  keeps non-ASCII, the ``{% generation %}`` tag, ``raise_exception`` and
  ``strftime_now``.
* **lenient** is what some real templates need beyond that: a mutable
  :class:`~jinja2.sandbox.SandboxedEnvironment` (Kimi K2 calls ``list.append``), the
  ``from_json``/``fromjson`` filters (DeepSeek V3.2/V4), a ``tojson`` that accepts
  generators (llama.cpp's DeepSeek R1 template), and default ``functions`` and
  ``datetime`` variables (firefunction v2). It is still a sandbox: only the
  mutation methods of lists, dicts, sets and deques are added.

``lenient=None`` (the default) renders strictly and falls back to lenient only
when the strict failure came from one of those lenient features; see
:class:`ChatTemplate`. Details and the list of templates that cannot render a tool
conversation are in ``docs/templates.md``.
"""

from __future__ import annotations

import hashlib
import json
import threading
import types
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Final

import attrs
import jinja2
from jinja2 import nodes
from jinja2.exceptions import SecurityError, TemplateRuntimeError, TemplateSyntaxError
from jinja2.ext import Extension
from jinja2.parser import Parser
from jinja2.runtime import Context
from jinja2.sandbox import (
    ImmutableSandboxedEnvironment,
    SandboxedEnvironment,
    is_internal_attribute,
    modifies_known_mutable,
)

from ..errors import TemplateError, TemplateResourceError, TemplateSecurityError
from ..vocabulary.valid_text import valid_text
from .bounded_filters import guarded_filters
from .bounded_ops import (
    GUARDED_CALLABLE_TYPES,
    INTERCEPTED_BINOPS,
    SIZED_RESULTS,
    account_result,
    account_value,
    check_json,
    check_strftime_format,
    guard_add,
    guard_binop,
    guard_call,
    guard_concat,
    guard_join,
    guard_literal,
    guard_output,
    guarded_globals,
    guarded_iterable,
    guarded_str_format,
)
from .budgeted_compiler import LOOP_FILTER, BudgetedCodeGenerator
from .container_growth import collect
from .render_budget import (
    DEFAULT_MAX_OUTPUT_CHARS,
    UNCOUNTED_SIZE,
    RenderBudget,
    RenderLimits,
    ResourceLimitError,
    active_budget,
    current_budget,
)

__all__ = [
    "DEFAULT_MAX_OUTPUT_CHARS",
    "ChatTemplate",
    "RenderLimits",
    "get_chat_template",
]

_CACHE_SIZE: Final = 64
# Jinja names a template compiled from a string like this in rewritten tracebacks.
_JINJA_STRING_FILENAME: Final = "<template>"


# ---------------------------------------------------------------------------
# Internal exceptions raised from inside the template. None leaves this module.


class _RaisedByTemplate(Exception):
    """The template called ``raise_exception(msg)``."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class _MutationRefused(SecurityError):
    """The immutable sandbox refused a list/dict mutation method that lenient allows."""


class _LenientOnly(TemplateRuntimeError):
    """The template used a filter, value or variable only lenient mode supplies."""


# Both mean "the strict environment lacks something lenient has": the trigger of
# the automatic fallback.
_FALLBACK_TRIGGERS: Final = (_MutationRefused, _LenientOnly)


# ---------------------------------------------------------------------------
# Globals and filters shared by both environments.


def _raise_exception(message: str) -> None:
    raise _RaisedByTemplate(str(message))


def _strftime_now(fmt: str) -> str:
    check_strftime_format(fmt)
    return datetime.now().strftime(fmt)


def _dump_json(
    value: Any,
    *,
    lenient: bool,
    ensure_ascii: bool,
    indent: int | str | None,
    separators: tuple[str, str] | None,
    sort_keys: bool,
) -> str:
    def convert(obj: Any) -> Any:
        # Undefined is iterable (empty), so it must be refused before the
        # iterable branch; HF raises TypeError here too.
        if isinstance(obj, jinja2.Undefined):
            raise TypeError("Object of type Undefined is not JSON serializable")
        if isinstance(obj, Mapping):
            if lenient:
                return dict(obj)
        elif isinstance(obj, Iterable) and not isinstance(obj, str | bytes):
            if lenient:
                return collect(current_budget(), obj, "tojson")
            raise _LenientOnly(
                f"tojson of a {type(obj).__name__} (e.g. from map()) needs lenient mode"
            )
        raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")

    check_json(value, indent)
    text = json.dumps(
        value,
        ensure_ascii=ensure_ascii,
        indent=indent,
        separators=separators,
        sort_keys=sort_keys,
        default=convert,
    )
    # escapes make the text a few times the value's size at most
    return text if len(text) <= UNCOUNTED_SIZE else account_value(current_budget(), text,
                                                                  "tojson")


def _tojson_strict(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | str | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return _dump_json(
        value,
        lenient=False,
        ensure_ascii=ensure_ascii,
        indent=indent,
        separators=separators,
        sort_keys=sort_keys,
    )


def _tojson_lenient(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | str | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return _dump_json(
        value,
        lenient=True,
        ensure_ascii=ensure_ascii,
        indent=indent,
        separators=separators,
        sort_keys=sort_keys,
    )


def _from_json(value: Any) -> Any:
    if not isinstance(value, str):
        raise TypeError(f"from_json expects a JSON string, not {type(value).__name__}")
    return json.loads(value)


def _from_json_missing(value: Any) -> Any:
    # Registered in the strict environment so the failure is recognisable (and
    # happens at render time, not compile time), not to provide the filter.
    raise _LenientOnly("the from_json/fromjson filter needs lenient mode")


class _GenerationTag(Extension):
    """``{% generation %}...{% endgeneration %}``: renders its body unchanged.

    Hugging Face uses the tag to mark assistant tokens for training masks; for
    prompt building only the body matters.
    """

    tags = {"generation"}  # noqa: RUF012 - Extension declares it a plain class attribute

    def parse(self, parser: Parser) -> list[nodes.Node]:
        next(parser.stream)  # the "generation" name token
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


# ---------------------------------------------------------------------------
# The two environments.


_DICT_ATTRIBUTES: Final = frozenset(dir(dict))
_METHOD_TYPES: Final = frozenset({types.BuiltinMethodType, types.MethodType})
_FORMAT_METHODS: Final = frozenset({"format", "format_map"})

class _BudgetedSandbox(SandboxedEnvironment):
    """The sandbox with every operation that can cost much checked against the
    render's budget (see :mod:`toolwire.templates.render_budget`)."""

    intercepted_binops = INTERCEPTED_BINOPS
    code_generator_class = BudgetedCodeGenerator
    guarded_add = staticmethod(guard_add)
    guarded_concat = staticmethod(guard_concat)
    guarded_literal = staticmethod(guard_literal)
    guarded_output = staticmethod(guard_output)
    # what the generated code joins a macro's, a block's or a {% set %} block's text with
    concat = staticmethod(guard_join)

    def _generate(self, source: nodes.Template, name: str | None, filename: str | None,
                  defer_init: bool = False) -> str:
        for loop in source.find_all(nodes.For):
            loop.iter = nodes.Filter(loop.iter, LOOP_FILTER, [], [], None, None,
                                     lineno=loop.iter.lineno)
        return super()._generate(source, name, filename, defer_init)

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        return guard_binop(operator, left, right)

    def call(__self, __context: Context, __obj: Any, *args: Any,
             **kwargs: Any) -> Any:
        # SandboxedEnvironment.call, with each call a step of the budget (inlined:
        # templates call macros and methods tens of thousands of times).
        budget = current_budget()
        budget.steps += 1
        if budget.steps >= budget.next_clock:
            budget.checkpoint()
        if type(__obj) not in GUARDED_CALLABLE_TYPES:
            if not __self.is_safe_callable(__obj):
                raise SecurityError(f"{__obj!r} is not safely callable")
            return __context.call(__obj, *args, **kwargs)
        args = guard_call(budget, __obj, args, kwargs)
        if not __self.is_safe_callable(__obj):
            raise SecurityError(f"{__obj!r} is not safely callable")
        result = __context.call(__obj, *args, **kwargs)
        kind = type(result)
        if kind not in SIZED_RESULTS or (kind is str and len(result) <= UNCOUNTED_SIZE):
            return result
        return account_result(budget, __obj, result)

    def wrap_str_format(self, value: Any) -> Any:
        if type(value) not in _METHOD_TYPES or value.__name__ not in _FORMAT_METHODS:
            return None  # the common case, decided without a call
        return guarded_str_format(value, self.getattr)

    def getattr(self, obj: Any, attribute: str) -> Any:
        """SandboxedEnvironment.getattr, with a fast path for plain dicts."""
        if type(obj) is dict and attribute not in _DICT_ATTRIBUTES:
            # `message.role`: a dict's attributes are exactly its class's, so any
            # other name is an item look-up, as Jinja finds after a failed getattr
            # (an exception per look-up).
            try:
                return obj[attribute]
            except KeyError:
                return self.undefined(obj=obj, name=attribute)
        try:
            value = getattr(obj, attribute)
        except AttributeError:
            try:
                return obj[attribute]
            except (TypeError, LookupError):
                return self.undefined(obj=obj, name=attribute)
        if type(value) in _METHOD_TYPES and value.__name__ in _FORMAT_METHODS:
            formatted = guarded_str_format(value, self.getattr)
            if formatted is not None:
                return formatted
        if self.is_safe_attribute(obj, attribute, value):
            return value
        return self.unsafe_undefined(obj, attribute)


class _CachedSafety:
    """Remembers the sandbox's verdict per (type, attribute name).

    Jinja's checks (``is_internal_attribute``, ``modifies_known_mutable``) depend
    only on the object's type and the attribute's name, and a template asks the
    same questions thousands of times per render (``message.content``,
    ``content.startswith``); caching them halves the cost of a sandboxed render.
    """

    _MAX_ENTRIES = 4096

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        cache: dict[tuple[type, str], bool] = self.__dict__.setdefault("_safe_cache", {})
        key = (type(obj), attr)
        verdict = cache.get(key)
        if verdict is None:
            verdict = bool(super().is_safe_attribute(obj, attr, value))  # type: ignore[misc]
            if len(cache) < self._MAX_ENTRIES:
                cache[key] = verdict
        return verdict


class _StrictEnvironment(_CachedSafety, _BudgetedSandbox, ImmutableSandboxedEnvironment):
    """HF's environment, with refusals that say whether lenient mode would help."""

    def unsafe_undefined(self, obj: Any, attribute: str) -> jinja2.Undefined:
        # Refused only because it mutates a list/dict: lenient mode allows it.
        mutation_only = (
            not attribute.startswith("_")
            and not is_internal_attribute(obj, attribute)
            and modifies_known_mutable(obj, attribute)
        )
        raise _refused(obj, attribute, _MutationRefused if mutation_only else SecurityError)


class _LenientEnvironment(_CachedSafety, _BudgetedSandbox):
    """A mutable sandbox: everything strict refuses stays refused, except mutation."""

    def unsafe_undefined(self, obj: Any, attribute: str) -> jinja2.Undefined:
        raise _refused(obj, attribute, SecurityError)


def _refused(obj: Any, attribute: str, exc: type[SecurityError]) -> SecurityError:
    # Raised at the look-up, not returned as an undefined value: a refused
    # attribute must never render as empty, pass `is defined` or a `default`.
    return exc(f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe.")


def _configure(env: jinja2.Environment, *, lenient: bool) -> jinja2.Environment:
    env.filters["tojson"] = _tojson_lenient if lenient else _tojson_strict
    json_filter = _from_json if lenient else _from_json_missing
    env.filters["from_json"] = json_filter
    env.filters["fromjson"] = json_filter
    env.filters.update(guarded_filters())
    env.filters[LOOP_FILTER] = guarded_iterable
    env.globals.update(guarded_globals())
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


_ENV_OPTIONS: Final[dict[str, Any]] = {
    "trim_blocks": True,
    "lstrip_blocks": True,
    "extensions": ["jinja2.ext.loopcontrols", _GenerationTag],
}
_STRICT_ENV: Final = _configure(_StrictEnvironment(**_ENV_OPTIONS), lenient=False)
_LENIENT_ENV: Final = _configure(_LenientEnvironment(**_ENV_OPTIONS), lenient=True)


# ---------------------------------------------------------------------------
# Error translation.


def _template_line(exc: BaseException) -> int | None:
    if isinstance(exc, TemplateSyntaxError):
        return exc.lineno
    line = None
    tb = exc.__traceback__
    # Jinja rewrites the traceback so template frames carry template line numbers;
    # the innermost one is where the error happened.
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == _JINJA_STRING_FILENAME:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _translate(exc: Exception, label: str) -> TemplateError:
    if isinstance(exc, _RaisedByTemplate):
        return TemplateError(exc.message)
    line = _template_line(exc)
    where = f"chat template {label}" + (f", line {line}" if line is not None else "")
    detail = getattr(exc, "message", None) or str(exc)
    if isinstance(exc, SecurityError):
        return TemplateSecurityError(f"{where}: sandbox violation: {detail}")
    if isinstance(exc, _LenientOnly):
        return TemplateError(f"{where}: {detail} (pass lenient=True or lenient=None)")
    if isinstance(exc, ResourceLimitError):
        return TemplateResourceError(f"{where}: resource limit: {detail}")
    return TemplateError(f"{where}: {type(exc).__name__}: {detail}")


# ---------------------------------------------------------------------------
# Context building.


def _plain_copy(value: Any) -> Any:
    """Copy the containers of caller data, so a lenient template cannot mutate it."""
    if isinstance(value, Mapping):
        return {key: _plain_copy(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        copied = [_plain_copy(item) for item in value]
        return copied if isinstance(value, list) else tuple(copied)
    if isinstance(value, set | frozenset):
        return type(value)(value)
    return value


def _functions_json(tools: Sequence[Mapping[str, Any]] | None) -> str:
    """The ``functions`` string firefunction v2 reads: the tool schemas as JSON."""
    schemas = [
        tool.get("function", tool) if isinstance(tool, Mapping) else tool for tool in tools or ()
    ]
    return json.dumps(schemas, ensure_ascii=False, indent=4)


def _lenient_defaults(tools: Sequence[Mapping[str, Any]] | None) -> dict[str, Any]:
    return {
        "functions": _functions_json(tools),
        "datetime": datetime.now().strftime("%Y-%m-%d %H:%M:%S"),
    }


# In strict mode these variables are undefined, as under HF, but using them raises
# a recognisable error so the automatic mode can retry leniently.
_STRICT_PLACEHOLDERS: Final[dict[str, Any]] = {
    name: jinja2.Undefined(
        f"{name!r} is undefined (lenient mode supplies it)", name=name, exc=_LenientOnly
    )
    for name in ("functions", "datetime")
}


# ---------------------------------------------------------------------------
# The public class.


class ChatTemplate:
    """A compiled chat template.

    :param source: the Jinja source of the template.
    :param lenient: ``False`` renders only in the strict (HF-equivalent)
        environment; ``True`` only in the lenient one; ``None`` renders strictly
        and, if that fails *only* because of a feature lenient mode supplies (a
        list/dict mutation method, ``from_json``/``fromjson``, ``tojson`` of a
        generator, the ``functions``/``datetime`` variables), renders again
        leniently and keeps using lenient mode for this template from then on.
        Any other failure, including every real sandbox violation, is raised.
    :param name: a short label for error messages; defaults to the hash prefix.
    :param max_output_chars: a render producing more characters raises
        :class:`TemplateError` (the same as ``limits.max_output_chars``).
    :param limits: the time, output and memory bounds of one render (see
        :class:`~toolwire.templates.render_budget.RenderLimits`); a render that
        exceeds one raises :class:`TemplateError` naming it.
    :raises TemplateError: the source does not compile.
    """

    def __init__(
        self,
        source: str,
        *,
        lenient: bool | None = None,
        name: str | None = None,
        max_output_chars: int | None = None,
        limits: RenderLimits | None = None,
    ) -> None:
        self._source = source
        self._hash = hashlib.sha256(source.encode("utf-8")).hexdigest()
        self._lenient = lenient
        self._label = repr(name) if name else f"sha256:{self._hash[:12]}"
        limits = limits or RenderLimits()
        if max_output_chars is not None:
            limits = attrs.evolve(limits, max_output_chars=max_output_chars)
        self._limits = limits
        self._strict: jinja2.Template | None = None
        self._lenient_template: jinja2.Template | None = None
        if lenient:
            self._lenient_template = self._compile(_LENIENT_ENV)
        else:
            self._strict = self._compile(_STRICT_ENV)

    @property
    def source(self) -> str:
        """The Jinja source."""
        return self._source

    @property
    def source_hash(self) -> str:
        """The sha256 hex digest of the UTF-8 source."""
        return self._hash

    @property
    def limits(self) -> RenderLimits:
        """The bounds of one render."""
        return self._limits

    @property
    def lenient(self) -> bool | None:
        """The mode asked for: ``True``, ``False`` or ``None`` (automatic)."""
        return self._lenient

    @property
    def uses_lenient(self) -> bool:
        """Whether renders now go through the lenient environment."""
        return self._strict is None or (
            self._lenient is None and self._lenient_template is not None
        )

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        bos_token: str = "",
        eos_token: str = "",
        **extra: Any,
    ) -> str:
        """Render a conversation into the prompt text.

        ``messages`` and ``tools`` are plain dicts in the OpenAI/HF shape; pass
        tool-call ``arguments`` as a mapping (most templates iterate it). Extra
        keyword arguments (``enable_thinking=False``, ``documents=...``) become
        template variables.

        :raises TemplateSecurityError: the template tried to leave the sandbox.
        :raises TemplateResourceError: the render passed one of its ``limits``.
        :raises TemplateError: anything else went wrong; a template's own
            ``raise_exception(msg)`` arrives with exactly ``msg`` as the message.
        """
        variables = {
            "messages": messages,
            "tools": tools,
            "add_generation_prompt": add_generation_prompt,
            "bos_token": bos_token,
            "eos_token": eos_token,
            **extra,
        }
        try:
            with active_budget(RenderBudget(self._limits)):
                return self._render(variables)
        except TemplateError:
            raise
        except Exception as exc:
            raise _translate(exc, self._label) from exc

    # -- internals ---------------------------------------------------------

    def _compile(self, env: jinja2.Environment) -> jinja2.Template:
        try:
            # Jinja folds constant expressions while compiling (`{{ 'x' | center(9) }}`):
            # that runs guarded code too.
            with active_budget(RenderBudget(self._limits)):
                return env.from_string(self._source)
        except Exception as exc:
            raise _translate(exc, self._label) from exc

    def _render(self, variables: dict[str, Any]) -> str:
        if self._strict is not None and not self.uses_lenient:
            try:
                return self._generate(self._strict, {**_STRICT_PLACEHOLDERS, **variables})
            except _FALLBACK_TRIGGERS:
                if self._lenient is False:
                    raise
        return self._render_lenient(variables)

    def _render_lenient(self, variables: dict[str, Any]) -> str:
        template = self._lenient_template
        if template is None:
            # Stored, so a template that needed lenient once skips the strict try.
            template = self._lenient_template = self._compile(_LENIENT_ENV)
        defaults = _lenient_defaults(variables.get("tools"))
        return self._generate(template, {**defaults, **_plain_copy(variables)})

    def _generate(self, template: jinja2.Template, variables: dict[str, Any]) -> str:
        # Streaming lets the bound stop a runaway template before it has built
        # the whole oversized string.
        chunks: list[str] = []
        size = 0
        limit = self._limits.max_output_chars
        stream: Iterator[str] = template.generate(variables)
        try:
            for chunk in stream:
                size += len(chunk)
                if size > limit:
                    raise TemplateResourceError(
                        f"chat template {self._label}: output exceeds {limit} characters"
                    )
                chunks.append(chunk)
        finally:
            if isinstance(stream, types.GeneratorType):
                stream.close()
        # a string literal of the template ('\ud800') can write what no tokenizer takes
        return valid_text("".join(chunks))

    def __repr__(self) -> str:
        return f"ChatTemplate({self._label}, lenient={self._lenient!r})"


# ---------------------------------------------------------------------------
# The compile cache.

_cache: OrderedDict[tuple[str, bool | None], ChatTemplate] = OrderedDict()
_cache_lock = threading.Lock()


def get_chat_template(source: str, lenient: bool | None = None) -> ChatTemplate:
    """Return the :class:`ChatTemplate` for ``source``, compiling it only once.

    Keyed by (sha256 of the source, ``lenient``); the least recently used of more
    than 64 entries is dropped. A source that fails to compile is not cached.
    """
    key = (hashlib.sha256(source.encode("utf-8")).hexdigest(), lenient)
    with _cache_lock:
        template = _cache.get(key)
        if template is not None:
            _cache.move_to_end(key)
            return template
        # Compiling under the lock keeps "once" true for concurrent callers; a
        # compile takes milliseconds.
        template = ChatTemplate(source, lenient=lenient)
        _cache[key] = template
        if len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
        return template
