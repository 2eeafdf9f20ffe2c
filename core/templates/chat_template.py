"""Render a model's Jinja chat template, safely: sandboxed, in a child process.

A chat template is untrusted input (it ships inside a model file). Two defences
bound it, each for one question:

* **what** it may do: it runs in Jinja's sandbox, immutable and strict as Hugging
  Face renders it (:mod:`toolwire.templates.sandbox` says what that refuses);
* **how much** it may do: it runs in a child process of its own
  (:mod:`toolwire.isolation`), warm and reused, each render held to the address
  space, CPU time and wall time of :class:`~toolwire.limits.RenderLimits`. A render
  that passes one fails with :class:`~toolwire.errors.TemplateResourceError`
  naming the bound and where the template came from; its child is killed and the
  next render gets a new one. Nothing of the caller's crosses back but the prompt,
  so the conversation is untouched.

:class:`ChatTemplate` is the caller's handle: it compiles the source in the child
(a template that does not compile fails at once), keeps whether the template needs
the lenient environment, and sends renders, one or a batch in one job
(:meth:`ChatTemplate.render_many`, for the probes of parser selection and
derivation). The variables of a render cross as JSON: mappings, lists (tuples become
lists), strings, numbers, booleans and ``None``.
"""

from __future__ import annotations

import functools
import hashlib
import threading
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from ..errors import ChildStoppedError, TemplateError, TemplateResourceError, TemplateSecurityError
from ..isolation.jobs import JobLimits, JobPool
from ..limits import RenderLimits

__all__ = ["ChatTemplate", "RenderLimits", "get_chat_template"]

