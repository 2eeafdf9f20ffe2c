"""Run the conformance suite on parsers derived from every real template.

Every dedicated parser plugin is disabled (only the core's reasoning filter is
loaded), each real template (in the folder ``tests/support/paths.py`` names) is
derived, and ``check_parser`` runs on the derived parser. Prints a table (template,
derived format, result or the reason it cannot) and writes it as JSON. Usage::

    python scripts/derived_conformance.py [--examples N] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import attrs

from toolwire import ParserSpec, hookimpl
from toolwire.errors import DerivationError
from toolwire.families.derive import derive_format
from toolwire.families.selection import DERIVED_FAMILY
from toolwire.hooks.manager import PluginManager
from toolwire.parse import reasoning
from toolwire.parse.family import parser_spec
from toolwire.testing import check_parser
from toolwire.vocabulary.call_ids import nine_char_call_id

# the repository root, so the one module that says where the shared data is can be imported
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.paths import SHARED_TEMPLATES as TEMPLATES


class _OneParser:
    """A plugin registering one given parser spec."""

    def __init__(self, spec: ParserSpec) -> None:
        self.spec = spec

    @hookimpl
    def register_parsers(self, register: Any) -> None:
        register(self.spec)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--examples", type=int, default=20)
    parser.add_argument("--json", dest="json_out")
    parser.add_argument("names", nargs="*")
    args = parser.parse_args(argv)
    rows = []
    paths = sorted(TEMPLATES.glob("*.jinja"))
    if args.names:
        paths = [p for p in paths if any(n in p.name for n in args.names)]
    for path in paths:
        source = path.read_text(encoding="utf-8")
        started = time.perf_counter()
        try:
            fmt = derive_format(source)
        except DerivationError as exc:
            rows.append({"template": path.name, "format": None, "result": "not derived",
                         "reason": str(exc)})
            print(f"{path.name:48} not derived: {exc}", flush=True)
            continue
        spec = attrs.evolve(parser_spec(fmt, lambda _: 0.0, make_call_id=nine_char_call_id),
                            name=DERIVED_FAMILY)
        plugins = PluginManager(builtins=False, entry_points=False)
        plugins.register(reasoning)
        plugins.register(_OneParser(spec), name="derived (under test)")
        report = check_parser(spec, source, markers=fmt.markup,
                              examples=args.examples, plugins=plugins,
                              raise_on_failure=False, template_name=path.name)
        failed = list(report.failed)
        kind = "+".join(type(k).__name__ for k in fmt.kinds)
        rows.append({"template": path.name, "format": kind,
                     "opening": (fmt.section_open or fmt.call_open or ("",))[0],
                     "result": "pass" if not failed else "fail",
                     "failed": failed, "statuses": report.statuses,
                     "failures": report.describe_failures()[:4000],
                     "seconds": round(time.perf_counter() - started, 1)})
        verdict = "PASS" if not failed else "FAIL " + ",".join(failed)
        print(f"{path.name:48} {kind:16} {verdict}", flush=True)
    passed = sum(r["result"] == "pass" for r in rows)
    derived = sum(r["result"] != "not derived" for r in rows)
    print(f"\n{len(rows)} templates: {derived} derived, {passed} pass conformance")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
