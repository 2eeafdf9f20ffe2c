"""The workspace tools under attack: hostile patterns, files, paths and races (issue 23)."""

from __future__ import annotations

import os
import threading
import time
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.mcp_fixtures import running, wait_until
from toolwire import Dispatcher, ToolCall, ToolRegistry
from toolwire.errors import ChildStoppedError
from toolwire.plugins import workspace_tools as wt
from toolwire.vocabulary import patterns
from toolwire.vocabulary.patterns import PatternError


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.md").write_text("alex is a colleague\nbob too\n")
    (tmp_path / "secret.txt").write_text("do not read")
    return root


@pytest.fixture
def dispatcher(workspace: Path) -> Dispatcher:
    return Dispatcher(ToolRegistry(wt.TOOLS), workspace=workspace, timeout=30)


def run(d: Dispatcher, name: str, **args: object) -> tuple[str, bool]:
    result = d.dispatch(ToolCall("c1", name, args))
    return result.content, result.is_error


# -- regular expressions: bounded in time, never stalling other threads ----------------------


@pytest.mark.process
def test_backtracking_regex_is_stopped_and_other_threads_keep_running(
        dispatcher: Dispatcher, workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wt.tools, "LIMITS", wt.WorkspaceLimits(regex_seconds=1))
    (workspace / "evil.txt").write_text("a" * 40 + "!\n")
    ticks = 0
    stop = threading.Event()

    def heartbeat() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            time.sleep(0.01)

    beat = threading.Thread(target=heartbeat)
    beat.start()
    started = time.monotonic()
    try:
        content, is_error = run(dispatcher, "search_text", pattern="(a|a)+$", regex=True)
    finally:
        stop.set()
        beat.join()
    elapsed = time.monotonic() - started
    assert is_error and "ran longer than 1 seconds" in content and "evil.txt" in content
    assert elapsed < 10
    # The heartbeat ran all along (about 100 ticks a second): the search held no lock.
    assert ticks > elapsed * 30


@pytest.mark.process
def test_a_killed_matcher_leaves_no_process_behind(workspace: Path) -> None:
    patterns._CHILDREN.close()
    assert patterns.match_lines("a", "a", 1, deadline=time.monotonic() + 30) == [0]
    (pid,) = patterns._CHILDREN.idle_children()
    stop_at = time.monotonic() + 0.5
    with pytest.raises(ChildStoppedError) as stopped:
        patterns.match_lines("(a|a)+$", "a" * 40 + "!", 5, deadline=time.monotonic() + 60,
                             cancelled=lambda: time.monotonic() > stop_at)
    assert stopped.value.bound == "cancelled"
    assert wait_until(lambda: not running(pid), within=5)


@pytest.mark.process
def test_the_search_after_a_timeout_works_again(dispatcher: Dispatcher, workspace: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wt.tools, "LIMITS", wt.WorkspaceLimits(regex_seconds=0.5))
    (workspace / "evil.txt").write_text("a" * 40 + "!\n")
    assert run(dispatcher, "search_text", pattern="(a|a)+$", regex=True)[1]
    content, is_error = run(dispatcher, "search_text", pattern=r"al\w+", regex=True)
    assert not is_error and content == "notes.md:1: alex is a colleague"


@pytest.mark.process  # the pooled matcher child (started by whichever test first needs it)
@settings(max_examples=60, deadline=None)
@given(pattern=st.text(alphabet="a()+*?|$^.\\[]{}0123,", min_size=1, max_size=14),
       line=st.text(alphabet="ab!", max_size=40))
def test_any_pattern_returns_within_its_budget(pattern: str, line: str) -> None:
    """The general rule: whatever the pattern, matching ends within the budget."""
    started = time.monotonic()
    try:
        patterns.match_lines(pattern, line, 3, deadline=started + 0.5)
    except (PatternError, ChildStoppedError):
        pass
    assert time.monotonic() - started < 30  # a hang guard: starting a child may take seconds


