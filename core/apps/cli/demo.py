"""``toolwire demo``: the whole loop on a tiny model toolwire writes itself.

A newcomer on a fresh machine sees real llama.cpp generation, the model's
chat template read from GGUF metadata, streaming parsing of its tool call,
dispatch of a real workspace tool and the events, with nothing downloaded.
The model has random weights; a grammar forces what it writes (a tool call,
then an answer quoting the tool's real result), which the demo says plainly.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ...conversation.chat import Chat
from ...errors import ToolwireError
from ...events import DoneEvent
from ...hooks.manager import PluginManager
from ...templates.default_template import DEFAULT_CHAT_TEMPLATE
from ...vocabulary.backend import Backend, ModelRequest
from ...vocabulary.tools import Tool
from .common import extra_hint, fail
from .event_printer import EventPrinter

__all__ = ["DEMO_MODEL", "EXAMPLE_TEXT", "check_demo_folder", "check_demo_options",
           "make_demo_backend", "register", "request_grammar", "run_demo", "scripted_arguments",
           "scripted_call"]

QUESTION = "What do my notes say about Alex?"
NOTES = {
    "notes/people.md": "# People\n\nAlex: maintains the parser plugins; prefers Qwen3.5.\n"
                       "Sam: runs the dashboard.\n",
    "notes/todo.md": "- ask Alex about the Hermes plugin\n- benchmark the 1 MB reply\n",
}
CALL = ("I will search the notes.\n\n<tool_call>\n<function=search_text>\n"
        "<parameter=pattern>\nAlex\n</parameter>\n</function>\n</tool_call>")
INTRO = """\
toolwire demo: a tiny stand-in model (random weights, about 150 KB) that toolwire
just wrote to
  {model}
llama.cpp runs it for real; a grammar forces what it writes, because random
weights cannot choose a tool. Everything else is the real path: chat template
from the GGUF metadata -> prompt -> llama.cpp tokens -> streaming parser ->
validation -> the workspace tool -> its result rendered back -> the answer.
"""
OUTRO = """
That was a stand-in model. Point toolwire at a real one:
  toolwire pull bartowski/Qwen_Qwen3-4B-GGUF    (a small Qwen3 that calls tools; the hub extra)
  toolwire chat --model Qwen3-4B-Q4_K_M --workspace DIR
  toolwire chat --model path/to/Qwen3.5-4B-Q4_K_M.gguf --workspace DIR
  toolwire chat --provider openai --model gpt-4o-mini      (OPENAI_API_KEY)
  toolwire chat --provider ollama --model qwen3:4b
