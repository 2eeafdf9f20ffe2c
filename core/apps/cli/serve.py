"""``toolwire serve``: the chat over HTTP (server-sent events), a dashboard page and
the OpenAI-compatible API.

Takes the same model options as ``toolwire chat`` (or ``--demo`` for the tiny
stand-in model of ``toolwire demo``) and serves
:func:`toolwire.apps.server.app.create_app` with uvicorn on ``--host``/``--port``
(127.0.0.1:8765 by default), loading the model in the background (the model
routes answer ``503`` until it is ready). Needs the ``serve`` extra (Starlette,
uvicorn). ``--api-key`` (or ``TOOLWIRE_SERVE_API_KEY``) requires a bearer token on every
``/v1`` route; a host other than loopback is refused without one (see
``docs/openai-server.md``).
"""

from __future__ import annotations

import argparse
import atexit
import errno
import ipaddress
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Final

from ...conversation.chat import Chat
from ...errors import ToolwireError
from ...hooks.manager import PluginManager
from ...limits import ServerLimits, bounds
from ...vocabulary.backend import Backend
from ...vocabulary.history import Message
from ..server.request_guard import LOOPBACK_HOSTS, HostPolicy, parse_origin
from .chat import add_chat_arguments, make_backend
from .common import UsageError, at_least, extra_hint, fail
from .model_options import check_model_options, local_worker_backend, model_label
from .tools import session_tools

if TYPE_CHECKING:
    from ..server.served_model import ChatFactory

__all__ = ["API_KEY_VARIABLE", "DEFAULT_HOST", "DEFAULT_PORT", "allowed_hosts_for",
           "is_loopback", "limits_from_args", "listen",
           "make_chat_factory", "model_id_for", "register", "run_serve"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
API_KEY_VARIABLE = "TOOLWIRE_SERVE_API_KEY"
_ANY_ADDRESS = ("0.0.0.0", "::", "")
_LIMIT_OPTIONS: Final = tuple(bound for bound in bounds(ServerLimits) if bound.flag)
"""The bounds ``serve`` takes as options, each its flag, help and default from its record."""


def register(
        subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    """Add the ``serve`` command to the ``toolwire`` command line; return its parser."""
    p = subparsers.add_parser("serve", help="serve the chat over HTTP (SSE, a dashboard, "
                                            "the OpenAI and Anthropic APIs)",
                              description="Serve the chat over HTTP: an SSE event stream, the "
                                          "reference dashboard page, the OpenAI-compatible "
                                          "/v1/chat/completions and /v1/responses, and "
                                          "Anthropic's /v1/messages (for agent clients: "
                                          "Codex CLI, Claude Code).")
    add_chat_arguments(p)
    p.add_argument("--demo", action="store_true",
                   help="serve the tiny stand-in model of 'toolwire demo' (written to a "
                        "temporary folder) instead of --model/--provider")
    p.add_argument("--host", default=DEFAULT_HOST,
                   help=f"address to listen on (default {DEFAULT_HOST}; any other needs "
                        "--api-key)")
    p.add_argument("--port", type=at_least(0, maximum=65535), default=DEFAULT_PORT,
                   help=f"port to listen on (default {DEFAULT_PORT}; 0 picks a free one)")
    p.add_argument("--api-key", help="require 'Authorization: Bearer KEY' on every /v1 route "
                                     f"(default: ${API_KEY_VARIABLE})")
    p.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                   help="also answer requests whose Host header is NAME (repeatable; the "
                        "loopback names and the --host address are always allowed)")
    p.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                   help="let web pages of ORIGIN (scheme://host[:port]) call the server "
                        "from a browser: CORS for that origin only (repeatable)")
    p.add_argument("--model-id", help="the model id OpenAI clients send (default: the model "
                                      "file's name without .gguf, or the provider's model)")
    p.add_argument("--approvals", action="store_true",
                   help="each call of a tool that changes things waits for the client's "
                        "approval (the dashboard shows approve/deny; denied after 10 minutes "
                        "without an answer)")
    limits = p.add_argument_group("request and connection bounds")
    for bound in _LIMIT_OPTIONS:
        limits.add_argument(str(bound.flag), type=type(bound.default), metavar="N",
                            dest=f"limit_{bound.name}",
                            help=bound.help)
    p.set_defaults(run=run_serve)
    return p