def test_a_bad_regex_is_a_clear_error(dispatcher: Dispatcher) -> None:
    content, is_error = run(dispatcher, "search_text", pattern="(unclosed", regex=True)
    assert is_error and "bad regular expression" in content


def test_long_lines_are_matched_on_their_start_only(dispatcher: Dispatcher,
                                                    workspace: Path) -> None:
    (workspace / "wide.txt").write_text("x" * 100_000 + "needle\n")
    content, is_error = run(dispatcher, "search_text", pattern="needle")
    assert not is_error and content.startswith("no match")
    assert "matched on their start only" in content


# -- reads: streaming, budgets per read and per line, truthful notes -------------------------


def test_a_file_without_newlines_is_read_in_bounded_memory(dispatcher: Dispatcher,
                                                           workspace: Path) -> None:
    size = 64 * 1024 * 1024
    with (workspace / "one-line.bin").open("wb") as handle:
        handle.truncate(size)  # sparse, no newline at all
    (workspace / "one-line.txt").write_bytes(b"")
    os.replace(workspace / "one-line.bin", workspace / "one-line.txt")
    tracemalloc.start()
    try:
        content, is_error = run(dispatcher, "read_file", path="one-line.txt")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not is_error
    assert f"line cut after {wt.LIMITS.max_line_bytes} bytes of {size}" in content
    assert peak < 4 * 1024 * 1024


def test_reading_past_the_end_says_how_long_the_file_is(dispatcher: Dispatcher,
                                                        workspace: Path) -> None:
    (workspace / "three.txt").write_text("a\nb\nc")
    content, is_error = run(dispatcher, "read_file", path="three.txt", start_line=9)
    assert not is_error and content == "(three.txt has 3 lines; there is no line 4)"
    (workspace / "two.txt").write_text("a\nb\n")
    content, _ = run(dispatcher, "read_file", path="two.txt", start_line=3)
    assert content == "(two.txt has 2 lines; there is no line 3)"
    (workspace / "empty.txt").write_text("")
    assert run(dispatcher, "read_file", path="empty.txt")[0] == "(empty.txt is empty)"


def test_a_read_cut_by_the_budget_says_where_to_continue(dispatcher: Dispatcher,
                                                         workspace: Path) -> None:
    (workspace / "many.txt").write_text("".join(f"line {i}\n" for i in range(1, 5001)))
    content, _ = run(dispatcher, "read_file", path="many.txt", start_line=10)
    last = content.splitlines()[-1]
    assert last.startswith("... truncated: showed lines 10-2009")
    assert last.endswith("ask for lines from 2010 on")
    assert content.splitlines()[-2] == "  2009| line 2009"


@settings(max_examples=40, deadline=None)
@given(lines=st.lists(st.text(alphabet="ab\r é", max_size=30), max_size=12),
       start=st.integers(1, 15), span=st.integers(0, 15))
def test_read_file_returns_exactly_the_asked_lines(tmp_path_factory: pytest.TempPathFactory,
                                                   lines: list[str], start: int,
                                                   span: int) -> None:
    """The general rule: whatever the content, a read returns its lines, numbered, unaltered."""
    root = tmp_path_factory.mktemp("ws")
    text = "".join(line + "\n" for line in lines)
    (root / "f.txt").write_bytes(text.encode())
    d = Dispatcher(ToolRegistry(wt.TOOLS), workspace=root, timeout=None)
    content, is_error = run(d, "read_file", path="f.txt", start_line=start,
                            end_line=start + span)
    assert not is_error
    wanted = text.split("\n")[:-1][start - 1:start + span]
    if wanted:
        assert content.splitlines() == [f"{n:>6}| {line.rstrip(chr(13))}" for n, line
                                         in enumerate(wanted, start)] or "\r" in text
    else:
        assert "there is no line" in content or "is empty" in content


# -- paths: no escape by hard link, race, fifo; relative names in messages -------------------


