"""In-process llama.cpp backend: a local GGUF model speaking its own chat template.

The prompt is rendered with the Jinja chat template stored in the model file
(read with :func:`toolwire.gguf_metadata.read_gguf_metadata`, never with
llama-cpp-python's chat formatters), in toolwire's sandbox; the parser plugin
that claims that template reads the reply. Generation streams token by token
from :meth:`llama_cpp.Llama.generate` with no stop strings: the model ends its
turn with an end-of-generation token (EOS, EOT, ``<|im_end|>``...), exactly as
it was trained to.

``llama_cpp`` is imported only when a model is loaded.
"""

from __future__ import annotations

import codecs
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, cast

import attrs

from toolwire.backends import ModelRequest, TurnEnd
from toolwire.cancel import CancelToken
from toolwire.chat_template import ChatTemplate, get_chat_template
from toolwire.errors import BackendError, ParserNotFoundError, TemplateError
from toolwire.events import (
    DiagnosticEvent,
    ErrorEvent,
    Event,
    NoParserEvent,
    ToolCallEvent,
)
from toolwire.gguf_metadata import GGUFMetadata, read_gguf_metadata
from toolwire.history import Message, to_template_messages
from toolwire.parsing import ParserSpec, default_call_id
from toolwire.plugin_manager import PluginManager, default_plugin_manager
from toolwire.selection import DERIVED_FAMILY, build_pipeline, select_parser

from .budget import PruneResult, prune_history

__all__ = [
    "DEFAULT_CHAT_TEMPLATE",
    "DEFAULT_N_CTX_CAP",
    "OPTIONS",
    "PROMPT_TAIL_CHARS",
    "LlamaCppBackend",
    "TemplateChoice",
    "install_log_filter",
]

DEFAULT_N_CTX_CAP: Final = 8192
"""``n_ctx`` defaults to the model's trained context length, capped at this."""

PROMPT_TAIL_CHARS: Final = 64
"""How much of the prompt's end the stream filters see (an open ``<think>``)."""

_FALLBACK_N_CTX: Final = 4096  # when the file does not say its context length

DEFAULT_CHAT_TEMPLATE: Final = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages and messages[0].role == 'system' %}"
    "{{- messages[0].content + '\\n\\n' }}"
    "{%- endif %}"
    "{{- '# Tools\\n\\nYou may call these functions:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nTo call a function, reply with exactly:\\n<tool_call>\\n"
    "<function=NAME>\\n<parameter=PARAMETER>\\nVALUE\\n</parameter>\\n</function>\\n"
    "</tool_call><|im_end|>\\n' }}"
    "{%- elif messages and messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' + (message.content or '') }}"
    "{%- for call in message.tool_calls or [] %}"
    "{%- if message.content or not loop.first %}{{- '\\n' }}{%- endif %}"
    "{{- '<tool_call>\\n<function=' + call.function.name + '>\\n' }}"
    "{%- for name, value in call.function.arguments | items %}"
    "{{- '<parameter=' + name + '>\\n' }}"
    "{{- value if value is string else value | tojson }}"
    "{{- '\\n</parameter>\\n' }}"
    "{%- endfor %}"
    "{{- '</function>\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.first or loop.previtem.role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{%- if loop.last or loop.nextitem.role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- elif message.role != 'system' or not loop.first %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""The template used when a GGUF file has none: ChatML, with tools offered and
