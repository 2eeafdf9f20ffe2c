"""The ``completions`` backend: a remote serving engine's raw text-completion endpoint,
prompted through the model's own chat template and read by toolwire's parsers.

Everything about the turn is the :class:`~toolwire.backends.templated.TemplatedBackend`'s
(render, fit the context, select the family's parser, parse the streamed text);
this class asks the engine what it is, counts tokens with the engine's
tokenizer, and streams the reply over HTTP:

* ``api="completions"``: OpenAI-style ``POST /v1/completions`` with the
  ``openai`` SDK (vLLM, SGLang, llama-cpp-python's server, llama-server);
* ``api="llama"``: llama-server's native ``POST /completion`` with ``httpx2``;
* ``api="auto"`` (the default): ``llama`` when the engine says it is
  llama-server, else ``completions``.

Generation ends at the engine's end of turn. The template's end-of-turn marker
is sent as a stop string only where the template needs it
(:func:`.sources.needed_stops`); the model's end tokens are the runtime's
(:meth:`CompletionsBackend.end_markers`), which the reply's pipeline drops when
the engine writes one out at the end. A grammar (``grammar=``, a GBNF text or a
``callable(request)``; the hook for grammar-constrained calls) goes where the
engine reads one; an engine that cannot be constrained is said so once.

Failures are ``error`` events with the kinds of the ``openai_compat`` backend
(``connection``, ``auth``, ``not_found``, ``rate_limit``, ``server``,
``timeout``, ``stream_cut``, ``bad_response``, ...): the turn ends, the
conversation goes on. See ``docs/engines.md``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final

from toolwire.plugin_api import (
    BackendError,
    Broken,
    CancelToken,
    DiagnosticEvent,
    EncodedPrompt,
    Event,
    GenerationEnd,
    GenerationSetupError,
    ModelRequest,
    PluginManager,
    ProviderPreset,
    RequestContext,
    ResolvedConnection,
    RetryNotice,
    RetryPolicy,
    StreamPump,
    TemplateChoice,
    TemplatedBackend,
    ToolGrammar,
    TurnEnd,
    classify_exception,
    extra_hint,
    rejects_stream_options,
)

from .engine import EngineInfo, TokenCounter, api_root, probe_engine
from .sources import (
    ModelFacts,
    end_of_turn_marker,
    end_tokens,
    needed_stops,
    read_model_file,
    special_markers,
    template_sources,
)
from .wire import (
    Finished,
    OpenedStream,
    TextPiece,
    Usage,
    grammar_fields,
    lazy_grammar_fields,
    open_completions_stream,
    open_llama_stream,
    openai_errors,
    special_token_fields,
)

__all__ = ["APIS", "API_KEY_ENV", "DEFAULT_N_CTX", "DEFAULT_TIMEOUT", "OPTIONS",
           "CompletionsBackend", "engine_connection"]

API_KEY_ENV: Final = "TOOLWIRE_ENGINE_API_KEY"
"""The only variable the engine's API key is read from (``api_key=`` wins over it)."""

APIS: Final = ("auto", "completions", "llama")
"""The ``api=`` values (``--api``)."""

DEFAULT_N_CTX: Final = 4096
"""The context size assumed when neither ``n_ctx=`` nor the engine says one."""

DEFAULT_TIMEOUT: Final = 600.0
"""Seconds to wait for the answer to start, and between two pieces of it."""

_PROBE_TIMEOUT: Final = 10.0
_UNSENT_KEY: Final = "toolwire-no-key"  # satisfies the SDK; the Authorization header is omitted

OPTIONS: Final = (
    "base_url", "api", "template", "chat_template", "model_file", "model", "api_key", "n_ctx",
    "max_tokens", "temperature", "top_p", "seed", "stop", "family", "enable_thinking",
    "plugins", "grammar", "timeout", "max_retries", "max_retry_wait", "retry_backoff",
)
"""The keyword arguments of :class:`CompletionsBackend` (``toolwire plugins`` lists them)."""

Grammar = str | Callable[[ModelRequest], str | None] | None


