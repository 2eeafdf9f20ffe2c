"""The MCP plugin's pure parts: configuration, tool names, result text, the lazy SDK import.

No server runs here; tests/tools/test_mcp_servers.py has the real ones.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.paths import REPO
from toolwire.plugins.mcp_tools import (
    TRUST_READ_ONLY_HINTS,
    MCPConfigError,
    ServerConfig,
    assign_names,
    load_config,
    parse_config,
    render_result,
    server_from_command,
    server_from_url,
)
from toolwire.plugins.mcp_tools.config import unique_names
from toolwire.plugins.mcp_tools.naming import server_prefix, valid_tool_name
from toolwire.vocabulary.tools import Tool

# -- configuration -------------------------------------------------------------------------


def test_the_shared_mcp_servers_format_gives_stdio_and_http_servers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ISSUES_TOKEN", "s3cret")
    servers = parse_config({"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "@mcp/server-files", "."],
                  "env": {"DEBUG": "0"}, "cwd": "/tmp", "alwaysAllow": ["read"]},
        "issues": {"url": "https://mcp.example.com/mcp", "type": "http",
                   "headers": {"Authorization": "Bearer ${ISSUES_TOKEN}"}},
        "old": {"command": "x", "disabled": True},
    }})
    assert servers == [
        ServerConfig("files", command="npx", args=("-y", "@mcp/server-files", "."),
                     env={"DEBUG": "0"}, cwd="/tmp"),
        ServerConfig("issues", url="https://mcp.example.com/mcp",
                     headers={"Authorization": "Bearer s3cret"}),
    ]
    assert [s.transport for s in servers] == ["stdio", "http"]


def test_a_variable_default_is_used_and_a_missing_variable_is_named(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TW_MISSING", raising=False)
    server = parse_config({"mcpServers": {"a": {"command": "${TW_MISSING:-run}"}}})[0]
    assert server.command == "run"
    with pytest.raises(MCPConfigError, match="TW_MISSING"):
        parse_config({"mcpServers": {"a": {"command": "run", "args": ["${TW_MISSING}"]}}})


@pytest.mark.parametrize("document, problem", [
    ({}, "mcpServers"),
    ({"mcpServers": []}, "mcpServers"),
    ({"mcpServers": {"a": "npx"}}, "must be an object"),
    ({"mcpServers": {"a": {}}}, "neither 'command' nor 'url'"),
    ({"mcpServers": {"a": {"command": "x", "url": "http://h/mcp"}}}, "not both"),
    ({"mcpServers": {"a": {"command": 3}}}, "'command' must be a string"),
    ({"mcpServers": {"a": {"command": "x", "args": "y"}}}, "'args' must be a list"),
    ({"mcpServers": {"a": {"command": "x", "env": {"K": 1}}}}, "'env' must map"),
    ({"mcpServers": {"a": {"url": "ftp://h/x"}}}, "not an http"),
    ({"mcpServers": {"a": {"url": "http://h/sse", "type": "sse"}}}, "SSE transport"),
    ({"mcpServers": {"a": {"command": ""}}}, "empty"),
])
def test_a_bad_configuration_is_a_clear_config_error(document: Any, problem: str) -> None:
    with pytest.raises(MCPConfigError, match=problem):
        parse_config(document, "mcp.json")


def test_load_config_names_the_file_when_it_is_missing_or_not_json(tmp_path: Path) -> None:
    with pytest.raises(MCPConfigError, match="cannot read"):
        load_config(tmp_path / "absent.json")
    broken = tmp_path / "broken.json"
    broken.write_text("{nope")
    with pytest.raises(MCPConfigError, match=r"broken\.json is not valid JSON"):
        load_config(broken)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=3),
    max_leaves=12)


@given(st.dictionaries(st.sampled_from(["mcpServers", "x"]),
                       st.dictionaries(st.text(max_size=6), json_values, max_size=3)))
def test_any_json_document_parses_or_is_a_config_error(document: dict[str, Any]) -> None:
    try:
        servers = parse_config(document)
    except MCPConfigError:
        return
    assert all(isinstance(s, ServerConfig) for s in servers)


@given(st.lists(st.text(st.characters(codec="utf-8", exclude_characters="\x00"),
                        min_size=1, max_size=12), min_size=1, max_size=5))
def test_a_command_line_splits_back_into_its_words(words: list[str]) -> None:
    if not words[0].strip():  # a program name of blanks only is no command
        with pytest.raises(MCPConfigError, match="empty"):
            server_from_command(shlex.join(words))
        return
    server = server_from_command(shlex.join(words))
    assert [server.command, *server.args] == words
    assert server.name


@pytest.mark.parametrize("command, name", [
    ("python -m weather.server --port 1", "server"),
    ("npx -y @modelcontextprotocol/server-filesystem /tmp", "server-filesystem"),
    ("uvx mcp-server-git@1.2", "mcp-server-git"),
    ("/usr/local/bin/notes-mcp --db x", "notes-mcp"),
    ("python3.11 tests/support/mcp_servers.py tools", "mcp_servers"),
    ("docker run -i --rm mcp/fetch", "fetch"),
])
def test_a_command_names_its_server_after_what_it_runs(command: str, name: str) -> None:
    assert server_from_command(command).name == name


def test_an_unbalanced_command_line_is_a_config_error() -> None:
    with pytest.raises(MCPConfigError, match="cannot split"):
        server_from_command("python 'server.py")
    with pytest.raises(MCPConfigError, match="empty"):
        server_from_command("   ")


def test_a_url_names_its_server_after_host_and_port() -> None:
    assert server_from_url("http://127.0.0.1:8123/mcp").name == "127_0_0_1_8123"
    assert server_from_url("https://mcp.example.com/mcp").name == "mcp_example_com"
    with pytest.raises(MCPConfigError):
        server_from_url("localhost:8000")


def test_repeated_server_names_are_made_unique_in_order() -> None:
    servers = unique_names([server_from_command("a x"), server_from_command("a y"),
                            server_from_command("a z")])
    assert [s.name for s in servers] == ["a", "a-2", "a-3"]


# -- names ---------------------------------------------------------------------------------


def test_a_tool_keeps_its_name_when_nothing_collides() -> None:
    named = assign_names([("files", "read_text"), ("issues", "create_issue")])
    assert [(n.name, n.note) for n in named] == [("read_text", None), ("create_issue", None)]


def test_a_name_shared_by_two_servers_is_prefixed_on_both_and_said_so() -> None:
    named = assign_names([("alpha", "search"), ("beta", "search"), ("beta", "size")])
    assert [n.name for n in named] == ["alpha_search", "beta_search", "size"]
    assert named[0].note == ("MCP server 'alpha' calls this tool 'search'; it is registered as "
                             "'alpha_search' because server 'beta' also has a tool named "
                             "'search'")


def test_a_name_taken_by_a_session_tool_is_prefixed_and_the_session_tool_keeps_it() -> None:
    named = assign_names([("files", "read_file")], taken={"read_file"})
    assert named[0].name == "files_read_file"
    assert "another tool of this session is named 'read_file'" in str(named[0].note)


def test_an_unregistrable_name_is_spelled_with_underscores() -> None:
    named = assign_names([("s", "get weather/now"), ("s", "9lives")])
    assert [n.name for n in named] == ["get_weather_now", "_9lives"]
    assert "characters a tool name cannot have" in str(named[0].note)


def test_a_server_listing_a_name_twice_keeps_the_first() -> None:
    named = assign_names([("s", "x"), ("s", "x")])
    assert named[0].name == "x" and named[1].name is None and "only the first" in str(named[1].note)


def test_a_server_prefix_is_a_valid_name_start() -> None:
    assert server_prefix("127_0_0_1_8123") == "mcp_127_0_0_1_8123"
    assert server_prefix("My Server!") == "My_Server"


names = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1,
                max_size=140)


@given(st.lists(st.tuples(st.sampled_from(["a", "b", "9c", "d e"]), names), max_size=12),
       st.sets(names, max_size=4))
def test_assigned_names_are_unique_valid_and_avoid_taken_names(
        listed: list[tuple[str, str]], taken: set[str]) -> None:
    named = assign_names(listed, taken)
    kept = [n.name for n in named if n.name is not None]
    assert len(kept) == len(set(kept))
    assert not set(kept) & taken
    for name in kept:
        Tool(schema={"name": name}, function=lambda: None)  # registrable
    for item, (server, remote) in zip(named, listed, strict=True):
        assert (item.server, item.remote) == (server, remote)
        assert (item.name == remote) == (item.note is None)


@given(names)
def test_valid_tool_name_leaves_valid_names_alone(name: str) -> None:
    spelled = valid_tool_name(name)
    assert valid_tool_name(spelled) == spelled


# -- result text ---------------------------------------------------------------------------


def block(kind: str, **fields: Any) -> SimpleNamespace:
    return SimpleNamespace(type=kind, **fields)


def test_text_passes_and_other_content_is_described_not_dropped() -> None:
    result = SimpleNamespace(content=[
        block("text", text="a red square"),
        block("image", data="iVBORw0KGgo=", mime_type="image/png"),
        block("audio", data="AAAA", mime_type="audio/wav"),
        block("resource_link", name="sq.png", uri="file:///sq.png", mime_type="image/png",
              description="the square"),
        block("resource", resource=SimpleNamespace(uri="file:///n.txt", mime_type="text/plain",
                                                   text="embedded words")),
        block("resource", resource=SimpleNamespace(uri="file:///b.bin", mime_type=None,
                                                   blob="AAAAAA==")),
        block("hologram"),
    ], structured_content=None)
    assert render_result(result).splitlines() == [
        "a red square",
        "[image: image/png, 8 bytes, not shown]",
        "[audio: audio/wav, 3 bytes, not shown]",
        "[resource link: sq.png <file:///sq.png> (image/png): the square]",
        "[resource <file:///n.txt> (text/plain)]",
        "embedded words",
        "[binary resource <file:///b.bin>: 4 bytes, not shown]",
        "[hologram content, not shown]",
    ]


def test_structured_content_is_added_unless_the_text_already_says_it() -> None:
    said = SimpleNamespace(content=[block("text", text='{"n": 3}')], structured_content={"n": 3})
    wrapped = SimpleNamespace(content=[block("text", text="3")],
                              structured_content={"result": 3})
    wrapped_text = SimpleNamespace(content=[block("text", text="found q")],
                                   structured_content={"result": "found q"})
    only = SimpleNamespace(content=[], structured_content={"rivers": ["Danube"]})
    other = SimpleNamespace(content=[block("text", text="see data")],
                            structured_content={"n": 3})
    assert render_result(said) == '{"n": 3}'
    assert render_result(wrapped) == "3"
    assert render_result(wrapped_text) == "found q"
    assert render_result(only) == 'structured content: {"rivers": ["Danube"]}'
    assert render_result(other) == 'see data\nstructured content: {"n": 3}'


def test_an_empty_result_says_so_and_a_long_one_is_cut_with_a_note() -> None:
    assert render_result(SimpleNamespace(content=[], structured_content=None)) == \
        "(the MCP tool returned no content)"
    long = SimpleNamespace(content=[block("text", text="x" * 120)], structured_content=None)
    cut = render_result(long, max_chars=100)
    assert cut == "x" * 56 + "\n[result cut: 64 more characters not shown]"
    assert len(cut) <= 100  # the note survives a later cut at the same bound


@given(st.lists(st.builds(SimpleNamespace, type=st.text(max_size=10) | st.none(),
                          text=json_values, data=json_values, mime_type=json_values,
                          name=json_values, uri=json_values, resource=json_values),
                max_size=4),
       json_values)
def test_any_untrusted_result_renders_to_text(blocks: list[Any], structured: Any) -> None:
    text = render_result(SimpleNamespace(content=blocks, structured_content=structured))
    assert isinstance(text, str) and text


# -- the SDK is imported only when a server is used ------------------------------------------


BLOCK_MCP = """
import sys
class _NoMCP:
    def find_spec(self, name, path=None, target=None):
        if name == "mcp" or name.startswith(("mcp.", "mcp_types")):
            raise ImportError(f"No module named {name!r} (blocked by the test)")
        return None