def limits_from_args(args: argparse.Namespace) -> ServerLimits:
    """The server's bounds from the ``serve`` options (defaults where not given)."""
    given = {bound.name: getattr(args, f"limit_{bound.name}") for bound in _LIMIT_OPTIONS
             if getattr(args, f"limit_{bound.name}", None) is not None}
    try:
        return ServerLimits(**given)
    except ValueError as exc:
        fail(str(exc))


def model_id_for(args: argparse.Namespace) -> str:
    """The id OpenAI clients send as ``model``: ``--model-id``, else a name from the model."""
    if args.model_id:
        return str(args.model_id)
    if args.demo:
        return "toolwire-demo"
    if args.provider or not args.model:
        return str(args.model or args.provider or "toolwire")
    given = str(getattr(args, "model_given", None) or args.model)
    if given != args.model:  # a name 'toolwire models' lists: ollama:qwen3:4b -> qwen3:4b
        given = given.partition(":")[2] if given.split(":")[0] in ("hf", "ollama", "lmstudio",
                                                                   "dir") else given
    name = Path(given).name
    return name[:-5] if name.lower().endswith(".gguf") else name


def make_chat_factory(args: argparse.Namespace, plugins: PluginManager,
                      backend: Backend | None = None) -> tuple[ChatFactory, str]:
    """The server's chat factory and model label, from ``serve`` options.

    The backend (the loaded model) is created once here and shared by every chat.
    """
    if args.demo:
        if args.model or args.provider:
            raise ToolwireError("--demo serves the stand-in model: leave out --model/--provider")
        from .demo import check_demo_options, make_demo_backend

        check_demo_options(args, "serves")

        tools = session_tools(args, plugins)  # --no-tools, --functions and --mcp, as a chat's
        base = Path(tempfile.mkdtemp(prefix="toolwire-serve-demo-"))
        atexit.register(shutil.rmtree, base, ignore_errors=True)  # the model lives till exit
        demo_backend, model_path, workspace = make_demo_backend(base, plugins)
        demo = backend or demo_backend

        def make_demo_chat(history: Sequence[Message], system: str | None) -> Chat:
            # the stand-in calls only the one tool it picks, in a temporary folder of
            # sample notes: the session's policy (--read-only) is the user's, as in a chat
            return Chat(demo, tools=tools, system_prompt=args.system if system is None
                        else system, workspace=workspace, read_only=args.read_only,
                        max_tool_iters=args.max_tool_iters, plugins=plugins, history=history)

        return make_demo_chat, f"demo: tiny stand-in model ({model_path.name})"

    # a local model runs in a supervised worker process: its crash ends one reply only
    shared = backend or (make_backend(args, plugins) if args.provider
                         else local_worker_backend(args, plugins))
    workspace = Path(args.workspace).resolve()
    tools = session_tools(args, plugins)

    def make_chat(history: Sequence[Message], system: str | None) -> Chat:
        return Chat(shared, tools=tools, system_prompt=args.system if system is None else system,
                    max_tool_iters=args.max_tool_iters, read_only=args.read_only,
                    workspace=workspace, plugins=plugins, history=history)

    label = (f"{args.provider}: {args.model or args.base_url}" if args.provider
             else Path(args.model).name)
    return make_chat, label


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host``:``port`` (``0``: a free port), for uvicorn to serve on.

    :raises UsageError: the port is out of range, taken, or not allowed, or the
        host is not an address of this machine.
    """
    if not 0 <= port <= 65535:
        fail(f"--port {port}: a port is a number from 0 to 65535")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as exc:
        fail(f"--host {host}: not an address to listen on ({exc.strerror})")
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            fail(f"cannot listen on {host}:{port}: the port is in use (choose another with "
                 "--port, or --port 0 for a free one)")
        if exc.errno == errno.EACCES:
            fail(f"cannot listen on {host}:{port}: not allowed (ports below 1024 need "
                 "privileges; choose another with --port)")
        fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}")
    sock.set_inheritable(True)
    return sock


def allowed_hosts_for(host: str, allow: Sequence[str] = ()) -> HostPolicy:
    """The ``Host`` names to serve when listening on ``host``, plus ``allow``.

    Listening on every interface (``0.0.0.0``, ``::``) allows the loopback
    names, this machine's host name and any IP literal (an IP is never a
    DNS-rebinding name); other names only through ``allow`` (``--allow-host``).
    """
    names = set(LOOPBACK_HOSTS) | {name.strip() for name in allow if name.strip()}
    if host in _ANY_ADDRESS:
        return HostPolicy(names | {socket.gethostname()}, any_ip_literal=True)
    return HostPolicy(names | {host})


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or name given to ``--host``) is this machine only."""
    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class _Terminated(Exception):
    """SIGTERM, once uvicorn has shut down on it: ends ``serve`` like Ctrl-C does."""


