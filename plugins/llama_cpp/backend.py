"""In-process llama.cpp backend: a local GGUF model speaking its own chat template.

The prompt is rendered with the Jinja chat template stored in the model file
(read with :func:`toolwire.gguf.metadata.read_gguf_metadata`, never with
llama-cpp-python's chat formatters), in toolwire's sandbox; the parser plugin
that claims that template reads the reply. Generation streams token by token
from :meth:`llama_cpp.Llama.generate` with no stop strings: the model ends its
turn with an end-of-generation token (EOS, EOT, ``<|im_end|>``...), exactly as
it was trained to.

``llama_cpp`` is imported only when a model is loaded. A quantized model is
loaded with llama.cpp's weight repacking unless a one-time probe in a child
process saw it crash on this CPU (:mod:`.repack_probe`), or ``repack=False``.
A closed model raises :class:`~toolwire.BackendError` (kind ``closed``) instead of
reaching freed native memory.
"""

from __future__ import annotations

import codecs
import contextlib
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs

from toolwire import ParserNotFoundError, select_parser
from toolwire.plugin_api import (
    DEFAULT_CHAT_TEMPLATE,
    JSON_TOOLS_TEMPLATE,
    BackendError,
    CancelToken,
    DiagnosticEvent,
    EncodedPrompt,
    ErrorEvent,
    Event,
    GenerationEnd,
    GenerationSetupError,
    GGUFMetadata,
    ModelRequest,
    PluginManager,
    PromptPiece,
    SpecialTokens,
    TemplateChoice,
    TemplatedBackend,
    TemplateSource,
    TokenLogprobEvent,
    ToolGrammar,
    TriggerWatch,
    TurnEnd,
    extra_hint,
    read_gguf_metadata,
)

from .grammar_sampling import check_grammar_first
from .repack_probe import ProbeVerdict, repack_verdict

__all__ = [
    "DEFAULT_CHAT_TEMPLATE",
    "DEFAULT_N_CTX_CAP",
    "DEFAULT_TOOLS_KEY",
    "OPTIONS",
    "LazyCalls",
    "LlamaCppBackend",
    "install_log_filter",
    "is_standin",
    "llama_seed",
    "tools_unsupported",
]

DEFAULT_TOP_K: Final = 40
"""The sampler's ``top_k`` unless a turn asks for another (llama-cpp-python's default)."""

DEFAULT_N_CTX_CAP: Final = 8192
"""``n_ctx`` defaults to the model's trained context length, capped at this."""

_FALLBACK_N_CTX: Final = 4096  # when the file does not say its context length

OPTIONS: Final = (
    "model_path", "n_ctx", "max_tokens", "temperature", "top_p", "seed", "n_threads",
    "n_gpu_layers", "enable_thinking", "family", "chat_template", "verbose", "progress",
    "plugins", "grammar", "max_reasoning_chars", "repack",
)
"""The keyword arguments of :class:`LlamaCppBackend` (``toolwire plugins`` lists them)."""

Grammar = str | Callable[[ModelRequest], str | None] | None


@attrs.frozen
class LazyCalls:
    """An ``"auto"`` turn's grammars, applied as the reply goes (see
    :mod:`toolwire.grammar.lazy`).

    :ivar grammar: the lazy grammar.
    :ivar after: each opening marker's continuation grammar, compiled.
    :ivar start: the start grammar, compiled (``None``: begin without one).
    """

    grammar: ToolGrammar
    after: Mapping[str, Any]
    start: Any = None