sys.meta_path.insert(0, _NoMCP())
"""


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCK_MCP + code], capture_output=True,
                          text=True, cwd=REPO, timeout=120)


@pytest.mark.process
def test_the_plugin_imports_and_loads_without_the_sdk() -> None:
    done = run_python(
        "import json, toolwire\n"
        "from toolwire.plugins.mcp_tools import MCPServers, mcp_tools\n"
        "manager = toolwire.PluginManager(entry_points=False)\n"
        "names = [p.name for p in manager.describe() if not p.error]\n"
        "print(json.dumps(['toolwire.plugins.mcp_tools' in names,"
        " [m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types', 'anyio')]]))\n")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [True, []]


@pytest.mark.process
def test_using_a_server_without_the_sdk_names_the_extra() -> None:
    done = run_python(
        "from toolwire.plugins.mcp_tools import MCPNotInstalledError, MCPServers\n"
        "servers = MCPServers(['some-server --stdio'])\n"
        "try:\n"
        "    servers.tools()\n"
        "except MCPNotInstalledError as exc:\n"
        "    print(exc)\n")
    assert done.returncode == 0, done.stderr
    assert "pip install -e '.[mcp]' in toolwire's source folder" in done.stdout


# -- a listed tool toolwire cannot register ---------------------------------------------------


def test_a_listed_tool_with_an_unusable_schema_is_skipped_with_a_note() -> None:
    from toolwire.plugins.mcp_tools import MCPServers

    def listed(name: str, schema: dict[str, Any], hint: bool | None) -> SimpleNamespace:
        return SimpleNamespace(name=name, description=None, title="A title",
                               input_schema=schema,
                               annotations=SimpleNamespace(read_only_hint=hint))

    owner = MCPServers([server_from_command("srv", trust=TRUST_READ_ONLY_HINTS)])
    try:
        tools = owner._build([(owner.configs[0], [
            listed("rows", {"type": "array"}, True),
            listed("peek", {"type": "object", "properties": {"n": {"type": "integer"}}}, True),
            listed("poke", {}, False),
        ])], (), False)
    finally:
        owner.close()
    assert [(t.name, t.read_only, t.description) for t in tools] == \
        [("peek", True, "A title"), ("poke", False, "A title")]
    assert owner.notes == ["MCP tool 'rows' of server 'srv' is skipped: tool 'rows': "
                           "parameters must have type 'object'"]


# -- trust -----------------------------------------------------------------------------------


def test_trust_is_read_from_a_config_entry_and_is_off_by_default() -> None:
    servers = parse_config({"mcpServers": {
        "files": {"command": "files-server", "trust": "read-only-hints"},
        "web": {"url": "https://mcp.example.com/mcp", "trust": "read-only-hints"},
        "plain": {"command": "plain-server"}}})
    assert [(s.name, s.trusts_read_only_hints) for s in servers] == \
        [("files", True), ("web", True), ("plain", False)]
    assert not server_from_command("srv").trusts_read_only_hints
    assert server_from_url("http://127.0.0.1:9/mcp", trust=TRUST_READ_ONLY_HINTS).trust == \
        TRUST_READ_ONLY_HINTS


@pytest.mark.parametrize("value", [True, "all", "read-only", ["read-only-hints"]])
def test_a_trust_value_other_than_read_only_hints_is_refused_by_name(value: object) -> None:
    with pytest.raises(MCPConfigError, match=r"server 'files': 'trust' must be "
                                             r"'read-only-hints'"):
        parse_config({"mcpServers": {"files": {"command": "files-server", "trust": value}}})
    with pytest.raises(MCPConfigError, match="trust 'all' is not known"):
        ServerConfig("files", command="files-server", trust="all")


def test_trusted_names_apply_after_repeated_names_are_made_unique() -> None:
    from toolwire.plugins.mcp_tools import MCPServers

    owner = MCPServers(["srv --a", "srv --b"], trusted=["srv-2"])
    try:
        assert [(c.name, c.trusts_read_only_hints) for c in owner.configs] == \
            [("srv", False), ("srv-2", True)]
    finally:
        owner.close()
    with pytest.raises(MCPConfigError, match=r"cannot trust 'srv-3'.*'srv', 'srv-2'"):
        MCPServers(["srv --a", "srv --b"], trusted=["srv-3"])


def test_an_untrusted_listing_with_hints_gives_write_tools() -> None:
    from toolwire.plugins.mcp_tools import MCPServers

    hinted = SimpleNamespace(name="peek", description="d", title=None,
                             input_schema={"type": "object"},
                             annotations=SimpleNamespace(read_only_hint=True))
    owner = MCPServers([server_from_command("srv")])
    try:
        tools = owner._build([(owner.configs[0], [hinted])], (), False)
    finally:
        owner.close()
    assert [(t.name, t.read_only) for t in tools] == [("peek", False)]
    assert owner.notes[-1].startswith("MCP server 'srv' marks 1 tool read-only (peek); its "
                                      "hints are not trusted")
