"""One place says what toolwire refuses: ``toolwire.limits``, and everything held to it.

* every limits record of the module is in ``LIMIT_RECORDS``, and every field of one is
  a declared bound (unit, meaning, what sets it);
* every table of bounds in docs/ is the one this module writes from the record
  (``<!-- limits: NAME -->`` ... ``<!-- /limits -->``), and docs/security.md has one
  for every record: a default, a flag or a meaning changed in the record fails here
  until the docs are written again (``python -m tests.unit.test_limits --write``);
* every bound with a flag is that option of a command (``serve``, ``chat``, ``tools``),
  its help the bound's meaning and default, its default the record's (``serve`` fills
  its bounds from ``ServerLimits`` and has no other bound option);
* an environment variable a bound names sets that bound's default, and a value that is
  not a positive number leaves the default.
"""

from __future__ import annotations

import argparse
import re
import sys

import attrs
import pytest

from tests.support.paths import DOCS
from toolwire import limits
from toolwire.apps.cli.main import _parser
from toolwire.apps.cli.serve import limits_from_args, register
from toolwire.limits import LIMIT_RECORDS, Bound, ServerLimits, bounds

_BLOCK = re.compile(r"<!-- limits: (?P<name>\w+) -->\n(?P<table>.*?)<!-- /limits -->", re.S)
_RECORDS = {record.__name__: record for record in LIMIT_RECORDS}


def _set_by(bound: Bound, settable: bool) -> str:
    ways = [f"`{bound.flag} N`" if bound.flag else "", f"`{bound.env}`" if bound.env else "",
            bound.python or (f"`{bound.record}({bound.name}=...)`" if settable else "")]
    return ", ".join(way for way in ways if way) or "fixed"


def table(record: type) -> str:
    """The markdown table of ``record``'s bounds, as the docs hold it."""
    settable = record.__name__ in ("RenderLimits", "ServerLimits", "WorkspaceLimits")
    rows = [f"| `{bound.name}` | {bound.meaning} | {bound.shown} | {_set_by(bound, settable)} |"
            for bound in bounds(record)]
    return "\n".join(["| bound | what it bounds | default | set by |", "|---|---|---|---|",
                      *rows]) + "\n"


def _docs() -> dict[str, str]:
    return {path.name: path.read_text(encoding="utf-8") for path in sorted(DOCS.glob("*.md"))}


def written(text: str) -> str:
    """``text`` with every limits table written again from its record."""
    return _BLOCK.sub(lambda m: f"<!-- limits: {m['name']} -->\n{table(_RECORDS[m['name']])}"
                                "<!-- /limits -->", text)


def test_every_limits_record_is_listed_and_every_field_is_a_declared_bound() -> None:
    found = {name for name, value in vars(limits).items()
             if isinstance(value, type) and attrs.has(value) and name.endswith("Limits")}
    assert found == set(_RECORDS)
    for record in LIMIT_RECORDS:
        for field in attrs.fields(record):
            assert "bound" in field.metadata, f"{record.__name__}.{field.name} is not declared"
        for bound in bounds(record):
            assert getattr(record(), bound.name) == bound.default or bound.env
            assert bound.meaning and "\n" not in bound.meaning and "|" not in bound.meaning


def test_every_bound_refuses_a_value_that_is_not_positive() -> None:
    for record in LIMIT_RECORDS:
        for bound in bounds(record):
            with pytest.raises(ValueError, match=f"{bound.name} must be positive"):
                record(**{bound.name: 0})


@pytest.mark.parametrize("doc", sorted(_docs()))
def test_the_tables_of_bounds_in_the_docs_are_written_from_the_records(doc: str) -> None:
    text = _docs()[doc]
    for match in _BLOCK.finditer(text):
        assert match["name"] in _RECORDS, f"{doc}: no limits record {match['name']}"
    assert written(text) == text, (f"{doc}: a table of bounds differs from toolwire.limits; "
                                   "run python -m tests.unit.test_limits --write")


def test_security_md_has_the_table_of_every_record() -> None:
    names = [m["name"] for m in _BLOCK.finditer(_docs()["security.md"])]
    assert sorted(names) == sorted(_RECORDS), "docs/security.md: one table per record"


def _serve_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    return register(parser.add_subparsers())


def test_every_bound_with_a_flag_is_that_option_of_the_command_line_with_its_help() -> None:
    options = {}
    for name, command in _parser()[1].items():
        for action in command._actions:
            for flag in action.option_strings:
                options.setdefault(flag, []).append((name, action))
    flagged = [b for record in LIMIT_RECORDS for b in bounds(record) if b.flag]
    assert {b.flag for b in flagged} >= {"--max-tool-iters", "--timeout", "--queue-size"}
    for bound in flagged:
        found = [(name, action) for name, action in options.get(str(bound.flag), ())
                 if action.help == bound.help]
        assert found, f"no command has {bound.flag} with the help {bound.help!r}"
        for _, action in found:  # serve's bounds are None until limits_from_args
            assert action.default in (bound.default, None)
            assert action.type(str(bound.default)) == bound.default


def test_serve_sets_each_bound_option_on_its_server_limits() -> None:
    parser = _serve_parser()
    flagged = [bound for bound in bounds(ServerLimits) if bound.flag]
    assert {a.dest for a in parser._actions if a.dest.startswith("limit_")} == \
        {f"limit_{bound.name}" for bound in flagged}
    assert limits_from_args(parser.parse_args([])) == ServerLimits()
    for bound in flagged:
        value = bound.default * 3
        given = limits_from_args(parser.parse_args([str(bound.flag), str(value)]))
        assert getattr(given, bound.name) == value
        assert attrs.evolve(given, **{bound.name: bound.default}) == ServerLimits()


@pytest.mark.parametrize("bound", [b for record in LIMIT_RECORDS for b in bounds(record)
                                   if b.env], ids=lambda b: f"{b.record}.{b.name}")
def test_an_environment_variable_sets_its_bound_and_a_bad_value_keeps_the_default(
        bound: Bound, monkeypatch: pytest.MonkeyPatch) -> None:
    record = _RECORDS[bound.record]
    assert bound.env is not None
    monkeypatch.setenv(bound.env, str(bound.default * 2))
    assert getattr(record(), bound.name) == bound.default * 2
    for bad in ("0", "-1", "nan", "inf", "many", ""):
        monkeypatch.setenv(bound.env, bad)
        assert getattr(record(), bound.name) == bound.default


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    for name, text in _docs().items():
        if written(text) != text:
            (DOCS / name).write_text(written(text), encoding="utf-8")
            print(f"wrote the tables of bounds in docs/{name}")
