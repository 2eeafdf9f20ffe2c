"""The path every text-completion runtime shares: render -> fit -> select -> pipeline.

A runtime that completes raw text (llama.cpp in-process, a remote engine's
completion endpoint) cannot be handed a conversation: it needs the model's own
chat template rendered around the conversation and the tool schemas, a prompt
that fits its context window, the parser that reads the markup the template
makes the model write, and that parser fed with every piece of text the model
produces. :class:`TemplatedBackend` owns all of that once; a runtime subclass
provides only what differs:

* :meth:`TemplatedBackend.encode_prompt`: count (and, where the runtime wants
  them, produce) the prompt's tokens; a runtime that tokenizes with special
  tokens parsed also gives :meth:`TemplatedBackend.special_tokens` and
  :meth:`TemplatedBackend.encode_pieces`, so the template's markup is tokenized
  with special tokens and text from messages without (see
  :mod:`toolwire.backends.prompt_pieces`);
* :meth:`TemplatedBackend.generate`: produce the reply's text pieces for an
  encoded prompt, ending with a :class:`GenerationEnd`;
* optionally :meth:`TemplatedBackend.prepare_generation` (per-turn options such
  as a grammar) and :meth:`TemplatedBackend.turn_notices` (one-time remarks); a
  runtime that sets :attr:`TemplatedBackend.tool_grammars` gets the grammar that
  enforces the turn's ``tool_choice`` there (``docs/grammar.md``).

The turn itself (:meth:`TemplatedBackend.stream_turn`) is the same for every
runtime: one turn at a time, template notices, fitting with pruning (checking
the cancel token between its trials), an
``error`` event instead of an exception for every failure, cancellation between
pieces, usage and timings, and the finish reason (``tool_calls`` when the
parser read a call).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final, cast

import attrs

from ..errors import (
    GrammarError,
    ParserNotFoundError,
    TemplateError,
    TemplateResourceError,
    ToolChoiceError,
)
from ..events import (
    DiagnosticEvent,
    ErrorEvent,
    Event,
    NoParserEvent,
    ReasoningEvent,
    TokenLogprobEvent,
    ToolCallEndEvent,
)
from ..families.selection import DERIVED_FAMILY, build_pipeline, select_parser
from ..grammar.build import ToolGrammar
from ..grammar.turn import grammar_failure, turn_grammar
from ..hooks.manager import PluginManager, default_plugin_manager
from ..parse.protocol import ParserSpec
from ..templates.chat_template import ChatTemplate, get_chat_template
from ..templates.history_shape import HistoryShape, apply_history_shape, history_shape
from ..vocabulary.backend import ModelRequest, ReasoningRequest, TurnEnd
from ..vocabulary.call_ids import default_call_id
from ..vocabulary.cancel import CancelToken
from ..vocabulary.history import Message, to_template_messages
from .context_fit import ContextFit, FittingCancelled, prune_history
from .prompt_pieces import ContentShield, PromptPiece, ShieldRules, SpecialTokens
from .repeated_calls import RepeatedCallStop

__all__ = [
    "PROMPT_TAIL_CHARS",
    "EncodedPrompt",
    "GenerationEnd",
    "GenerationSetupError",
    "TemplateChoice",
    "TemplateSource",
    "TemplatedBackend",
]

PROMPT_TAIL_CHARS: Final = 64
"""How much of the prompt's end the stream filters see (an open ``<think>``)."""

_UNKNOWN: Final = object()
_REASONING_BUDGET: Final = "reasoning_budget"
"""The diagnostic (and cancel reason) of a reply stopped at its reasoning budget."""


@attrs.frozen
class TemplateSource:
    """A chat template's source and where it came from.

    :ivar key: the origin, shown in messages: a GGUF key
        (``tokenizer.chat_template``), ``"override"``, ``"default"``, a file path...
    :ivar source: the Jinja source.
    :ivar is_default: the runtime had no template and uses toolwire's default.
    :ivar where: the file it came from (a GGUF file's name...), when the key does not
        say it; a render's errors name it.
    """

    key: str
    source: str
    is_default: bool = False
    where: str = ""

    @property
    def label(self) -> str:
        """Where the template came from, as a render's errors name it."""
        return f"{self.where}: {self.key}" if self.where else self.key


