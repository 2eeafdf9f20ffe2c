"""The ``toolwire`` command through its entry point, ``main(argv)``, in-process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import CliRun, run_cli
from tests.support.templates import shared_template, template_path

REPLY = ("Looking.\n\n<tool_call>\n<function=search>\n<parameter=query>\nalex\n</parameter>\n"
         "<parameter=limit>\n10\n</parameter>\n</function>\n</tool_call>")
TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {
    "type": "object", "properties": {"query": {"type": "string"},
                                     "limit": {"type": "integer"}}}}}]


def toolwire(*args: str, stdin: str = "", cwd: Path | None = None,
             entry_points: bool = False) -> CliRun:
    return run_cli(*args, stdin=stdin, cwd=cwd, entry_points=entry_points)


def test_parse_prints_the_documented_shape(tmp_path: Path) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS))
    run = toolwire("parse", "--family", "qwen_xml", "--tools", str(tools), stdin=REPLY)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == {
        "content": "Looking.", "reasoning": "",
        "tool_calls": [{"name": "search", "arguments": {"query": "alex", "limit": 10}}],
        "diagnostics": []}


@pytest.mark.parametrize("chunk", ["1", "3", "64"])
def test_parse_output_does_not_depend_on_chunk_size(tmp_path: Path, chunk: str) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS))
    whole = toolwire("parse", "--family", "qwen_xml", "--tools", str(tools), stdin=REPLY)
    chunked = toolwire("parse", "--family", "qwen_xml", "--tools", str(tools), "--chunk", chunk,
                       stdin=REPLY)
    assert chunked.returncode == 0 and chunked.stdout == whole.stdout


def test_parse_with_a_template_selects_its_parser(tmp_path: Path) -> None:
    shared_template("Qwen3.5-4B.jinja")
    run = toolwire("parse", "--template", str(template_path("Qwen3.5-4B.jinja")),
                   stdin=REPLY)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["tool_calls"][0]["arguments"]["limit"] == "10"


def test_parse_with_an_unclaimed_template_exits_2_naming_what_was_seen(tmp_path: Path) -> None:
    template = tmp_path / "odd.jinja"
    template.write_text("{% for m in messages %}<|python_tag|>{{ m.content }}{% endfor %}")
    run = toolwire("parse", "--template", str(template), stdin=REPLY)
    assert run.returncode == 2
    assert "no parser plugin claims" in run.stderr and "<|python_tag|>" in run.stderr


def test_parse_with_unknown_family_exits_2() -> None:
    run = toolwire("parse", "--family", "no_such_family", stdin="hi")
    assert run.returncode == 2 and "no_such_family" in run.stderr


def test_detect_reads_a_gguf_and_a_template_file(tmp_path: Path) -> None:
    template = shared_template("Qwen3-Coder.jinja")
    from toolwire.testing.tiny_gguf import write_tiny_gguf

    model = write_tiny_gguf(tmp_path / "m.gguf", template)
    for path in (model, template_path("Qwen3-Coder.jinja")):
        run = toolwire("detect", str(path), "--json")
        assert run.returncode == 0, run.stderr
        result = json.loads(run.stdout)
        assert result["family"] == "qwen_xml" and result["score"] > 0
        assert len(result["sha256"]) == 64
    human = toolwire("detect", str(model))
    assert "family:   qwen_xml" in human.stdout and "tokenizer.chat_template" in human.stdout


def test_detect_on_a_hostile_file_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 20)
    run = toolwire("detect", str(bad))
    assert run.returncode == 2
    assert "bad.gguf" in run.stderr and "Traceback" not in run.stderr


def test_render_prints_the_exact_prompt(tmp_path: Path) -> None:
    shared_template("Qwen3.5-4B.jinja")
    messages = tmp_path / "messages.json"
    messages.write_text(json.dumps([{"role": "user", "content": "hi"}]))
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS))
    run = toolwire("render", str(template_path("Qwen3.5-4B.jinja")), "--messages",
                   str(messages), "--tools", str(tools), "--no-enable-thinking")
    assert run.returncode == 0, run.stderr
    assert '"name": "search"' in run.stdout
    assert run.stdout.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
                               "<think>\n\n</think>\n\n")
    assert "characters" in run.stderr


def test_plugins_lists_builtins_with_their_distribution() -> None:
    run = toolwire("plugins", "--json", entry_points=True)
    assert run.returncode == 0
    by_name = {p["name"]: p for p in json.loads(run.stdout)}
    assert by_name["toolwire.plugins.qwen_xml"]["parsers"] == ["qwen_xml"]
    assert by_name["toolwire.plugins.qwen_xml"]["distribution"] == "toolwire"
    assert "write_file" in by_name["toolwire.plugins.workspace_tools"]["tools"]


@pytest.mark.model
def test_demo_runs_the_whole_loop_on_a_real_tiny_model(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp")
    run = toolwire("demo", "--json", "--dir", str(tmp_path))
    assert run.returncode == 0, run.stderr
    events = [json.loads(line) for line in run.stdout.splitlines()]
    types = [e["type"] for e in events]
    assert types.index("tool_call") < types.index("tool_result") < len(types) - 1
    result = next(e for e in events if e["type"] == "tool_result")
    assert "notes/people.md:3: Alex" in result["content"] and not result["is_error"]
    answer = "".join(e["text"] for e in events if e["type"] == "text")
    assert "Alex: maintains the parser plugins" in answer
    assert events[-1] == {**events[-1], "type": "done", "reason": "stop"}


@pytest.mark.model
def test_demo_explains_it_is_a_stand_in(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp")
    run = toolwire("demo", "--dir", str(tmp_path))
    assert run.returncode == 0, run.stderr
    assert "stand-in model" in run.stdout and "toolwire chat --model" in run.stdout


@pytest.mark.parametrize("reply", ["<tool_", "<", "Sure. <tool_call"])
def test_parse_says_a_reply_cut_inside_an_opening_marker_was_cut(reply: str) -> None:
    # issue 39, item 7: the text stays, with a truncated_call diagnostic holding the cut
    run = toolwire("parse", "--family", "hermes_json", "--compact", stdin=reply)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["content"] == reply and out["tool_calls"] == []
    assert [(d["code"], d["raw"]) for d in out["diagnostics"]] == \
        [("truncated_call", reply.removeprefix("Sure. "))]
