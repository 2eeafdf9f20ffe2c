"""Benchmark: schema walks in linear time, and hostile schemas refused (issue 28, item 1).

* **Hostile schemas until refusal**: a tool whose ``$defs`` chain 40 levels of
  ``{"anyOf": [{"$ref": next}, {"$ref": next}]}`` (and ``allOf``, ``oneOf``; 3 KB
  of JSON, 2^41 subschemas applied to one value when expanded), offered as a
  library :class:`toolwire.Tool`, in a ``/v1/chat/completions`` body (the same
  parsing the route runs), and by an MCP server (the same tool creation the
  plugin runs); and a schema within the size budgets whose branches descend
  (``{"anyOf": [{"properties": {"a": next}}, ...]}``) validated against a value
  40 levels deep, which jsonschema alone would take 2^40 steps for: the
  dispatcher's validation budget stops it. Time (process time) until the
  refusal, and the peak memory of a second run under tracemalloc. Target: each
  refused in < 1 s and < 100 MB.
* **Ordinary schemas** (every function of the BFCL collection in
  the real schemas, when present): tool creation (normalization, budget,
  metaschema check), parameter types and nullability as the parsers ask for
  them, the grammar build of a JSON, a tagged, a nested and a pythonic family,
  and validation of the ground-truth calls; each as process time, best of N.
  The same functions ran on the commit before the change (numbers kept in
  ``BEFORE`` below, measured the same way on the same machine), so the table
  says whether the ordinary case is any slower.

Run ``python -m benchmarks schema_walks [--quick]``.
"""

from __future__ import annotations

import json
import sys
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from tests.support.paths import SHARED_SCHEMAS

from .harness import print_table, write_results

__all__ = ["BEFORE", "hostile_rows", "load_bfcl", "ordinary_rows", "report", "run"]

BENCHMARK = "schema_walks"
SCHEMAS = SHARED_SCHEMAS
GRAMMAR_FAMILIES = ("hermes_json", "qwen_xml", "minimax_m3", "pythonic")
CHAIN_LEVELS = 40

BEFORE: dict[str, float] = {
    "tool creation (normalize, budget, metaschema)": 2043.1,
    "parameter types and nullability": 29.7,
    "grammar build, hermes_json": 327.6,
    "grammar build, qwen_xml": 2354.0,
    "grammar build, minimax_m3": 6105.2,
    "grammar build, pythonic": 322.2,
    "validation of the ground-truth calls": 49.7,
}
"""Milliseconds (best of two runs of 5, process time) of each ordinary case on commit
92b650f, the one before the change, measured with this module's :func:`ordinary_rows`
in turns with the changed tree on the same machine."""


def _best(func: Callable[[], Any], runs: int) -> float:
    """The least process time of ``runs`` calls, in milliseconds."""
    best = float("inf")
    for _ in range(runs):
        start = time.process_time()
        func()
        best = min(best, time.process_time() - start)
    return best * 1000


# -- the BFCL collection ------------------------------------------------------------------


def _first_value(options: list[Any]) -> tuple[bool, Any]:
    for value in options:
        if value != "":
            return True, value
    return False, None