@attrs.frozen
class TemplateChoice:
    """A chat template and the parser that reads what it makes the model write.

    :ivar key: where the template came from (see :class:`TemplateSource`).
    :ivar source: the Jinja source.
    :ivar template: the compiled template.
    :ivar parser: the parser spec, or ``None`` when no parser claims the template.
    :ivar no_parser_message: why there is no parser (for the ``no_parser`` event).
    :ivar seen_markers: well-known tool-call markers seen in an unclaimed template.
    :ivar is_default: the template is toolwire's default, not the model's.
    :ivar selection_note: the selection's caveat (a claim chosen by score alone,
        or claims refused before the derived parser), shown once as a diagnostic.
    """

    key: str
    source: str
    template: ChatTemplate
    parser: ParserSpec | None
    no_parser_message: str = ""
    seen_markers: tuple[str, ...] = ()
    is_default: bool = False
    selection_note: str = ""


@attrs.frozen
class EncodedPrompt:
    """A rendered prompt as the runtime counts it.

    :ivar text: the prompt text.
    :ivar n_tokens: its size in tokens (exact, or the runtime's estimate).
    :ivar tokens: the token ids, for runtimes that generate from ids.
    """

    text: str
    n_tokens: int
    tokens: tuple[int, ...] | None = None


@attrs.frozen
class GenerationEnd:
    """The last item :meth:`TemplatedBackend.generate` yields.

    :ivar reason: ``stop`` (the model ended its turn), ``length`` (the token
        limit), ``cancelled`` or ``error``.
    :ivar completion_tokens: tokens generated.
    :ivar error: for ``error``, what failed (becomes an ``error`` event).
    :ivar error_kind: that event's ``kind`` (``backend`` by default).
    :ivar first_token_at: ``time.perf_counter()`` of the first token, if any.
    """

    reason: str = "stop"
    completion_tokens: int = 0
    error: str = ""
    error_kind: str = "backend"
    first_token_at: float | None = None