class CompletionsBackend(TemplatedBackend):
    """A model on a remote serving engine, prompted through its own chat template.

    :param base_url: the engine's address (``http://host:8000`` or ``.../v1``).
    :param api: ``auto``, ``completions`` (``/v1/completions``) or ``llama``
        (llama-server's ``/completion``).
    :param template: a Jinja chat template file (``--template``); first choice.
    :param chat_template: a chat template's source, instead of a file.
    :param model_file: the model's GGUF file or ``tokenizer_config.json``
        (``--model-file``): the template when neither of the above nor the
        engine gives one, and the model's BOS/EOS tokens.
    :param model: the model name sent to ``/v1/completions``; default: the
        engine's first model.
    :param api_key: sent as ``Authorization: Bearer``; default: the
        :data:`API_KEY_ENV` variable (no other is read).
    :param n_ctx: the context size; default: what the engine says, else
        :data:`DEFAULT_N_CTX`.
    :param max_tokens: the most tokens one reply may take (a turn's
        ``request.sampling.max_tokens`` may lower it for that turn).
    :param temperature: sampling temperature (``None``: the engine's default);
        a turn's ``request.sampling`` replaces it, ``top_p`` and ``seed``.
    :param top_p: nucleus sampling (``None``: the engine's default).
    :param seed: the sampling seed (``None``: the engine's).
    :param stop: more stop strings, sent with every request.
    :param family: force a parser family instead of selecting one by template.
    :param enable_thinking: passed to the template (Qwen3-style reasoning switch).
    :param plugins: the plugin manager whose parsers and filters apply.
    :param grammar: a grammar (GBNF) or ``callable(request) -> grammar | None``
        that constrains sampling where the engine accepts one.
    :param timeout: seconds to wait for the answer to start and between
        pieces; ``None`` waits forever.
    :param max_retries: retries of a 429 or 5xx answer.
    :param max_retry_wait: the most seconds all retries of one turn may wait.
    :param retry_backoff: first wait when the engine gives no ``retry-after``;
        doubles on each retry.
    :param environ: where :data:`API_KEY_ENV` is read (default ``os.environ``).
    :param probe: ask the engine what it is (``False``: treat it as unknown).
    :raises BackendError: ``kind="config"``: a bad option, no chat template, a
        file that cannot be read, or the ``remote`` extra missing.
    :raises toolwire.GGUFError: a GGUF ``model_file`` is malformed.
    :raises toolwire.TemplateError: the chat template does not compile.
    :raises toolwire.ParserNotFoundError: ``family`` names no registered parser.
    :raises ValueError: an option is out of range.
    """

    name = "completions"

    def __init__(
        self,
        base_url: str,
        *,
        api: str = "auto",
        template: str | os.PathLike[str] | None = None,
        chat_template: str | None = None,
        model_file: str | os.PathLike[str] | None = None,
        model: str | None = None,
        api_key: str | None = None,
        n_ctx: int | None = None,
        max_tokens: int = 1024,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        stop: Sequence[str] = (),
        family: str | None = None,
        enable_thinking: bool = False,
        plugins: PluginManager | None = None,
        grammar: Grammar = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        max_retries: int = 3,
        max_retry_wait: float = 30.0,
        retry_backoff: float = 1.0,
        environ: Mapping[str, str] | None = None,
        probe: bool = True,
    ) -> None:
        if api not in APIS:
            raise BackendError(f"api must be one of {', '.join(APIS)}, not {api!r}",
                               kind="config")
        if not base_url or not base_url.strip():
            raise BackendError("the completions backend needs base_url (the engine's address, "
                               "e.g. http://host:8000)", kind="config")
        self.retry = RetryPolicy(max_retries, max_retry_wait, retry_backoff,
                                 resend=self._drop_stream_options)
        if n_ctx is not None and n_ctx < 2:
            raise ValueError("n_ctx must be at least 2")
        self.root = api_root(base_url)
        self.connection = engine_connection(self.root, api_key, environ)
        self.timeout = timeout
        self.temperature = temperature
        self.top_p = top_p
        self.seed = seed
        self.grammar = grammar
        self._http = _make_http_client(self.connection.api_key, timeout)
        try:
            self.engine = (probe_engine(self._http, self.root, timeout=_PROBE_TIMEOUT)
                           if probe else EngineInfo())
            self.connection = engine_connection(self.root, api_key, environ, self.engine.label)
            self.facts: ModelFacts | None = (read_model_file(model_file)
                                             if model_file is not None else None)
            self.api = self._choose_api(api)
            self.model = model or self.engine.model or "default"
            self._counter = TokenCounter(self._http, self.root, self.engine, self.model)
            known_ctx = n_ctx or self.engine.n_ctx
            self._guessed_ctx = known_ctx is None
            eos = self.engine.eos_token or (self.facts.eos_token if self.facts else None) or ""
            super().__init__(
                templates=template_sources(template=template, chat_template=chat_template,
                                           engine=self.engine, facts=self.facts,
                                           base_url=base_url),
                n_ctx=known_ctx or DEFAULT_N_CTX, max_tokens=max_tokens, family=family,
                plugins=plugins, enable_thinking=enable_thinking,
                bos_token="",  # the engine puts the model's BOS before a text prompt itself
                eos_token=eos)
            tools_template = self.template_choice(tools=True)
            ends = end_tokens(self.engine, self.facts)
            marker = end_of_turn_marker(tools_template.template, eos_token=eos)
            self.stops: tuple[str, ...] = (*needed_stops(marker, ends), *stop)
            self._ends = ends
            self._special = special_markers(tools_template.source, leave_out=(
                *(m for m in (marker, *ends) if m), *self.stops))
            self.context = RequestContext(self.connection, self.model, timeout)
            self._client: Any = None
            self._client_lock = threading.Lock()
            self._stream_options = True
            self._notes: list[Event] = []
            if self.api == "completions":
                self._sdk_client()  # import the SDK now, while the caller shows "loading"
        except BaseException:
            self._http.close()  # a failed setup leaves no connection open
            raise

    def __repr__(self) -> str:
        return (f"CompletionsBackend({self.root!r}, api={self.api!r}, "
                f"engine={self.engine.kind!r}, n_ctx={self.n_ctx})")

    def _choose_api(self, api: str) -> str:
        if api == "auto":
            return "llama" if self.engine.kind == "llama_server" else "completions"
        if api == "llama" and self.engine.kind not in ("llama_server", "unknown"):
            raise BackendError(
                f"--api llama is llama-server's native /completion endpoint, but {self.root} "
                f"is {self.engine.label}: use --api completions", kind="config")
        return api

    # -- one-time remarks, and notes raised while generating --------------------------------

    def stream_turn(self, request: ModelRequest, cancel: CancelToken) -> Iterator[Event | TurnEnd]:
        """Run one turn (see :meth:`TemplatedBackend.stream_turn`), with this backend's notes.

        Notes raised while generating (a retry) are yielded before the next item.
        """
        for item in super().stream_turn(request, cancel):
            if self._notes:
                notes, self._notes = self._notes, []
                yield from notes
            yield item

    def turn_notices(self, choice: TemplateChoice) -> Iterator[Event]:
        """Say once what toolwire had to assume about the engine."""
        if self.engine.unreachable and self.announce_once("unreachable"):
            yield DiagnosticEvent(
                "engine_unreachable",
                f"could not ask the engine at {self.root} what it is "
                f"({self.engine.unreachable}); treating it as an OpenAI-style completions server")
        if self._guessed_ctx and self.announce_once("n_ctx"):
            yield DiagnosticEvent(
                "context_size_assumed",
                f"{self.engine.label} at {self.root} does not say its context size; assuming "
                f"{self.n_ctx} tokens (pass n_ctx=... / --n-ctx to set it)")
        if self._counter.estimating and self.announce_once("estimate"):
            yield DiagnosticEvent(
                "token_count_estimated",
                f"{self.engine.label} at {self.root} has no tokenize endpoint toolwire knows; "
                "prompt sizes are estimated at one token per 3 bytes")

    # -- what the templated base asks of a runtime -------------------------------------

    def encode_prompt(self, text: str) -> EncodedPrompt:
        """The prompt's size by the engine's tokenizer, or the documented estimate."""
        count, _exact = self._counter.count(text)
        return EncodedPrompt(text, count)

    def end_markers(self) -> tuple[str, ...]:
        """The model's end tokens toolwire knows of (EOS, EOT: the engine's, or the file's)."""
        return self._ends

    tool_grammars = True

    def prepare_generation(self, request: ModelRequest, choice: TemplateChoice,
                           grammar: ToolGrammar | None = None) -> Any:
        """The request fields of this turn's grammar: the ``grammar`` option when
        given, else the one enforcing the turn's ``tool_choice``.

        A lazy grammar (``"auto"``) goes only to llama-server, which takes
        ``grammar_lazy`` and trigger patterns; other engines answer freely then.

        :raises GenerationSetupError: the ``grammar`` callable failed.
        """
        try:
            text = self.grammar(request) if callable(self.grammar) else self.grammar
        except Exception as exc:
            raise GenerationSetupError(
                "grammar", f"the grammar option failed: {type(exc).__name__}: {exc}") from exc
        if not text and grammar is not None:
            if grammar.lazy:
                return lazy_grammar_fields(self.engine, grammar.gbnf, grammar.trigger_patterns)
            text = grammar.gbnf
        if not text:
            return None
        fields = grammar_fields(self.engine, text)
        if fields is None and self.announce_once("grammar"):
            self._notes.append(DiagnosticEvent(
                "grammar_unsupported",
                f"{self.engine.label} at {self.root} cannot be sent a grammar; generating "
                "without one"))
        return fields

    def generate(self, prompt: EncodedPrompt, request: ModelRequest, options: Any,
                 cancel: CancelToken) -> Iterator[str | GenerationEnd]:
        """Stream the reply's text from the engine until its end of turn, the limit or a cancel."""
        grammar: Mapping[str, Any] = options or {}
        opener = self._llama_opener(prompt.text, grammar, request) if self.api == "llama" \
            else self._completions_opener(prompt.text, grammar, request)
        pump = StreamPump(opener, self.retry).start()
        pieces = 0
        first: float | None = None
        finish: str | None = None
        usage = Usage()
        end: GenerationEnd | None = None
        try:
            for item in pump.items(lambda: cancel.cancelled):
                if isinstance(item, TextPiece):
                    if first is None:
                        first = time.perf_counter()
                    pieces += 1
                    yield item.text
                elif isinstance(item, Finished):
                    finish = item.reason
                elif isinstance(item, Usage):
                    usage = item
                elif isinstance(item, RetryNotice):
                    self._notes.append(self.retry.note(item, self.root))
                elif isinstance(item, Broken) and finish is None:
                    error = classify_exception(item.error, self.context, openai_errors(),
                                               mid_stream=item.opened, tools_offered=False,
                                               retries=item.retries)
                    end = GenerationEnd("error", error=str(error), error_kind=error.kind)
                    break
                if cancel.cancelled:
                    break
        finally:
            pump.abandon()
        tokens = usage.completion_tokens if usage.completion_tokens is not None else pieces
        if cancel.cancelled:
            yield GenerationEnd("cancelled", tokens, first_token_at=first)
        elif end is not None:
            yield GenerationEnd(end.reason, tokens, end.error, end.error_kind, first)
        elif finish is None:
            yield GenerationEnd(
                "error", tokens, f"the stream from {self.engine.label} at {self.root} ended "
                "before the reply was complete (no end of generation). What was received so "
                "far is kept.", "stream_cut", first)
        else:
            yield GenerationEnd(finish, tokens, first_token_at=first)

    # -- requests ---------------------------------------------------------------------

    def _sampling(self, request: ModelRequest) -> dict[str, Any]:
        """The sampling fields of this turn: the request's where set, else the backend's."""
        asked = request.sampling
        chosen = {"temperature": self.temperature, "top_p": self.top_p, "seed": self.seed}
        chosen.update({key: value for key, value in
                       (("temperature", asked.temperature), ("top_p", asked.top_p),
                        ("seed", asked.seed), ("top_k", asked.top_k)) if value is not None})
        return {key: value for key, value in chosen.items() if value is not None}

    def _completions_opener(self, prompt: str, grammar: Mapping[str, Any],
                            request: ModelRequest) -> Callable[[], OpenedStream]:
        extra = {**special_token_fields(self.engine, self._special), **grammar}
        sampling = self._sampling(request)
        if "top_k" in sampling:  # not a field of OpenAI's completions: the engines read it here
            extra["top_k"] = sampling.pop("top_k")
        limit = self.reply_limit(request)

        def open_stream() -> OpenedStream:
            kwargs: dict[str, Any] = {"model": self.model, "prompt": prompt, "stream": True,
                                      "max_tokens": limit, **sampling}
            if self.stops:
                kwargs["stop"] = list(self.stops)
            if self._stream_options:
                kwargs["stream_options"] = {"include_usage": True}
            if extra:
                kwargs["extra_body"] = dict(extra)
            kwargs["extra_headers"] = self._sdk_headers()
            return open_completions_stream(self._sdk_client(), kwargs)

        return open_stream

    def _llama_opener(self, prompt: str, grammar: Mapping[str, Any],
                      request: ModelRequest) -> Callable[[], OpenedStream]:
        body: dict[str, Any] = {"prompt": prompt, "stream": True,
                                "n_predict": self.reply_limit(request),
                                "cache_prompt": True, **self._sampling(request),
                                **special_token_fields(self.engine, self._special), **grammar}
        if self.stops:
            body["stop"] = list(self.stops)
        url = f"{self.root}/completion"
        return lambda: open_llama_stream(self._http, url, body)

    def _drop_stream_options(self, exc: BaseException) -> bool:
        if self.api == "completions" and self._stream_options and rejects_stream_options(exc):
            self._stream_options = False  # this engine does not know the field: send again
            return True
        return False

    # -- clients ----------------------------------------------------------------------

    def _sdk_headers(self) -> dict[str, Any]:
        """``Authorization`` exactly as resolved; OpenAI's own headers never sent."""
        from openai import omit

        key = self.connection.api_key
        return {"Authorization": f"Bearer {key}" if key else omit,
                "OpenAI-Organization": omit, "OpenAI-Project": omit}

    def _sdk_client(self) -> Any:
        with self._client_lock:
            if self._client is None:
                try:
                    import openai
                except ImportError as exc:  # pragma: no cover - depends on the install
                    raise BackendError("the completions backend needs the openai package: "
                                       f"{extra_hint('remote')}", kind="config") from exc
                self._client = openai.OpenAI(api_key=self.connection.api_key or _UNSENT_KEY,
                                             base_url=f"{self.root}/v1", timeout=self.timeout,
                                             max_retries=0)
            return self._client

    def close(self) -> None:
        """Close the HTTP connections (the backend cannot be used afterwards)."""
        self._http.close()
        with self._client_lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def __enter__(self) -> CompletionsBackend:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def engine_connection(root: str, api_key: str | None, environ: Mapping[str, str] | None,
                      label: str = "the engine") -> ResolvedConnection:
    """The engine's address and key: ``api_key``, else :data:`API_KEY_ENV`, else none.

    The key belongs to the engine the user points at, so it follows ``base_url``;
    no other variable (``OPENAI_API_KEY``, ``TOOLWIRE_SERVE_API_KEY`` of ``toolwire
    serve``) is ever read. ``label`` names the engine in error messages.
    """
    preset = ProviderPreset(label, None, API_KEY_ENV,
                            description="a serving engine's text-completion endpoint")
    if api_key:
        return ResolvedConnection(preset, root, api_key, "api_key argument")
    found = (os.environ if environ is None else environ).get(API_KEY_ENV, "").strip()
    if found:
        return ResolvedConnection(preset, root, found, API_KEY_ENV)
    return ResolvedConnection(preset, root, None, "")


def _make_http_client(api_key: str | None, timeout: float | None) -> Any:
    """The ``httpx2`` client for probing, tokenizing and llama-server's native endpoint."""
    try:
        import httpx2
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise BackendError("the completions backend needs httpx2 (with the openai package): "
                           f"{extra_hint('remote')}", kind="config") from exc
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    limits = httpx2.Timeout(timeout, connect=30.0) if timeout is not None else None
    return httpx2.Client(headers=headers, timeout=limits)