called in the Qwen XML markup (so the built-in ``qwen_xml`` parser reads the
calls). See ``docs/local.md``."""

OPTIONS: Final = (
    "model_path", "n_ctx", "max_tokens", "temperature", "top_p", "seed", "n_threads",
    "n_gpu_layers", "enable_thinking", "family", "chat_template", "verbose", "progress",
    "plugins", "grammar",
)
"""The keyword arguments of :class:`LlamaCppBackend` (``toolwire plugins`` lists them)."""

Grammar = str | Callable[[ModelRequest], str | None] | None


@attrs.frozen
class TemplateChoice:
    """A chat template and the parser that reads what it makes the model write.

    :ivar key: where the template came from: a GGUF key
        (``tokenizer.chat_template``, ``tokenizer.chat_template.tool_use``),
        ``"override"`` (the ``chat_template`` option) or ``"default"`` (the file
        has none: :data:`DEFAULT_CHAT_TEMPLATE`).
    :ivar source: the Jinja source.
    :ivar template: the compiled template.
    :ivar parser: the parser spec, or ``None`` when no parser claims the template.
    :ivar no_parser_message: why there is no parser (for the ``no_parser`` event).
    :ivar seen_markers: well-known tool-call markers seen in an unclaimed template.
    """

    key: str
    source: str
    template: ChatTemplate
    parser: ParserSpec | None
    no_parser_message: str = ""
    seen_markers: tuple[str, ...] = ()


class _Runtime:
    """The few things the backend asks of a loaded model, behind one interface.

    Wraps a :class:`llama_cpp.Llama`, or a stand-in with ``tokenize(bytes,
    add_bos=, special=)``, ``detokenize(list, special=)``, ``generate(tokens,
    **sampling)``, ``token_bos()``, ``n_ctx()``, ``add_bos_token()`` and
    ``is_eog(token)`` (a stand-in receives grammars as GBNF text).
    """

    def __init__(self, model: Any) -> None:
        self.model = model
        self._pieces: dict[int, bytes] = {}
        self._standin = callable(getattr(model, "is_eog", None))
        if self._standin:
            self._vocab: Any = None
            self.add_bos = bool(model.add_bos_token())
        else:
            self._vocab = model._model.vocab
            self.add_bos = bool(model._model.add_bos_token())
        self.bos = int(model.token_bos())

    def n_ctx(self) -> int:
        return int(self.model.n_ctx())

    def tokenize(self, text: str) -> list[int]:
        """The prompt's tokens: specials parsed, one BOS at most."""
        tokens = [int(t) for t in self.model.tokenize(text.encode("utf-8"), add_bos=False,
                                                      special=True)]
        if self.add_bos and self.bos >= 0 and (not tokens or tokens[0] != self.bos):
            tokens.insert(0, self.bos)
        return tokens

    def is_eog(self, token: int) -> bool:
        if self._standin:
            return bool(self.model.is_eog(token))
        import llama_cpp

        return bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))

    def piece(self, token: int) -> bytes:
        """The bytes of one token, specials written out (markup must reach the parser)."""
        cached = self._pieces.get(token)
        if cached is not None:
            return cached
        if self._standin:
            data = bytes(self.model.detokenize([token], special=True))
        else:
            data = _token_to_piece(self._vocab, token)
        self._pieces[token] = data
        return data

    def grammar(self, text: str) -> Any:
        """A grammar object for ``generate``; raises ``ValueError`` if it does not parse."""
        if self._standin:
            return text
        import llama_cpp

        sampler = llama_cpp.llama_sampler_init_grammar(self._vocab, text.encode("utf-8"),
                                                       b"root")
        if not sampler:
            raise ValueError("llama.cpp could not parse the GBNF grammar")
        llama_cpp.llama_sampler_free(sampler)
        from llama_cpp.llama_grammar import LlamaGrammar

        return LlamaGrammar.from_string(text, verbose=False)

    def generate(self, tokens: list[int], *, temperature: float, top_p: float,
                 grammar: Any) -> Iterator[int]:
        stream: Iterator[int] = self.model.generate(
            tokens, temp=temperature, top_p=top_p, top_k=40, min_p=0.05,
            repeat_penalty=1.0, grammar=grammar)
        return stream


def _token_to_piece(vocab: Any, token: int) -> bytes:
    import ctypes

    import llama_cpp

    size = 64
    while True:
        buffer = ctypes.create_string_buffer(size)
        n = int(llama_cpp.llama_token_to_piece(vocab, token, buffer, size, 0, True))
        if n >= 0:
            return buffer.raw[:n]
        size = -n


