"""The small real model (SmolLM2-135M-Instruct Q4_1, the real-model extra) through toolwire.

Figures of issue 31, each on the model's real 49,152-token vocabulary, one thread, runs
paired and alternating (the machine is shared, so a pair sees the same load), each as
wall time a token and as CPU time a token (every process doing the work: on a loaded
machine the CPU time is the steadier measure of toolwire's own cost):

* the grammar's cost: the same ``tool_choice="required"`` turn with the backend's tool
  grammars on and off (target: overhead <= 15 %);
* time to first token of a cold prompt (the KV cache reset before each);
* the end-to-end overhead of ``stream_turn`` over raw ``Llama.generate`` on the same
  prompt tokens (target <= 5 %);
* the model worker of ``toolwire serve`` against the same backend in-process, per token
  as the caller sees it (target <= 5 %);
* peak memory (``ru_maxrss``) before loading, after loading, and at the end;
* repeated calls: BFCL's first rows (a built-in schema without the real schemas) under
  ``"required"`` and ``"auto"``, with and without parallel calls, with the repeated-call
  rule switched off (what the model writes) and on: finish reasons, calls and distinct
  calls a reply, tokens and seconds a reply, and how often the rule ended a reply.

``python -m benchmarks real_model`` (about 15 minutes on the loaded two-core machine;
``--quick`` for fewer runs).
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from benchmarks.harness import print_table, write_results
from tests.support.paths import SHARED_SCHEMAS
from toolwire import (
    CancelToken,
    DiagnosticEvent,
    Event,
    Message,
    ModelRequest,
    TextEvent,
    Tool,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
    TurnEnd,
    default_plugin_manager,
)
from toolwire.backends import templated
from toolwire.backends.repeated_calls import REPEATED_CALL, RepeatedCallStop
from toolwire.testing.real_model import MISSING_REAL_MODEL, real_model_path

BENCHMARK = "real_model"
SCHEMAS = SHARED_SCHEMAS / "BFCL_v4_simple_python.json"
STORY = "Write a short story about a lighthouse keeper and a storm."
OPTIONS: dict[str, Any] = {"n_ctx": 2048, "temperature": 0.0, "seed": 1, "n_threads": 1,
                           "progress": False}
REPEAT_TOKENS = 200
"""A repeat section's reply limit: room for a call written several times."""
BUILT_IN = ([{"name": "triangle_area", "description": "The area of a triangle.",
              "parameters": {"type": "object", "properties": {
                  "base": {"type": "integer"}, "height": {"type": "integer"}},
                  "required": ["base", "height"]}}],
            "What is the area of a triangle whose base is 10 and height is 5?")


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _cases(count: int) -> list[tuple[tuple[Tool, ...], str]]:
    if SCHEMAS.is_file():
        with SCHEMAS.open(encoding="utf-8") as rows:
            picked = [json.loads(next(rows)) for _ in range(count)]
        raw = [(row["function"], row["question"][0][-1]["content"]) for row in picked]
    else:
        raw = [BUILT_IN]
    return [(tuple(Tool(f, lambda **kwargs: "ok") for f in functions), question)
            for functions, question in raw]


_CONTENT = (TextEvent, ToolCallStartEvent, ToolCallDeltaEvent, ToolCallEndEvent)


def _turn(backend: Any, request: ModelRequest) -> tuple[list[Any], float, float]:
    """A turn's items, the caller's time from the first piece of the reply (text or a
    call) to the end, and the time to that first piece (notices before it, such as
    the default template's, do not count)."""
    started = time.perf_counter()
    first: float | None = None
    items = []
    for item in backend.stream_turn(request, CancelToken()):
        if first is None and isinstance(item, _CONTENT):
            first = time.perf_counter()
        items.append(item)
    ended = time.perf_counter()
    first = first or ended
    return items, ended - first, first - started


def _tokens(items: list[Any]) -> int:
    end = items[-1]
    return int(end.usage["completion_tokens"]) if isinstance(end, TurnEnd) and end.usage else 0


def _per_token(items: list[Any], seconds: float) -> float:
    """Milliseconds a token after the first, as the caller saw them."""
    return seconds / max(_tokens(items) - 1, 1) * 1000


def _generation_per_token(items: list[Any]) -> float:
    """Milliseconds a token after the first, by the backend's own timing of the
    generation (the sampler, the grammar, the parser; not the prompt)."""
    end = items[-1]
    seconds = float((end.timings or {}).get("generation", 0.0))
    return seconds / max(_tokens(items) - 1, 1) * 1000


Timed = tuple[float, float]
"""Milliseconds a token: wall time, and CPU time (every process doing the work)."""


