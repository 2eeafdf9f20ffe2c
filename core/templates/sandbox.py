"""The Jinja sandbox chat templates render in, inside the template child process.

A chat template is a Jinja program shipped inside a model file (GGUF metadata,
``tokenizer_config.json``). Templates are untrusted input: CVE-2024-34359 in
llama-cpp-python was remote code execution through a template rendered with an
unsandboxed Jinja environment. Every template here therefore runs in a Jinja
sandbox, which refuses ``_``-prefixed and interpreter-internal attributes
(``__globals__``, ``__class__.__mro__``, ``cycler.__init__.__globals__``,
``self._TemplateReference__context``, ...), has no loader (no ``include`` or
``import`` of files) and exposes no module such as ``os`` or ``subprocess``. That is
the defence against *what* a template may do; *how much* it may do (memory, time) is
bounded from the outside, by the child process this module runs in
(:class:`~toolwire.templates.chat_template.ChatTemplate` sends it the renders).

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

The automatic mode renders strictly and falls back to lenient only when the strict
failure came from one of those lenient features. :func:`handle_job` is the child's
entry: it compiles a source once (kept by its hash), renders a batch of variable
sets, and answers each with the prompt or the error, in words the parent raises as
they are.
"""

from __future__ import annotations

import functools
import json
import types
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Final

import jinja2
from jinja2 import nodes
from jinja2.exceptions import SecurityError, TemplateRuntimeError, TemplateSyntaxError
from jinja2.ext import Extension
from jinja2.parser import Parser
from jinja2.sandbox import (
    ImmutableSandboxedEnvironment,
    SandboxedEnvironment,
    is_internal_attribute,
    modifies_known_mutable,
)

from ..vocabulary.valid_text import valid_text

__all__ = ["handle_job"]

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


class _OutputTooLong(Exception):
    """The rendered prompt passed its length bound."""


class _SourceNeeded(Exception):
    """The template must be compiled here, and its source was not sent."""


# Both mean "the strict environment lacks something lenient has": the trigger of
# the automatic fallback.
_FALLBACK_TRIGGERS: Final = (_MutationRefused, _LenientOnly)


# ---------------------------------------------------------------------------
# Globals and filters shared by both environments.


def _raise_exception(message: str) -> None:
    raise _RaisedByTemplate(str(message))


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _dump_json(value: Any, ensure_ascii: bool = False, indent: int | str | None = None,
               separators: tuple[str, str] | None = None, sort_keys: bool = False, *,
               lenient: bool) -> str:
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
                return list(obj)
            raise _LenientOnly(
                f"tojson of a {type(obj).__name__} (e.g. from map()) needs lenient mode")
        raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")

    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys, default=convert)


_tojson_strict: Final = functools.partial(_dump_json, lenient=False)
_tojson_lenient: Final = functools.partial(_dump_json, lenient=True)


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


class _FastSandbox(SandboxedEnvironment):
    """The sandbox, with the look-ups templates make most decided quickly.

    Jinja's checks (``is_internal_attribute``, ``modifies_known_mutable``) depend
    only on the object's type and the attribute's name, and a template asks the
    same questions thousands of times per render (``message.content``,
    ``content.startswith``): the verdict is kept per (type, name), which halves the
    cost of a sandboxed render.
    """

    _MAX_VERDICTS = 4096

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
        return super().getattr(obj, attribute)

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        cache: dict[tuple[type, str], bool] = self.__dict__.setdefault("_verdicts", {})
        key = (type(obj), attr)
        verdict = cache.get(key)
        if verdict is None:
            verdict = bool(super().is_safe_attribute(obj, attr, value))
            if len(cache) < self._MAX_VERDICTS:
                cache[key] = verdict
        return verdict


class _StrictEnvironment(_FastSandbox, ImmutableSandboxedEnvironment):
    """HF's environment, with refusals that say whether lenient mode would help."""

    def unsafe_undefined(self, obj: Any, attribute: str) -> jinja2.Undefined:
        # Refused only because it mutates a list/dict: lenient mode allows it.
        mutation_only = (
            not attribute.startswith("_")
            and not is_internal_attribute(obj, attribute)
            and modifies_known_mutable(obj, attribute)
        )
        raise _refused(obj, attribute, _MutationRefused if mutation_only else SecurityError)


class _LenientEnvironment(_FastSandbox):
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
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


_ENV_OPTIONS: Final[dict[str, Any]] = {
    "trim_blocks": True,
    "lstrip_blocks": True,
    "extensions": ["jinja2.ext.loopcontrols", _GenerationTag],
    # no constant folding: compiling runs no template code, so a template that does
    # not compile is the only failure of a compile, and every bound is a render's
    "optimized": False,
}
_STRICT_ENV: Final = _configure(_StrictEnvironment(**_ENV_OPTIONS), lenient=False)
_LENIENT_ENV: Final = _configure(_LenientEnvironment(**_ENV_OPTIONS), lenient=True)


# ---------------------------------------------------------------------------
# Error translation: what the parent raises, as (kind, message).


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


def _failure(exc: Exception, label: str) -> dict[str, str]:
    """The error as the parent raises it: ``kind`` is ``raised`` (the template's own
    ``raise_exception``), ``security``, ``output`` or ``template``."""
    if isinstance(exc, _RaisedByTemplate):
        return {"kind": "raised", "message": exc.message}
    if isinstance(exc, _OutputTooLong):
        return {"kind": "output", "message": f"chat template {label}: {exc}"}
    line = _template_line(exc)
    where = f"chat template {label}" + (f", line {line}" if line is not None else "")
    detail = getattr(exc, "message", None) or str(exc)
    if isinstance(exc, SecurityError):
        return {"kind": "security", "message": f"{where}: sandbox violation: {detail}"}
    if isinstance(exc, _LenientOnly):
        return {"kind": "template",
                "message": f"{where}: {detail} (pass lenient=True or lenient=None)"}
    return {"kind": "template", "message": f"{where}: {type(exc).__name__}: {detail}"}


