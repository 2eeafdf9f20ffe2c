"""Where the chat template and the model's special tokens come from, and what they imply.

A remote engine is sent a rendered prompt, so toolwire needs the model's chat
template. :func:`template_sources` takes it from, in this order:

1. ``template`` (``--template PATH``) or ``chat_template`` (the source itself);
2. the engine, where it publishes it (llama-server's ``GET /props``);
3. ``model_file`` (``--model-file PATH``): a local GGUF file, read with
   :func:`toolwire.gguf.metadata.read_gguf_metadata`, or a Hugging Face
   ``tokenizer_config.json`` (with a ``chat_template.jinja`` beside it when
   the JSON has no template).

From the template and the model's end tokens follow two things the request
needs. :func:`end_of_turn_marker` is what the template writes after an
assistant's reply; :func:`needed_stops` sends it as a stop string only where
the template needs it: when toolwire knows the model's end tokens and the
marker is none of them, so the engine would not end the turn there by itself.
:func:`special_markers` lists the template's special-token markup, which
llama-server writes out as text only when asked (``preserved_tokens``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Final

import attrs

from toolwire.plugin_api import (
    BackendError,
    ChatTemplate,
    TemplateError,
    TemplateSource,
    read_gguf_metadata,
)

from .engine import EngineInfo

__all__ = [
    "ModelFacts",
    "end_of_turn_marker",
    "end_tokens",
    "needed_stops",
    "read_model_file",
    "special_markers",
    "template_sources",
]

_PROBE_USER, _PROBE_REPLY = "zqcompletionsuser", "zqcompletionsreply"
_SPECIAL_MARKUP: Final = re.compile(
    r"<\|[^<>|\s]{1,48}\|>|<｜[^<>｜\s]{1,48}｜>|\[[A-Z][A-Z_]{1,30}\]")
_MAX_SPECIAL_MARKERS: Final = 64
_MAX_CONFIG_BYTES: Final = 16 * 1024 * 1024


@attrs.frozen
class ModelFacts:
    """What a local model file says about the model the engine serves.

    :ivar path: the file read.
    :ivar templates: ``(key, source)`` for turns without and with tools, when present.
    :ivar bos_token: the BOS token text.
    :ivar eos_token: the EOS token text.
    :ivar eot_token: the end-of-turn token text (GGUF only).
    :ivar context_length: the trained context length.
    """

    path: str
    templates: Mapping[bool, tuple[str, str]] = attrs.field(factory=dict)
    bos_token: str | None = None
    eos_token: str | None = None
    eot_token: str | None = None
    context_length: int | None = None


def read_model_file(path: str | os.PathLike[str]) -> ModelFacts:
    """Read a GGUF file or a ``tokenizer_config.json``.

    :raises BackendError: ``kind="config"``: the file is missing, unreadable or
        not JSON.
    :raises toolwire.GGUFError: a GGUF file is malformed.
    """
    file = Path(path)
    if not file.is_file():
        raise BackendError(f"--model-file {str(file)!r} does not exist or is not a file",
                           kind="config", path=str(file))
    with open(file, "rb") as handle:
        magic = handle.read(4)
    if magic == b"GGUF":
        meta = read_gguf_metadata(file)
        templates = {tools: found for tools in (False, True)
                     if (found := meta.template_for(tools=tools)) is not None}
        return ModelFacts(str(file), templates, meta.bos_token, meta.eos_token, meta.eot_token,
                          meta.context_length)
    return _read_tokenizer_config(file)


def _token_text(value: object) -> str | None:
    if isinstance(value, Mapping):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def _read_tokenizer_config(file: Path) -> ModelFacts:
    try:
        if file.stat().st_size > _MAX_CONFIG_BYTES:
            raise ValueError(f"larger than {_MAX_CONFIG_BYTES} bytes")
        config = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BackendError(f"--model-file {str(file)!r} is neither a GGUF file nor a readable "
                           f"tokenizer_config.json: {exc}", kind="config",
                           path=str(file)) from exc
    if not isinstance(config, Mapping):
        raise BackendError(f"--model-file {str(file)!r}: a tokenizer_config.json holds a JSON "
                           "object", kind="config", path=str(file))
    named: dict[str, str] = {}
    raw = config.get("chat_template")
    if isinstance(raw, str):
        named["default"] = raw
    elif isinstance(raw, list):  # [{"name": "default", "template": ...}, {"name": "tool_use"...}]
        for entry in raw:
            if isinstance(entry, Mapping) and isinstance(entry.get("name"), str) and \
                    isinstance(entry.get("template"), str):
                named[entry["name"]] = entry["template"]
    beside = file.with_name("chat_template.jinja")
    if "default" not in named and beside.is_file():
        named["default"] = beside.read_text(encoding="utf-8")
    key = f"{file.name} chat_template"
    templates: dict[bool, tuple[str, str]] = {}
    for tools in (False, True):
        if tools and "tool_use" in named:
            templates[tools] = (f"{key}.tool_use", named["tool_use"])
        elif "default" in named:
            templates[tools] = (key, named["default"])
        elif "tool_use" in named:
            templates[tools] = (f"{key}.tool_use", named["tool_use"])
    length = config.get("model_max_length")
    context = length if isinstance(length, int) and 0 < length < 1 << 24 else None
    return ModelFacts(str(file), templates, _token_text(config.get("bos_token")),
                      _token_text(config.get("eos_token")), None, context)


def template_sources(*, template: str | os.PathLike[str] | None, chat_template: str | None,
                     engine: EngineInfo, facts: ModelFacts | None,
                     base_url: str) -> Callable[[bool], TemplateSource]:
    """The template source for turns without and with tools, in the documented order.

    :raises BackendError: ``kind="config"``: a template file cannot be read, or
        no source has a template.
    """
    if chat_template is not None:
        chosen = TemplateSource("chat_template argument", chat_template)
        return lambda tools: chosen
    if template is not None:
        try:
            source = Path(template).read_text(encoding="utf-8")
        except (OSError, ValueError) as exc:
            raise BackendError(f"cannot read --template {os.fspath(template)!r}: {exc}",
                               kind="config", path=os.fspath(template)) from exc
        from_file = TemplateSource(os.fspath(template), source)
        return lambda tools: from_file
    if engine.chat_template is not None:
        plain = TemplateSource(f"{engine.label} GET /props chat_template", engine.chat_template)
        with_tools = plain if engine.tool_use_template is None else TemplateSource(
            f"{engine.label} GET /props chat_template_tool_use", engine.tool_use_template)
        return lambda tools: with_tools if tools else plain
    if facts is not None and facts.templates:
        found = {tools: TemplateSource(*facts.templates[tools], where=Path(facts.path).name)
                 for tools in facts.templates}
        return lambda tools: found.get(tools) or found[not tools]
    where = (f"--model-file {facts.path} has none" if facts is not None
             else "no --model-file was given")
    engine_said = (f"the engine could not be asked for one ({engine.unreachable})"
                   if engine.unreachable else
                   f"{engine.label} does not publish one (only llama-server does, in GET /props)")
    raise BackendError(
        f"no chat template for the model at {base_url}: {engine_said} and {where}. Pass "
        "--template PATH (a Jinja file) or --model-file PATH (the model's GGUF file or "
        "tokenizer_config.json).", kind="config")


def end_of_turn_marker(template: ChatTemplate, *, eos_token: str = "") -> str | None:
    """What the template writes right after an assistant's reply (first line, trimmed).

    ``None`` when it writes nothing there, or the template fails to render the
    probe conversation.
    """
    try:
        text = template.render(
            [{"role": "user", "content": _PROBE_USER},
             {"role": "assistant", "content": _PROBE_REPLY}],
            tools=None, add_generation_prompt=False, bos_token="", eos_token=eos_token)
    except TemplateError:
        return None
    at = text.rfind(_PROBE_REPLY)
    if at < 0:
        return None
    after = text[at + len(_PROBE_REPLY):].lstrip()
    marker = after.split("\n", 1)[0].strip()
    return marker or None


def needed_stops(marker: str | None, end_tokens: Iterable[str | None]) -> tuple[str, ...]:
    """``(marker,)`` when the engine would not end the turn at ``marker`` by itself.

    That is known only when the model's end tokens are (``end_tokens``: EOS,
    EOT); a marker holding one of them ends the turn at the engine already.
    """
    known = [t for t in end_tokens if t]
    if marker is None or not known or any(t in marker for t in known):
        return ()
    return (marker,)


def special_markers(source: str, *, leave_out: Sequence[str] = ()) -> tuple[str, ...]:
    """The special-token markup a template writes (``<|...|>``, ``<｜...｜>``, ``[TOOL_CALLS]``).

    Markers in ``leave_out`` (the end-of-turn tokens) are not listed, so the
    engine never writes them as text.
    """
    seen: dict[str, None] = {}
    for match in _SPECIAL_MARKUP.finditer(source):
        marker = match.group(0)
        if marker not in leave_out and not any(marker in t for t in leave_out if t):
            seen.setdefault(marker)
        if len(seen) >= _MAX_SPECIAL_MARKERS:
            break
    return tuple(seen)


def end_tokens(engine: EngineInfo, facts: ModelFacts | None) -> tuple[str, ...]:
    """The model's end tokens toolwire knows of (EOS, EOT), from the engine or the file."""
    found = [engine.eos_token]
    if facts is not None:
        found += [facts.eos_token, facts.eot_token]
    return tuple(dict.fromkeys(t for t in found if t))