class _LogFilter:
    """llama.cpp's log callback: everything when verbose, otherwise errors only.

    llama-cpp-python's own callback maps ggml's log levels by an older numbering
    and lets warnings through when ``verbose=False``; ggml's levels are now
    NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4, CONT 5 (continues the last one).
    The callback is process-wide, so it is installed once and follows the
    ``verbose`` of the latest model loaded, as llama-cpp-python's does.
    """

    ERROR: Final = 4
    CONT: Final = 5

    def __init__(self) -> None:
        self.verbose = False
        self.last = 0
        self.installed: Any = None

    def install(self, verbose: bool) -> None:
        self.verbose = verbose
        if self.installed is not None:
            return
        import ctypes

        import llama_cpp

        @llama_cpp.llama_log_callback  # type: ignore[untyped-decorator]
        def callback(level: int, text: bytes, user_data: Any) -> None:
            if level != self.CONT:
                self.last = level
            if self.verbose or self.last >= self.ERROR:
                sys.stderr.write(text.decode("utf-8", "replace"))
                sys.stderr.flush()

        self.installed = callback  # keep the ctypes callback alive
        llama_cpp.llama_log_set(callback, ctypes.c_void_p(0))


_LOG_FILTER: Final = _LogFilter()


def install_log_filter(verbose: bool) -> None:
    """Route llama.cpp's logging to stderr: all of it if ``verbose``, else errors only."""
    _LOG_FILTER.install(verbose)


def _load_llama(path: Path, *, n_ctx: int, seed: int | None, n_threads: int | None,
                n_gpu_layers: int, verbose: bool) -> Any:
    try:
        import llama_cpp
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise BackendError("the llama_cpp backend needs llama-cpp-python: "
                           "pip install 'toolwire[local]'", kind="load") from exc
    install_log_filter(verbose)
    options: dict[str, Any] = {"n_ctx": n_ctx, "n_gpu_layers": n_gpu_layers,
                               "verbose": verbose}
    if seed is not None:
        options["seed"] = seed
    if n_threads is not None:
        options["n_threads"] = n_threads
        options["n_threads_batch"] = n_threads
    try:
        return llama_cpp.Llama(str(path), **options)
    except Exception as exc:
        raise BackendError(f"llama.cpp could not load {path}: {exc}", kind="load",
                           path=str(path)) from exc