# ---------------------------------------------------------------------------
# Context building.


def _functions_json(tools: Sequence[Mapping[str, Any]] | None) -> str:
    """The ``functions`` string firefunction v2 reads: the tool schemas as JSON."""
    schemas = [
        tool.get("function", tool) if isinstance(tool, Mapping) else tool for tool in tools or ()
    ]
    return json.dumps(schemas, ensure_ascii=False, indent=4)


# In strict mode these variables are undefined, as under HF, but using them raises
# a recognisable error so the automatic mode can retry leniently.
_STRICT_PLACEHOLDERS: Final[dict[str, Any]] = {
    name: jinja2.Undefined(
        f"{name!r} is undefined (lenient mode supplies it)", name=name, exc=_LenientOnly
    )
    for name in ("functions", "datetime")
}


# ---------------------------------------------------------------------------
# Compiling and rendering.

_compiled: OrderedDict[tuple[str, bool], jinja2.Template] = OrderedDict()


def _compile(source_hash: str, source: str | None, lenient: bool) -> jinja2.Template | None:
    """The compiled template (``None``: not compiled here and no source sent).

    :raises Exception: the source does not compile (Jinja folds constant expressions
        while compiling, so this runs template code too).
    """
    key = (source_hash, lenient)
    template = _compiled.get(key)
    if template is not None:
        _compiled.move_to_end(key)
        return template
    if source is None:
        return None
    template = (_LENIENT_ENV if lenient else _STRICT_ENV).from_string(source)
    _compiled[key] = template
    if len(_compiled) > _CACHE_SIZE:
        _compiled.popitem(last=False)
    return template


def _generate(template: jinja2.Template, variables: dict[str, Any], limit: int) -> str:
    # Streaming lets the bound stop a runaway template before it has built the
    # whole oversized string.
    chunks: list[str] = []
    size = 0
    stream: Iterator[str] = template.generate(variables)
    try:
        for chunk in stream:
            size += len(chunk)
            if size > limit:
                raise _OutputTooLong(f"output exceeds {limit} characters")
            chunks.append(chunk)
    finally:
        if isinstance(stream, types.GeneratorType):
            stream.close()
    # a string literal of the template ('\ud800') can write what no tokenizer takes
    return valid_text("".join(chunks))


class _Renderer:
    """One template's renders in one job: strict first, lenient once it is needed."""

    def __init__(self, job: Mapping[str, Any]) -> None:
        self.hash = str(job["source_hash"])
        self.source: str | None = job.get("source")
        self.mode = str(job.get("mode", "auto"))
        self.label = str(job.get("label", ""))
        self.limit = int(job.get("max_output_chars", 10_000_000))

    def compile(self, lenient: bool) -> jinja2.Template:
        """The template compiled in that environment.

        :raises _SourceNeeded: it was not compiled here, and its source was not sent.
        """
        template = _compile(self.hash, self.source, lenient)
        if template is None:
            raise _SourceNeeded
        return template

    def render(self, variables: dict[str, Any], now: datetime | None) -> str:
        if now is not None:
            variables.setdefault("strftime_now", now.strftime)
        if self.mode != "lenient":
            template = self.compile(False)
            try:
                return _generate(template, {**_STRICT_PLACEHOLDERS, **variables}, self.limit)
            except _FALLBACK_TRIGGERS:
                if self.mode == "strict":
                    raise
            self.mode = "lenient"  # a template that needed lenient once skips the strict try
        template = self.compile(True)
        clock = now or datetime.now()
        defaults = {"functions": _functions_json(variables.get("tools")),
                    "datetime": clock.strftime("%Y-%m-%d %H:%M:%S")}
        return _generate(template, {**defaults, **variables}, self.limit)


def handle_job(job: Mapping[str, Any]) -> dict[str, Any]:
    """Compile a template, or render a batch through it (the child's entry).

    A job holds the template's ``source_hash`` and ``source`` (which may be left out
    when it was compiled here before), ``mode`` (``strict``, ``lenient``, ``auto``),
    ``label`` (for messages), ``max_output_chars`` and ``renders``: a list of
    ``{"variables": {...}, "now": ISO time or null}``. The answer is ``{"unknown":
    true}`` when the source is needed, else ``{"lenient": B, "results": [...]}`` with
    ``{"text": prompt}`` or ``{"kind": ..., "message": ...}`` for each render, or
    ``{"compiled": true}`` / one failure for a job without ``renders``.
    """
    renderer = _Renderer(job)
    renders = job.get("renders")
    try:
        renderer.compile(renderer.mode == "lenient")
        if renders is None:
            return {"compiled": True}
        results: list[dict[str, str]] = []
        for render in renders:
            now = render.get("now")
            try:
                text = renderer.render(dict(render["variables"]),
                                       datetime.fromisoformat(now) if now else None)
            except (MemoryError, _SourceNeeded):
                raise
            except Exception as exc:
                results.append(_failure(exc, renderer.label))
                continue
            results.append({"text": text})
    except _SourceNeeded:
        return {"unknown": True}
    except MemoryError:
        raise
    except Exception as exc:  # the source does not compile
        return {"failure": _failure(exc, renderer.label)}
    return {"lenient": renderer.mode == "lenient", "results": results}