def _terminated(sig: int, frame: FrameType | None) -> None:
    raise _Terminated


def run_serve(args: argparse.Namespace, plugins: PluginManager,
              backend: Backend | None = None) -> int:
    """Run ``toolwire serve`` until interrupted; return the exit status.

    The server listens at once; the model loads in a worker thread. A load that
    fails stops the server and raises its error.
    """
    try:
        import uvicorn

        from ..server.app import cancel_replies, create_app
        from ..server.served_model import LoadedModel, ServedModel
        from ..server.uvicorn_server import uvicorn_config
    except ImportError as exc:
        raise ToolwireError(f"toolwire serve needs the serve extra: {extra_hint('serve')} "
                            f"({exc})") from exc
    api_key = args.api_key or os.environ.get(API_KEY_VARIABLE) or None
    if not is_loopback(args.host) and not api_key:
        fail(f"refusing to listen on {args.host} without an API key: anyone who can reach "
             f"the port could use the model and run the tools. Pass --api-key KEY (or set "
             f"{API_KEY_VARIABLE}), or listen on 127.0.0.1.")
    limits = limits_from_args(args)
    try:
        origins = [parse_origin(origin) for origin in args.allow_origin]
    except ValueError as exc:
        fail(f"--allow-origin: {exc}")
    if args.demo and (args.model or args.provider):
        fail("--demo serves the stand-in model: leave out --model/--provider")
    if args.demo:
        from .demo import check_demo_options

        check_demo_options(args, "serves")
    if not args.demo and backend is None:
        check_model_options(args, plugins)
    source = "the demo model" if args.demo or backend is not None else model_label(args)
    listener = listen(args.host, args.port)  # before the banner: it shows the real port
    port = listener.getsockname()[1]
    served = ServedModel(label=f"loading {source}", model_id=model_id_for(args))
    app = create_app(served=served, allowed_hosts=allowed_hosts_for(args.host, args.allow_host),
                     limits=limits, api_key=api_key, approvals=args.approvals,
                     allowed_origins=origins)
    shown = f"[{args.host}]" if ":" in args.host else args.host
    print(f"toolwire serve: loading {source} ...\n  dashboard: http://{shown}:{port}/\n"
          f"  API: POST http://{shown}:{port}/v1/chat (server-sent events)\n"
          f"  OpenAI API: http://{shown}:{port}/v1 (model {served.model_id!r}; chat "
          f"completions and responses)\n"
          f"  Anthropic API: http://{shown}:{port} (POST /v1/messages)",
          file=sys.stderr, flush=True)

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            # end the streams at once (each gets its done event) so the shutdown is quick
            cancel_replies(app)
            super().handle_exit(sig, frame)

    server = Server(uvicorn_config(app, host=args.host, port=port, limits=limits))
    failures: list[BaseException] = []

    def load() -> None:
        try:
            make_chat, label = make_chat_factory(args, plugins, backend)
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)
            served.set_failed(f"{type(exc).__name__}: {exc}")
            server.should_exit = True
            return
        served.set_ready(LoadedModel(make_chat, None, label, served.model_id))
        print(f"toolwire serve: ready: {label}", file=sys.stderr, flush=True)

    threading.Thread(target=load, name="toolwire-load", daemon=True).start()
    # uvicorn re-raises the signal that stopped it once it has shut down; SIGTERM's
    # default action would then kill the process before atexit (the demo's folder)
    on_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated) if on_main_thread else None
    try:
        server.run(sockets=[listener])
    except (KeyboardInterrupt, _Terminated):  # Ctrl-C or SIGTERM it handled: a normal stop
        pass
    finally:
        listener.close()
        if on_main_thread:
            signal.signal(signal.SIGTERM, previous)
    if failures:
        failure = failures[0]
        if isinstance(failure, ToolwireError | UsageError):
            raise failure
        raise ToolwireError(f"the model could not be loaded: {type(failure).__name__}: "
                            f"{failure}") from failure
    return 0
