"""A search's matching child never outlives its host, its call, or its CPU budget (issues
28 and 41).

The regular expression runs in the pattern child (toolwire.isolation's job child).
Whatever ends the search (the regex budget, the dispatcher's shorter deadline, a
cancelled reply, the host killed or exiting mid-search), no child is left spinning.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from tests.support.mcp_fixtures import running, wait_until
from tests.support.paths import REPO
from toolwire import CancelToken, Dispatcher, ToolCall, ToolRegistry
from toolwire.errors import ChildStoppedError
from toolwire.plugins import workspace_tools as wt
from toolwire.vocabulary import patterns

BACKTRACKING = "(a|a)+$"  # backtracks for ever in regex too ((a+)+$ it answers at once)
EVIL_LINE = "a" * 40 + "!\n"

pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"),
                                 reason="reads children from /proc"), pytest.mark.process]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "evil.txt").write_text(EVIL_LINE)
    return root


_CHILD = b"toolwire.vocabulary.patterns"
"""What a pattern child's command line holds."""


def matching_children(parent: int) -> list[int]:
    """Live pattern children whose parent is ``parent``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes()
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and _CHILD in command and running(int(entry.name)):
            found.append(int(entry.name))
    return found


def busy_children() -> list[int]:
    """Pattern children of this process not waiting warm in the pool for a next job (a
    search's child; a warm one another thread of the process started may be idle)."""
    idle = {child.pid for child in patterns._CHILDREN._idle}
    return [pid for pid in matching_children(os.getpid()) if pid not in idle]


def workers_by_command() -> set[int]:
    """Live pattern children of any parent (an orphan's parent is no longer its host)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if _CHILD in (entry / "cmdline").read_bytes():
                    found.add(int(entry.name))
            except OSError:
                continue
    return {pid for pid in found if running(pid)}


def test_a_dispatcher_timeout_shorter_than_the_regex_budget_leaves_no_child_running(
        workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    patterns._CHILDREN.close()
    monkeypatch.setattr(wt.tools, "LIMITS", wt.WorkspaceLimits(regex_seconds=30))
    dispatcher = Dispatcher(ToolRegistry(wt.TOOLS), workspace=workspace, timeout=1)
    started = time.monotonic()
    result = dispatcher.dispatch(ToolCall("c1", "search_text",
                                          {"pattern": BACKTRACKING, "regex": True}))
    # the search stops at the same deadline: whichever of the two notices it first answers
    assert result.error_kind == "timeout" or "call's time limit ran out" in result.content
    assert time.monotonic() - started < 20  # (not the 30 s regex bound: a loaded machine's room)
    assert wait_until(lambda: not busy_children(), within=15)


def test_a_cancelled_reply_stops_the_search_and_its_child(
        workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    patterns._CHILDREN.close()
    monkeypatch.setattr(wt.tools, "LIMITS", wt.WorkspaceLimits(regex_seconds=30))
    dispatcher = Dispatcher(ToolRegistry(wt.TOOLS), workspace=workspace, timeout=60)
    cancel = CancelToken()
    threading.Timer(0.5, cancel.cancel).start()
    started = time.monotonic()
    result = dispatcher.dispatch(ToolCall("c1", "search_text",
                                          {"pattern": BACKTRACKING, "regex": True}),
                                 cancel=cancel)
    assert result.error_kind == "cancelled" or "the reply was cancelled" in result.content
    assert time.monotonic() - started < 20  # (not the 30 s regex bound: a loaded machine's room)
    assert wait_until(lambda: not busy_children(), within=15)


def test_the_search_stopped_at_the_calls_deadline_says_so(
        workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wt.tools, "LIMITS", wt.WorkspaceLimits(regex_seconds=30))
    deadline = time.monotonic() + 0.5
    with pytest.raises(ChildStoppedError) as stopped:
        patterns.match_lines(BACKTRACKING, EVIL_LINE, 1, deadline=deadline)
    assert stopped.value.bound == "wall time"
    assert time.monotonic() - deadline < 15  # (not the 30 s regex bound)
    dispatcher = Dispatcher(ToolRegistry(wt.TOOLS), workspace=workspace, timeout=1)
    result = dispatcher.dispatch(ToolCall("c1", "search_text",
                                          {"pattern": BACKTRACKING, "regex": True}))
    assert result.error_kind == "timeout" or "call's time limit ran out" in result.content


_HOST = textwrap.dedent("""
    import os, sys, threading, time
    os.environ["TOOLWIRE_REGEX_TIMEOUT"] = "600"  # read when the plugin is imported
    from toolwire import Dispatcher, ToolCall, ToolRegistry
    from toolwire.plugins import workspace_tools as wt
    dispatcher = Dispatcher(ToolRegistry(wt.TOOLS), workspace=sys.argv[1], timeout={timeout})
    def exit_mid_search():
        from tests.tools.test_workspace_search_child import matching_children
        while not matching_children(os.getpid()):
            time.sleep(0.01)
        sys.stdin.readline()  # the test has seen the child: exit now, mid-search
        os._exit(0)
    if sys.argv[2] == "exit":
        threading.Thread(target=exit_mid_search, daemon=True).start()
    result = dispatcher.dispatch(ToolCall("c1", "search_text",
                                          {{"pattern": "(a|a)+$", "regex": True}}))
    print(f"the search ended before the host: {{result!r}}", file=sys.stderr)
""")

_SPINNING_SECONDS = 1.5
"""CPU time a pattern child has used once it is surely inside the endless match: more than
its start (an interpreter and its imports) and the pattern's check (another job, the same
child) take."""


def cpu_seconds(pid: int) -> float:
    """The CPU time process ``pid`` has used (``0`` once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def spinning_children(host: int) -> list[int]:
    """The host's pattern children inside the endless match (see :data:`_SPINNING_SECONDS`)."""
    return [pid for pid in matching_children(host) if cpu_seconds(pid) >= _SPINNING_SECONDS]


@pytest.mark.parametrize(("how", "timeout"), [("sigkill", "None"), ("sigkill", "60"),
                                              ("exit", "60")])
def test_a_host_that_dies_mid_search_leaves_no_child(workspace: Path, how: str,
                                                     timeout: str) -> None:
    """``None`` searches on the host's main thread, ``60`` in a tool thread."""
    host = subprocess.Popen([sys.executable, "-c", _HOST.format(timeout=timeout),
                             str(workspace), how], cwd=REPO, stdin=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        # the child that matches for ever, not one still starting or checking the pattern (a
        # fresh clone saw the first child it found go before the test looked again)
        wait_until(lambda: spinning_children(host.pid) or host.poll() is not None, within=120)
        children = spinning_children(host.pid)
        if not children:
            host.kill()
            assert host.stderr is not None
            pytest.fail(f"the host's search never spun: {host.stderr.read()!r}")
        if how == "sigkill":
            host.send_signal(signal.SIGKILL)
        else:  # the host exits when told, not after a time it guessed the test would take
            assert host.stdin is not None
            host.stdin.write(b"exit\n")
            host.stdin.flush()
        host.wait(30)
        assert wait_until(lambda: not (set(children) & workers_by_command()), within=5), \
            f"children {children} outlived their host"
    finally:
        host.kill()
        host.wait(30)


def test_a_child_nobody_kills_ends_at_its_own_cpu_limit() -> None:
    """The host here never kills the child: the kernel does, at the seconds it was given."""
    child = patterns._CHILDREN._take()
    try:
        child.send({"job": {"op": "lines", "pattern": BACKTRACKING, "text": EVIL_LINE,
                            "limit": 1, "seconds": 600}, "cpu": 1})
        end = child.wait(30)
        assert end is not None and end.signal == signal.SIGXCPU and end.bound == "cpu time"
    finally:
        child.kill()
        child.release()


def test_an_idle_pooled_child_survives_the_tool_thread_that_asked_for_it(
        workspace: Path) -> None:
    """Children are started by one long-lived thread, not by the (short-lived) caller."""
    patterns._CHILDREN.close()
    box: list[int] = []

    def search_once() -> None:
        assert patterns.match_lines("a", "a\nb", 5, deadline=time.monotonic() + 30) == [0]
        box.extend(patterns._CHILDREN.idle_children())

    thread = threading.Thread(target=search_once)
    thread.start()
    thread.join()
    assert box
    time.sleep(0.5)  # a child killed with its starting thread would be dead by now
    assert running(box[0])
    assert patterns.match_lines("b", "a\nb", 5, deadline=time.monotonic() + 30) == [1]
    assert box[0] in patterns._CHILDREN.idle_children()