class _Runtime:
    """The few things the backend asks of a loaded model, behind one interface.

    Wraps a :class:`llama_cpp.Llama`, or a stand-in with ``tokenize(bytes,
    add_bos=, special=)``, ``detokenize(list, special=)``, ``generate(tokens,
    **sampling)``, ``token_bos()``, ``n_ctx()``, ``add_bos_token()`` and
    ``is_eog(token)`` (a stand-in receives grammars as GBNF text).
    """

    def __init__(self, model: Any) -> None:
        self.model = model
        self.closed = False
        self._pieces: dict[int, bytes] = {}
        self._standin = is_standin(model)
        self.check_open()
        if self._standin:
            self._vocab: Any = None
            self.add_bos = bool(model.add_bos_token())
        else:
            self._vocab = model._model.vocab
            self.add_bos = bool(model._model.add_bos_token())
            # a grammar checks the sampled token, not the whole vocabulary, each step
            check_grammar_first(model)
        self.bos = int(model.token_bos())
        self._sampling: dict[str, Any] = {}
        self._logits_type: Any = None  # ctypes' float array of the vocabulary's size
        self._names: dict[int, tuple[str, tuple[int, ...]]] = {}
        # the model's seed before a turn's own replaced it; put back on the next
        # turn that brings none (so a seed set with Llama.set_seed still holds)
        self._seed_before: int | None = None

    def closed_reason(self) -> str:
        """Why the model cannot be used (``""``: it can): closed by the backend, or a
        ``Llama`` whose model or context someone else freed."""
        if self.closed:
            return "the backend was closed"
        return "" if self._standin else _freed(self.model)

    def check_open(self) -> None:
        """Raise before any native call on a closed model (it would read freed memory).

        :raises BackendError: ``kind="closed"``.
        """
        _refuse(self.closed_reason())

    def n_ctx(self) -> int:
        self.check_open()
        return int(self.model.n_ctx())

    def tokenize(self, text: str) -> list[int]:
        """The prompt's tokens: specials parsed, one BOS at most."""
        return self.tokenize_pieces((PromptPiece(text),))

    def tokenize_pieces(self, pieces: Sequence[PromptPiece]) -> list[int]:
        """The tokens of a prompt given as pieces (see :mod:`toolwire.backends.prompt_pieces`):
        markup with special tokens parsed, message text without; one BOS at most."""
        self.check_open()
        tokens: list[int] = []
        for piece in pieces:
            if piece.text:
                tokens.extend(int(t) for t in self.model.tokenize(
                    piece.text.encode("utf-8"), add_bos=False, special=piece.markup))
        if self.add_bos and self.bos >= 0 and (not tokens or tokens[0] != self.bos):
            tokens.insert(0, self.bos)
        return tokens

    def special_tokens(self) -> SpecialTokens:
        """The texts llama.cpp's tokenizer cuts at, and those that become control tokens.

        llama.cpp parses CONTROL and UNKNOWN tokens only when asked to parse
        specials, and USER_DEFINED tokens always; those with the RSTRIP attribute
        (Phi-3's) drop the white space after them. A stand-in model may offer
        ``special_tokens() -> (control, user_defined)`` to take part.
        """
        self.check_open()
        if self._standin:
            offered = getattr(self.model, "special_tokens", None)
            if offered is None:
                return SpecialTokens()
            offered_control, offered_user_defined = offered()
            return SpecialTokens(frozenset(offered_control), frozenset(offered_user_defined))
        import llama_cpp

        control: set[str] = set()
        user_defined: set[str] = set()
        rstrip: set[str] = set()
        control_bits = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN
        special_bits = control_bits | llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED
        get_attr = llama_cpp.llama_vocab_get_attr
        for token in range(int(llama_cpp.llama_vocab_n_tokens(self._vocab))):
            attr = int(get_attr(self._vocab, token))
            if not attr & special_bits:
                continue
            raw = llama_cpp.llama_vocab_get_text(self._vocab, token)
            text = bytes(raw).decode("utf-8", "replace") if raw else ""
            if text:
                (control if attr & control_bits else user_defined).add(text)
                if attr & llama_cpp.LLAMA_TOKEN_ATTR_RSTRIP:
                    rstrip.add(text)  # the white space after it is dropped: cut after that
        return SpecialTokens(frozenset(control), frozenset(user_defined), frozenset(rstrip))

    def is_eog(self, token: int) -> bool:
        self.check_open()
        if self._standin:
            return bool(self.model.is_eog(token))
        import llama_cpp

        return bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))

    def piece(self, token: int) -> bytes:
        """The bytes of one token, specials written out (markup must reach the parser)."""
        self.check_open()
        cached = self._pieces.get(token)
        if cached is not None:
            return cached
        if self._standin:
            data = bytes(self.model.detokenize([token], special=True))
        else:
            data = _token_to_piece(self._vocab, token)
        self._pieces[token] = data
        return data

    def token_logprob(self, token: int, text: str, top: int) -> TokenLogprobEvent | None:
        """The log probability of ``token``, just sampled, and of the ``top`` most
        likely tokens at its step, from the logits that step sampled from: their
        log-softmax, computed as llama-cpp-python's ``Llama.logits_to_logprobs``
        does (float32, shifted by the largest), for those tokens only (``None``
        for a stand-in model)."""
        self.check_open()
        if self._standin:
            return None
        import ctypes

        import llama_cpp
        import numpy as np

        if self._logits_type is None:
            self._logits_type = ctypes.c_float * int(llama_cpp.llama_vocab_n_tokens(self._vocab))
        pointer = llama_cpp.llama_get_logits_ith(self.model._ctx.ctx, -1)
        logits = np.frombuffer(self._logits_type.from_address(ctypes.addressof(pointer.contents)),
                               dtype=np.float32)
        shifted = logits - logits.max()
        norm = np.log(np.exp(shifted).sum())
        alternatives = []
        if top:
            best = np.argpartition(-shifted, top - 1)[:top] if top < len(shifted) \
                else np.arange(len(shifted))
            best = best[np.argsort(-shifted[best], kind="stable")]
            for other, value in zip(best.tolist(), (shifted[best] - norm).tolist(),
                                    strict=True):
                name, data = self._named(other)
                alternatives.append({"token": name, "logprob": _finite(value),
                                     "bytes": list(data)})
        return TokenLogprobEvent(text, _finite(float(shifted[token] - norm)),
                                 self._named(token)[1], alternatives)

    def _named(self, token: int) -> tuple[str, tuple[int, ...]]:
        """A token's text (invalid UTF-8 replaced) and bytes, as logprobs name it."""
        named = self._names.get(token)
        if named is None:
            data = self.piece(token)
            named = self._names[token] = (data.decode("utf-8", "replace"), tuple(data))
        return named

    def grammar(self, text: str) -> Any:
        """A grammar object for ``generate``; raises ``ValueError`` if it does not parse."""
        self.check_open()
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

    def end_texts(self) -> tuple[str, ...]:
        """The texts of the vocabulary's end-of-generation tokens."""
        self.check_open()
        if self._standin:
            return ()
        import llama_cpp

        found = []
        for token in range(int(llama_cpp.llama_vocab_n_tokens(self._vocab))):
            if llama_cpp.llama_vocab_is_eog(self._vocab, token):
                raw = llama_cpp.llama_vocab_get_text(self._vocab, token)
                if raw:
                    found.append(bytes(raw).decode("utf-8", "replace"))
        return tuple(found)

    def prefill(self, tokens: Sequence[int], cancel: CancelToken) -> bool:
        """Evaluate the prompt but its last token, one batch at a time, reading
        ``cancel`` between batches; ``False`` when it was cancelled first.

        ``Llama.generate`` evaluates the whole prompt before its first token, and a
        cancelled turn could not end until then (a few thousand tokens on a CPU: a
        minute after its client left). Here the evaluation stops within one batch of
        a cancel; ``generate`` then finds the prompt in its cache and evaluates only
        the last token. A stand-in model, or a cache that cannot drop a suffix, is left
        to ``generate``.
        """
        self.check_open()
        model = self.model
        if self._standin or not hasattr(model, "eval"):
            return not cancel.cancelled
        target = len(tokens) - 1
        cached = int(model.n_tokens)
        prefix = 0
        for mine, theirs in zip(model.input_ids[:cached].tolist(), tokens[:target],
                                strict=False):
            if mine != theirs:
                break
            prefix += 1
        if prefix >= target:
            return not cancel.cancelled
        if not model._ctx.kv_cache_seq_rm(-1, prefix, -1):
            return not cancel.cancelled
        model.n_tokens = prefix
        batch = max(1, int(model.n_batch))
        for start in range(prefix, target, batch):
            if cancel.cancelled:
                return False
            model.eval(tokens[start:min(target, start + batch)])
        return not cancel.cancelled

    def generate(self, tokens: list[int], *, temperature: float, top_p: float,
                 seed: int | None, grammar: Any, top_k: int = DEFAULT_TOP_K) -> Iterator[int]:
        """Start sampling after ``tokens``; ``seed`` (``None``: the model's own)
        seeds this generation's sampler, which ``Llama.generate`` builds afresh."""
        self.check_open()
        set_seed = getattr(self.model, "set_seed", None)
        if set_seed is not None:
            if seed is not None:
                if self._seed_before is None:
                    self._seed_before = getattr(self.model, "_seed", None)
                set_seed(seed)
            elif self._seed_before is not None:
                set_seed(self._seed_before)
                self._seed_before = None
        self._sampling = {"temp": temperature, "top_p": top_p, "top_k": top_k, "min_p": 0.05,
                          "repeat_penalty": 1.0}
        stream: Iterator[int] = self.model.generate(tokens, grammar=grammar, **self._sampling)
        return stream

    def constrain(self, grammar: Any) -> None:
        """Sample under ``grammar`` (``None``: none) from the next token of the
        generation under way on; a stand-in model gets ``constrain(grammar)`` if it has it."""
        self.check_open()
        if self._standin:
            switch = getattr(self.model, "constrain", None)
            if switch is not None:
                switch(grammar)
            return
        # Llama.generate samples through ``_sampler``, built by ``_init_sampler``
        # when the generation starts: the same chain, rebuilt with another grammar
        self.model._sampler = self.model._init_sampler(grammar=grammar, **self._sampling)