_CACHE_SIZE: Final = 64
_BOUNDS: Final = {"memory": "memory", "cpu time": "time", "wall time": "time"}
_CHILDREN: Final = JobPool("toolwire.templates.sandbox")
"""The warm children every template renders in."""


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
    :param name: where the template came from (a GGUF file, a path), for error
        messages; defaults to the hash prefix.
    :param limits: the memory, time and output bounds of one render; a render that
        passes one raises :class:`TemplateResourceError` naming it.
    :raises TemplateError: the source does not compile.
    """

    def __init__(self, source: str, *, lenient: bool | None = None, name: str | None = None,
                 limits: RenderLimits | None = None) -> None:
        self._source = source
        self._hash = hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()
        self._lenient = lenient
        self._fell_back = False
        self._label = repr(name) if name else f"sha256:{self._hash[:12]}"
        self._limits = limits or RenderLimits()
        try:
            self._job(None)
        except TemplateResourceError:
            pass  # Jinja computes constant expressions as it compiles: the render says it

    @property
    def source(self) -> str:
        """The Jinja source."""
        return self._source

    @property
    def source_hash(self) -> str:
        """The sha256 hex digest of the UTF-8 source."""
        return self._hash

    @property
    def label(self) -> str:
        """How messages name the template: its name, or its hash prefix."""
        return self._label

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
        return self._lenient is True or self._fell_back

    def render(self, messages: Sequence[Mapping[str, Any]], *,
               tools: Sequence[Mapping[str, Any]] | None = None,
               add_generation_prompt: bool = True, bos_token: str = "", eos_token: str = "",
               now: datetime | None = None, **extra: Any) -> str:
        """Render a conversation into the prompt text.

        ``messages`` and ``tools`` are plain dicts in the OpenAI/HF shape; pass
        tool-call ``arguments`` as a mapping (most templates iterate it). Extra
        keyword arguments (``enable_thinking=False``, ``documents=...``) become
        template variables; every variable is a JSON value.

        :param now: the time ``strftime_now`` (and lenient mode's ``datetime``)
            shows (default: the time of the render).
        :raises TemplateSecurityError: the template tried to leave the sandbox.
        :raises TemplateResourceError: the render passed one of its ``limits``.
        :raises TemplateError: anything else went wrong; a template's own
            ``raise_exception(msg)`` arrives with exactly ``msg`` as the message.
        """
        result = self.render_many([dict(messages=messages, tools=tools,
                                        add_generation_prompt=add_generation_prompt,
                                        bos_token=bos_token, eos_token=eos_token, now=now,
                                        **extra)])[0]
        if isinstance(result, TemplateError):
            raise result
        return result

    def render_many(self, renders: Sequence[Mapping[str, Any]]) -> list[str | TemplateError]:
        """Render several variable sets in one job: each result is the prompt or the
        :class:`TemplateError` its render raised (returned, not raised).

        Each entry holds :meth:`render`'s keyword arguments (``messages`` required).

        :raises TemplateResourceError: a render passed a memory or time bound (the
            batch stops there: its child is killed).
        """
        batch = [_render_entry(entry) for entry in renders]
        answer = self._job(batch)
        return [self._result(item) for item in answer["results"]]

    # -- internals ---------------------------------------------------------

    def _job(self, renders: list[dict[str, Any]] | None) -> dict[str, Any]:
        """Run a compile (``renders`` ``None``) or a batch of renders in a child; the
        source is sent again when the child does not know it yet."""
        job: dict[str, Any] = {"source_hash": self._hash, "mode": self._mode(),
                               "label": self._label,
                               "max_output_chars": self._limits.max_output_chars,
                               "renders": renders}
        if renders is None:
            job["source"] = self._source
        limits = JobLimits(memory_bytes=self._limits.max_memory_bytes,
                           wall_seconds=self._limits.max_seconds)
        for _ in range(3):  # a pool's other child, or a new one, may not know the source
            try:
                answer: dict[str, Any] = _CHILDREN.run(job, limits)
            except ChildStoppedError as stopped:
                raise self._stopped(stopped) from None
            except TypeError as exc:
                raise TemplateError(f"chat template {self._label}: a variable is not a JSON "
                                    f"value: {exc}") from None
            if not answer.get("unknown"):
                break
            job["source"] = self._source
        if "failure" in answer:
            failure = self._result(answer["failure"])
            raise failure if isinstance(failure, TemplateError) else TemplateError(failure)
        if answer.get("lenient") and self._lenient is None:
            self._fell_back = True
        return answer

    def _mode(self) -> str:
        if self.uses_lenient:
            return "lenient"
        return "strict" if self._lenient is False else "auto"

    def _stopped(self, stopped: ChildStoppedError) -> TemplateResourceError:
        bound = _BOUNDS.get(stopped.bound, stopped.bound)
        return TemplateResourceError(
            f"chat template {self._label}: resource limit: the render passed its {bound} "
            f"bound: {stopped.how}", bound=bound, template=self._label,
            peak_memory_bytes=stopped.peak_memory_bytes)

    def _result(self, item: Mapping[str, str]) -> str | TemplateError:
        if "text" in item:
            return item["text"]
        kind, message = item.get("kind", "template"), item.get("message", "")
        if kind == "security":
            return TemplateSecurityError(message)
        if kind == "output":
            return TemplateResourceError(message, bound="output", template=self._label)
        return TemplateError(message)

    def __repr__(self) -> str:
        return f"ChatTemplate({self._label}, lenient={self._lenient!r})"


def _render_entry(entry: Mapping[str, Any]) -> dict[str, Any]:
    variables = dict(entry)
    now = variables.pop("now", None)
    variables.setdefault("tools", None)
    variables.setdefault("add_generation_prompt", True)
    variables.setdefault("bos_token", "")
    variables.setdefault("eos_token", "")
    return {"variables": variables, "now": now.isoformat() if now is not None else None}


# ---------------------------------------------------------------------------
# The compile cache.

_cache_lock = threading.Lock()


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _compiled(source: str, lenient: bool | None, name: str | None) -> ChatTemplate:
    return ChatTemplate(source, lenient=lenient, name=name)


def get_chat_template(source: str, lenient: bool | None = None, *,
                      name: str | None = None) -> ChatTemplate:
    """Return the :class:`ChatTemplate` for ``source``, compiling it only once.

    Keyed by (the source, ``lenient``, ``name``); the least recently used of more
    than 64 entries is dropped. A source that fails to compile is not cached.
    """
    with _cache_lock:  # compiling under the lock keeps "once" true for concurrent callers
        return _compiled(source, lenient, name)
