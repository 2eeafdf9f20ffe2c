"""A whole chat loop on the tiny local model whose forced call goes to an MCP tool.

Real llama.cpp runs a tiny random-weight GGUF carrying the real Qwen3.5 chat
template; a grammar forces its output (a call of the MCP server's ``add`` tool,
then an answer). The MCP server is a real process speaking the protocol over
stdio. What is checked: the server's schema reaches the prompt through the
template, the model's text-valued arguments are typed by that schema, the call
runs on the server, and its result goes back to the model through the template.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("mcp")

from tests.support.mcp_fixtures import logged, stdio_server
from tests.support.paths import MISSING_TEMPLATES, SHARED_TEMPLATES
from toolwire import Chat, DoneEvent, ModelRequest, TextEvent, ToolResultEvent
from toolwire.plugins.llama_cpp.backend import LlamaCppBackend
from toolwire.plugins.mcp_tools import MCPServers
from toolwire.testing.scripted import isolated_plugin_manager
from toolwire.testing.tiny_gguf import TINY_BACKEND_OPTIONS, write_tiny_gguf
from toolwire.testing.tiny_gguf import forcing_grammar as grammar_for
from toolwire.vocabulary.tools import Tool

pytestmark = pytest.mark.llama

TEMPLATES = SHARED_TEMPLATES
USED_TOOLS = {"add", "lookup_city", "refuse", "save_note", "slow"}


class Script:
    """Grammar provider: the forced reply of each model turn; keeps each request."""

    def __init__(self, *replies: str) -> None:
        self.replies = list(replies)
        self.requests: list[ModelRequest] = []

    def __call__(self, request: ModelRequest) -> str:
        self.requests.append(request)
        return grammar_for(self.replies.pop(0))


@pytest.fixture(scope="module")
def qwen_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    template = TEMPLATES / "Qwen3.5-4B.jinja"
    if not template.exists():
        pytest.skip(MISSING_TEMPLATES)
    return write_tiny_gguf(tmp_path_factory.mktemp("tiny") / "qwen-tiny.gguf",
                           template.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mcp") / "calls.jsonl"


@pytest.fixture(scope="module")
def mcp(log: Path) -> Iterator[list[Tool]]:
    with MCPServers([stdio_server("tools", log=log)], connect_timeout=90,
                    trusted=["tools"]) as servers:
        # the tools the scripts call, and write tools to leave out: a prompt offering
        # every tool of the server would not fit the tiny model's context
        yield [t for t in servers.tools(strict=True) if t.name in USED_TOOLS]


def backend(path: Path, script: Script) -> LlamaCppBackend:
    return LlamaCppBackend(path, grammar=script, seed=7, plugins=isolated_plugin_manager(),
                           progress=False, **TINY_BACKEND_OPTIONS)  # type: ignore[arg-type]


def test_a_grammar_forced_call_of_the_tiny_model_runs_on_the_mcp_server(
        qwen_model: Path, mcp: list[Tool], log: Path) -> None:
    call = ("<tool_call>\n<function=add>\n<parameter=a>\n19\n</parameter>\n"
            "<parameter=b>\n23\n</parameter>\n</function>\n</tool_call>")
    script = Script(call, "The sum is 42.")
    model = backend(qwen_model, script)
    chat = Chat(model, tools=mcp, read_only=True, tool_timeout=30)
    events = list(chat.send("What is 19 + 23?"))
    result = next(e for e in events if isinstance(e, ToolResultEvent))
    assert (result.name, result.content, result.is_error) == ("add", "42", False)
    assert [e["arguments"] for e in logged(log, tool="add")] == [{"a": 19, "b": 23}]
    assert "".join(e.text for e in events if isinstance(e, TextEvent)) == "The sum is 42."
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.reason == "stop" and done.turns == 2
    # read-only mode offered the hinted tools only, through the real template
    offered = [t.name for t in script.requests[0].tools]
    assert "add" in offered and "save_note" not in offered
    first_prompt = model.fit_prompt(script.requests[0])[1].text
    assert "Add two whole numbers." in first_prompt
    second_prompt = model.fit_prompt(script.requests[1])[1].text
    assert "<tool_response>\n42\n</tool_response>" in second_prompt


def test_a_failing_mcp_call_is_the_tiny_models_next_input_and_the_chat_goes_on(
        qwen_model: Path, mcp: list[Tool]) -> None:
    call = ("<tool_call>\n<function=refuse>\n<parameter=reason>\nno key\n</parameter>\n"
            "</function>\n</tool_call>")
    script = Script(call, "It failed.", "Still here.")
    model = backend(qwen_model, script)
    # the tiny model spells text a character per token: offer one tool, so the prompt fits
    chat = Chat(model, tools=[t for t in mcp if t.name == "refuse"], tool_timeout=30)
    events = list(chat.send("Try it."))
    result = next(e for e in events if isinstance(e, ToolResultEvent))
    assert result.is_error and result.error_kind == "tool_error"
    assert "refused: no key" in result.content
    prompt = model.fit_prompt(script.requests[1])[1].text
    assert "refused: no key" in prompt
    assert chat.ask("And now?") == "Still here."