_FLOOR_LOGPROB: Final = -9999.0  # a token the model gives no chance (OpenAI's floor)


def _finite(logprob: float) -> float:
    return logprob if math.isfinite(logprob) else _FLOOR_LOGPROB


def _freed(llama: Any) -> str:
    """``""``, or why a ``Llama``'s native model is gone (its owner closed it)."""
    if getattr(llama._model, "model", None) is None or getattr(llama._ctx, "ctx", None) is None:
        return "its llama.cpp model was closed"
    return ""


def _refuse(reason: str) -> None:
    if reason:
        raise BackendError(f"the model cannot be used: {reason}; create a new backend",
                           kind="closed")


DEFAULT_TOOLS_KEY: Final = "toolwire json tools"
"""The template key of turns with tools that use toolwire's
:data:`~toolwire.plugin_api.JSON_TOOLS_TEMPLATE` because the model's own template
cannot carry tool calls (see :func:`tools_unsupported`)."""


def tools_unsupported(source: str, plugins: PluginManager) -> str:
    """Why a chat template cannot carry tool calls, or ``""`` when it can.

    It cannot when no parser plugin claims it and none can be derived from it: the
    calls a model would write in its markup could not be read (SmolLM2's plain
    ChatML, which never mentions tools, is one). A template a parser claims keeps
    its own markup, even one that does not list the tools itself (DeepSeek-R1's).
    """
    try:
        select_parser(source, plugins)
    except ParserNotFoundError:
        return "no parser plugin reads the calls it writes, and none can be derived from it"
    return ""