def load_bfcl() -> tuple[list[dict[str, Any]], list[tuple[list[str], str, dict[str, Any]]]]:
    """Every distinct BFCL function, and ``(names offered, called name, arguments)``
    of each ground-truth call (its first acceptable value per parameter)."""
    functions: dict[str, dict[str, Any]] = {}
    calls: list[tuple[list[str], str, dict[str, Any]]] = []
    if not SCHEMAS.is_dir():
        return [], []
    answers: dict[str, Any] = {}
    for path in sorted((SCHEMAS / "possible_answer").glob("*.json")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                record = json.loads(line)
                answers[record["id"]] = record["ground_truth"]
    for path in sorted(SCHEMAS.glob("BFCL_*.json")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            record = json.loads(line)
            names = []
            for function in record["function"]:
                functions.setdefault(json.dumps(function, sort_keys=True), function)
                names.append(function["name"])
            for call in answers.get(record["id"], ()):
                for name, params in call.items():
                    arguments = {}
                    for key, options in params.items():
                        given, value = _first_value(options)
                        if given:
                            arguments[key] = value
                    calls.append((names, name, arguments))
    return list(functions.values()), calls


# -- ordinary schemas ---------------------------------------------------------------------


def _never_called(**arguments: Any) -> str:
    return "ok"


def ordinary_rows(runs: int) -> list[dict[str, Any]]:
    """Process time of each walk over every BFCL function (empty without the collection)."""
    from toolwire import Dispatcher, Tool, ToolCall, ToolDefinitionError, ToolRegistry, grammar_for
    from toolwire.grammar import GrammarError, clear_grammar_cache
    from toolwire.vocabulary.schema import ToolSchemaIndex, tool_parameters_by_name

    functions, calls = load_bfcl()
    if not functions:
        return []
    tools: dict[str, Tool] = {}

    def create() -> None:
        tools.clear()
        for function in functions:
            try:
                made = Tool(schema=function, function=_never_called)
            except ToolDefinitionError:
                continue
            tools.setdefault(made.name, made)

    create()
    openai = [t.openai_schema() for t in tools.values()]

    def types() -> None:
        index = ToolSchemaIndex(tool_parameters_by_name(openai))
        for tool in tools.values():
            for param in tool.parameters.get("properties") or {}:
                index.types(tool.name, param)
                index.is_string(tool.name, param)
                index.coerce(tool.name, param, "null")

    def grammar(family: str) -> Callable[[], None]:
        def build() -> None:
            clear_grammar_cache()
            for item in openai:
                try:
                    grammar_for(family, [item])
                except GrammarError:
                    pass
        return build

    registry = ToolRegistry(tools.values())
    known = [(name, arguments) for _, name, arguments in calls if name in tools]

    def validate() -> None:
        dispatcher = Dispatcher(registry, timeout=None)
        for name, arguments in known:
            try:
                dispatcher.check(ToolCall("c", name, dict(arguments)))
            except Exception:  # an invalid ground truth is still a validation
                pass

    cases: list[tuple[str, Callable[[], None], int]] = [
        ("tool creation (normalize, budget, metaschema)", create, len(functions)),
        ("parameter types and nullability", types, len(tools)),
        *((f"grammar build, {family}", grammar(family), len(openai))
          for family in GRAMMAR_FAMILIES),
        ("validation of the ground-truth calls", validate, len(known)),
    ]
    rows = []
    for case, func, count in cases:
        best = _best(func, runs)
        before = BEFORE.get(case)
        rows.append({"benchmark": BENCHMARK, "case": case, "items": count, "ms": best,
                     "before_ms": before if before is not None else "",
                     "ratio": best / before if before else "", "runs": runs})
    return rows


# -- hostile schemas ----------------------------------------------------------------------


def chain_schema(levels: int, keyword: str) -> dict[str, Any]:
    """Parameters whose ``$defs`` chain ``levels`` levels of two references to the next."""
    defs: dict[str, Any] = {f"n{i}": {keyword: [{"$ref": f"#/$defs/n{i + 1}"},
                                                {"$ref": f"#/$defs/n{i + 1}"}]}
                            for i in range(levels)}
    defs[f"n{levels}"] = {"type": "string"}
    return {"type": "object", "properties": {"x": {"$ref": "#/$defs/n0"}},
            "required": ["x"], "$defs": defs}


def descending_chain_schema(levels: int) -> dict[str, Any]:
    """Parameters whose ``$defs`` chain ``levels`` levels of two branches, each
    descending into property ``a`` of the next: small, and within both budgets."""
    defs: dict[str, Any] = {
        f"n{i}": {"anyOf": [{"type": "object", "properties": {"a": {"$ref": f"#/$defs/n{i + 1}"}}},
                            {"type": "object", "properties": {"a": {"$ref": f"#/$defs/n{i + 1}"}}}]}
        for i in range(levels)}
    defs[f"n{levels}"] = {"type": "string"}
    return {"type": "object", "properties": {"x": {"$ref": "#/$defs/n0"}},
            "required": ["x"], "$defs": defs}


def _until_refused(func: Callable[[], Any]) -> tuple[float, float, str]:
    """Process time (ms, untraced), peak traced memory (MB, a second run) and the
    refusal's first words."""
    start = time.process_time()
    try:
        outcome = func()
        message = f"not refused: {outcome!r:.60}"
    except Exception as exc:  # the refusal is what is measured
        message = f"{type(exc).__name__}: {exc}"
    elapsed = (time.process_time() - start) * 1000
    tracemalloc.start()
    try:
        func()
    except Exception:  # the same refusal again, measured for memory
        pass
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return elapsed, peak / 1e6, message


def hostile_rows() -> list[dict[str, Any]]:
    """Each hostile schema until its refusal."""
    from toolwire import Dispatcher, Tool, ToolCall, ToolRegistry
    from toolwire.apps.server.completion_request import parse_completion_request
    from toolwire.limits import ServerLimits
    from toolwire.plugins.mcp_tools.toolset import MCPServers

    cases: list[tuple[str, Callable[[], Any], int]] = []
    for keyword in ("anyOf", "allOf", "oneOf"):
        params = chain_schema(CHAIN_LEVELS, keyword)
        size = len(json.dumps(params))
        function = {"name": "hostile", "description": "", "parameters": params}
        cases.append((f"{keyword} x{CHAIN_LEVELS}: library Tool",
                      lambda f=function: Tool(schema=f, function=_never_called), size))
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}],
                "tools": [{"type": "function", "function": function}]}
        cases.append((f"{keyword} x{CHAIN_LEVELS}: /v1/chat/completions body",
                      lambda b=body: parse_completion_request(b, ServerLimits()), size))
    mcp_params = chain_schema(CHAIN_LEVELS, "anyOf")
    cases.append((f"anyOf x{CHAIN_LEVELS}: MCP server's tool",
                  lambda: _mcp_listing(MCPServers, mcp_params), len(json.dumps(mcp_params))))
    deep = descending_chain_schema(CHAIN_LEVELS)
    dispatcher = Dispatcher(ToolRegistry([Tool(schema={"name": "deep", "parameters": deep},
                                               function=_never_called)]), timeout=None)
    value: Any = 5
    for _ in range(CHAIN_LEVELS):
        value = {"a": value}
    cases.append((f"descending anyOf x{CHAIN_LEVELS}: validating a value {CHAIN_LEVELS} deep",
                  lambda: dispatcher.check(ToolCall("c", "deep", {"x": value})),
                  len(json.dumps(deep))))
    rows = []
    for case, func, size in cases:
        ms, mb, message = _until_refused(func)
        rows.append({"benchmark": BENCHMARK, "case": case, "schema_bytes": size, "ms": ms,
                     "peak_mb": mb, "refusal": message[:90],
                     "meets_target": ms < 1000 and mb < 100 and
                     not message.startswith("not refused")})
    return rows


