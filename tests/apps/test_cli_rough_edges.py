"""The command line's rough edges, each through the real entry point (``python -m toolwire``
in a subprocess): pipes closed early, advice in flags, names in any case with a "did you
mean", exit status 2 for every input error, option values checked, serve's port, help,
the generation and provider flags, standard input."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.cli import CliRun, run_cli
from tests.support.openai_wire_server import Fail, Stream, WireServer, reply_chunks
from tests.support.templates import shared_template, template_path
from toolwire.apps.cli.main import COMMANDS


def toolwire(*args: str, stdin: str | None = "", cwd: Path | None = None,
             env: dict[str, str] | None = None) -> CliRun:
    return run_cli(*args, stdin=stdin or "", env={**os.environ, **(env or {})}, cwd=cwd)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def remote(server: WireServer, workspace: Path, *extra: str) -> list[str]:
    return ["chat", "--base-url", server.url, "--model", "m", "--workspace", str(workspace),
            *extra]


def qwen() -> Path:
    shared_template("Qwen3.5-4B.jinja")
    return template_path("Qwen3.5-4B.jinja")


# -- output piped to a reader that goes away -----------------------------------------------


@pytest.mark.process
@pytest.mark.parametrize("args", [["plugins"], ["plugins", "--json"], ["detect", "QWEN"],
                                  ["tools", "--json"]])
def test_a_closed_pipe_ends_quietly_without_a_traceback(args: list[str]) -> None:
    args = [str(qwen()) if a == "QWEN" else a for a in args]
    proc = subprocess.Popen([sys.executable, "-m", "toolwire", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ,
                                                         "TOOLWIRE_LOAD_PLUGINS": ""})
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before anything is written
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141
    assert err == ""


@pytest.mark.process
def test_piping_into_head_prints_no_error() -> None:
    shell = subprocess.run(
        ["bash", "-c", f"'{sys.executable}' -m toolwire plugins | head -1; "
                       f"'{sys.executable}' -m toolwire detect '{qwen()}' --all | head -2"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "TOOLWIRE_LOAD_PLUGINS": ""})
    assert shell.stderr == "" and len(shell.stdout.splitlines()) == 3


# -- advice in flags, names in any case, "did you mean" -----------------------------------


def test_advice_names_flags_not_python_arguments(tmp_path: Path) -> None:
    template = tmp_path / "odd.jinja"
    template.write_text("{% for m in messages %}<|python_tag|>{{ m.content }}{% endfor %}")
    parsed = toolwire("parse", "--template", str(template), stdin="x")
    assert parsed.returncode == 2
    assert "--family NAME" in parsed.stderr and "family=" not in parsed.stderr
    keyless = toolwire("chat", "--provider", "openai", "--model", "m", "--message", "x",
                       env={"OPENAI_API_KEY": ""})
    assert keyless.returncode == 2
    assert "--api-key-env VARIABLE" in keyless.stderr and "api_key=" not in keyless.stderr


def test_a_rejected_key_during_a_reply_is_explained_with_flags(server: WireServer,
                                                             workspace: Path) -> None:
    server.enqueue(Fail.error(401, "bad key"))
    run = toolwire(*remote(server, workspace, "--message", "x"), env={"TOOLWIRE_API_KEY": ""})
    assert run.returncode == 1
    assert "error (auth)" in run.stdout and "--api-key-env VARIABLE" in run.stdout
    assert "api_key=" not in run.stdout


@pytest.mark.parametrize("given", ["Custom", "CUSTOM", " custom"])
def test_provider_names_are_read_in_any_case(server: WireServer, workspace: Path,
                                             given: str) -> None:
    server.enqueue(Stream(reply_chunks("Fine.")))
    run = toolwire("chat", "--provider", given, "--base-url", server.url, "--model", "m",
                   "--workspace", str(workspace), "--message", "hi")
    assert run.returncode == 0, run.stderr
    assert "Fine." in run.stdout


def test_llama_server_may_be_spelled_with_a_dash(server: WireServer, workspace: Path) -> None:
    server.enqueue(Stream(reply_chunks("Fine.")))
    run = toolwire("chat", "--provider", "Llama-Server", "--base-url", server.url, "--model",
                   "m", "--workspace", str(workspace), "--message", "hi")
    assert run.returncode == 0, run.stderr


@pytest.mark.parametrize(("args", "suggestion"), [
    (["chat", "--provider", "opnai", "--model", "m", "--message", "x"], "'openai'"),
    (["chat", "--provider", "olama", "--model", "m", "--message", "x"], "'ollama'"),
    (["chat", "--provider", "ollama", "--model", "m", "--family", "qwen_xml", "--message", "x"],
     None),
    (["parse", "--family", "qwen_xm"], "'qwen_xml'"),
    (["parse", "--family", "Hermes_JSON"], "'hermes_json'"),
    (["conformance", "t.jinja", "--family", "harmon"], "'harmony'"),
])
def test_unknown_names_say_did_you_mean(args: list[str], suggestion: str | None) -> None:
    run = toolwire(*args, stdin="x")
    assert run.returncode == 2 and "Traceback" not in run.stderr
    if suggestion is None:  # --family is for a local model, whatever its spelling
        assert "--family applies to a local model" in run.stderr
    else:
        assert f"did you mean {suggestion}" in run.stderr


def test_a_local_family_gets_a_did_you_mean_too(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"x")
    run = toolwire("chat", "--model", str(model), "--family", "qwen_xm", "--message", "x")
    assert run.returncode == 2 and "did you mean 'qwen_xml'" in run.stderr


def test_base_url_alone_means_the_custom_provider(server: WireServer, workspace: Path) -> None:
    server.enqueue(Stream(reply_chunks("Custom.")))
    run = toolwire("chat", "--base-url", server.url, "--model", "m", "--workspace",
                   str(workspace), "--message", "hi")
    assert run.returncode == 0, run.stderr
    assert run.stderr.startswith("loading custom: m ...")
    assert server.requests[0].path.endswith("/chat/completions")


# -- exit status 2 for every input error ------------------------------------------------


def test_input_errors_exit_2_without_a_traceback(tmp_path: Path) -> None:
    not_gguf = tmp_path / "notes.gguf"
    not_gguf.write_text("just text")
    cases = {
        "missing model": ["chat", "--model", str(tmp_path / "missing.gguf"), "--message", "x"],
        "not a GGUF": ["chat", "--model", str(not_gguf), "--message", "x"],
        "missing --resume": ["chat", "--provider", "ollama", "--model", "m", "--resume",
                             str(tmp_path / "nope.json"), "--message", "x"],
        "missing --workspace": ["chat", "--provider", "ollama", "--model", "m",
                                "--workspace", str(tmp_path / "nowhere"), "--message", "x"],
        "--workspace a file": ["chat", "--provider", "ollama", "--model", "m", "--workspace",
                               str(not_gguf), "--message", "x"],
        "--provider without --model": ["chat", "--provider", "ollama", "--message", "x"],
        "no model at all": ["chat", "--message", "x"],
        "--threads remote": ["chat", "--provider", "ollama", "--model", "m", "--threads", "2",
                             "--message", "x"],
        "--chat-template-file remote": ["chat", "--provider", "ollama", "--model", "m",
                                        "--chat-template-file", str(not_gguf), "--message",
                                        "x"],
        "--api-key-env unset": ["chat", "--provider", "ollama", "--model", "m",
                                "--api-key-env", "TOOLWIRE_TEST_UNSET_KEY", "--message", "x"],
        "--api-key-env local": ["chat", "--model", str(not_gguf), "--api-key-env", "HOME",
                                "--message", "x"],
    }
    for what, args in cases.items():
        run = toolwire(*args)
        assert run.returncode == 2, (what, run.stderr)
        assert run.stderr.startswith("toolwire: "), (what, run.stderr)
        assert "Traceback" not in run.stderr and "loading" not in run.stderr, what


@pytest.mark.parametrize("args", [
    ["parse", "--family", "qwen_xml", "--chunk", "0"],
    ["parse", "--family", "qwen_xml", "--chunk", "-3"],
    ["parse", "--family", "qwen_xml", "--chunk", "two"],
    ["chat", "--max-tokens", "0"],
    ["chat", "--max-tool-iters", "0"],
    ["chat", "--temperature", "-1"],
    ["chat", "--temperature", "nan"],
    ["chat", "--top-p", "1.5"],
    ["chat", "--top-p", "0"],
    ["chat", "--ctx-size", "1"],
    ["chat", "--threads", "0"],
    ["chat", "--n-gpu-layers", "-2"],
    ["serve", "--port", "-1"],
    ["serve", "--port", "70000"],
])
def test_option_values_out_of_range_are_refused(args: list[str]) -> None:
    run = toolwire(*args)
    assert run.returncode == 2
    option = args[-2]
    assert f"error: argument {option}" in run.stderr and "Traceback" not in run.stderr


def test_empty_standard_input_is_an_input_error(workspace: Path, server: WireServer) -> None:
    run = toolwire(*remote(server, workspace), stdin="  \n")
    assert run.returncode == 2 and "standard input was empty" in run.stderr
    assert server.requests == []


# -- serve's port ------------------------------------------------------------------------------


def start_serve(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "toolwire", "serve", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TOOLWIRE_LOAD_PLUGINS": ""})


@pytest.mark.process
def test_serve_port_0_shows_the_port_it_really_listens_on(server: WireServer,
                                                         workspace: Path) -> None:
    pytest.importorskip("uvicorn")
    proc = start_serve("--base-url", server.url, "--model", "m", "--workspace",
                       str(workspace), "--port", "0")
    try:
        assert proc.stderr is not None
        seen = ""
        while (found := re.search(r"dashboard: http://127\.0\.0\.1:(\d+)/", seen)) is None:
            line = proc.stderr.readline()
            assert line, f"serve ended before its banner: {seen}"
            seen += line
        port = int(found.group(1))
        assert port != 0 and "loading custom: m ..." in seen
        deadline = time.monotonic() + 30
        while True:
            try:
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                connection.request("GET", "/")
                assert connection.getresponse().status == 200
                break
            except ConnectionRefusedError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    assert proc.returncode == 0


def post_when_listening(port: int, path: str, body: object,
                        headers: dict[str, str]) -> http.client.HTTPResponse:
    """POST once uvicorn accepts connections (it starts just after the banner)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            connection.request("POST", path, json.dumps(body),
                               {**headers, "Content-Type": "application/json"})
            return connection.getresponse()
        except ConnectionRefusedError:
            assert time.monotonic() < deadline
            time.sleep(0.1)


