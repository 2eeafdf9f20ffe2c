"""``toolwire models``: the GGUF models already on this machine, and ``--model NAME``.

Lists the models found in the Hugging Face cache, Ollama's store, LM Studio's
folder and ``--models-dir`` / ``TOOLWIRE_MODELS_DIR`` (see
:mod:`toolwire.apps.local_models`), one row each: the short name ``--model``
accepts, the size, architecture, quantization, the parser family its chat
template selects, and the path. Nothing is downloaded; only headers are read.

:func:`local_model_path` is how ``chat`` and ``serve`` turn ``--model`` into a
file: a path, or a name from this list.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ...hooks.manager import PluginManager
from ..local_models import (
    SOURCES,
    AmbiguousModelError,
    LocalModel,
    ModelNotFoundError,
    describe_model,
    find_models,
    model_stores,
    resolve_model,
)
from .common import existing_folder, fail
from .terminal_text import terminal_safe

__all__ = ["add_models_dir_argument", "human_size", "local_model_path", "register", "run"]


def add_models_dir_argument(parser: argparse.ArgumentParser) -> None:
    """The ``--models-dir`` option of ``models``, ``chat`` and ``serve``."""
    parser.add_argument("--models-dir", action="append", default=[], metavar="DIR",
                        type=existing_folder,
                        help="also look for .gguf files in the existing folder DIR "
                             "(repeatable; also $TOOLWIRE_MODELS_DIR)")


def register(subparsers: Any) -> None:
    """Add the ``models`` command."""
    p = subparsers.add_parser(
        "models", help="list the GGUF models already on this machine",
        description="List the GGUF models found in the Hugging Face cache, Ollama's store, "
                    "LM Studio's folder and --models-dir / $TOOLWIRE_MODELS_DIR, with the "
                    "name 'chat --model' accepts. Nothing is downloaded.")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--source", action="append", choices=SOURCES,
                   help="only this store (repeatable)")
    p.add_argument("--verify", action="store_true",
                   help="select each family exactly as a chat does (renders the template, "
                        "derives a parser when no plugin's claim holds; slower) instead of "
                        "by the plugins' scores")
    add_models_dir_argument(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace, plugins: PluginManager) -> int:
    """List the models; return 0 (also when none are found)."""
    stores = model_stores(extra_dirs=args.models_dir)
    models = find_models(stores, sources=args.source)
    rows = [_row(model, plugins, args.verify) for model in models]
    if args.json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
        return 0
    if not rows:
        looked = "\n  ".join(f"{s.source}: {s.root}" for s in stores
                             if args.source is None or s.source in args.source)
        print(f"no GGUF models found; looked in:\n  {looked}\n"
              "(--models-dir DIR adds a folder)", file=sys.stderr)
        return 0
    table = [["NAME", "SIZE", "ARCH", "QUANT", "FAMILY", "PATH"]]
    table += [[r["name"], human_size(r["size"]), r["architecture"] or "-",
               r["quantization"] or "-", r["family"] or "-", r["path"]] for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]) - 1)]
    for line in table:  # names and paths come from other tools' downloads
        print(terminal_safe("  ".join(cell.ljust(w) for cell, w in zip(line, widths,
                                                                         strict=False))
                            + "  " + line[-1]))
    for row in rows:
        if row["problem"]:
            print(terminal_safe(f"{row['name']}: {row['problem']}"), file=sys.stderr)
    return 0


def _row(model: LocalModel, plugins: PluginManager, verify: bool) -> dict[str, Any]:
    about = describe_model(model, plugins, verify=verify)
    return {"name": model.name, "source": model.source, "path": str(model.path),
            "size": model.size, "architecture": about.architecture,
            "quantization": about.quantization, "family": about.family,
            "context_length": about.context_length, "problem": about.problem}


def human_size(size: int) -> str:
    """``145.2 KB``, ``2.5 GB``: a size in bytes as a person reads it."""
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


def local_model_path(value: str, models_dirs: list[str] | None = None) -> str:
    """The file ``--model VALUE`` names: a path, or a model ``toolwire models`` lists.

    A value with a store prefix (``ollama:``, ``hf:``...) is looked up; otherwise
    an existing file wins, then a found model's name or a unique substring.

    :raises UsageError: nothing matches (the message says where models were
        looked for), several models match (the message lists them), or the
        value is a folder.
    """
    prefixed = value.partition(":")[0] in SOURCES and ":" in value
    path = Path(value).expanduser()
    if not prefixed:
        if path.is_file():
            return str(path)
        if path.is_dir():
            fail(f"--model {value}: is a folder; give a .gguf file in it (toolwire models "
                 f"--models-dir {value} lists them)")
    stores = model_stores(extra_dirs=models_dirs or [])
    try:
        return str(resolve_model(value, find_models(stores)).path)
    except AmbiguousModelError as exc:
        fail(f"--model: {exc}")
    except ModelNotFoundError:
        where = ", ".join(sorted({str(s.root) for s in stores if s.root.is_dir()})) or \
            "no model store exists on this machine"
        what = "model file does not exist" if value.lower().endswith(".gguf") and \
            not prefixed else "no model file or local model has that name"
        fail(f"--model {value}: {what} (toolwire models lists the models found in: {where})")