"""


def _answer_from_results(request: ModelRequest) -> str:
    results = [m.content for m in request.messages if m.role == "tool"]
    found = results[-1].strip() if results else "nothing"
    return f"Your notes mention Alex here:\n{found}"


EXAMPLE_TEXT = "Alex"
"""The string the stand-in passes where a tool wants text (the demo's notes mention Alex)."""
_SHOWN_RESULT = 400


def scripted_arguments(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """Arguments a tool's schema accepts, made up for the stand-in model's call: each
    required parameter (or the first, when none is required) with a value of its type."""
    properties = parameters.get("properties")
    if not isinstance(properties, Mapping) or not properties:
        return {}
    required = [n for n in parameters.get("required", ()) if n in properties]
    return {name: _example(properties[name]) for name in required or list(properties)[:1]}


def _example(schema: Any, depth: int = 0) -> Any:
    if not isinstance(schema, Mapping) or depth > 8:
        return EXAMPLE_TEXT
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    if "default" in schema:
        return schema["default"]
    for key in ("anyOf", "oneOf", "allOf"):
        branches = schema.get(key)
        if isinstance(branches, list) and branches:
            typed = [b for b in branches if not (isinstance(b, Mapping)
                                                 and b.get("type") == "null")]
            return _example((typed or branches)[0], depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    low = schema.get("minimum", schema.get("exclusiveMinimum", 1))
    if kind == "integer":
        return int(low) + (1 if "exclusiveMinimum" in schema else 0)
    if kind == "number":
        return float(low) + (1.0 if "exclusiveMinimum" in schema else 0.0)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    if kind == "array":
        return [_example(schema.get("items"), depth + 1)] * int(schema.get("minItems", 0))
    if kind == "object":
        return scripted_arguments(schema)
    return EXAMPLE_TEXT


def scripted_call(tool: Tool) -> str:
    """The stand-in's call of ``tool``, in the markup of the demo model's template."""
    parameters = "".join(
        f"<parameter={name}>\n"
        f"{value if isinstance(value, str) else json.dumps(value)}\n</parameter>\n"
        for name, value in scripted_arguments(tool.parameters).items())
    return (f"I will call {tool.name}.\n\n<tool_call>\n<function={tool.name}>\n"
            f"{parameters}</function>\n</tool_call>")


def request_grammar(plugin_tools: Iterable[str] = ()) -> Callable[[ModelRequest], str]:
    """What the stand-in writes (``toolwire demo``, ``chat --demo``, ``serve --demo``):
    an answer to the request's own tools, ``tool_choice`` and ``response_format``.

    It calls the tool a named ``tool_choice`` names; else, among the offered tools,
    the first that is not one of ``plugin_tools`` (a client's own on
    ``/v1/chat/completions``, ``--functions`` and MCP tools on ``/v1/chat``), else
    ``search_text`` (the demo's story: its notes mention Alex), else the first.
    With no tool offered (none sent, or ``tool_choice: "none"``) it answers in
    words, or with a JSON value the ``response_format`` admits; after a tool's
    result it quotes the result, unless the ``tool_choice`` demands a call
    (``"required"`` or a named tool): then it calls again, on every turn.
    """
    theirs = frozenset(plugin_tools)

    def grammar(request: ModelRequest) -> str:
        from ...testing.tiny_gguf import forcing_grammar
        from ...vocabulary.tool_choice import resolve_tool_choice

        last = request.messages[-1] if request.messages else None
        must_call = bool(request.offered_tools) and \
            resolve_tool_choice(request.tool_choice).constrains_from_start
        if last is not None and last.role == "tool" and not must_call:
            called = next((m.tool_calls[-1].name for m in reversed(request.messages)
                           if m.role == "assistant" and m.tool_calls), "the tool")
            if called == "search_text":
                return forcing_grammar(_answer_from_results(request))
            found = last.content.strip() or "(nothing)"
            if len(found) > _SHOWN_RESULT:
                found = found[:_SHOWN_RESULT] + " ..."
            return forcing_grammar(f"(a stand-in model) {called} returned:\n{found}")
        offered = {t.name: t for t in request.offered_tools}
        allowed = resolve_tool_choice(request.tool_choice).allowed(list(offered))
        if not allowed:
            wanted = request.response_format
            if wanted is not None:
                schema = wanted.schema if wanted.type == "json_schema" else {
                    "type": "object", "properties": {"answer": {"type": "string"}}}
                return forcing_grammar(json.dumps(_example(schema)))
            return forcing_grammar("(a stand-in model) No tool is offered, so there is "
                                   "nothing to call.")
        name = next((n for n in allowed if n not in theirs), None) or \
            ("search_text" if "search_text" in allowed else allowed[0])
        tool = offered[name]
        call = CALL if scripted_arguments(tool.parameters) == {"pattern": EXAMPLE_TEXT} \
            and name == "search_text" else scripted_call(tool)
        return forcing_grammar(call)

    return grammar


def _write_notes(base: Path) -> Path:
    """The demo's notes written under ``base/workspace``; returns that folder."""
    workspace = base / "workspace"
    for name, text in NOTES.items():
        (workspace / name).parent.mkdir(parents=True, exist_ok=True)
        (workspace / name).write_text(text, encoding="utf-8")
    return workspace


def make_demo_backend(base: Path, plugins: PluginManager) -> tuple[Backend, Path, Path]:
    """Write the tiny model and a small workspace under ``base``; return the backend,
    the model path and the workspace. What the stand-in writes is
    :func:`request_grammar`'s answer, the plugins' tools being its own."""
    try:
        from ...testing.tiny_gguf import TINY_BACKEND_OPTIONS, write_tiny_gguf
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ToolwireError(f"the demo needs the local extra: {extra_hint('local')} "
                            f"({exc})") from exc
    workspace = _write_notes(base)
    model = write_tiny_gguf(base / DEMO_MODEL, DEFAULT_CHAT_TEMPLATE)
    options: dict[str, Any] = dict(TINY_BACKEND_OPTIONS)
    backend = plugins.backend("llama_cpp").create(
        model_path=model, grammar=request_grammar([t.name for t in plugins.tools()]),
        temperature=0.0, max_tokens=512,
        plugins=plugins, progress=False, **options)
    return backend, model, workspace


DEMO_MODEL = "tiny-demo.gguf"
"""The stand-in model's file name in the demo's folder."""


_DEMO_UNUSABLE = (
    ("base_url", "--base-url"), ("template", "--template"), ("model_file", "--model-file"),
    ("api", "--api"), ("family", "--family"), ("chat_template_file", "--chat-template-file"),
    ("api_key_env", "--api-key-env"), ("temperature", "--temperature"), ("top_p", "--top-p"),
    ("seed", "--seed"), ("max_tokens", "--max-tokens"), ("n_ctx", "--ctx-size"),
    ("n_threads", "--threads"), ("n_gpu_layers", "--n-gpu-layers"), ("repack", "--no-repack"),
    ("models_dir", "--models-dir"),
)


def check_demo_options(args: argparse.Namespace, verb: str) -> None:
    """``chat --demo`` and ``serve --demo`` refuse, as input errors, the options the
    stand-in cannot use.

    The stand-in writes what a grammar forces, in its own folder of sample notes:
    options choosing or tuning a model, and ``--workspace``, would be dropped, so
    they are refused. ``--functions``, ``--no-tools``, ``--mcp``, ``--max-tool-iters``,
    ``--read-only`` and ``--system`` are honoured, as in any chat.

    :param verb: what the command does with the stand-in (``"serves"``, ``"chats with"``).
    :raises UsageError: one of those options was given.
    """
    given = [flag for dest, flag in _DEMO_UNUSABLE if getattr(args, dest, None) not in (None, [])]
    if getattr(args, "workspace", ".") != ".":
        given.append("--workspace")
    if given:
        fail(f"--demo {verb} the stand-in model in its own sample notes, which cannot use "
             f"{', '.join(given)}: leave {'it' if len(given) == 1 else 'them'} out")


def check_demo_folder(folder: Path) -> None:
    """``--dir``: a folder (made if missing) where the demo overwrites nothing of the user's.

    Files an earlier demo wrote there (the same notes, a stand-in model) are written
    again; any other file in the demo's way stops it, named, before anything is written.

    :raises UsageError: ``folder`` is a file, cannot be made, or holds such files.
    """
    if folder.exists() and not folder.is_dir():
        fail(f"--dir {folder}: is a file; give a folder for the demo's model and notes")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"--dir {folder}: cannot make that folder: {exc.strerror or exc}")
    theirs = [name for name in (DEMO_MODEL, *(f"workspace/{n}" for n in NOTES))
              if (folder / name).exists() and not _written_by_demo(folder / name, name)]
    if theirs:
        fail(f"--dir {folder}: the demo would overwrite {', '.join(theirs)}, which it did not "
             "write; give a new or empty folder")


def _written_by_demo(path: Path, name: str) -> bool:
    if name == DEMO_MODEL:
        from ...gguf.metadata import read_gguf_metadata

        try:
            return read_gguf_metadata(path).scalars.get("general.name") == "toolwire-tiny"
        except (OSError, ToolwireError):
            return False
    try:
        return path.is_file() and path.read_text(encoding="utf-8") == NOTES[
            name.removeprefix("workspace/")]
    except (OSError, UnicodeDecodeError):
        return False


def register(subparsers: Any) -> None:
    """Add the ``demo`` command."""
    p = subparsers.add_parser("demo", help="the whole loop on a tiny model toolwire writes itself",
                              description="Write a tiny model, run it in llama.cpp and show a "
                                          "real tool call parsed, validated, run and answered.")
    p.add_argument("--json", action="store_true", help="print every event as a JSON line")
    p.add_argument("--dir", help="where to write the model and workspace, kept afterwards "
                                 "(default: a temporary folder, removed at the end)")
    p.add_argument("--real", action="store_true",
                   help="ask a small real model instead (SmolLM2-135M-Instruct, from the "
                        "real-model extra): it writes its own tool call")
    p.set_defaults(run=run_demo)


def run_demo(args: argparse.Namespace, plugins: PluginManager) -> int:
    """Run the demo; return 0 when the exchange ended normally."""
    if args.dir:
        folder = Path(args.dir).expanduser()
        check_demo_folder(folder)
        return _run_demo_in(folder, args, plugins)
    with tempfile.TemporaryDirectory(prefix="toolwire-demo-") as base:
        return _run_demo_in(Path(base), args, plugins)


def _run_demo_in(base: Path, args: argparse.Namespace, plugins: PluginManager) -> int:
    started = time.perf_counter()
    if getattr(args, "real", False):
        from .real_demo import REAL_TOOL, real_demo_backend

        backend, intro = real_demo_backend(args, plugins)
        tools = [t for t in plugins.tools() if t.name == REAL_TOOL]
        workspace = _write_notes(base)
        options: dict[str, Any] = {"max_tool_iters": 3, "tool_choice": "required"}
        took, outro = "loading the model", ""
    else:
        backend, model, workspace = make_demo_backend(base, plugins)
        intro, tools, options = INTRO.format(model=model), plugins.tools(), {"max_tool_iters": 4}
        took, outro = "writing and loading the model", OUTRO
    out = sys.stdout
    if not args.json:
        out.write(f"{intro}\nworkspace: {workspace}\n> {QUESTION}\n")
    chat = Chat(backend, tools=tools, workspace=workspace, read_only=True, plugins=plugins,
                **options)
    printer = EventPrinter(out, as_json=args.json, show_reasoning=True,
                           color=out.isatty() and not args.json)
    done: DoneEvent | None = None
    try:
        for event in chat.send(QUESTION):
            printer.show(event)
            if isinstance(event, DoneEvent):
                done = event
    finally:
        close = getattr(backend, "close", None)
        if close is not None:
            close()
    if not args.json:
        out.write(f"\n(done: {done.reason if done else '?'}, "
                  f"{time.perf_counter() - started:.2f} s including {took})\n{outro}")
    return 0 if done is not None and done.reason == "stop" else 1