def is_standin(model: Any) -> bool:
    """Whether ``model`` is a stand-in (it answers ``is_eog`` itself), not a ``Llama``."""
    return callable(getattr(model, "is_eog", None))


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


_SEED_VALUES: Final = 0xFFFFFFFF  # llama.cpp seeds are uint32; the top value means "random"


def llama_seed(seed: int) -> int:
    """A seed of any size as llama.cpp's ``uint32``, never ``LLAMA_DEFAULT_SEED``
    (``0xFFFFFFFF``, which asks for a random one): ``seed mod (2**32 - 1)``."""
    return seed % _SEED_VALUES


_DEFAULTS_LOCK: Final = threading.Lock()


@contextlib.contextmanager
def _model_defaults(llama_cpp: Any, **fields: Any) -> Iterator[None]:
    """Make ``llama_model_default_params()`` return ``fields`` set while ``Llama()`` runs.

    ``Llama()`` takes no option for them: it starts from that function's result
    (looked up at call time) and passes the struct to ``llama_model_load_from_file``.

    :raises BackendError: this llama-cpp-python's struct has no such field.
    """
    module = llama_cpp.llama_cpp
    known = {name for name, *_ in getattr(module.llama_model_params, "_fields_", ())}
    missing = sorted(set(fields) - known)
    if missing:
        raise BackendError(f"this llama-cpp-python cannot set {', '.join(missing)} (too old: "
                           "upgrade it to load a model without weight repacking)", kind="load")
    with _DEFAULTS_LOCK:
        original = module.llama_model_default_params

        def patched() -> Any:
            params = original()
            for name, value in fields.items():
                setattr(params, name, value)
            return params

        module.llama_model_default_params = patched
        try:
            yield
        finally:
            module.llama_model_default_params = original