@pytest.mark.process
def test_serve_keeps_its_own_key_apart_from_the_providers(server: WireServer,
                                                           workspace: Path) -> None:
    pytest.importorskip("uvicorn")
    server.enqueue(Stream(reply_chunks("Served.")))
    proc = subprocess.Popen(
        [sys.executable, "-m", "toolwire", "serve", "--base-url", server.url, "--model", "m",
         "--workspace", str(workspace), "--port", "0", "--api-key", "for-my-clients",
         "--api-key-env", "PROVIDER_KEY"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TOOLWIRE_LOAD_PLUGINS": "", "PROVIDER_KEY": "for-the-provider"})
    try:
        assert proc.stderr is not None
        seen = ""
        while "toolwire serve: ready" not in seen:
            line = proc.stderr.readline()
            assert line, f"serve ended before it was ready: {seen}"
            seen += line
        port = int(re.search(r"dashboard: http://127\.0\.0\.1:(\d+)/", seen).group(1))  # type: ignore[union-attr]
        answer = post_when_listening(port, "/v1/chat/completions", {
            "model": "m", "messages": [{"role": "user", "content": "hi"}]},
            {"Authorization": "Bearer for-my-clients"})
        assert answer.status == 200, answer.read()
        assert "Served." in answer.read().decode()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    assert server.requests[0].headers["authorization"] == "Bearer for-the-provider"


def test_serve_on_a_port_in_use_says_so_before_any_banner(workspace: Path) -> None:
    pytest.importorskip("uvicorn")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = toolwire("serve", "--provider", "ollama", "--model", "m", "--workspace",
                       str(workspace), "--port", str(port))
    assert run.returncode == 2
    assert "port is in use" in run.stderr and "--port 0" in run.stderr
    assert "dashboard" not in run.stderr and "Traceback" not in run.stderr


# -- commands and their help -----------------------------------------------------------------


def test_version_and_help_name_every_command_plainly() -> None:
    version = toolwire("--version")
    assert version.returncode == 0 and re.fullmatch(r"toolwire \d+\.\d+\.\d+\n", version.stdout)
    top = toolwire("--help")
    assert top.returncode == 0 and "`" not in top.stdout
    names = [module.__name__.rsplit(".", 1)[1] for module in COMMANDS]
    assert len(names) == len(set(names)) >= 11
    for name in names:
        assert re.search(rf"^\s+{name}\b", top.stdout, re.M), name
        sub = toolwire(name, "--help")
        assert sub.returncode == 0, name
        description = sub.stdout.split("\n\n")[1]
        assert description and not description.startswith(("positional", "options")), name
        assert "`" not in sub.stdout, name


def test_chat_help_shows_the_defaults() -> None:
    shown = toolwire("chat", "--help").stdout
    for default in ("(default: 0.7", "(default: 0.95", "(default: 1024", "(default: 10 ",
                    "(default: 0)", "(default: random)"):
        assert default in " ".join(shown.split()), default


def test_enable_thinking_is_a_flag_for_render_and_chat(tmp_path: Path) -> None:
    messages = tmp_path / "m.json"
    messages.write_text(json.dumps([{"role": "user", "content": "hi"}]))
    on = toolwire("render", str(qwen()), "--messages", str(messages), "--enable-thinking")
    off = toolwire("render", str(qwen()), "--messages", str(messages), "--no-enable-thinking")
    assert on.returncode == off.returncode == 0, on.stderr + off.stderr
    assert on.stdout.endswith("<|im_start|>assistant\n<think>\n")
    assert off.stdout.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert "--no-enable-thinking" in toolwire("chat", "--help").stdout


def test_render_reads_openai_shaped_calls_with_string_arguments(tmp_path: Path) -> None:
    messages = tmp_path / "m.json"
    messages.write_text(json.dumps([
        {"role": "user", "content": "find alex"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "search", "arguments": '{"query": "alex", "limit": 3}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "3 hits"}]))
    run = toolwire("render", str(qwen()), "--messages", str(messages))
    assert run.returncode == 0, run.stderr
    assert "<function=search>\n<parameter=query>\nalex\n</parameter>\n<parameter=limit>\n3\n" \
        in run.stdout
    assert "<tool_response>\n3 hits\n</tool_response>" in run.stdout
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"role": "robot", "content": "x"}]))
    refused = toolwire("render", str(qwen()), "--messages", str(bad))
    assert refused.returncode == 2 and "unknown role 'robot'" in refused.stderr


def test_detect_shows_the_best_runners_up_and_all_of_them_on_request() -> None:
    some = toolwire("detect", str(qwen()))
    line = next(x for x in some.stdout.splitlines() if x.startswith("runners-up:"))
    assert line.count(" 0") == 3 and re.search(r"and \d+ more, --all shows them", line)
    every = toolwire("detect", str(qwen()), "--all")
    line = next(x for x in every.stdout.splitlines() if x.startswith("runners-up:"))
    assert line.count(",") >= 20 and "more" not in line


@pytest.mark.kit
def test_conformance_checks_the_derived_parser_when_asked() -> None:
    run = toolwire("conformance", str(qwen()), "--family", "derived", "--examples", "2",
                   "--seed", "1")
    assert run.returncode == 0, run.stdout + run.stderr
    row = run.stdout.splitlines()[1].split()
    assert row[:2] == ["Qwen3.5-4B.jinja", "derived"] and "FAIL" not in row


@pytest.mark.model
def test_demo_leaves_no_temporary_folder_behind(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp")
    temp = tmp_path / "tmp"
    temp.mkdir()
    run = toolwire("demo", "--json", env={"TMPDIR": str(temp)})
    assert run.returncode == 0, run.stderr
    assert list(temp.iterdir()) == []


@pytest.mark.process
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_serve_demo_removes_its_temporary_folder_when_it_stops(tmp_path: Path,
                                                                stop: signal.Signals) -> None:
    pytest.importorskip("llama_cpp")
    pytest.importorskip("uvicorn")
    temp = tmp_path / "tmp"
    temp.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "toolwire", "serve", "--demo", "--port", "0"],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            env={**os.environ, "TOOLWIRE_LOAD_PLUGINS": "", "TMPDIR": str(temp)})
    try:
        assert proc.stderr is not None
        seen = ""
        while "toolwire serve: ready" not in seen:
            line = proc.stderr.readline()
            assert line, f"serve ended before it was ready: {seen}"
            seen += line
        assert next(p.name for p in temp.iterdir()).startswith("toolwire-serve-demo-")
    finally:
        proc.send_signal(stop)
        proc.communicate(timeout=60)
    assert proc.returncode == 0 and list(temp.iterdir()) == []


# -- generation and provider flags -------------------------------------------------------------


def test_sampling_flags_reach_a_remote_provider(server: WireServer, workspace: Path) -> None:
    server.enqueue(Stream(reply_chunks("Sampled.")))
    run = toolwire(*remote(server, workspace, "--temperature", "0.2", "--top-p", "0.5",
                           "--seed", "7", "--max-tokens", "50", "--message", "hi"))
    assert run.returncode == 0, run.stderr
    body = server.requests[0].body
    assert (body["temperature"], body["top_p"], body["seed"], body["max_tokens"]) == (
        0.2, 0.5, 7, 50)


def test_remote_defaults_are_the_providers_own(server: WireServer, workspace: Path) -> None:
    server.enqueue(Stream(reply_chunks("Plain.")))
    run = toolwire(*remote(server, workspace, "--message", "hi"))
    assert run.returncode == 0, run.stderr
    assert not {"temperature", "top_p", "seed", "max_tokens"} & set(server.requests[0].body)


def test_api_key_env_names_the_variable_holding_the_key(server: WireServer,
                                                       workspace: Path) -> None:
    server.enqueue(Stream(reply_chunks("Authorised.")))
    run = toolwire(*remote(server, workspace, "--api-key-env", "MY_TEAM_KEY", "--message",
                           "hi"), env={"MY_TEAM_KEY": "sk-team-123"})
    assert run.returncode == 0, run.stderr
    assert server.requests[0].headers["authorization"] == "Bearer sk-team-123"


@pytest.mark.model
def test_local_flags_reach_llama_cpp_and_the_template_file_is_used(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp")
    from toolwire.testing.tiny_gguf import write_tiny_gguf

    model = write_tiny_gguf(tmp_path / "tiny.gguf")
    plain = toolwire("chat", "--model", str(model), "--no-tools", "--json", "--message", "hi",
                     "--threads", "1", "--n-gpu-layers", "0", "--ctx-size", "256", "--seed",
                     "3", "--temperature", "0", "--top-p", "0.9", "--max-tokens", "3")
    events = [json.loads(line) for line in plain.stdout.splitlines()]
    assert events[-1]["type"] == "done", plain.stderr
    template = tmp_path / "mine.jinja"
    template.write_text("{{ raise_exception('this is my own template') }}")
    mine = toolwire("chat", "--model", str(model), "--no-tools", "--json", "--message", "hi",
                    "--chat-template-file", str(template), "--max-tokens", "3")
    events = [json.loads(line) for line in mine.stdout.splitlines()]
    assert any(e["type"] == "error" and "this is my own template" in e["message"]
               for e in events), mine.stdout + mine.stderr


# -- standard input -----------------------------------------------------------------------------


def test_lines_sends_each_piped_line_as_a_message(server: WireServer, workspace: Path) -> None:
    server.enqueue(Stream(reply_chunks("One.")), Stream(reply_chunks("Two.")))
    run = toolwire(*remote(server, workspace, "--lines"), stdin="first\n\nsecond\n")
    assert run.returncode == 0, run.stderr
    assert "One." in run.stdout and "Two." in run.stdout
    second = server.requests[1].body["messages"]
    assert [m["content"] for m in second] == ["first", "One.", "second"]


def test_piped_input_without_lines_is_one_message(server: WireServer, workspace: Path) -> None:
    server.enqueue(Stream(reply_chunks("Both.")))
    run = toolwire(*remote(server, workspace), stdin="first\nsecond\n")
    assert run.returncode == 0, run.stderr
    assert server.requests[0].body["messages"][-1]["content"] == "first\nsecond\n"


def test_lines_with_message_is_a_usage_error(server: WireServer, workspace: Path) -> None:
    run = toolwire(*remote(server, workspace, "--lines", "--message", "x"))
    assert run.returncode == 2 and "--lines" in run.stderr