def _cpu_seconds(pid: int | None = None) -> float:
    """This process's CPU time, or another one's (``/proc``, clock ticks)."""
    if pid is None:
        return time.process_time()
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _timed_turn(backend: Any, request: ModelRequest, worker_pid: int | None = None,
                generation: bool = False) -> tuple[list[Any], Timed]:
    """A turn and its cost a token: the caller's wall time from the first piece of the
    reply (``generation``: the backend's own generation timing), and the CPU time of
    the whole turn (this process's, plus the worker's when there is one)."""
    cpu = _cpu_seconds() + (_cpu_seconds(worker_pid) if worker_pid else 0.0)
    items, seconds, _ = _turn(backend, request)
    cpu = _cpu_seconds() + (_cpu_seconds(worker_pid) if worker_pid else 0.0) - cpu
    wall = _generation_per_token(items) if generation else _per_token(items, seconds)
    return items, (wall, cpu / max(_tokens(items), 1) * 1000)


def _paired(first: Callable[[], Timed], second: Callable[[], Timed],
            reps: int) -> tuple[list[Timed], list[Timed]]:
    a, b = [], []
    for i in range(reps):
        if i % 2:
            b.append(second())
            a.append(first())
        else:
            a.append(first())
            b.append(second())
    return a, b


def _row(case: str, base: list[float], other: list[float], unit: str) -> dict[str, Any]:
    pairs = [o / b - 1 for b, o in zip(base, other, strict=True) if b > 0]
    return {"benchmark": BENCHMARK, "case": case, "unit": unit,
            "base": round(statistics.median(base), 3), "other": round(statistics.median(other), 3),
            "overhead_pct": round(statistics.median(pairs) * 100, 1) if pairs else None,
            "runs": len(base)}


def _rows(case: str, base: list[Timed], other: list[Timed]) -> list[dict[str, Any]]:
    """The wall-time row and the CPU-time row of a paired comparison."""
    return [_row(f"{case}, wall", [b[0] for b in base], [o[0] for o in other], "ms/token"),
            _row(f"{case}, CPU", [b[1] for b in base], [o[1] for o in other], "ms/token")]


class _NoRule(RepeatedCallStop):
    """The repeated-call rule switched off: every event passes, nothing stops the
    reply (for the rows that show what the model does without it)."""

    def feed(self, events: Iterable[Event]) -> Iterator[Event]:
        yield from events


