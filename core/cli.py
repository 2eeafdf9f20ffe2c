"""The ``toolwire`` command line: plugins, parse, detect, render.

Exit status: 0 on success, 2 for a usage or input problem (including "no parser
claims this template"), 1 for anything else that failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from .errors import (
    GGUFError,
    ParserConflictError,
    ParserNotFoundError,
    TemplateError,
    ToolwireError,
)
from .plugin_manager import PluginManager

__all__ = ["main"]


class _UsageError(Exception):
    """A problem with what the user asked for: exit status 2."""


def _fail(message: str) -> NoReturn:
    raise _UsageError(message)


def _read_json_file(path: str, what: str) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        _fail(f"{what} file not found: {path}")
    except (OSError, UnicodeDecodeError) as exc:
        _fail(f"cannot read {what} file {path}: {exc}")
    except ValueError as exc:
        _fail(f"{what} file {path} is not valid JSON: {exc}")


def _load_tools(path: str | None) -> list[Any] | None:
    if path is None:
        return None
    tools = _read_json_file(path, "tools")
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        _fail(f"tools file {path} must hold a JSON list of OpenAI-style tool objects")
    return tools


def _template_source(path: str, *, tools: bool = True) -> tuple[str, str]:
    """Read a chat template from a ``.gguf`` file or a template file.

    :returns: (source key, template source)
    """
    file = Path(path)
    if not file.exists():
        _fail(f"file not found: {path}")
    if file.suffix.lower() == ".gguf":
        from .gguf_metadata import read_gguf_metadata

        meta = read_gguf_metadata(file)
        found = meta.template_for(tools=tools)
        if found is None:
            _fail(f"{path} has no tokenizer.chat_template in its metadata")
        return found
    try:
        return "file", file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        _fail(f"cannot read template {path}: {exc}")


def _cmd_plugins(args: argparse.Namespace, plugins: PluginManager) -> int:
    infos = plugins.describe()
    if args.json:
        print(json.dumps([{
            "name": i.name, "distribution": i.distribution, "version": i.version,
            "builtin": i.builtin, "parsers": list(i.parsers), "backends": list(i.backends),
            "tools": list(i.tools), "stream_filters": list(i.stream_filters), "error": i.error,
        } for i in infos], indent=2))
        return 0
    for info in infos:
        dist = f"{info.distribution} {info.version}" if info.distribution else ""
        origin = ", ".join(x for x in ("built-in" if info.builtin else "", dist) if x) \
            or "registered"
        print(f"{info.name}  ({origin})")
        if info.error:
            print(f"  FAILED: {info.error}")
        for label, names in (("parsers", info.parsers), ("backends", info.backends),
                             ("tools", info.tools), ("stream filters", info.stream_filters)):
            if names:
                print(f"  {label}: {', '.join(names)}")
    return 0


def _cmd_parse(args: argparse.Namespace, plugins: PluginManager) -> int:
    from .selection import parse_reply

    if args.family is None and args.template is None:
        _fail("give --family NAME or --template PATH")
    tools = _load_tools(args.tools)
    template = _template_source(args.template)[1] if args.template else None
    text = sys.stdin.buffer.read().decode("utf-8", errors="replace")
    reply = parse_reply(text, family=args.family, chat_template=template, tools=tools,
                        chunk_size=args.chunk, plugins=plugins)
    print(json.dumps(reply.to_dict(), ensure_ascii=False, indent=None if args.compact else 2))
    return 0


def _cmd_detect(args: argparse.Namespace, plugins: PluginManager) -> int:
    from .selection import score_parsers, select_parser, template_hash

    key, source = _template_source(args.path, tools=True)
    if args.derive:
        from .derive import DerivationError, derive_format

        try:
            derived = derive_format(source)
        except DerivationError as exc:
            print(f"toolwire: cannot derive a parser from {args.path}: {exc}", file=sys.stderr)
            if exc.seen:
                print(f"seen: {exc.seen!r}", file=sys.stderr)
            return 2
        print(json.dumps(derived.to_dict(), indent=2, ensure_ascii=False))
        return 0
    ranking = score_parsers(source, plugins)
    result: dict[str, Any] = {"path": args.path, "source_key": key,
                              "sha256": template_hash(source),
                              "scores": [{"family": s.name, "plugin": s.plugin, "score": score}
                                         for s, score in ranking]}
    status = 0
    try:
        choice = select_parser(source, plugins)
        result.update(family=choice.spec.name, plugin=choice.spec.plugin, score=choice.score)
    except (ParserNotFoundError, ParserConflictError) as exc:
        result.update(family=None, plugin=None, score=0.0, error=str(exc))
        status = 2
    if args.json:
        print(json.dumps(result, indent=2))
        return status
    print(f"template: {args.path} ({key}), sha256 {result['sha256']}")
    if result["family"]:
        print(f"family:   {result['family']}  (plugin {result['plugin']}, "
              f"score {result['score']:g})")
    else:
        print(f"family:   none: {result['error']}")
    runners = [r for r in result["scores"] if r["family"] != result["family"]]
    if runners:
        print("runners-up: " + ", ".join(f"{r['family']} {r['score']:g}" for r in runners))
    return status


def _cmd_render(args: argparse.Namespace, plugins: PluginManager) -> int:
    from .chat_template import get_chat_template

    tools = _load_tools(args.tools)
    messages = _read_json_file(args.messages, "messages")
    if not isinstance(messages, list):
        _fail(f"messages file {args.messages} must hold a JSON list of messages")
    _, source = _template_source(args.path, tools=bool(tools))
    extra = {}
    bos = eos = ""
    if Path(args.path).suffix.lower() == ".gguf":
        from .gguf_metadata import read_gguf_metadata

        meta = read_gguf_metadata(args.path)
        bos, eos = meta.bos_token or "", meta.eos_token or ""
    if args.enable_thinking is not None:
        extra["enable_thinking"] = args.enable_thinking == "true"
    prompt = get_chat_template(source).render(messages, tools=tools, bos_token=bos,
                                              eos_token=eos, add_generation_prompt=True,
                                              **extra)
    sys.stdout.write(prompt)  # exactly the prompt: no newline added
    sys.stdout.flush()
    lead = "" if prompt.endswith("\n") else "\n"
    print(f"{lead}-- {len(prompt)} characters, {len(prompt.encode('utf-8'))} bytes",
          file=sys.stderr)
    return 0


def _cmd_chat(args: argparse.Namespace, plugins: PluginManager) -> int:
    from .cli_chat import run_chat

    return run_chat(args, plugins)


def _cmd_demo(args: argparse.Namespace, plugins: PluginManager) -> int:
    from .cli_demo import run_demo

    return run_demo(args, plugins)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="toolwire", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("plugins", help="list loaded plugins and what each contributes")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=_cmd_plugins)

    p = sub.add_parser("parse", help="parse a raw model reply read from standard input")
    p.add_argument("--family", help="parser family, e.g. qwen_xml")
    p.add_argument("--template", help="chat template file or .gguf: select its parser")
    p.add_argument("--tools", help="OpenAI-style tools list (JSON) to type arguments")
    p.add_argument("--chunk", type=int, default=0,
                   help="feed N characters at a time (output is identical)")
    p.add_argument("--compact", action="store_true", help="one-line JSON")
    p.set_defaults(run=_cmd_parse)

    p = sub.add_parser("detect", help="which parser family a template or .gguf selects")
    p.add_argument("path")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--derive", action="store_true",
                   help="print the call markup inferred from the template (a plain record)")
    p.set_defaults(run=_cmd_detect)

    p = sub.add_parser("render", help="print the exact prompt a model would see")
    p.add_argument("path", help="chat template file or .gguf")
    p.add_argument("--tools", help="OpenAI-style tools list (JSON)")
    p.add_argument("--messages", required=True, help="messages list (JSON)")
    p.add_argument("--enable-thinking", choices=("true", "false"), default=None)
    p.set_defaults(run=_cmd_render)

    from .cli_chat import add_chat_arguments

    p = sub.add_parser("chat", help="chat with a local GGUF model or a remote provider")
    add_chat_arguments(p)
    p.add_argument("--show-reasoning", action="store_true", help="show reasoning, dimmed")
    p.add_argument("--json", action="store_true", help="print every event as a JSON line")
    p.add_argument("--message", help="run one exchange with this message and exit")
    p.add_argument("--resume", help="continue a conversation saved with /save or --save")
    p.add_argument("--save", help="save the conversation to this file when done")
    p.set_defaults(run=_cmd_chat)

    from .cli_serve import add_serve_command

    add_serve_command(sub)

    from .conformance_cli import add_conformance_command

    add_conformance_command(sub)

    p = sub.add_parser("demo", help="the whole loop on a tiny model toolwire writes itself")
    p.add_argument("--json", action="store_true", help="print every event as a JSON line")
    p.add_argument("--dir", help="where to write the model and workspace (default: temp)")
    p.set_defaults(run=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    args = _parser().parse_args(argv)
    try:
        plugins = PluginManager()
        status: int = args.run(args, plugins)
        return status
    except _UsageError as exc:
        print(f"toolwire: {exc}", file=sys.stderr)
        return 2
    except (ParserNotFoundError, ParserConflictError, GGUFError, TemplateError) as exc:
        print(f"toolwire: {exc}", file=sys.stderr)
        return 2
    except ToolwireError as exc:
        print(f"toolwire: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
