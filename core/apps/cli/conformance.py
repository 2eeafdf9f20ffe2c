"""``toolwire conformance TEMPLATE...``: run the parser conformance suite from the shell.

For each template file (a Jinja file or a ``.gguf``), the parser is selected as
a chat would select it (:func:`toolwire.select_parser`, every installed plugin),
then :func:`toolwire.testing.check_parser` runs. The table shows one row per
template; each property is ``PASS``, ``FAIL`` or ``SKIP``. Progress goes to
standard error.

``--family derived`` checks the parser derived from each template itself (see
``docs/derived.md``), as a chat uses it when no plugin claims the template.

Exit status: 0 when every property passed or was skipped, 1 when a property
failed, 2 when a template could not be read or no parser claims it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from ...errors import ParserConflictError, ParserNotFoundError, ToolwireError
from ...hooks.manager import PluginManager, SpecPlugin
from ...parse.protocol import ParserSpec
from .common import at_least, check_family

__all__ = ["register", "run_conformance"]

_STATUS = {"passed": "PASS", "failed": "FAIL", "skipped": "SKIP"}


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``conformance`` command to ``toolwire``'s subparsers.

    The subcommand's ``run`` default is :func:`run_conformance`, called as
    ``args.run(args, plugins)`` like every other ``toolwire`` subcommand.

    :param subparsers: what ``ArgumentParser.add_subparsers()`` returned.
    :returns: the subcommand's parser.
    """
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "conformance", help="run the parser conformance suite on chat templates",
        description="Select each template's parser as a chat would, run the parser "
                    "conformance suite through the template, print a table. Exit status: 0 "
                    "passed, 1 a property failed, 2 a template is unreadable or has no parser.")
    parser.add_argument("templates", nargs="+", metavar="TEMPLATE",
                        help="chat template file (.jinja) or .gguf")
    parser.add_argument("--examples", type=at_least(1), default=30, metavar="N",
                        help="hypothesis examples per property, at least 1 (default 30)")
    parser.add_argument("--family", help="check this parser family instead of selecting one "
                                         "('derived': the parser derived from the template)")
    parser.add_argument("--seed", type=int, help="make the search reproducible")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(run=run_conformance)
    return parser


def _read_template(path: str) -> str:
    file = Path(path)
    if file.suffix.lower() == ".gguf":
        from ...gguf.metadata import read_gguf_metadata

        found = read_gguf_metadata(file).template_for(tools=True)
        if found is None:
            raise ValueError(f"{path} has no tokenizer.chat_template in its metadata")
        return found[1]
    return file.read_text(encoding="utf-8")


def run_conformance(args: argparse.Namespace, plugins: PluginManager, *,
                    out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run the suite on each template in ``args.templates``; print the table (or JSON).

    :returns: the exit status (0 passed, 1 a property failed, 2 a template
        could not be read or has no parser).
    """
    from ...families.selection import select_parser

    out = out or sys.stdout
    err = err or sys.stderr
    if args.family is not None:
        check_family(args.family, plugins)
    try:
        from ...testing.conformance import PROPERTIES, check_parser
    except ImportError as exc:  # hypothesis comes with the "test" extra
        print(f"toolwire conformance needs hypothesis ({exc}); "
              "install it with: pip install 'hypothesis>=6.100'", file=err)
        return 2
    rows: list[dict[str, Any]] = []
    status = 0
    total = len(args.templates)
    for number, path in enumerate(args.templates, start=1):
        name = Path(path).name
        row: dict[str, Any] = {"template": path}
        rows.append(row)
        try:
            source = _read_template(path)
            spec = select_parser(source, plugins, family=args.family).spec
        except (OSError, UnicodeDecodeError, ValueError, ParserNotFoundError,
                ParserConflictError) as exc:
            row.update(family=None, plugin=None, error=str(exc))
            print(f"[{number}/{total}] {name}: {exc}", file=err)
            status = 2
            continue
        progress = _progress(err, f"[{number}/{total}] {name} ({spec.name})")
        checked, markers = plugins, None
        if spec.name not in plugins.parsers():  # derived from this template: not a plugin's
            checked, markers = _derived_only(spec), _derived_markup(source)
            spec = checked.parser(spec.name)  # as registered there
        try:
            report = check_parser(spec, source, examples=args.examples, plugins=checked,
                                  template_name=name, seed=args.seed, raise_on_failure=False,
                                  progress=progress, markers=markers)
        except ToolwireError as exc:
            row.update(family=spec.name, plugin=spec.plugin, error=str(exc))
            print(f" error: {exc}", file=err)
            status = max(status, 1)
            continue
        print(" done" if report.passed else f" failed: {', '.join(report.failed)}", file=err)
        row.update(report.to_dict())
        row["template"] = path
        if not report.passed:
            status = max(status, 1)
    if args.json:
        print(json.dumps(rows, indent=2, ensure_ascii=False), file=out)
    else:
        _print_table(rows, PROPERTIES, out)
    return status


def _derived_only(spec: ParserSpec) -> PluginManager:
    """A plugin manager with the reasoning filter and the derived parser alone, so the
    suite checks it as a chat that derived it would use it."""
    from ...hooks import builtin_reasoning

    manager = PluginManager(builtins=False, entry_points=False)
    manager.register(builtin_reasoning)
    manager.register(SpecPlugin(spec), name=f"{spec.name} (derived from the template)")
    return manager


def _derived_markup(source: str) -> tuple[str, ...]:
    from ...families.derive import derive_format

    return tuple(derive_format(source).markup)


def _progress(err: TextIO, label: str) -> Callable[[str], None]:
    """A progress line on standard error: the label, then a dot per property."""
    print(f"{label}: ", end="", file=err, flush=True)

    def step(_name: str) -> None:
        print(".", end="", file=err, flush=True)

    return step


def _print_table(rows: list[dict[str, Any]], properties: tuple[str, ...], out: TextIO) -> None:
    header = ["template", "family", "plugin", *properties, "examples"]
    lines = [header]
    details: list[str] = []
    for row in rows:
        if "error" in row:
            lines.append([Path(row["template"]).name, row.get("family") or "-",
                          row.get("plugin") or "-", *["-"] * len(properties), "0"])
            details.append(f"{row['template']}: {row['error']}")
            continue
        statuses = {p["name"]: p for p in row["properties"]}
        lines.append([Path(row["template"]).name, row["family"], row["plugin"],
                      *[_STATUS[statuses[p]["status"]] for p in properties],
                      str(sum(p["examples"] for p in row["properties"]))])
        for prop in row["properties"]:
            if prop["status"] == "failed":
                details.append(f"{row['template']}: {prop['name']} FAILED: {prop['error']}")
                if prop["falsifying_text"] is not None:
                    details.append(f"  falsifying text: {prop['falsifying_text']!r}")
            elif prop["status"] == "skipped":
                details.append(f"{row['template']}: {prop['name']} skipped: {prop['reason']}")
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for line in lines:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))
              .rstrip(), file=out)
    if details:
        print(file=out)
        for detail in details:
            print(detail, file=out)
