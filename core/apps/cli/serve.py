"""``toolwire serve``: the chat over HTTP (server-sent events) with a dashboard page.

Takes the same model options as ``toolwire chat`` (or ``--demo`` for the tiny
stand-in model of ``toolwire demo``), loads the model once and serves
:func:`toolwire.apps.server.app.create_app` with uvicorn on ``--host``/``--port``
(127.0.0.1:8765 by default). Needs the ``serve`` extra (Starlette, uvicorn).
There is no authentication: keep it on 127.0.0.1 (see ``docs/dashboard.md``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from ...backends.protocol import Backend
from ...conversation.chat import Chat
from ...conversation.history import Message
from ...errors import ToolwireError
from ...hooks.manager import PluginManager
from .chat import add_chat_arguments, make_backend

if TYPE_CHECKING:
    from ..server.app import ChatFactory

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "allowed_hosts_for", "make_chat_factory", "register",
           "run_serve"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
_ANY_ADDRESS = ("0.0.0.0", "::", "")


def register(
        subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    """Add the ``serve`` command to the ``toolwire`` command line; return its parser."""
    p = subparsers.add_parser("serve", help="serve the chat over HTTP (SSE) with a dashboard",
                              description="Serve the chat over HTTP: an SSE event stream and "
                                          "the reference dashboard page.")
    add_chat_arguments(p)
    p.add_argument("--demo", action="store_true",
                   help="serve the tiny stand-in model of 'toolwire demo' (written to a "
                        "temporary folder) instead of --model/--provider")
    p.add_argument("--host", default=DEFAULT_HOST,
                   help=f"address to listen on (default {DEFAULT_HOST}; there is no "
                        "authentication, do not expose it)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT,
                   help=f"port to listen on (default {DEFAULT_PORT}; 0 picks a free one)")
    p.set_defaults(run=run_serve)
    return p


def make_chat_factory(args: argparse.Namespace, plugins: PluginManager,
                      backend: Backend | None = None) -> tuple[ChatFactory, str]:
    """The server's chat factory and model label, from ``serve`` options.

    The backend (the loaded model) is created once here and shared by every chat.
    """
    if args.demo:
        if args.model or args.provider:
            raise ToolwireError("--demo serves the stand-in model: leave out --model/--provider")
        from .demo import make_demo_backend

        base = Path(tempfile.mkdtemp(prefix="toolwire-serve-demo-"))
        demo_backend, model_path, workspace = make_demo_backend(base, plugins)
        demo = backend or demo_backend

        def make_demo_chat(history: Sequence[Message], system: str | None) -> Chat:
            return Chat(demo, tools=plugins.tools(), system_prompt=system, workspace=workspace,
                        read_only=True, max_tool_iters=4, plugins=plugins, history=history)

        return make_demo_chat, f"demo: tiny stand-in model ({model_path.name})"

    shared = backend or make_backend(args, plugins)
    workspace = Path(args.workspace).resolve()
    tools = [] if args.no_tools else plugins.tools()

    def make_chat(history: Sequence[Message], system: str | None) -> Chat:
        return Chat(shared, tools=tools, system_prompt=args.system if system is None else system,
                    max_tool_iters=args.max_tool_iters, read_only=args.read_only,
                    workspace=workspace, plugins=plugins, history=history)

    label = f"{args.provider}: {args.model}" if args.provider else Path(args.model).name
    return make_chat, label


def allowed_hosts_for(host: str) -> Sequence[str] | None:
    """The ``Host`` names to serve when listening on ``host`` (``None``: any)."""
    from ..server.app import LOOPBACK_HOSTS

    if host in _ANY_ADDRESS:
        return None
    return sorted(LOOPBACK_HOSTS | {host.strip("[]").lower()})


def run_serve(args: argparse.Namespace, plugins: PluginManager,
              backend: Backend | None = None) -> int:
    """Run ``toolwire serve`` until interrupted; return the exit status."""
    try:
        import uvicorn

        from ..server.app import LOOPBACK_HOSTS, cancel_replies, create_app
    except ImportError as exc:
        raise ToolwireError(f"toolwire serve needs the serve extra: pip install "
                            f"'toolwire[serve]' ({exc})") from exc
    source = "the demo model" if args.demo else (args.provider or args.model or "?")
    print(f"loading {source} ...", file=sys.stderr, flush=True)
    make_chat, label = make_chat_factory(args, plugins, backend)
    app = create_app(make_chat, model=label, allowed_hosts=allowed_hosts_for(args.host))
    shown = f"[{args.host}]" if ":" in args.host else args.host
    print(f"toolwire serve: {label}\n  dashboard: http://{shown}:{args.port}/\n"
          f"  API: POST http://{shown}:{args.port}/v1/chat (server-sent events)",
          file=sys.stderr, flush=True)
    if args.host.strip("[]").lower() not in LOOPBACK_HOSTS:
        print(f"WARNING: listening on {args.host} with no authentication: anyone who can "
              "reach this port can chat and run the tools. Use 127.0.0.1.", file=sys.stderr,
              flush=True)

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            # end the streams at once (each gets its done event) so the shutdown is quick
            cancel_replies(app)
            super().handle_exit(sig, frame)

    config = uvicorn.Config(app, host=args.host, port=args.port, log_level="info",
                            access_log=False, lifespan="off", timeout_graceful_shutdown=5)
    try:
        Server(config).run()
    except KeyboardInterrupt:  # uvicorn re-raises the Ctrl-C it handled: a normal stop
        pass
    return 0
