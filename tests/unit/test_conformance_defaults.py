"""Every built-in family passes the conformance kit at its defaults on every real template
it claims: ``toolwire conformance TEMPLATE --seed 0`` (30 examples per property) exits 0.

The templates are found, not listed: each real template a built-in family claims
(:func:`toolwire.select_parser` among the built-ins) is a case, so a template added to
the real templates is checked as soon as a family claims it. The seed makes a red
run replayable from the shell with the same command; the kit keeps no hypothesis
database, so a run never depends on an earlier one.

About 6 CPU minutes for the 63 claimed templates (5 to 27 s each): CI runs them all,
as the issue asks; ``-m "not conformance_defaults"`` leaves them out of a local run.
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest

from tests.support.templates import SHARED_TEMPLATES, template_names, template_params
from toolwire.apps.cli.conformance import register as add_conformance_command
from toolwire.errors import ParserConflictError, ParserNotFoundError
from toolwire.families.selection import select_parser
from toolwire.testing import isolated_plugin_manager


def _claimed() -> list[str]:
    """The real templates a built-in family claims."""
    builtins = isolated_plugin_manager()
    names = []
    for name in template_names():
        try:
            select_parser((SHARED_TEMPLATES / name).read_text(encoding="utf-8"), builtins)
        except (ParserNotFoundError, ParserConflictError):
            continue
        names.append(name)
    return names


@pytest.mark.conformance_defaults
@pytest.mark.parametrize("name", template_params(_claimed()))
def test_the_claiming_family_passes_the_kit_defaults(name: str) -> None:
    parser = argparse.ArgumentParser(prog="toolwire")
    add_conformance_command(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["conformance", str(SHARED_TEMPLATES / name), "--seed", "0"])
    assert args.examples == 30  # the kit's default, as the issue states it
    out, err = io.StringIO(), io.StringIO()
    status = args.run(args, isolated_plugin_manager(), out=out, err=err)
    assert status == 0, f"{Path(name).name}:\n{out.getvalue()}{err.getvalue()}"