class LlamaCppBackend:
    """A local GGUF model run in-process by llama.cpp.

    :param model_path: the ``.gguf`` file.
    :param n_ctx: the context window in tokens; default: the model's trained
        length capped at :data:`DEFAULT_N_CTX_CAP`.
    :param max_tokens: the most tokens one reply may take; the prompt gets
        ``n_ctx - max_tokens`` (see ``docs/local.md``, "Context budget").
    :param temperature: sampling temperature (``0`` is greedy).
    :param top_p: nucleus sampling.
    :param seed: the sampling seed (``None``: random).
    :param n_threads: CPU threads (``None``: llama.cpp's choice).
    :param n_gpu_layers: layers to offload to a GPU (``-1``: all).
    :param enable_thinking: passed to the template (Qwen3-style reasoning switch).
    :param family: force a parser family instead of selecting one by template.
    :param chat_template: a Jinja template source used instead of the file's.
    :param verbose: let llama.cpp log to stderr.
    :param progress: print ``loading NAME (N MB)...`` on stderr when it is a terminal.
    :param plugins: the plugin manager whose parsers and filters apply.
    :param grammar: a GBNF grammar (or ``callable(request) -> GBNF | None``) that
        constrains sampling; tests and ``toolwire demo`` use it to force output.
    :param model: an already loaded ``llama_cpp.Llama`` (or a stand-in with the
        same surface, see :class:`_Runtime`) used instead of loading
        ``model_path``; the metadata is still read from ``model_path``.
    :raises BackendError: the file is missing (``kind="not_found"``) or llama.cpp
        cannot load it (``kind="load"``).
    :raises toolwire.GGUFError: the file's metadata is malformed.
    :raises toolwire.TemplateError: the chat template does not compile.
    :raises toolwire.ParserNotFoundError: ``family`` names no registered parser.
    :raises toolwire.ParserConflictError: two parsers tie for the template.
    :raises ValueError: an option is out of range.
    """

    name = "llama_cpp"

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        *,
        n_ctx: int | None = None,
        max_tokens: int = 1024,
        temperature: float = 0.7,
        top_p: float = 0.95,
        seed: int | None = None,
        n_threads: int | None = None,
        n_gpu_layers: int = 0,
        enable_thinking: bool = False,
        family: str | None = None,
        chat_template: str | None = None,
        verbose: bool = False,
        progress: bool = True,
        plugins: PluginManager | None = None,
        grammar: Grammar = None,
        model: Any = None,
    ) -> None:
        path = Path(model_path)
        if not path.is_file():
            what = "is a directory, not a GGUF file" if path.is_dir() else "does not exist"
            raise BackendError(f"model file {str(path)!r} {what}", kind="not_found",
                               path=str(path))
        if max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        if n_ctx is not None and n_ctx < 2:
            raise ValueError("n_ctx must be at least 2")
        self.model_path = path
        self.metadata: GGUFMetadata = read_gguf_metadata(path)
        trained = self.metadata.context_length
        if n_ctx is not None:
            self.n_ctx = n_ctx
        elif model is not None:
            self.n_ctx = int(model.n_ctx())  # the context the given model was made with
        else:
            self.n_ctx = min(trained or _FALLBACK_N_CTX, DEFAULT_N_CTX_CAP)
        if max_tokens >= self.n_ctx:
            raise ValueError(f"max_tokens ({max_tokens}) must be below n_ctx ({self.n_ctx}): "
                             "the prompt needs room too")
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.seed = seed
        self.enable_thinking = enable_thinking
        self.grammar = grammar
        self._family = family
        self._plugins = plugins or default_plugin_manager()
        self._override = chat_template
        self._choices: dict[bool, TemplateChoice] = {
            tools: self._choose_template(tools) for tools in (False, True)
        }
        self._announced: set[str] = set()
        self._lock = threading.Lock()
        self.load_seconds = 0.0
        if model is None:
            started = time.perf_counter()
            self._progress(progress, started=None)
            try:
                model = _load_llama(path, n_ctx=self.n_ctx, seed=seed, n_threads=n_threads,
                                    n_gpu_layers=n_gpu_layers, verbose=verbose)
            except BaseException:
                self._progress(progress, started=started, failed=True)
                raise
            self.load_seconds = time.perf_counter() - started
            self._progress(progress, started=started)
        self._runtime = _Runtime(model)
        self._first_turn = True

    # -- setup -------------------------------------------------------------

    @property
    def llama(self) -> Any:
        """The loaded ``llama_cpp.Llama`` (or the stand-in given as ``model``)."""
        return self._runtime.model

    @property
    def prompt_budget(self) -> int:
        """The most tokens a prompt may take: ``n_ctx - max_tokens``."""
        return self.n_ctx - self.max_tokens

    def template_choice(self, *, tools: bool) -> TemplateChoice:
        """The template (and parser) used for turns with or without tools."""
        return self._choices[tools]

    def _choose_template(self, tools: bool) -> TemplateChoice:
        if self._override is not None:
            key, source = "override", self._override
        else:
            found = self.metadata.template_for(tools=tools)
            key, source = found if found is not None else ("default", DEFAULT_CHAT_TEMPLATE)
        template = get_chat_template(source)
        try:
            spec = select_parser(source, self._plugins, family=self._family).spec
        except ParserNotFoundError as exc:
            if self._family is not None:
                raise
            return TemplateChoice(key, source, template, None, str(exc), exc.seen_markers)
        return TemplateChoice(key, source, template, spec)

    def _progress(self, enabled: bool, *, started: float | None, failed: bool = False) -> None:
        if not enabled or not sys.stderr.isatty():
            return
        if started is None:
            megabytes = self.model_path.stat().st_size / 1e6
            size = f"{megabytes:.1f}" if megabytes < 10 else f"{megabytes:.0f}"
            label = self.metadata.name or self.model_path.name
            sys.stderr.write(f"loading {label} ({size} MB)...")
        elif failed:
            sys.stderr.write(" failed\n")
        else:
            sys.stderr.write(f" done in {time.perf_counter() - started:.1f} s\n")
        sys.stderr.flush()

    def make_call_id(self, index: int) -> str:
        """Call ids in the form the parser family (of the tools template) wants."""
        spec = self._choices[True].parser
        return spec.make_call_id(index) if spec is not None else default_call_id(index)

    # -- prompt --------------------------------------------------------------

    def render(self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]] | None,
               choice: TemplateChoice | None = None) -> str:
        """The prompt text for ``messages`` (template errors propagate)."""
        choice = choice or self._choices[bool(tools)]
        return choice.template.render(
            to_template_messages(messages), tools=list(tools) if tools else None,
            add_generation_prompt=True, bos_token=self.metadata.bos_token or "",
            eos_token=self.metadata.eos_token or "", enable_thinking=self.enable_thinking)

    def tokenize(self, text: str) -> list[int]:
        """Tokenize a rendered prompt as it is fed to the model."""
        return self._runtime.tokenize(text)

    def fit_prompt(self, request: ModelRequest) -> tuple[PruneResult, str, list[int]]:
        """Render, count and prune ``request`` to the prompt budget.

        :returns: the pruning result, the prompt text and its tokens (those of
            the pruned conversation, or of the protected part when it does not fit).
        :raises TemplateError: the template raised.
        """
        tools = request.tool_schemas() or None
        choice = self._choices[bool(tools)]
        rendered: dict[tuple[int, ...], tuple[str, list[int]]] = {}

        def count(messages: Sequence[Message]) -> int:
            key = tuple(id(m) for m in messages)
            if key not in rendered:
                text = self.render(messages, tools, choice)
                rendered[key] = (text, self._runtime.tokenize(text))
            return len(rendered[key][1])

        final_prompt = (request.final_turn and len(request.messages) >= 2
                        and request.messages[-1].role == "user"
                        and request.messages[-2].role == "tool")
        result = prune_history(request.messages, count, self.prompt_budget,
                               final_answer_prompt=final_prompt)
        text, tokens = rendered[tuple(id(m) for m in result.messages)]
        return result, text, tokens

    # -- one turn ------------------------------------------------------------

    def stream_turn(self, request: ModelRequest, cancel: CancelToken) -> Iterator[Event | TurnEnd]:
        """Run one model turn: render, fit, generate, parse; ``TurnEnd`` last.

        Never raises for a failed turn: a template error, a context overflow or a
        llama.cpp failure becomes an ``error`` event and ``TurnEnd("error")``.
        """
        while not self._lock.acquire(timeout=0.05):
            if cancel.cancelled:
                yield TurnEnd("cancelled")
                return
        try:
            yield from self._turn(request, cancel)
        finally:
            self._lock.release()

    def _notices(self, choice: TemplateChoice) -> Iterator[Event]:
        if choice.key == "default" and "default" not in self._announced:
            self._announced.add("default")
            yield DiagnosticEvent(
                "default_chat_template",
                f"{self.model_path.name} has no chat template in its metadata; using "
                "toolwire's default ChatML template (tool calls in the Qwen XML markup, see "
                "docs/local.md). Pass chat_template=... to use the model's real one.")
        if choice.parser is not None and choice.parser.name == DERIVED_FAMILY and \
                "derived" not in self._announced:
            self._announced.add("derived")
            yield DiagnosticEvent(
                "derived_parser",
                "no parser plugin claims this model's chat template; its tool calls are read "
                "with markers inferred from the template itself (toolwire detect --derive "
                "shows them)")
        if choice.parser is None and choice.source not in self._announced:
            self._announced.add(choice.source)
            # cast: mypy cannot type the event's ``converter=tuple`` field
            yield NoParserEvent(choice.no_parser_message, cast(Any, choice.seen_markers))

    def _turn(self, request: ModelRequest, cancel: CancelToken) -> Iterator[Event | TurnEnd]:
        load = self.load_seconds if self._first_turn else None
        self._first_turn = False
        tools = request.tool_schemas() or None
        choice = self._choices[bool(tools)]
        yield from self._notices(choice)
        started = time.perf_counter()
        try:
            fitted, prompt, tokens = self.fit_prompt(request)
        except TemplateError as exc:
            yield ErrorEvent("template", f"the chat template ({choice.key}) failed: {exc}")
            yield TurnEnd("error")
            return
        except Exception as exc:  # tokenizer failure
            yield ErrorEvent("backend", f"could not build the prompt: {type(exc).__name__}: "
                                        f"{exc}")
            yield TurnEnd("error")
            return
        usage: dict[str, Any] = {"prompt_tokens": len(tokens), "completion_tokens": 0}
        if not fitted.fits:
            yield ErrorEvent(
                "context",
                f"the prompt needs {fitted.tokens} tokens but only {fitted.budget} fit "
                f"(n_ctx {self.n_ctx} - max_tokens {self.max_tokens}): {fitted.over_by} tokens "
                "over even after dropping all older history. Shorten the system prompt or "
                "the latest message or tool results, offer fewer tools, or raise n_ctx.")
            yield TurnEnd("error", usage=usage)
            return
        if fitted.removed:
            yield DiagnosticEvent(
                "context_pruned",
                f"dropped the {fitted.removed} oldest messages from the prompt to fit the "
                f"context window ({fitted.tokens} of {fitted.budget} tokens)")
        try:
            grammar_text = self.grammar(request) if callable(self.grammar) else self.grammar
            grammar = self._runtime.grammar(grammar_text) if grammar_text else None
        except Exception as exc:
            yield ErrorEvent("grammar", f"the grammar option failed: {type(exc).__name__}: "
                                        f"{exc}")
            yield TurnEnd("error", usage=usage)
            return
        pipeline = build_pipeline(choice.parser, request.tool_parameters(),
                                  plugins=self._plugins, chat_template=choice.source,
                                  prompt_tail=prompt[-PROMPT_TAIL_CHARS:])
        render_seconds = time.perf_counter() - started
        if cancel.cancelled:
            yield TurnEnd("cancelled", usage=usage)
            return

        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        reason = "stop"
        completion = 0
        called = False
        first_token: float | None = None
        gen_started = time.perf_counter()
        stream: Iterator[int] | None = None
        try:
            stream = self._runtime.generate(tokens, temperature=self.temperature,
                                            top_p=self.top_p, grammar=grammar)
            for token in stream:
                if first_token is None:
                    first_token = time.perf_counter()
                if cancel.cancelled:
                    reason = "cancelled"
                    break
                if self._runtime.is_eog(token):
                    break
                completion += 1
                text = decoder.decode(self._runtime.piece(token))
                if text:
                    for event in pipeline.feed(text):
                        called = called or isinstance(event, ToolCallEvent)
                        yield event
                if cancel.cancelled:
                    reason = "cancelled"
                    break
                if completion >= self.max_tokens:
                    reason = "length"
                    break
        except Exception as exc:
            reason = "error"
            yield ErrorEvent("backend", f"llama.cpp failed while generating: "
                                        f"{type(exc).__name__}: {exc}")
        finally:
            # stop llama.cpp now, not when the generator is collected
            close = getattr(stream, "close", None)
            if close is not None:
                close()
        ended = time.perf_counter()
        usage["completion_tokens"] = completion
        timings: dict[str, Any] = {
            "render": round(render_seconds, 6),
            "prompt": round((first_token or ended) - gen_started, 6),
            "generation": round(ended - (first_token or ended), 6),
        }
        if load is not None:
            timings["load"] = round(load, 6)
        if reason in ("cancelled", "error"):
            yield TurnEnd(reason, usage=usage, timings=timings)
            return
        # A cut at max_tokens may split a character: its bytes are not text.
        rest = decoder.decode(b"", final=True) if reason == "stop" else ""
        events = pipeline.feed(rest) if rest else []
        events.extend(pipeline.close())
        for event in events:
            called = called or isinstance(event, ToolCallEvent)
            yield event
        if reason == "stop" and called:
            reason = "tool_calls"
        yield TurnEnd(reason, usage=usage, timings=timings)

    def close(self) -> None:
        """Free the model (the backend cannot be used afterwards)."""
        close = getattr(self._runtime.model, "close", None)
        if close is not None:
            close()

    def __repr__(self) -> str:
        return f"LlamaCppBackend({str(self.model_path)!r}, n_ctx={self.n_ctx})"
