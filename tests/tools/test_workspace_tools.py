"""The workspace tools: confined to the workspace, clear refusals, through dispatch."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from toolwire import Dispatcher, ToolCall, ToolRegistry
from toolwire.plugins import workspace_tools as wt


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("import os\n\ndef main():\n    return 42\n")
    (root / "notes.md").write_text("alex is a colleague\nbob too\n")
    (tmp_path / "secret.txt").write_text("do not read")
    return root


@pytest.fixture
def dispatcher(workspace: Path) -> Dispatcher:
    return Dispatcher(ToolRegistry(wt.TOOLS), workspace=workspace)


def run(d: Dispatcher, name: str, **args: object) -> tuple[str, bool]:
    result = d.dispatch(ToolCall("c1", name, args))
    return result.content, result.is_error


def test_list_dir_shows_folders_and_sizes(dispatcher: Dispatcher) -> None:
    content, is_error = run(dispatcher, "list_dir")
    assert not is_error
    assert content.splitlines()[0] == "src/"
    assert "notes.md  (28 bytes)" in content


def test_read_file_with_a_line_range(dispatcher: Dispatcher) -> None:
    content, is_error = run(dispatcher, "read_file", path="src/app.py", start_line=3, end_line=4)
    assert not is_error
    assert content.splitlines() == ["     3| def main():", "     4|     return 42"]


def test_search_text_finds_lines(dispatcher: Dispatcher) -> None:
    content, _ = run(dispatcher, "search_text", pattern="alex")
    assert content == "notes.md:1: alex is a colleague"
    content, _ = run(dispatcher, "search_text", pattern=r"ret\w+ \d+", regex=True)
    assert content == "src/app.py:4: return 42"


def test_write_file_creates_folders_inside_the_workspace(dispatcher: Dispatcher,
                                                         workspace: Path) -> None:
    content, is_error = run(dispatcher, "write_file", path="out/new.txt", content="hi\n")
    assert not is_error and "wrote 3 bytes to out/new.txt" in content
    assert (workspace / "out" / "new.txt").read_text() == "hi\n"


@pytest.mark.parametrize("path", ["../secret.txt", "/etc/passwd", "src/../../secret.txt",
                                  "~/x"])
def test_paths_that_escape_are_refused(dispatcher: Dispatcher, path: str) -> None:
    content, is_error = run(dispatcher, "read_file", path=path)
    assert is_error and ("outside the workspace" in content or "absolute" in content)
    assert "do not read" not in content


def test_symlink_out_of_the_workspace_is_refused(dispatcher: Dispatcher, workspace: Path) -> None:
    os.symlink(workspace.parent / "secret.txt", workspace / "link.txt")
    os.symlink(workspace.parent, workspace / "up")
    for path in ("link.txt", "up/secret.txt"):
        content, is_error = run(dispatcher, "read_file", path=path)
        assert is_error and "outside the workspace" in content
    content, is_error = run(dispatcher, "write_file", path="up/evil.txt", content="x")
    assert is_error and not (workspace.parent / "evil.txt").exists()
    content, _ = run(dispatcher, "search_text", pattern="do not read")
    assert content.startswith("no match")


def test_model_supplied_workspace_is_ignored(dispatcher: Dispatcher, tmp_path: Path) -> None:
    content, is_error = run(dispatcher, "read_file", path="secret.txt", workspace=str(tmp_path))
    assert is_error and "do not read" not in content


def test_write_tool_is_refused_in_read_only_mode(workspace: Path) -> None:
    d = Dispatcher(ToolRegistry(wt.TOOLS), workspace=workspace, read_only=True)
    assert [t.name for t in d.offered_tools()] == ["list_dir", "read_file", "search_text"]
    content, is_error = run(d, "write_file", path="x.txt", content="x")
    assert is_error and "read-only" in content and not (workspace / "x.txt").exists()


def test_workspace_parameter_is_not_shown_to_the_model() -> None:
    for tool in wt.TOOLS:
        assert "workspace" not in tool.parameters["properties"]
        assert tool.accepts_workspace


def test_a_file_name_that_is_not_utf8_lists_and_searches_as_valid_text(
        dispatcher: Dispatcher, workspace: Path) -> None:
    """``os.listdir`` gives ``'caf\\udce9.txt'`` for a Latin-1 name: the model reads
    U+FFFD in its place, as ``read_file`` shows bytes that are not UTF-8 (issue 40,
    item 2)."""
    with open(os.path.join(os.fsencode(workspace), b"caf\xe9.txt"), "wb") as out:
        out.write(b"alex was here\n")
    for name, arguments in (("list_dir", {}), ("search_text", {"pattern": "alex was"})):
        content, is_error = run(dispatcher, name, **arguments)
        assert not is_error and "caf\ufffd.txt" in content
        content.encode("utf-8")