def test_a_hard_link_to_an_outside_file_is_neither_read_nor_written(
        dispatcher: Dispatcher, workspace: Path) -> None:
    os.link(workspace.parent / "secret.txt", workspace / "hard.txt")
    content, is_error = run(dispatcher, "read_file", path="hard.txt")
    assert is_error and "hard links" in content and "do not read" not in content
    content, is_error = run(dispatcher, "write_file", path="hard.txt", content="owned")
    assert is_error and "hard links" in content
    assert (workspace.parent / "secret.txt").read_text() == "do not read"
    content, _ = run(dispatcher, "search_text", pattern="do not read")
    assert content.startswith("no match")


def test_writing_a_fifo_is_refused_without_blocking(dispatcher: Dispatcher,
                                                    workspace: Path) -> None:
    os.mkfifo(workspace / "pipe")
    started = time.monotonic()
    for tool, args in (("write_file", {"content": "x"}), ("read_file", {})):
        content, is_error = run(dispatcher, tool, path="pipe", **args)
        assert is_error and "not a regular file" in content
    assert time.monotonic() - started < 30  # a blocked open would never return


def test_a_symlink_loop_does_not_break_the_search(dispatcher: Dispatcher,
                                                  workspace: Path) -> None:
    os.symlink("loop2", workspace / "loop1")
    os.symlink("loop1", workspace / "loop2")
    os.symlink("self", workspace / "self")
    content, is_error = run(dispatcher, "search_text", pattern="alex")
    assert not is_error and content.startswith("notes.md:1: alex")
    content, is_error = run(dispatcher, "read_file", path="loop1")
    assert is_error and "too many symlinks" in content


def test_a_symlink_inside_the_workspace_is_followed(dispatcher: Dispatcher,
                                                    workspace: Path) -> None:
    (workspace / "sub").mkdir()
    os.symlink("../notes.md", workspace / "sub" / "link.md")
    os.symlink(str(workspace / "notes.md"), workspace / "absolute.md")
    for path in ("sub/link.md", "absolute.md"):
        content, is_error = run(dispatcher, "read_file", path=path)
        assert not is_error and "alex is a colleague" in content


def test_messages_never_name_the_hosts_absolute_paths(dispatcher: Dispatcher,
                                                      workspace: Path) -> None:
    os.symlink(workspace.parent / "secret.txt", workspace / "out.txt")
    os.mkfifo(workspace / "pipe")
    attempts = [("read_file", {"path": "missing/x.txt"}), ("read_file", {"path": "out.txt"}),
                ("read_file", {"path": "pipe"}), ("list_dir", {"path": "notes.md"}),
                ("write_file", {"path": "notes.md/x", "content": "x"}),
                ("search_text", {"pattern": "x", "path": "nowhere"})]
    for tool, args in attempts:
        content, is_error = run(dispatcher, tool, **args)
        assert is_error, (tool, args, content)
        assert str(workspace.parent) not in content, content


def test_list_dir_sizes_come_from_the_entry_itself(dispatcher: Dispatcher,
                                                   workspace: Path) -> None:
    (workspace.parent / "big.bin").write_bytes(b"x" * 12345)
    os.symlink(workspace.parent / "big.bin", workspace / "big-link")
    content, _ = run(dispatcher, "list_dir")
    assert "big-link  (symlink)" in content and "12345" not in content


def test_a_write_replaces_the_file_and_keeps_its_mode(dispatcher: Dispatcher,
                                                      workspace: Path) -> None:
    script = workspace / "run.sh"
    script.write_text("old")
    script.chmod(0o750)
    _, is_error = run(dispatcher, "write_file", path="run.sh", content="new")
    assert not is_error
    assert script.read_text() == "new" and (script.stat().st_mode & 0o777) == 0o750
    assert [p.name for p in workspace.iterdir() if "toolwire-tmp" in p.name] == []


