"""``toolwire grammar`` through its real entry point: the grammar printed, as text or
JSON, for a family or a template; every failure a clear exit 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import CliRun, run_cli
from tests.support.templates import shared_template, template_path

TOOLS = [{"type": "function", "function": {
    "name": "search", "description": "Search the notes.",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}},
        "required": ["query"]}}},
    {"type": "function", "function": {"name": "list_dir", "parameters": {
        "type": "object", "properties": {}}}}]


def grammar(*args: str) -> CliRun:
    return run_cli("grammar", *args)


def tools_file(tmp_path: Path, tools: list[dict[str, Any]] = TOOLS) -> str:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(tools))
    return str(path)


def test_it_prints_the_required_grammar_of_a_family(tmp_path: Path) -> None:
    run = grammar("--family", "qwen_xml", "--tools", tools_file(tmp_path))
    assert run.returncode == 0, run.stderr
    head, *rules = run.stdout.splitlines()
    assert head == "# qwen_xml calls of search, list_dir (tool_choice required)"
    assert rules[0] == "root ::= calls"
    assert '"<function=" "search" ">"' in run.stdout and '"list_dir"' in run.stdout


def test_auto_as_json_says_it_is_lazy_and_what_triggers_it(tmp_path: Path) -> None:
    run = grammar("--family", "hermes_json", "--tools", tools_file(tmp_path),
                  "--tool-choice", "auto", "--json")
    assert run.returncode == 0, run.stderr
    printed = json.loads(run.stdout)
    assert printed["lazy"] is True and printed["triggers"] == ["<tool_call>"]
    assert printed["tools"] == ["search", "list_dir"] and printed["gbnf"].startswith("root ::=")


def test_a_named_choice_without_parallel_calls_names_only_that_tool(tmp_path: Path) -> None:
    run = grammar("--family", "qwen_xml", "--tools", tools_file(tmp_path),
                  "--tool-choice", "list_dir", "--no-parallel", "--json")
    assert run.returncode == 0, run.stderr
    printed = json.loads(run.stdout)
    assert printed["tool_choice"] == "named:list_dir"
    assert '"search"' not in printed["gbnf"] and '"list_dir"' in printed["gbnf"]


def test_a_template_selects_its_family(tmp_path: Path) -> None:
    shared_template("Qwen3.5-4B.jinja")
    run = grammar("--template", str(template_path("Qwen3.5-4B.jinja")),
                  "--tools", tools_file(tmp_path), "--json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["family"] == "qwen_xml"


@pytest.mark.parametrize(("args", "tools", "message"), [
    (("--family", "qwen_xml"), [{"type": "function", "function": {"name": "tag", "parameters": {
        "type": "object", "patternProperties": {"^x": {"type": "string"}}}}}],
     "('patternProperties')"),
    (("--family", "gemma4"), TOOLS, "gemma4: its arguments are written in the family's own"),
    (("--family", "qwen_xml", "--tool-choice", "nosuch"), TOOLS, "'nosuch'"),
    (("--family", "qwen_xml", "--tool-choice", "none"), TOOLS, "offers no tools"),
    (("--family", "qwen_xmll"), TOOLS, "qwen_xml"),
])
def test_what_no_grammar_can_say_exits_2_with_the_reason(
        tmp_path: Path, args: tuple[str, ...], tools: list[dict[str, Any]],
        message: str) -> None:
    run = grammar(*args, "--tools", tools_file(tmp_path, tools))
    assert run.returncode == 2
    assert message in run.stderr and "Traceback" not in run.stderr and run.stdout == ""