def _load_llama(path: Path, *, n_ctx: int, seed: int | None, n_threads: int | None,
                n_gpu_layers: int, verbose: bool, repack: bool = True) -> Any:
    try:
        import llama_cpp
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise BackendError(f"the llama_cpp backend needs llama-cpp-python: {extra_hint('local')}",
                           kind="load") from exc
    install_log_filter(verbose)
    options: dict[str, Any] = {"n_ctx": n_ctx, "n_gpu_layers": n_gpu_layers,
                               "verbose": verbose}
    if seed is not None:
        options["seed"] = seed
    if n_threads is not None:
        options["n_threads"] = n_threads
        options["n_threads_batch"] = n_threads
    try:
        if repack:
            return llama_cpp.Llama(str(path), **options)
        with _model_defaults(llama_cpp, use_extra_bufts=False):
            return llama_cpp.Llama(str(path), **options)
    except BackendError:
        raise
    except Exception as exc:
        raise BackendError(f"llama.cpp could not load {path}: {exc}", kind="load",
                           path=str(path)) from exc


class LlamaCppBackend(TemplatedBackend):
    """A local GGUF model run in-process by llama.cpp.

    Everything about the template, the context fit, the parser and the turn
    is the :class:`~toolwire.backends.templated.TemplatedBackend`'s; this class
    loads the model, tokenizes, samples and generates.

    :param model_path: the ``.gguf`` file.
    :param n_ctx: the context window in tokens; default: the model's trained
        length capped at :data:`DEFAULT_N_CTX_CAP`.
    :param max_tokens: the most tokens one reply may take; the prompt gets
        ``n_ctx - max_tokens`` (see ``docs/local.md``, "The context fit").
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
        Without it, a turn with tools is constrained by the grammar of its
        ``tool_choice``, generated from the family's record (``docs/grammar.md``):
        lazily under ``"auto"``, from the first token under ``"required"``.
    :param max_reasoning_chars: under ``tool_choice="required"`` where the prompt
        opens a reasoning block, the most characters of reasoning the grammar
        allows before the calls (``None``: no bound).
    :param model: an already loaded ``llama_cpp.Llama`` (or a stand-in with the
        same surface, see :class:`_Runtime`) used instead of loading
        ``model_path``; the metadata is still read from ``model_path``.
    :param repack: llama.cpp's weight repacking (its extra buffer types: CPU_REPACK,
        AMX). ``None`` (default): on, unless a one-time probe in a child process
        saw it crash on this CPU for this kind of file (:mod:`.repack_probe`; the
        first turn then says so with a ``repack_disabled`` diagnostic); ``False``:
        off; ``True``: on, without a probe.
    :raises BackendError: the file is missing (``kind="not_found"``), llama.cpp
        cannot load it (``kind="load"``), or ``model`` was closed (``kind="closed"``).
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
        max_reasoning_chars: int | None = None,
        repack: bool | None = None,
    ) -> None:
        path = Path(model_path)
        if not path.is_file():
            what = "is a directory, not a GGUF file" if path.is_dir() else "does not exist"
            raise BackendError(f"model file {str(path)!r} {what}", kind="not_found",
                               path=str(path))
        if n_ctx is not None and n_ctx < 2:
            raise ValueError("n_ctx must be at least 2")
        if model is not None and not is_standin(model):
            _refuse(_freed(model))  # before its n_ctx() reads freed memory
        self.model_path = path
        self.metadata: GGUFMetadata = read_gguf_metadata(path)
        if n_ctx is None:
            if model is not None:
                n_ctx = int(model.n_ctx())  # the context the given model was made with
            else:
                n_ctx = min(self.metadata.context_length or _FALLBACK_N_CTX, DEFAULT_N_CTX_CAP)
        self._override = chat_template
        self._forced_family = family
        self.tool_template_note = ""
        """Why turns with tools use toolwire's JSON tools template (``""``: they do not)."""
        super().__init__(templates=self._template_source, n_ctx=n_ctx, max_tokens=max_tokens,
                         family=family, plugins=plugins, enable_thinking=enable_thinking,
                         bos_token=self.metadata.bos_token or "",
                         eos_token=self.metadata.eos_token or "")
        self.temperature = temperature
        self.top_p = top_p
        self.seed = seed
        self.grammar = grammar
        self.max_reasoning_chars = max_reasoning_chars
        self.load_seconds = 0.0
        self.repack: bool | None = None
        """Whether llama.cpp repacked the weights (``None``: a model given as ``model``)."""
        self.repack_note = ""
        """Why repacking is off, when a probe's crash turned it off."""
        if model is None:
            verdict = self._repack_verdict(repack, progress)
            # said once, by the first turn's repack_disabled diagnostic (not here as well)
            self.repack, self.repack_note = verdict.repack, verdict.note
            started = time.perf_counter()
            self._progress(progress, started=None)
            try:
                model = _load_llama(path, n_ctx=self.n_ctx, seed=seed, n_threads=n_threads,
                                    n_gpu_layers=n_gpu_layers, verbose=verbose,
                                    repack=verdict.repack)
            except BaseException:
                self._progress(progress, started=started, failed=True)
                raise
            self.load_seconds = time.perf_counter() - started
            self._progress(progress, started=started)
        elif not is_standin(model):
            # a Llama made elsewhere: its warnings are llama.cpp's, not this backend's
            install_log_filter(verbose)
        self._runtime = _Runtime(model)
        self.token_logprobs = not is_standin(model)
        """Whether turns give token log probabilities when asked (a ``Llama`` does)."""
        self._first_turn = True
        self._end_texts: tuple[str, ...] | None = None

    # -- setup -------------------------------------------------------------

    @property
    def llama(self) -> Any:
        """The loaded ``llama_cpp.Llama`` (or the stand-in given as ``model``)."""
        return self._runtime.model

    def _repack_verdict(self, repack: bool | None, progress: bool) -> ProbeVerdict:
        if repack is not None:
            return ProbeVerdict(repack=repack)
        try:
            import llama_cpp  # noqa: F401  (the probe reads the build's identity)
        except ImportError:
            return ProbeVerdict(repack=True)  # the load says what is missing
        file_type = self.metadata.scalars.get("general.file_type")
        show = progress and sys.stderr.isatty()

        def announce() -> None:
            if show:
                sys.stderr.write("checking llama.cpp on this CPU (once per kind of model)...")
                sys.stderr.flush()

        verdict = repack_verdict(self.model_path,
                                 file_type if isinstance(file_type, int) else None,
                                 before_probe=announce)
        if show and verdict.probed:
            sys.stderr.write(" done\n")
            sys.stderr.flush()
        return verdict

    def _template_source(self, tools: bool) -> TemplateSource:
        if self._override is not None:
            return TemplateSource("override", self._override)
        found = self.metadata.template_for(tools=tools)
        if found is None:
            return TemplateSource("default", DEFAULT_CHAT_TEMPLATE, is_default=True)
        if tools and self._forced_family is None:
            why = tools_unsupported(found[1], self.plugins)
            if why:
                self.tool_template_note = (
                    f"{self.model_path.name}'s chat template ({found[0]}) cannot carry tool "
                    f"calls: {why}; turns with tools use toolwire's ChatML template with JSON "
                    "calls in <tool_call> tags, which the hermes_json parser reads (turns "
                    "without tools keep the model's own; chat_template=... or family=... "
                    "overrides this)")
                return TemplateSource(DEFAULT_TOOLS_KEY, JSON_TOOLS_TEMPLATE)
        return TemplateSource(*found, where=self.model_path.name)

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

    # -- what the templated base asks of a runtime ---------------------------

    def tokenize(self, text: str) -> list[int]:
        """Tokenize a rendered prompt as it is fed to the model (all of it as markup)."""
        return self._runtime.tokenize(text)

    def encode_prompt(self, text: str) -> EncodedPrompt:
        """The prompt's tokens, by the model's own tokenizer (all of it as markup)."""
        tokens = self._runtime.tokenize(text)
        return EncodedPrompt(text, len(tokens), tuple(tokens))

    def special_tokens(self) -> SpecialTokens:
        """The model's special-token texts, read from its vocabulary once."""
        return self._runtime.special_tokens()

    def encode_pieces(self, pieces: Sequence[PromptPiece]) -> EncodedPrompt:
        """The prompt's tokens: the template's markup with special tokens parsed, text
        from messages without, so a tool result cannot write a control token."""
        tokens = self._runtime.tokenize_pieces(pieces)
        return EncodedPrompt("".join(p.text for p in pieces), len(tokens), tuple(tokens))

    def turn_notices(self, choice: TemplateChoice) -> Iterator[Event]:
        """Say once that repacking is off after a crash, and that the file has no
        template and toolwire's default is used."""
        if self.repack_note and self.announce_once("repack"):
            yield DiagnosticEvent("repack_disabled", self.repack_note)
        if choice.key == DEFAULT_TOOLS_KEY and self.announce_once(DEFAULT_TOOLS_KEY):
            yield DiagnosticEvent("default_tool_template", self.tool_template_note)
        if choice.is_default and self.announce_once("default"):
            yield DiagnosticEvent(
                "default_chat_template",
                f"{self.model_path.name} has no chat template in its metadata; using "
                "toolwire's default ChatML template (tool calls in the Qwen XML markup). Pass"
                " chat_template=... to use the model's real one.")

    tool_grammars = True

    def end_markers(self) -> tuple[str, ...]:
        """The texts of the model's end-of-generation tokens (read once)."""
        if self._end_texts is None:
            self._end_texts = self._runtime.end_texts()
        return self._end_texts

    def prepare_generation(self, request: ModelRequest, choice: TemplateChoice,
                           grammar: ToolGrammar | None = None) -> Any:
        """The sampler's grammar for this turn: the ``grammar`` option when given,
        else the one enforcing the turn's ``tool_choice`` (lazy under ``"auto"``)."""
        try:
            grammar_text = self.grammar(request) if callable(self.grammar) else self.grammar
            if grammar_text:
                return self._runtime.grammar(grammar_text)
        except Exception as exc:
            raise GenerationSetupError(
                "grammar", f"the grammar option failed: {type(exc).__name__}: {exc}") from exc
        if grammar is None:
            return None
        try:
            if grammar.lazy:
                return LazyCalls(grammar, {marker: self._runtime.grammar(text)
                                           for marker, text in grammar.continuations},
                                 self._runtime.grammar(grammar.start) if grammar.start
                                 else None)
            return self._runtime.grammar(grammar.gbnf)
        except Exception as exc:
            raise GenerationSetupError(
                "grammar", f"llama.cpp refused the {grammar.family} call grammar "
                           f"(toolwire grammar --family {grammar.family} prints it): "
                           f"{type(exc).__name__}: {exc}") from exc

    def extra_timings(self) -> Mapping[str, Any]:
        """The load time, on the first turn."""
        if not self._first_turn:
            return {}
        self._first_turn = False
        return {"load": round(self.load_seconds, 6)}

    def generate(self, prompt: EncodedPrompt, request: ModelRequest, options: Any,
                 cancel: CancelToken) -> Iterator[str | TokenLogprobEvent | GenerationEnd]:
        """Sample token by token until an end-of-generation token, the limit or a cancel.

        ``request.sampling`` replaces :attr:`temperature`, :attr:`top_p`,
        :attr:`seed` and the sampler's ``top_k`` (:data:`DEFAULT_TOP_K`) for this turn
        and may lower :attr:`max_tokens`
        (:meth:`reply_limit`). ``request.logprobs`` adds each token's
        :class:`~toolwire.plugin_api.TokenLogprobEvent` before its text.
        """
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        completion = 0
        first_token: float | None = None
        stream: Iterator[int] | None = None
        reason = "stop"
        watch = TriggerWatch(options.grammar) if isinstance(options, LazyCalls) else None
        sampling = request.sampling
        limit = self.reply_limit(request)
        top = request.logprobs
        try:
            if not self._runtime.prefill(list(prompt.tokens or ()), cancel):
                yield GenerationEnd("cancelled", 0)
                return
            stream = self._runtime.generate(
                list(prompt.tokens or ()),
                temperature=self.temperature if sampling.temperature is None
                else sampling.temperature,
                top_p=self.top_p if sampling.top_p is None else sampling.top_p,
                top_k=DEFAULT_TOP_K if sampling.top_k is None else sampling.top_k,
                seed=None if sampling.seed is None else llama_seed(sampling.seed),
                grammar=options.start if isinstance(options, LazyCalls) else options)
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
                if top is not None:
                    logprob = self._runtime.token_logprob(token, text, top)
                    if logprob is not None:
                        yield logprob
                if watch is not None and text and not watch.done:
                    switch = watch.feed(text)
                    if switch is not None:
                        self._runtime.constrain(options.after.get(switch.marker))
                if text:
                    yield text
                if cancel.cancelled:
                    reason = "cancelled"
                    break
                if completion >= limit:
                    reason = "length"
                    break
        except Exception as exc:
            yield GenerationEnd("error", completion, f"llama.cpp failed while generating: "
                                                     f"{type(exc).__name__}: {exc}",
                                error_kind=exc.kind if isinstance(exc, BackendError)
                                else "backend", first_token_at=first_token)
            return
        finally:
            # stop llama.cpp now, not when the generator is collected
            close = getattr(stream, "close", None)
            if close is not None:
                close()
        if reason == "stop":
            # a cut at max_tokens may split a character: its bytes are not text
            rest = decoder.decode(b"", final=True)
            if rest:
                yield rest
        yield GenerationEnd(reason, completion, first_token_at=first_token)

    def stream_turn(self, request: ModelRequest,
                    cancel: CancelToken) -> Iterator[Event | TurnEnd]:
        """One turn (see :meth:`TemplatedBackend.stream_turn`); on a closed model an
        ``error`` event of kind ``closed``, never a call into freed memory."""
        reason = self._runtime.closed_reason()
        if reason:
            yield ErrorEvent("closed", f"the model cannot be used: {reason}; create a new "
                                       "backend")
            yield TurnEnd("error")
            return
        yield from super().stream_turn(request, cancel)

    def close(self) -> None:
        """Free the model (the backend cannot be used afterwards: its calls raise
        :class:`~toolwire.BackendError` of kind ``closed``, its turns end with that
        error). Closing twice is harmless."""
        self._runtime.closed = True
        close = getattr(self._runtime.model, "close", None)
        if close is not None:
            close()

    def __repr__(self) -> str:
        return f"LlamaCppBackend({str(self.model_path)!r}, n_ctx={self.n_ctx})"
