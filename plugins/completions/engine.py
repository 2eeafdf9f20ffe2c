"""What a serving engine says about itself, and counting tokens with its tokenizer.

The engines this backend drives answer the same OpenAI-style listing,
``GET /v1/models``, and differ in one field of it, ``owned_by``: each writes
its own name there (vLLM ``vllm``, SGLang ``sglang``, llama.cpp's llama-server
``llamacpp``, llama-cpp-python's server ``me``). That is how :func:`probe_engine`
tells them apart; llama-server is also asked ``GET /props``, which publishes
the model's chat template, its BOS and EOS tokens and the context size of a
slot. vLLM and SGLang put the context size in the listing (``max_model_len``).

Each engine counts tokens at its own endpoint (:class:`TokenCounter`):

=================  ==========================  ===================================
engine             endpoint                    request
=================  ==========================  ===================================
llama-server       ``POST /tokenize``          ``content``, ``add_special``,
                                               ``parse_special``
llama-cpp-python   ``POST /extras/tokenize/    ``input``
                   count``
vLLM, SGLang       ``POST /tokenize``          ``model``, ``prompt``,
                                               ``add_special_tokens``
=================  ==========================  ===================================

An engine without one (or one whose endpoint fails) gets
:func:`estimate_tokens`: one token per three bytes of UTF-8, which over-counts
English and code (about four bytes a token) so that a prompt that fits by the
estimate fits for real.

Every answer is untrusted: fields of the wrong type are ignored, never trusted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

import attrs

__all__ = [
    "ENGINE_LABELS",
    "ESTIMATE_BYTES_PER_TOKEN",
    "EngineInfo",
    "TokenCounter",
    "api_root",
    "estimate_tokens",
    "probe_engine",
]

ESTIMATE_BYTES_PER_TOKEN: Final = 3
""":func:`estimate_tokens` counts one token per this many bytes of UTF-8."""

ENGINE_LABELS: Final[Mapping[str, str]] = {
    "llama_server": "llama-server",
    "llama_cpp_python": "llama-cpp-python's server",
    "vllm": "vLLM",
    "sglang": "SGLang",
    "unknown": "the engine",
}
"""The engine kinds :func:`probe_engine` knows, and how messages name them."""

_OWNERS: Final[Mapping[str, str]] = {
    "llamacpp": "llama_server", "me": "llama_cpp_python", "vllm": "vllm", "sglang": "sglang",
}
_MAX_TEMPLATE_CHARS: Final = 1_000_000  # a chat template larger than this is not one
_MAX_MARKER_CHARS: Final = 256


def api_root(base_url: str) -> str:
    """The engine's root URL: ``base_url`` without a trailing ``/`` or ``/v1``."""
    root = base_url.strip().rstrip("/")
    if root.endswith("/v1"):
        root = root[: -len("/v1")]
    return root


def estimate_tokens(text: str) -> int:
    """The documented estimate: one token per three bytes of UTF-8 (rounded up)."""
    return math.ceil(len(text.encode("utf-8", "surrogatepass")) / ESTIMATE_BYTES_PER_TOKEN)


def _text(value: object, limit: int) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= limit else None


