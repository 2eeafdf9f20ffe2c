"""The model, generation and provider options of ``chat`` and ``serve``, checked once.

:func:`add_generation_arguments` adds the sampling and runtime flags
(``--temperature``, ``--top-p``, ``--seed``, ``--max-tokens``, ``--ctx-size``,
``--threads``, ``--n-gpu-layers``, ``--no-repack``, ``--chat-template-file``,
``--api-key-env``).
:func:`check_model_options` runs before anything is loaded or printed: it names
the provider whatever its case (``--base-url`` alone means ``custom``), resolves
``--model`` for a local model (a path or a name ``toolwire models`` lists),
checks ``--family`` and the workspace, and refuses options the chosen backend
does not take, each as an input error (exit status 2) with a "did you mean".
:func:`generation_options` hands the values to the backend in its own terms.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from ...gguf.metadata import read_gguf_metadata
from ...hooks.manager import PluginManager
from ...vocabulary.backend import Backend
from .common import UsageError, at_least, check_family, cli_advice, did_you_mean, fail, fraction
from .models import local_model_path

__all__ = ["COMPLETIONS", "LOCAL_ONLY", "MAX_THREADS", "add_generation_arguments",
           "check_model_options", "generation_options", "local_backend_options",
           "local_worker_backend", "model_label"]

COMPLETIONS = "completions"
LOCAL_ONLY = ("n_threads", "n_gpu_layers", "repack")
"""Options only a local model takes (``--threads``, ``--n-gpu-layers``, ``--no-repack``)."""
_LOCAL_FLAGS = {"n_threads": "--threads", "n_gpu_layers": "--n-gpu-layers",
                "repack": "--no-repack"}
MAX_THREADS = 512
"""ggml's most threads (``GGML_MAX_N_THREADS``); far more crash llama.cpp."""

_REMOTE_PROVIDERS = ("openai", "ollama", "vllm", "gemini", "anthropic", "llama_server",
                     "custom")


def add_generation_arguments(parser: argparse.ArgumentParser) -> None:
    """The sampling and runtime options of ``chat`` and ``serve``, defaults in their help."""
    group = parser.add_argument_group(
        "generation", "sampling and runtime options (a remote provider uses its own "
                      "defaults for what is not given)")
    group.add_argument("--temperature", type=at_least(0.0, float), metavar="T",
                       help="sampling temperature, 0 is greedy (default: 0.7 for a local "
                            "model)")
    group.add_argument("--top-p", type=fraction, metavar="P",
                       help="nucleus sampling (default: 0.95 for a local model)")
    group.add_argument("--seed", type=int, metavar="N",
                       help="sampling seed, for repeatable replies (default: random)")
    group.add_argument("--max-tokens", type=at_least(1), metavar="N",
                       help="the most tokens one reply may take (default: 1024; a remote "
                            "provider: its own)")
    group.add_argument("--ctx-size", "--n-ctx", dest="n_ctx", type=at_least(2), metavar="N",
                       help="context size in tokens (default: a local model's trained "
                            "length, at most 8192; completions: what the engine says)")
    group.add_argument("--threads", dest="n_threads", type=at_least(1, maximum=MAX_THREADS),
                       metavar="N", help=f"CPU threads of a local model, at most {MAX_THREADS} "
                                         "(default: llama.cpp's choice)")
    group.add_argument("--n-gpu-layers", type=at_least(-1), metavar="N",
                       help="layers of a local model to offload to a GPU, -1 for all "
                            "(default: 0)")
    group.add_argument("--no-repack", dest="repack", action="store_const", const=False,
                       help="load a local model without llama.cpp's weight repacking (default: "
                            "repack, unless a one-time check saw it crash on this CPU, which "
                            "toolwire then says)")
    group.add_argument("--chat-template-file", metavar="FILE",
                       help="use this Jinja chat template instead of the model's own "
                            "(local and completions)")
    group.add_argument("--api-key-env", metavar="VARIABLE",
                       help="read the provider's API key from this environment variable "
                            "(default: the provider's own, e.g. OPENAI_API_KEY)")