def test_swapping_a_folder_for_a_symlink_never_lets_a_read_or_write_out(
        tmp_path: Path) -> None:
    """Another local process races the tools, swapping a folder for a link out."""
    root = tmp_path / "ws"
    outside = tmp_path / "outside"
    (root / "d").mkdir(parents=True)
    outside.mkdir()
    (root / "d" / "f.txt").write_text("inside")
    (outside / "f.txt").write_text("OUTSIDE")
    d = Dispatcher(ToolRegistry(wt.TOOLS), workspace=root, timeout=None)
    stop = threading.Event()

    def swapper() -> None:
        real, link = root / "d-real", root / "d-link"
        os.symlink(outside, link)
        while not stop.is_set():
            # Each step is one atomic rename; a step that fails (a write re-created
            # "d" meanwhile) is simply retried on the next round.
            for source, target in ((root / "d", real), (link, root / "d"),
                                   (root / "d", link), (real, root / "d")):
                try:
                    os.rename(source, target)
                except OSError:
                    pass

    thread = threading.Thread(target=swapper, daemon=True)
    thread.start()
    leaked = []
    try:
        for i in range(1500):
            content, _ = run(d, "read_file", path="d/f.txt")
            if "OUTSIDE" in content:
                leaked.append(content)
            run(d, "write_file", path=f"d/w{i % 3}.txt", content="x")
    finally:
        stop.set()
        thread.join()
    assert leaked == []
    assert sorted(p.name for p in outside.iterdir()) == ["f.txt"]


# -- path depth: no chain of thousands of folders --------------------------------------------


def _depth(root: Path) -> int:
    deepest = 0
    for folder, _, _ in os.walk(root):
        deepest = max(deepest, len(Path(folder).relative_to(root).parts))
    return deepest


def test_a_write_through_3001_folders_is_refused_before_any_folder_is_made(
        dispatcher: Dispatcher, workspace: Path) -> None:
    content, is_error = run(dispatcher, "write_file", path="a/" * 3001 + "f.txt", content="x")
    assert is_error
    limit = wt.LIMITS.max_path_depth
    assert f"goes through more than {limit} folders" in content
    assert len(content) < 400  # the 6,000-character path is not quoted whole
    assert not (workspace / "a").exists()


def test_a_write_at_the_depth_limit_works_and_one_level_more_is_refused(
        dispatcher: Dispatcher, workspace: Path) -> None:
    limit = wt.LIMITS.max_path_depth
    content, is_error = run(dispatcher, "write_file", path="d/" * limit + "f.txt", content="x")
    assert not is_error, content
    assert _depth(workspace) == limit
    content, is_error = run(dispatcher, "write_file", path="e/" * (limit + 1) + "f.txt",
                            content="x")
    assert is_error and "folders deep" in content
    assert not (workspace / "e").exists()


def test_dotdot_does_not_count_as_depth_but_symlinks_that_lengthen_a_path_do(
        dispatcher: Dispatcher, workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wt.tools, "LIMITS", wt.WorkspaceLimits(max_path_depth=3))
    _, is_error = run(dispatcher, "write_file", path="a/b/../c/../d/e/f.txt", content="x")
    assert not is_error
    (workspace / "x" / "y").mkdir(parents=True)
    os.symlink("x/y", workspace / "short")
    content, is_error = run(dispatcher, "write_file", path="short/z/w/f.txt", content="x")
    assert is_error and "more than 3 folders" in content
    assert not (workspace / "x" / "y" / "z" / "w").exists()


def test_reads_and_listings_are_held_to_the_same_depth(
        dispatcher: Dispatcher, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wt.tools, "LIMITS", wt.WorkspaceLimits(max_path_depth=2))
    for name, args in (("read_file", {"path": "a/b/c/f.txt"}), ("list_dir", {"path": "a/b/c/d"}),
                       ("search_text", {"pattern": "x", "path": "a/b/c/d"})):
        content, is_error = run(dispatcher, name, **args)
        assert is_error and "more than 2 folders" in content, (name, content)