def _count(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 1 << 40:
        return value
    return None


@attrs.frozen
class EngineInfo:
    """What the engine at a URL said about itself (all ``None`` when it said nothing).

    :ivar kind: ``llama_server``, ``llama_cpp_python``, ``vllm``, ``sglang`` or ``unknown``.
    :ivar model: the first model id of ``GET /v1/models``.
    :ivar n_ctx: the context size a request may use.
    :ivar chat_template: the template llama-server publishes (``GET /props``).
    :ivar tool_use_template: its ``chat_template_tool_use``, when it has one.
    :ivar bos_token: the model's BOS token text (llama-server).
    :ivar eos_token: the model's EOS token text (llama-server).
    :ivar unreachable: why the engine could not be asked (empty when it answered).
    """

    kind: str = "unknown"
    model: str | None = None
    n_ctx: int | None = None
    chat_template: str | None = None
    tool_use_template: str | None = None
    bos_token: str | None = None
    eos_token: str | None = None
    unreachable: str = ""

    @property
    def label(self) -> str:
        """The engine's name for messages."""
        return ENGINE_LABELS.get(self.kind, "the engine")

    @property
    def is_llama_cpp(self) -> bool:
        """llama-server or llama-cpp-python (both take a GBNF ``grammar``)."""
        return self.kind in ("llama_server", "llama_cpp_python")


def _get_json(http: Any, url: str, timeout: float) -> Any:
    """``GET url`` as JSON, or ``None`` for a non-200 answer or a body that is not JSON."""
    response = http.get(url, timeout=timeout)
    if response.status_code != 200:
        return None
    try:
        return response.json()
    except ValueError:
        return None


def probe_engine(http: Any, root: str, *, timeout: float = 10.0) -> EngineInfo:
    """Ask the engine at ``root`` what it is (``GET /v1/models``, then ``GET /props``).

    :param http: an ``httpx2.Client`` (its headers carry the API key).
    :param timeout: seconds each question may take.
    :returns: what was learnt; ``unreachable`` says why nothing was, when the
        engine could not be reached at all.
    """
    import httpx2

    try:
        listing = _get_json(http, f"{root}/v1/models", timeout)
    except httpx2.HTTPError as exc:
        return EngineInfo(unreachable=f"{type(exc).__name__}: {exc}")
    kind, model, n_ctx = "unknown", None, None
    entries = listing.get("data") if isinstance(listing, Mapping) else None
    first = entries[0] if isinstance(entries, list) and entries else None
    if isinstance(first, Mapping):
        owner = first.get("owned_by")
        kind = _OWNERS.get(owner, "unknown") if isinstance(owner, str) else "unknown"
        model = _text(first.get("id"), 4096)
        n_ctx = _count(first.get("max_model_len"))
    info = EngineInfo(kind, model, n_ctx)
    if kind not in ("unknown", "llama_server"):
        return info
    try:
        props = _get_json(http, f"{root}/props", timeout)
    except httpx2.HTTPError:
        return info
    settings = props.get("default_generation_settings") if isinstance(props, Mapping) else None
    if not isinstance(props, Mapping) or not (
            isinstance(settings, Mapping) or isinstance(props.get("chat_template"), str)):
        return info
    slot_ctx = _count(settings.get("n_ctx")) if isinstance(settings, Mapping) else None
    return attrs.evolve(
        info, kind="llama_server", n_ctx=slot_ctx or n_ctx,
        chat_template=_text(props.get("chat_template"), _MAX_TEMPLATE_CHARS),
        tool_use_template=_text(props.get("chat_template_tool_use"), _MAX_TEMPLATE_CHARS),
        bos_token=_text(props.get("bos_token"), _MAX_MARKER_CHARS),
        eos_token=_text(props.get("eos_token"), _MAX_MARKER_CHARS))


class TokenCounter:
    """Counts a prompt's tokens at the engine's tokenize endpoint, or estimates.

    A connection failure falls back to the estimate for that prompt only; an
    engine that has no such endpoint (404, 405, 501) or answers something
    unreadable is not asked again. :attr:`estimating` says which applies.

    :param http: an ``httpx2.Client``.
    :param root: the engine's root URL.
    :param engine: what the engine said about itself.
    :param model: the model name vLLM and SGLang want in the request.
    """

    def __init__(self, http: Any, root: str, engine: EngineInfo, model: str | None) -> None:
        self._http = http
        self._request: tuple[str, dict[str, Any]] | None = None
        if engine.kind == "llama_server":
            self._request = (f"{root}/tokenize", {"add_special": True, "parse_special": True})
        elif engine.kind == "llama_cpp_python":
            self._request = (f"{root}/extras/tokenize/count", {})
        elif engine.kind in ("vllm", "sglang"):
            self._request = (f"{root}/tokenize",
                             {"model": model or engine.model, "add_special_tokens": True})
        self._field = {"llama_server": "content", "llama_cpp_python": "input"}.get(
            engine.kind, "prompt")
        self.last_failure = ""

    @property
    def estimating(self) -> bool:
        """Whether prompts are counted by :func:`estimate_tokens`."""
        return self._request is None

    def count(self, text: str) -> tuple[int, bool]:
        """``(tokens, exact)``: the engine's count, or the estimate when it cannot say."""
        if self._request is None:
            return estimate_tokens(text), False
        import httpx2

        url, extra = self._request
        try:
            response = self._http.post(url, json={**extra, self._field: text})
        except httpx2.HTTPError as exc:
            self.last_failure = f"{type(exc).__name__}: {exc}"
            return estimate_tokens(text), False
        counted = _read_count(response)
        if counted is None:
            self.last_failure = f"POST {url} answered HTTP {response.status_code}"
            if response.status_code in (404, 405, 501) or response.status_code == 200:
                self._request = None  # no such endpoint, or one that speaks another shape
            return estimate_tokens(text), False
        return counted, True


def _read_count(response: Any) -> int | None:
    if response.status_code != 200:
        return None
    try:
        body = response.json()
    except ValueError:
        return None
    if not isinstance(body, Mapping):
        return None
    count = body.get("count")
    if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
        return count
    tokens = body.get("tokens")
    return len(tokens) if isinstance(tokens, list) else None