def _repeats(backend: Any, cases: list[tuple[tuple[Tool, ...], str]],
             rule: bool) -> list[dict[str, Any]]:
    """Each tool_choice and parallel_tool_calls setting over ``cases``: finish reasons,
    calls and distinct calls a reply, tokens and seconds a reply."""
    rows = []
    saved = templated.RepeatedCallStop  # type: ignore[attr-defined]
    templated.RepeatedCallStop = RepeatedCallStop if rule else _NoRule  # type: ignore[attr-defined]
    try:
        for choice in ("required", "auto"):
            for parallel in (True, False):
                reasons: dict[str, int] = {}
                calls, distinct, tokens, seconds, ended = [], [], [], [], 0
                for tools, question in cases:
                    started = time.perf_counter()
                    items, _, _ = _turn(backend, ModelRequest(
                        (Message.user(question),), tools, tool_choice=choice,
                        parallel_tool_calls=parallel))
                    seconds.append(time.perf_counter() - started)
                    end = items[-1]
                    reasons[end.reason] = reasons.get(end.reason, 0) + 1
                    written = [(e.name, json.dumps(e.arguments, sort_keys=True, default=str))
                               for e in items if isinstance(e, ToolCallEndEvent)]
                    calls.append(len(written))
                    distinct.append(len(set(written)))
                    tokens.append(_tokens(items))
                    ended += sum(isinstance(e, DiagnosticEvent) and e.code == REPEATED_CALL
                                 for e in items)
                rows.append({"benchmark": BENCHMARK,
                             "case": f"repeats, rule {'on' if rule else 'off'}: {choice}, "
                                     f"parallel {parallel}",
                             "unit": "replies", "reasons": reasons, "calls_per_reply": calls,
                             "distinct_per_reply": distinct, "tokens_per_reply": tokens,
                             "seconds_per_reply": round(statistics.median(seconds), 2),
                             "ended_by_repeat_rule": ended, "runs": len(calls)})
    finally:
        templated.RepeatedCallStop = saved  # type: ignore[attr-defined]
    return rows


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Measure; return the rows (none when the real-model extra is missing)."""
    path = real_model_path()
    if path is None:
        print(MISSING_REAL_MODEL)
        return []
    import llama_cpp

    from toolwire.backends.model_worker import WorkerBackend, WorkerSpec
    from toolwire.plugins.llama_cpp import LlamaCppBackend

    reps = 2 if quick else 8
    rss_before = _rss_mb()
    backend = LlamaCppBackend(path, max_tokens=64, **OPTIONS)
    rss_loaded = _rss_mb()
    rows: list[dict[str, Any]] = []
    tools, question = _cases(1)[0]
    required = ModelRequest((Message.user(question),), tools, tool_choice="required",
                            parallel_tool_calls=False)

    def grammar(on: bool) -> Callable[[], Timed]:
        def once() -> Timed:
            backend.tool_grammars = on
            return _timed_turn(backend, required, generation=True)[1]
        return once

    grammar(False)(), grammar(True)()  # the prompt in the KV cache for both from here on
    off, on = _paired(grammar(False), grammar(True), reps)
    backend.tool_grammars = True
    rows.extend(_rows("grammar: a required turn's generation (off -> on)", off, on))

    def cold_ttft() -> float:
        backend.llama.reset()
        _, _, to_first = _turn(backend, ModelRequest((Message.user(STORY),), tools))
        return to_first * 1000

    ttft = [cold_ttft() for _ in range(reps)]
    prompt_tokens = backend.fit_prompt(ModelRequest((Message.user(STORY),), tools))[1].n_tokens
    rows.append({"benchmark": BENCHMARK, "case": f"time to first token, cold {prompt_tokens}-token "
                 "prompt with tools", "unit": "ms", "base": round(statistics.median(ttft), 1),
                 "runs": reps})

    story = ModelRequest((Message.user(STORY),))
    tokens = list(backend.fit_prompt(story)[1].tokens or ())
    llama = backend.llama
    runtime = backend._runtime

    def raw() -> Timed:
        cpu = time.process_time()
        first: float | None = None
        produced = 0
        for token in llama.generate(tokens, temp=0.0, top_p=0.95, top_k=40, min_p=0.05,
                                    repeat_penalty=1.0):
            if first is None:
                first = time.perf_counter()
            if runtime.is_eog(token):
                break
            llama.detokenize([token], special=True)
            produced += 1
            if produced >= 64:
                break
        assert first is not None
        wall = (time.perf_counter() - first) / max(produced - 1, 1) * 1000
        return wall, (time.process_time() - cpu) / max(produced, 1) * 1000

    def wired() -> Timed:
        return _timed_turn(backend, story)[1]

    raw(), wired()  # the prompt in the KV cache for both from here on
    raw_ms, wired_ms = _paired(raw, wired, reps)
    rows.extend(_rows("end to end: raw Llama.generate -> toolwire stream_turn", raw_ms,
                      wired_ms))

    worker = WorkerBackend(WorkerSpec("llama_cpp", {"model_path": str(path), "max_tokens": 64,
                                                    **OPTIONS}), default_plugin_manager()).start()
    try:
        def in_process() -> Timed:
            return _timed_turn(backend, story)[1]

        server_cpu: list[float] = []

        def in_worker() -> Timed:
            cpu = time.process_time()
            items, timed = _timed_turn(worker, story, worker_pid=worker.status()["pid"])
            server_cpu.append((time.process_time() - cpu) / max(_tokens(items), 1) * 1000)
            return timed

        in_worker()
        server_cpu.clear()
        here, there = _paired(in_process, in_worker, reps)
        rows.extend(_rows("serve's model worker: in-process -> worker process", here, there))
        rows.append({"benchmark": BENCHMARK, "case": "serve's model worker: the server "
                     "process's own CPU a token (the pipe, JSON, the reader thread)",
                     "unit": "ms/token", "base": round(statistics.median(server_cpu), 3),
                     "runs": len(server_cpu)})
    finally:
        worker.close()

    backend.max_tokens = REPEAT_TOKENS
    cases = _cases(2 if quick else 5)
    for rule in (False, True):
        rows.extend(_repeats(backend, cases, rule))
    backend.close()
    rows.append({"benchmark": BENCHMARK, "case": "peak memory (ru_maxrss)", "unit": "MB",
                 "base": round(rss_before), "other": round(rss_loaded),
                 "peak": round(_rss_mb()), "llama_cpp_python": llama_cpp.__version__})
    return rows


def report(rows: list[dict[str, Any]]) -> None:
    """Print the tables."""
    timed = [r for r in rows if not r["case"].startswith("repeats")]
    print_table(timed, ["case", "unit", "base", "other", "overhead_pct", "peak", "runs"],
                "SmolLM2-135M-Instruct Q4_1, 1 thread, paired runs (base -> other)")
    print_table([r for r in rows if r["case"].startswith("repeats")],
                ["case", "reasons", "calls_per_reply", "distinct_per_reply",
                 "tokens_per_reply", "seconds_per_reply", "ended_by_repeat_rule"],
                f"Repeated calls (BFCL simple rows, greedy, {REPEAT_TOKENS} tokens)")


if __name__ == "__main__":
    result = run(quick="--quick" in sys.argv)
    report(result)
    print(f"written: {write_results(BENCHMARK, result)}")