class GenerationSetupError(Exception):
    """:meth:`TemplatedBackend.prepare_generation` failed; the turn ends with an error.

    :param kind: the ``error`` event's kind (``grammar``...).
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


Piece = str | GenerationEnd | TokenLogprobEvent


class TemplatedBackend:
    """Base class of the backends that prompt a model through its own chat template.

    :param templates: the template source for turns without (``False``) and with
        (``True``) tools.
    :param n_ctx: the context window in tokens.
    :param max_tokens: the most tokens one reply may take; the prompt gets
        ``n_ctx - max_tokens``.
    :param family: force a parser family instead of selecting one by template.
    :param plugins: the plugin manager whose parsers and filters apply.
    :param enable_thinking: passed to the template (Qwen3-style reasoning switch).
    :param bos_token: the template's ``bos_token`` variable.
    :param eos_token: the template's ``eos_token`` variable.
    :raises toolwire.TemplateError: a template does not compile.
    :raises toolwire.ParserNotFoundError: ``family`` names no registered parser.
    :raises toolwire.ParserConflictError: two parsers tie for a template.
    """

    name = "templated"

    tool_grammars = False
    """``True`` where the runtime can constrain sampling with a grammar: each turn
    with tools then gets the grammar of its ``tool_choice``
    (:func:`toolwire.grammar.turn.turn_grammar`), passed to
    :meth:`prepare_generation` as ``grammar``."""

    max_reasoning_chars: int | None = None
    """The most characters of reasoning a grammar lets the model write before its
    calls where the prompt opened a reasoning block (``None``: no bound)."""

    def __init__(self, *, templates: Callable[[bool], TemplateSource], n_ctx: int,
                 max_tokens: int, family: str | None = None,
                 plugins: PluginManager | None = None, enable_thinking: bool = False,
                 bos_token: str = "", eos_token: str = "") -> None:
        if max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        if max_tokens >= n_ctx:
            raise ValueError(f"max_tokens ({max_tokens}) must be below n_ctx ({n_ctx}): "
                             "the prompt needs room too")
        self.n_ctx = n_ctx
        self.max_tokens = max_tokens
        self.enable_thinking = enable_thinking
        self.bos_token = bos_token
        self.eos_token = eos_token
        self._family = family
        self._plugins = plugins or default_plugin_manager()
        self._choices: dict[bool, TemplateChoice] = {
            tools: self._choose_template(templates(tools)) for tools in (False, True)
        }
        self._announced: set[str] = set()
        self._turn_lock = threading.Lock()
        self._specials: Any = _UNKNOWN
        self._shield_rules_by_template: dict[str, ShieldRules] = {}

    # -- what a runtime provides ---------------------------------------------------------

    def encode_prompt(self, text: str) -> EncodedPrompt:
        """Count the prompt's tokens (and give their ids where the runtime needs them)."""
        raise NotImplementedError

    def generate(self, prompt: EncodedPrompt, request: ModelRequest, options: Any,
                 cancel: CancelToken) -> Iterator[Piece]:
        """Yield the reply's text pieces, then one :class:`GenerationEnd`.

        Where ``request.logprobs`` is set and the runtime gives them (its
        ``token_logprobs`` is ``True``), each token's
        :class:`~toolwire.events.TokenLogprobEvent` comes just before its text.

        Check ``cancel`` between pieces (end with ``cancelled``), stop at
        :meth:`reply_limit` tokens (end with ``length``), and never raise: a
        failure is ``GenerationEnd("error", error=...)``. Text must be whole
        characters. Apply ``request.sampling`` where it is set.
        """
        raise NotImplementedError

    def reply_limit(self, request: ModelRequest) -> int:
        """The most tokens this turn's reply may take: the request's ``max_tokens``
        where it is set and smaller, else :attr:`max_tokens` (the prompt room was
        counted from :attr:`max_tokens`, so a request cannot raise it)."""
        asked = request.sampling.max_tokens
        return self.max_tokens if asked is None else min(asked, self.max_tokens)

    def prepare_generation(self, request: ModelRequest, choice: TemplateChoice,
                           grammar: ToolGrammar | None = None) -> Any:
        """Per-turn generation options (a grammar...), passed to :meth:`generate`.

        :param grammar: where :attr:`tool_grammars` is set, the grammar that
            enforces the request's ``tool_choice`` (``None``: nothing to constrain).
        :raises GenerationSetupError: the turn cannot run (an ``error`` event).
        """
        return None

    def end_markers(self) -> tuple[str, ...]:
        """Texts of the runtime's end-of-generation tokens (a grammar lets the model
        end its turn with one where the family's closing marker is one; a reply that
        ends with one, written out, has it dropped)."""
        return ()

    def turn_notices(self, choice: TemplateChoice) -> Iterator[Event]:
        """Runtime-specific remarks before a turn; override to add some (call ``super``)."""
        return iter(())

    # -- templates and parsers -----------------------------------------------------------

    @property
    def plugins(self) -> PluginManager:
        """The plugin manager whose parsers and stream filters apply."""
        return self._plugins

    @property
    def prompt_room(self) -> int:
        """The most tokens a prompt may take: ``n_ctx - max_tokens``."""
        return self.n_ctx - self.max_tokens

    def template_choice(self, *, tools: bool) -> TemplateChoice:
        """The template (and parser) used for turns with or without tools."""
        return self._choices[tools]

    def _choose_template(self, origin: TemplateSource) -> TemplateChoice:
        template = get_chat_template(origin.source, name=origin.label)
        try:
            selected = select_parser(origin.source, self._plugins, family=self._family)
        except ParserNotFoundError as exc:
            if self._family is not None:
                raise
            return TemplateChoice(origin.key, origin.source, template, None, str(exc),
                                  exc.seen_markers, origin.is_default)
        return TemplateChoice(origin.key, origin.source, template, selected.spec,
                              is_default=origin.is_default, selection_note=selected.note)

    def make_call_id(self, index: int) -> str:
        """Call ids in the form the parser family (of the tools template) wants."""
        spec = self._choices[True].parser
        return spec.make_call_id(index) if spec is not None else default_call_id(index)

    # -- the prompt ----------------------------------------------------------------------

    def render(self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]] | None,
               choice: TemplateChoice | None = None,
               reasoning: ReasoningRequest | None = None) -> str:
        """The prompt text for ``messages`` (template errors propagate).

        :param reasoning: the turn's reasoning switches (default: the backend's own).
        """
        choice = choice or self._choices[bool(tools)]
        records = to_template_messages(messages)
        if any(m.tool_calls for m in messages):
            records = apply_history_shape(records, self._history_shape(choice))
        return self._render_template(choice, records, list(tools) if tools else None,
                                     self._switches(reasoning))

    def _switches(self, reasoning: ReasoningRequest | None) -> dict[str, Any]:
        """The template's reasoning variables for a turn: the backend's
        ``enable_thinking``, replaced by what the turn asks (``thinking`` too, the
        name some templates read, and ``reasoning_effort``)."""
        switches: dict[str, Any] = {"enable_thinking": self.enable_thinking}
        if reasoning is not None:
            switches.update(reasoning.template_switches())
        return switches

    def _render_template(self, choice: TemplateChoice, messages: list[dict[str, Any]],
                         tools: list[Any] | None, switches: Mapping[str, Any]) -> str:
        try:
            return choice.template.render(
                messages, tools=tools, add_generation_prompt=True, bos_token=self.bos_token,
                eos_token=self.eos_token, **switches)
        except TemplateResourceError:
            raise
        except TemplateError:
            if tools is not None:
                raise
            # a template that iterates its tools whatever it is given (Hermes' tool_use
            # variant) renders a turn without tools with an empty list instead of none
            return choice.template.render(
                messages, tools=[], add_generation_prompt=True, bos_token=self.bos_token,
                eos_token=self.eos_token, **switches)

    def _history_shape(self, choice: TemplateChoice) -> HistoryShape:
        """How ``choice``'s template wants earlier calls (probed once per template)."""
        return history_shape(choice.template, bos_token=self.bos_token,
                             eos_token=self.eos_token)

    def special_tokens(self) -> SpecialTokens | None:
        """The texts the runtime's tokenizer treats specially; ``None``: none or unknown.

        A runtime that tokenizes with special tokens parsed overrides this (and
        :meth:`encode_pieces`), so that text in a message cannot become a
        control token (see :mod:`toolwire.backends.prompt_pieces`).
        """
        return None

    def encode_pieces(self, pieces: Sequence[PromptPiece]) -> EncodedPrompt:
        """Encode a prompt given as pieces: markup with special tokens parsed, the
        rest as text. The default joins them for :meth:`encode_prompt`."""
        return self.encode_prompt("".join(piece.text for piece in pieces))

    def _shield_rules(self, choice: TemplateChoice) -> ShieldRules | None:
        """The runtime's special tokens (asked once) with the template's markup."""
        if self._specials is _UNKNOWN:
            tokens = self.special_tokens()
            self._specials = None if tokens is None or not tokens.partition else tokens
        if self._specials is None:
            return None
        rules = self._shield_rules_by_template.get(choice.source)
        if rules is None:
            rules = self._shield_rules_by_template[choice.source] = ShieldRules(
                self._specials, choice.source)
        return rules

    def fit_prompt(self, request: ModelRequest, cancel: CancelToken | None = None, *,
                   whole: bool = False) -> tuple[ContextFit, EncodedPrompt]:
        """Render, count and prune ``request`` to the prompt room.

        With ``whole``, the whole conversation is rendered and counted, and
        nothing is pruned (what a client asks when it counts its prompt's tokens).

        Each message is converted (and its special-token text shielded) once;
        only the prompts pruning tries are rendered, and those are bounded by the
        prompt that fits (see :func:`~toolwire.backends.context_fit.prune_history`).

        :returns: the pruning result and the encoded prompt (of the pruned
            conversation, or of the protected part when even that does not fit).
        :raises TemplateError: the template raised (a template that exceeds its
            render limits counts as a prompt too large instead).
        :raises FittingCancelled: ``cancel`` was set while fitting.
        """
        tools = request.tool_schemas() or None
        choice = self._choices[bool(tools)]
        rules = self._shield_rules(choice)
        shield = None if rules is None else ContentShield(
            rules, reserved=self.bos_token + self.eos_token)
        template_tools = list(tools) if tools else None
        if shield is not None and template_tools is not None:
            template_tools = shield.shield(template_tools)
        converted: dict[int, dict[str, Any]] = {}
        encoded: dict[tuple[int, ...], EncodedPrompt] = {}
        switches = self._switches(request.reasoning)

        def template_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
            out = []
            for message in messages:
                record = converted.get(id(message))
                if record is None:
                    (record,) = to_template_messages((message,))
                    if message.tool_calls:
                        (record,) = apply_history_shape((record,), self._history_shape(choice))
                    if shield is not None:
                        record = shield.shield(record)
                    converted[id(message)] = record
                out.append(record)
            return out

        def count(messages: Sequence[Message]) -> int | None:
            key = tuple(id(m) for m in messages)
            if key not in encoded:
                try:
                    rendered = self._render_template(choice, template_messages(messages),
                                                     template_tools, switches)
                except TemplateResourceError:
                    return None  # too large to render: too large to fit
                pieces = (PromptPiece(rendered),) if shield is None else shield.pieces(rendered)
                encoded[key] = self.encode_pieces(pieces)
            return encoded[key].n_tokens

        final_prompt = (request.final_turn and len(request.messages) >= 2
                        and request.messages[-1].role == "user"
                        and request.messages[-2].role == "tool")
        if whole:
            total = count(request.messages)
            if total is None:
                raise TemplateResourceError(
                    f"the chat template ({choice.key}) cannot render the conversation "
                    "within its bounds")
            return ContextFit(tuple(request.messages), total, self.prompt_room), \
                encoded[tuple(id(m) for m in request.messages)]
        result = prune_history(request.messages, count, self.prompt_room,
                               final_answer_prompt=final_prompt, cancel=cancel)
        key = tuple(id(m) for m in result.messages)
        if key not in encoded:  # too large to render even alone
            raise TemplateResourceError(
                f"the chat template ({choice.key}) cannot render even the messages that "
                "are never dropped within its bounds")
        return result, encoded[key]

    def prompt_tokens(self, request: ModelRequest) -> int:
        """The tokens of the prompt ``request`` renders: the whole conversation with its
        tools and the turn's reasoning switches, exactly as a turn renders it, nothing
        pruned (a prompt over the room is counted in full).

        :raises TemplateError: the template failed (or cannot render within its bounds).
        """
        with self._turn_lock:
            return self.fit_prompt(request, whole=True)[1].n_tokens

    # -- one turn ------------------------------------------------------------------------

    def stream_turn(self, request: ModelRequest, cancel: CancelToken) -> Iterator[Event | TurnEnd]:
        """Run one model turn: render, fit, generate, parse; ``TurnEnd`` last.

        Turns run one at a time. Never raises for a failed turn: a template error,
        a context overflow or a runtime failure becomes an ``error`` event and
        ``TurnEnd("error")``.
        """
        while not self._turn_lock.acquire(timeout=0.05):
            if cancel.cancelled:
                yield TurnEnd("cancelled")
                return
        if request.tools and not request.offered_tools:  # tool_choice "none"
            request = attrs.evolve(request, tools=())
        try:
            yield from self._turn(request, cancel)
        finally:
            self._turn_lock.release()

    def _notices(self, choice: TemplateChoice) -> Iterator[Event]:
        yield from self.turn_notices(choice)
        derived = choice.parser is not None and choice.parser.name == DERIVED_FAMILY
        if derived and "derived" not in self._announced:
            self._announced.add("derived")
            refused = f" ({choice.selection_note})" if choice.selection_note else ""
            yield DiagnosticEvent(
                "derived_parser",
                "no parser plugin claims this model's chat template; its tool calls are read "
                "with markers inferred from the template itself (toolwire detect --derive "
                f"shows them){refused}")
        elif not derived and choice.selection_note and \
                self.announce_once("selection:" + choice.source):
            yield DiagnosticEvent("parser_unverified", choice.selection_note
                                  + " (toolwire detect shows each check)")
        if choice.parser is None and choice.source not in self._announced:
            self._announced.add(choice.source)
            # cast: mypy cannot type the event's ``converter=tuple`` field
            yield NoParserEvent(choice.no_parser_message, cast(Any, choice.seen_markers))

    def announce_once(self, key: str) -> bool:
        """``True`` the first time ``key`` is seen (for one-time notices)."""
        if key in self._announced:
            return False
        self._announced.add(key)
        return True

    def _turn(self, request: ModelRequest, cancel: CancelToken) -> Iterator[Event | TurnEnd]:
        tools = request.tool_schemas() or None
        choice = self._choices[bool(tools)]
        yield from self._notices(choice)
        started = time.perf_counter()
        try:
            fitted, prompt = self.fit_prompt(request, cancel)
        except FittingCancelled:
            yield TurnEnd("cancelled")
            return
        except TemplateError as exc:
            yield ErrorEvent("template", f"the chat template ({choice.key}) failed: {exc}")
            yield TurnEnd("error")
            return
        except Exception as exc:  # a tokenizer failure
            yield ErrorEvent("backend", f"could not build the prompt: {type(exc).__name__}: "
                                        f"{exc}")
            yield TurnEnd("error")
            return
        usage: dict[str, Any] = {"prompt_tokens": prompt.n_tokens, "completion_tokens": 0}
        if not fitted.fits:
            yield ErrorEvent(
                "context",
                f"the prompt needs {fitted.tokens} tokens but only {fitted.room} fit "
                f"(n_ctx {self.n_ctx} - max_tokens {self.max_tokens}): {fitted.over_by} tokens "
                "over even after dropping all older history. Shorten the system prompt or "
                "the latest message or tool results, offer fewer tools, or raise n_ctx.")
            yield TurnEnd("error", usage=usage)
            return
        if fitted.removed:
            yield DiagnosticEvent(
                "context_pruned",
                f"dropped the {fitted.removed} oldest messages from the prompt to fit the "
                f"context window ({fitted.tokens} of {fitted.room} tokens)")
        grammar = None
        if self.tool_grammars:
            try:
                grammar = turn_grammar(request, choice.parser, template=choice.source,
                                       prompt_tail=prompt.text[-PROMPT_TAIL_CHARS:],
                                       end_markers=self.end_markers(),
                                       max_reasoning_chars=self.max_reasoning_chars)
            except (GrammarError, ToolChoiceError) as exc:
                notes, fatal = grammar_failure(exc, request, self.announce_once)
                yield from notes
                if fatal:
                    yield TurnEnd("error", usage=usage)
                    return
        try:
            options = (self.prepare_generation(request, choice, grammar) if self.tool_grammars
                       else self.prepare_generation(request, choice))
        except GenerationSetupError as exc:
            yield ErrorEvent(exc.kind, str(exc))
            yield TurnEnd("error", usage=usage)
            return
        pipeline = build_pipeline(choice.parser, request.tool_parameters(),
                                  plugins=self._plugins, chat_template=choice.source,
                                  prompt_tail=prompt.text[-PROMPT_TAIL_CHARS:],
                                  end_tokens=self.end_markers())
        render_seconds = time.perf_counter() - started
        if cancel.cancelled:
            yield TurnEnd("cancelled", usage=usage)
            return
        called = False
        end = GenerationEnd("error", error="the runtime ended without saying why")
        generation_started = time.perf_counter()
        repeats = RepeatedCallStop(cancel)  # a call the reply already holds ends it
        budget = request.reasoning.budget
        reasoning_tokens = 0
        for piece in self.generate(prompt, request, options, repeats.token):
            if isinstance(piece, GenerationEnd):
                end = piece
                break
            if isinstance(piece, TokenLogprobEvent):  # asked for: before its text's events
                yield piece
                continue
            reasoned = False
            for event in repeats.feed(pipeline.feed(piece)):
                called = called or isinstance(event, ToolCallEndEvent)
                reasoned = reasoned or isinstance(event, ReasoningEvent)
                yield event
            if reasoned:  # a runtime's piece is one token's text
                reasoning_tokens += 1
                if budget is not None and reasoning_tokens >= budget \
                        and not repeats.token.cancelled:
                    repeats.token.cancel(_REASONING_BUDGET)
        ended = time.perf_counter()
        usage["completion_tokens"] = end.completion_tokens
        if reasoning_tokens:
            usage["reasoning_tokens"] = reasoning_tokens
        if end.reason == "cancelled" and repeats.token.reason == _REASONING_BUDGET \
                and not cancel.cancelled and not repeats.stopped:
            yield DiagnosticEvent(_REASONING_BUDGET,
                                  f"the reply reasoned for its whole budget ({budget} tokens) "
                                  "and was stopped there, as at max_tokens")
            end = attrs.evolve(end, reason="length")
        first = end.first_token_at or ended
        timings: dict[str, Any] = {"render": round(render_seconds, 6),
                                   "prompt": round(first - generation_started, 6),
                                   "generation": round(ended - first, 6)}
        timings.update(self.extra_timings())
        if repeats.stopped:  # the rule's end (tool_calls and its notice) unless the user cancelled
            yield from repeats.finish(TurnEnd("cancelled", usage=usage, timings=timings))
            return
        if end.reason == "error":
            yield ErrorEvent(end.error_kind, end.error)
        if end.reason in ("cancelled", "error"):
            yield TurnEnd(end.reason, usage=usage, timings=timings)
            return
        # a call the token limit cut is never recovered: its arguments may be cut short
        for event in pipeline.close(end_reason="length" if end.reason == "length" else "stop"):
            called = called or isinstance(event, ToolCallEndEvent)
            yield event
        reason = "tool_calls" if end.reason == "stop" and called else end.reason
        yield TurnEnd(reason, usage=usage, timings=timings)

    def extra_timings(self) -> Mapping[str, Any]:
        """Timings a runtime adds to the turn's (``load`` on the first turn...)."""
        return {}
