"""Provider presets and the API-key isolation rule.

A preset names a provider's default base URL and the one environment variable
its API key is read from. :func:`resolve_connection` turns a preset, an optional
base URL override and an optional explicit key into the exact base URL and key
a backend uses. The rule it applies:

* A key is read only from the preset's own variable (``GEMINI_API_KEY`` for
  ``gemini``, ...), never from ``OPENAI_API_KEY`` for a non-OpenAI preset, and no
  base-URL variable (``OPENAI_BASE_URL``) is ever read.
* A preset without a base URL (``custom``) needs one; there is no fallback to
  OpenAI's.
* A hosted provider's key (``openai``, ``gemini``, ``anthropic``) belongs to that
  provider's origin: when ``base_url`` points at another origin, the key from
  the environment is withheld and only an explicit ``api_key`` is sent. The keys
  of self-hosted servers (``vllm``, ``llama_server``, ``custom``) belong to the
  server the user configures, so they follow ``base_url``.
* A hosted provider's missing key is a :class:`~toolwire.BackendError` with
  ``kind="auth"`` naming the variable, raised when the backend is created.

No function here imports the ``openai`` SDK.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import urlsplit

from toolwire.plugin_api import BackendError, ProviderPreset, ResolvedConnection

__all__ = [
    "PRESETS",
    "origin_of",
    "preset",
    "resolve_connection",
]

_VLLM_TOOLS_HINT = (
    "Start vLLM with --enable-auto-tool-choice and --tool-call-parser NAME, NAME being "
    "the parser for the model family (hermes, qwen3_xml, qwen3_coder, llama3_json, "
    "mistral, ...)."
)


PRESETS: Mapping[str, ProviderPreset] = {
    p.name: p
    for p in (
        ProviderPreset(
            "openai", "https://api.openai.com/v1", "OPENAI_API_KEY", key_required=True,
            key_bound_to_origin=True, description="OpenAI's API"),
        ProviderPreset(
            "ollama", "http://localhost:11434/v1", None, placeholder_key="ollama",
            start_hint="Is Ollama running? Start it with `ollama serve`.",
            tools_hint="Ollama answers this for models whose template has no tool support; "
                       "pick a model tagged 'tools' (ollama.com/search?c=tools).",
            description="a local Ollama server"),
        ProviderPreset(
            "vllm", "http://localhost:8000/v1", "VLLM_API_KEY",
            start_hint="Is vLLM running? Start it with `vllm serve MODEL "
                       "--enable-auto-tool-choice --tool-call-parser NAME`.",
            tools_hint=_VLLM_TOOLS_HINT, description="a vLLM OpenAI-compatible server"),
        ProviderPreset(
            "gemini", "https://generativelanguage.googleapis.com/v1beta/openai/",
            "GEMINI_API_KEY", key_required=True, key_bound_to_origin=True,
            description="Google Gemini's OpenAI-compatible endpoint"),
        ProviderPreset(
            "anthropic", "https://api.anthropic.com/v1/", "ANTHROPIC_API_KEY",
            key_required=True, key_bound_to_origin=True,
            description="Anthropic's OpenAI SDK compatibility endpoint"),
        ProviderPreset(
            "llama_server", "http://localhost:8080/v1", "LLAMA_API_KEY",
            start_hint="Is llama-server running? Start it with `llama-server -m MODEL.gguf "
                       "--jinja`.",
            tools_hint="Start llama-server with --jinja so it renders tools with the model's "
                       "chat template.",
            description="llama.cpp's llama-server"),
        ProviderPreset(
            "custom", None, "TOOLWIRE_API_KEY",
            description="any other OpenAI-compatible server (base_url required)"),
    )
}
"""Every built-in preset, by name."""


def preset(name: str) -> ProviderPreset:
    """The preset called ``name``.

    :raises BackendError: ``kind="config"``, no such preset.
    """
    found = PRESETS.get(name)
    if found is None:
        known = ", ".join(PRESETS)
        raise BackendError(f"unknown provider {name!r} for openai_compat (known: {known}); "
                           "use provider='custom' with base_url= for any other server",
                           kind="config", provider=name)
    return found


def origin_of(url: str) -> tuple[str, str, int | None]:
    """``(scheme, host, port)`` of a URL, lower-cased, default ports filled in."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None:
        port = {"http": 80, "https": 443}.get(scheme)
    return scheme, (parts.hostname or "").lower(), port


def resolve_connection(provider: str, *, base_url: str | None = None,
                       api_key: str | None = None,
                       environ: Mapping[str, str] | None = None) -> ResolvedConnection:
    """Apply the key-isolation rule (see the module docstring).

    :param provider: a preset name.
    :param base_url: overrides the preset's URL.
    :param api_key: an explicit key; always sent, to whatever ``base_url`` is.
    :param environ: where variables are read (default ``os.environ``).
    :raises BackendError: ``kind="config"`` for an unknown provider or a missing
        base URL, ``kind="auth"`` for a missing required key.
    """
    chosen = preset(provider)
    env = os.environ if environ is None else environ
    url = (base_url or "").strip() or chosen.base_url
    if not url:
        raise BackendError(f"provider {chosen.name!r} needs base_url= (the server's API root, "
                           "e.g. 'http://host:8000/v1'); there is no default",
                           kind="config", provider=chosen.name)
    at_home = chosen.base_url is not None and origin_of(url) == origin_of(chosen.base_url)
    if api_key:
        return ResolvedConnection(chosen, url, api_key, "api_key argument",
                                  provider_origin=at_home)
    var = chosen.api_key_env
    found = env.get(var, "").strip() if var else ""
    withheld = ""
    if found and chosen.key_bound_to_origin and not at_home:
        withheld = (f"{var} holds a key for {chosen.base_url} and base_url points elsewhere "
                    f"({url}), so it was not sent; pass api_key=... to send a key there")
        found = ""
    if found and var:
        return ResolvedConnection(chosen, url, found, var, provider_origin=at_home)
    if chosen.key_required and at_home:
        raise BackendError(f"provider {chosen.name!r} needs an API key: set {var} or pass "
                           f"api_key=... (no other variable is read for {chosen.name})",
                           kind="auth", provider=chosen.name, variable=var)
    if chosen.placeholder_key:
        return ResolvedConnection(chosen, url, chosen.placeholder_key, "placeholder",
                                  withheld, at_home)
    return ResolvedConnection(chosen, url, None, "", withheld, at_home)
