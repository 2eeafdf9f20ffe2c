"""The one supervised child (toolwire.isolation.supervisor): how a child's end is
described, and a real child talked to over its JSON-lines pipe, ended by a signal,
and killed when it writes more than its pipe takes (issue 41, item 1).

The bounds of a job (memory, CPU time, wall time) are held by the template and
pattern tests, which run in the job children; these tests hold the supervisor under
them with programs of their own.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest

from toolwire.isolation.supervisor import MEMORY_STATUS, ChildEnd, ChildGone, SupervisedChild

WAIT = 60.0  # a failure bound only: every wait below ends on an event


@pytest.mark.parametrize(("end", "bound", "said"), [
    (ChildEnd(None, signal.SIGSEGV), "crash", "SIGSEGV: a crash in native code"),
    (ChildEnd(None, signal.SIGKILL), "crash", "SIGKILL: killed, often by the kernel when "
                                               "memory runs out"),
    (ChildEnd(None, signal.SIGXCPU), "crash", "SIGXCPU: its CPU-time limit"),
    (ChildEnd(3), "crash", "exit status 3"),
    (ChildEnd(0), "", "it exited"),
    (ChildEnd(None, signal.SIGKILL, "wall time"), "wall time",
     "it passed its time bound and was killed"),
    (ChildEnd(None, signal.SIGKILL, "cancelled"), "cancelled",
     "it was stopped: its work was cancelled"),
])
def test_one_description_says_how_any_child_ended(end: ChildEnd, bound: str, said: str) -> None:
    assert (end.bound, end.describe()) == (bound, said)


def test_a_wait_status_is_read_into_the_bound_it_means() -> None:
    class Usage:
        ru_maxrss = 1 << 30  # a spawned child's counts its spawner's peak: never read
        ru_utime = 0.5
        ru_stime = 0.25

    memory = ChildEnd.from_wait(MEMORY_STATUS << 8, Usage(), peak=5 << 20)
    assert (memory.status, memory.bound, memory.cpu_seconds, memory.peak_memory_bytes) == \
        (MEMORY_STATUS, "memory", 0.75, 5 << 20)
    cpu = ChildEnd.from_wait(signal.SIGXCPU, Usage())
    assert (cpu.signal_name, cpu.bound) == ("SIGXCPU", "cpu time")
    assert ChildEnd.from_wait(signal.SIGKILL, Usage(), "wall time").bound == "wall time"


ECHO = """
import json, os
inbox = os.fdopen(3, "rb")
out = os.fdopen(4, "wb")
for line in inbox:
    message = json.loads(line)
    if message.get("crash"):
        os.abort()
    if message.get("hold"):
        held = bytearray(message["hold"])
        held[::4096] = b"x" * len(held[::4096])  # touched: resident
    if message.get("flood"):
        out.write(b"x" * message["flood"]); out.flush()
    out.write(json.dumps({"echo": message}).encode() + b"\\n"); out.flush()
"""


@pytest.mark.process
def test_a_child_answers_over_its_pipe_and_exits_when_the_pipe_closes() -> None:
    child = SupervisedChild([sys.executable, "-c", ECHO])
    assert child.send({"text": "café \udce9", "n": [1, 2]})
    assert child.receive(WAIT) == {"echo": {"text": "café \udce9", "n": [1, 2]}}
    end = child.close(WAIT)
    assert (end.status, end.bound, end.describe()) == (0, "", "it exited")
    assert child.send({"late": True}) is False


@pytest.mark.process
def test_a_child_that_crashes_is_gone_with_the_signal_named() -> None:
    child = SupervisedChild([sys.executable, "-c", ECHO])
    child.send({"crash": True})
    with pytest.raises(ChildGone) as gone:
        child.receive(WAIT)
    assert gone.value.end.signal_name == "SIGABRT"
    assert gone.value.end.describe() == "SIGABRT: an abort in native code"


@pytest.mark.process
def test_a_child_that_writes_more_than_its_pipe_takes_is_killed_for_its_output() -> None:
    child = SupervisedChild([sys.executable, "-c", ECHO], max_line_bytes=1 << 16)
    child.send({"flood": 1 << 20})
    with pytest.raises(ChildGone) as gone:
        child.receive(WAIT)
    assert gone.value.end.bound == "output"


def test_a_job_child_that_still_holds_much_after_its_job_is_not_kept_warm(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a warm child carries its resident memory into the next job, whose refusal reports
    # the child's peak: only a child back near its starting size is reused
    from toolwire.isolation import jobs
    from toolwire.templates import chat_template

    pool = chat_template._CHILDREN
    template = chat_template.ChatTemplate("{{ messages | length }}", name="small.jinja")
    pool.close()
    assert template.render([]) == "0"
    kept = pool.idle_children()
    assert len(kept) == 1 and jobs._resident(kept[0]) <= jobs.KEEP_RESIDENT_BYTES
    monkeypatch.setattr(jobs, "KEEP_RESIDENT_BYTES", 1 << 20)  # less than any child holds
    assert template.render([]) == "0"
    assert pool.idle_children() == []


@pytest.mark.process
def test_a_killed_childs_peak_memory_is_its_own_not_its_hosts() -> None:
    # wait4's ru_maxrss of a spawned child starts at its host's peak: the pytest worker
    # of a whole run holds hundreds of MiB, which a refusal reported as the child's
    ballast = bytearray(256 << 20)
    ballast[::4096] = b"x" * len(ballast[::4096])
    child = SupervisedChild([sys.executable, "-c", ECHO])
    child.send({"hold": 40 << 20})
    assert child.receive(WAIT) is not None
    end = child.kill("wall time")
    del ballast
    assert (40 << 20) <= end.peak_memory_bytes < (40 << 20) + (100 << 20)


@pytest.mark.process
@pytest.mark.parametrize("how", ["cancelled", "wall time"])
def test_a_callers_cancel_or_deadline_holds_while_a_new_job_child_starts(
        how: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a start is not the job's time (its wall bound starts when the child is ready), but a
    # cancelled reply or a call's deadline must not wait for a slow start to end
    from toolwire.errors import ChildStoppedError
    from toolwire.isolation.jobs import JobLimits, JobPool

    (tmp_path / "slow_start_handler.py").write_text(
        "import time\ntime.sleep(120)\n\ndef handle_job(job):\n    return job\n",
        encoding="utf-8")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    pool = JobPool("slow_start_handler")
    started = time.monotonic()
    with pytest.raises(ChildStoppedError) as stopped:
        if how == "cancelled":
            pool.run({}, JobLimits(), cancelled=lambda: True)
        else:
            pool.run({}, JobLimits(), deadline=time.monotonic() + 0.5)
    assert stopped.value.bound == how
    assert time.monotonic() - started < 60  # (not the handler's 120 s import)
    pool.close()
