"""docs/examples/mcp_chat.py, the example docs/mcp.md shows, runs as written."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import shlex
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("mcp")

from tests.support.mcp_fixtures import SCRIPT
from tests.support.paths import DOCS
from toolwire.testing.scripted import ScriptedBackend

pytestmark = pytest.mark.process

CALL = ("<tool_call>\n<function=add>\n<parameter=a>\n19\n</parameter>\n<parameter=b>\n23\n"
        "</parameter>\n</function>\n</tool_call>")


def example() -> ModuleType:
    path = DOCS / "examples" / "mcp_chat.py"
    spec = importlib.util.spec_from_file_location("mcp_chat_example", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_synchronous_example_answers_with_the_servers_tool() -> None:
    backend = ScriptedBackend([CALL, lambda request: f"It is {request.messages[-1].content}."])
    answer = example().ask(backend, shlex.join([sys.executable, SCRIPT, "tools"]),
                           "What is 19 + 23?")
    assert answer == "It is 42."


def test_the_asyncio_example_uses_the_servers_of_a_config_file(tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {
        "calc": {"command": sys.executable, "args": [SCRIPT, "tools"]}}}))
    backend = ScriptedBackend([CALL, lambda request: f"It is {request.messages[-1].content}."])
    answer = asyncio.run(example().ask_async(backend, str(config), "What is 19 + 23?"))
    assert answer == "It is 42."