def check_model_options(args: argparse.Namespace, plugins: PluginManager) -> None:
    """Check and settle the model options in place, before anything loads.

    Afterwards ``args.provider`` is a known provider name or ``None`` (local),
    ``args.model`` a file path for a local model, ``args.provider_api_key`` the key named by
    ``--api-key-env`` (or ``None``), and the workspace an existing folder.

    :raises UsageError: for any option that cannot work, with advice.
    """
    if getattr(args, "demo", False):
        return
    _settle_provider(args)
    if args.provider != COMPLETIONS and any(getattr(args, key, None) for key in
                                           ("template", "model_file", "api")):
        fail("--template, --model-file and --api are options of --provider completions")
    if args.chat_template_file is not None and getattr(args, "template", None) is not None:
        fail("give --chat-template-file or --template, not both (they are the same option)")
    if args.family is not None:
        check_family(args.family, plugins)
    workspace = Path(args.workspace).expanduser()
    if not workspace.is_dir():
        what = "is not a folder" if workspace.exists() else "does not exist"
        fail(f"--workspace {args.workspace}: {what}")
    args.provider_api_key = None  # not args.api_key: that is serve's own key for its clients
    if args.api_key_env:
        if args.provider is None:
            fail("--api-key-env is for a remote provider (--provider or --base-url)")
        key = os.environ.get(args.api_key_env, "").strip()
        if not key:
            fail(f"--api-key-env {args.api_key_env}: that environment variable is not set")
        args.provider_api_key = key
    if args.chat_template_file is not None and not Path(args.chat_template_file).is_file():
        fail(f"--chat-template-file {args.chat_template_file}: file not found")
    if args.provider is None:
        if not args.model:
            fail("give --model: a .gguf file, or a name 'toolwire models' lists (or "
                 "--provider NAME --model NAME for a remote model)")
        args.model_given = args.model
        args.model = local_model_path(args.model, getattr(args, "models_dir", None))
        try:
            read_gguf_metadata(args.model)  # a file that is not GGUF fails here, in milliseconds
        except OSError as exc:
            fail(f"--model {args.model_given}: cannot read {args.model}: {exc.strerror or exc}")
        args.model_options_checked = True
        return
    local_only = [_LOCAL_FLAGS[n] for n in LOCAL_ONLY if getattr(args, n, None) is not None]
    if local_only:
        fail(f"{' and '.join(local_only)} apply to a local model, not to --provider "
             f"{args.provider}")
    if args.provider != COMPLETIONS:
        if not args.model:
            fail(f"--provider {args.provider} needs --model NAME (the model name the server "
                 "knows)")
        for flag, value in (("--chat-template-file", args.chat_template_file),
                            ("--ctx-size", args.n_ctx), ("--family", args.family)):
            if value is not None:
                fail(f"{flag} applies to a local model or --provider completions (a remote "
                     f"provider uses its own template and parser)")
    args.model_options_checked = True


def _settle_provider(args: argparse.Namespace) -> None:
    if args.provider is None:
        if args.base_url:
            args.provider = "custom"  # a server address alone: any OpenAI-compatible server
        return
    given = args.provider
    name = given.strip().lower().replace("-", "_")
    known = (*_REMOTE_PROVIDERS, COMPLETIONS)
    if name not in known:
        fail(f"--provider {given}: unknown provider{did_you_mean(name, known)}; known: "
             f"{', '.join(known)} (--base-url URL alone uses any OpenAI-compatible server)")
    args.provider = name


def generation_options(args: argparse.Namespace, backend: str) -> dict[str, Any]:
    """The given generation options as keyword arguments of ``backend``.

    ``llama_cpp`` and ``completions`` take them directly; ``openai_compat`` gets the
    sampling values in the request body (``extra_body``) and the key as ``api_key``.
    """
    sampling = {key: getattr(args, key) for key in ("temperature", "top_p", "seed",
                                                    "max_tokens")
                if getattr(args, key, None) is not None}
    if backend == "openai_compat":
        options: dict[str, Any] = {"extra_body": sampling} if sampling else {}
        if getattr(args, "provider_api_key", None):
            options["api_key"] = args.provider_api_key
        return options
    options = dict(sampling)
    if getattr(args, "n_ctx", None) is not None:
        options["n_ctx"] = args.n_ctx
    template = getattr(args, "chat_template_file", None)
    if backend == "llama_cpp":
        for key in LOCAL_ONLY:
            if getattr(args, key, None) is not None:
                options[key] = getattr(args, key)
        if template is not None:
            options["chat_template"] = _read_template(template)
    elif backend == COMPLETIONS:
        if template is not None:
            options["template"] = template
        if getattr(args, "provider_api_key", None):
            options["api_key"] = args.provider_api_key
    return options


def local_backend_options(args: argparse.Namespace) -> dict[str, Any]:
    """The ``llama_cpp`` backend's keyword arguments for the local model the options name."""
    local: dict[str, Any] = {"model_path": str(args.model),
                             "enable_thinking": args.enable_thinking,
                             **generation_options(args, "llama_cpp")}
    if args.family is not None:
        local["family"] = args.family
    return local


def local_worker_backend(args: argparse.Namespace, plugins: PluginManager) -> Backend:
    """``serve``'s local model, loaded in a supervised worker process (a crash in
    llama.cpp ends one reply, not the server; see
    :mod:`toolwire.backends.model_worker`). Returns once the model is loaded.

    :raises BackendError: the worker could not load the model.
    :raises UsageError: the backend refused an option value (``--ctx-size 10``), as
        ``chat`` says it.
    """
    from ...backends.model_worker import WorkerBackend, WorkerSpec

    if not getattr(args, "model_options_checked", False):
        check_model_options(args, plugins)
    spec = WorkerSpec("llama_cpp", {**local_backend_options(args), "progress": False},
                      label=Path(str(args.model)).name)
    try:
        return WorkerBackend(spec, plugins).start()
    except ValueError as exc:
        raise UsageError(cli_advice(str(exc))) from exc


def _read_template(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"--chat-template-file {path}: cannot read it: {exc}")


def model_label(args: argparse.Namespace) -> str:
    """What is being loaded, for the ``loading ...`` line."""
    if args.provider == COMPLETIONS:
        return f"completions: {args.base_url}"
    if args.provider:
        return f"{args.provider}: {args.model}"
    given = getattr(args, "model_given", None)
    return str(args.model) if given in (None, args.model) else f"{given} ({args.model})"
