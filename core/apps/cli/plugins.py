"""``toolwire plugins``: the loaded plugins and what each contributes."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ...hooks.manager import PluginManager

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    """Add the ``plugins`` command."""
    p = subparsers.add_parser("plugins", help="list loaded plugins and what each contributes",
                              description="List the loaded plugins and what each contributes.")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, plugins: PluginManager) -> int:
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