def _mcp_listing(servers_class: Any, params: dict[str, Any]) -> Any:
    """The plugin's tool creation for a listed tool (no process: the listing is given)."""
    from types import SimpleNamespace

    from toolwire.plugins.mcp_tools.config import server_from_command

    owner = servers_class([])
    try:
        item = SimpleNamespace(name="hostile", title=None, description="", annotations=None,
                               input_schema=params)
        tools = owner._build([(server_from_command("hostile-server"), [item])], (), False)
        if tools:
            return tools
        raise RuntimeError(owner.notes[-1])
    finally:
        owner.close()


def run(quick: bool = False) -> list[dict[str, Any]]:
    """The hostile schemas until refusal, then the ordinary walks."""
    return hostile_rows() + ordinary_rows(3 if quick else 9)


def report(rows: list[dict[str, Any]]) -> None:
    """Print the two tables."""
    hostile = [r for r in rows if "refusal" in r]
    ordinary = [r for r in rows if "refusal" not in r]
    if hostile:
        print_table(hostile, ["case", "schema_bytes", "ms", "peak_mb", "meets_target",
                              "refusal"],
                    "Hostile schemas until refused (target < 1 s and < 100 MB)")
    if ordinary:
        print_table(ordinary, ["case", "items", "ms", "before_ms", "ratio", "runs"],
                    "Walks of the BFCL schemas, process time, best of N (before: the "
                    "commit before the change)")


if __name__ == "__main__":
    result = run(quick="--quick" in sys.argv)
    report(result)
    print(f"written: {write_results(BENCHMARK, result)}")
