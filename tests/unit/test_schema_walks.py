"""Schemas are walked in linear time, and a schema over a limit is refused where it enters
(issue 28, item 1).

A 3 KB schema whose ``$defs`` chain 40 levels of ``{"anyOf": [{"$ref": next},
{"$ref": next}]}`` (or ``allOf``, ``oneOf``) applies 2^41 subschemas to one value:
it is refused, naming the tool and the budget, as a library tool, in a
``/v1/chat/completions`` body (a 400 from a real server on 127.0.0.1) and from a
real MCP server (left out, the server's other tools offered). Below the budgets,
and past them where a walk is called directly, every walk (types, nullability,
grammar, argument typing, normalization) looks at each subschema a bounded number
of times: the tests count the look-ups, so an exponential walk fails them instead
of timing out. Recursive schemas (a tree) still work everywhere.
"""

from __future__ import annotations

import http.server
import json
import random
import sys
import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

import toolwire.grammar.json_values as json_values_module
import toolwire.grammar.nested as nested_module
import toolwire.vocabulary.schema as schema_module
from tests.apps.test_server import json_request, running_server, scripted_app
from tests.support.families import parse, plugins
from tests.support.gbnf_sampler import GbnfSampler
from tests.support.grammar_schemas import call_problems
from tests.support.mcp_hostile_server import SCRIPT as HOSTILE_SERVER
from tests.support.mcp_hostile_server import chain_schema
from toolwire import (
    Dispatcher,
    Tool,
    ToolArgumentsError,
    ToolCall,
    ToolCallEndEvent,
    ToolDefinitionError,
    ToolRegistry,
    ToolSchemaBudgetError,
    grammar_for,
)
from toolwire.conversation.validation import (
    ValidationStepsExceeded,
    bounded_validator,
    validation_steps,
)
from toolwire.grammar import GrammarSchemaError
from toolwire.grammar.build import build_grammar
from toolwire.limits import SchemaLimits
from toolwire.parse.values import decode_nested_value
from toolwire.testing import ScriptedBackend
from toolwire.vocabulary.schema import (
    ToolSchemaIndex,
    allows_null,
    normalize_schema,
    schema_types,
    tool_parameters_by_name,
)
from toolwire.vocabulary.schema_size import check_schema_size
from toolwire.vocabulary.tool_choice import resolve_tool_choice

DEFAULT_MAX_NODES = SchemaLimits().max_nodes
DEFAULT_MAX_DEPTH = SchemaLimits().max_depth
DEFAULT_MAX_EXPANSION = SchemaLimits().max_expansion

KEYWORDS = ("anyOf", "allOf", "oneOf")
HOSTILE_LEVELS = 40
WALK_LEVELS = 20
"""Levels of the chains walked directly (past the budget): 2^20 look-ups if exponential."""
WITHIN_LEVELS = 7
"""The longest two-branch chain within the default expansion budget (509 subschemas)."""
GRAMMAR_FAMILIES = ("hermes_json", "qwen_xml", "glm_xml", "minimax_m3", "pythonic", "kimi_k2")
LOOKUP_CAP = 20_000
"""More look-ups than this in one walk of a 20-level chain means it is not linear."""


def _never_called(**arguments: Any) -> str:
    return "ok"


def descending_chain(levels: int, dialect: str | None = None) -> dict[str, Any]:
    """Two branches per level, each descending into property ``a`` of the next level."""
    extra = {"$schema": dialect} if dialect else {}
    defs: dict[str, Any] = {
        f"n{i}": {**extra, "anyOf": [
            {"type": "object", "properties": {"a": {"$ref": f"#/$defs/n{i + 1}"}}},
            {"type": "object", "properties": {"a": {"$ref": f"#/$defs/n{i + 1}"}}}]}
        for i in range(levels)}
    defs[f"n{levels}"] = {"type": "string"}
    return {"type": "object", "properties": {"x": {"$ref": "#/$defs/n0"}}, "$defs": defs}


TREE = {"type": "object", "required": ["root"],
        "properties": {"root": {"$ref": "#/$defs/node"}},
        "$defs": {"node": {"type": "object", "required": ["name"], "properties": {
            "name": {"type": "string", "maxLength": 8},
            "children": {"type": "array", "maxItems": 2, "items": {"$ref": "#/$defs/node"}}}}}}


@pytest.fixture
def lookups(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts every ``resolve_ref`` the schema helpers and the grammar make; fails a walk
    (by raising) once it has made more than :data:`LOOKUP_CAP`."""
    count = [0]
    real = schema_module.resolve_ref

    def counting(schema: Any, root: Any, _depth: int = 0) -> Any:
        count[0] += 1
        if count[0] > LOOKUP_CAP:
            raise AssertionError(f"more than {LOOKUP_CAP} look-ups: the walk is not linear")
        return real(schema, root, _depth)

    for module in (schema_module, json_values_module, nested_module):
        monkeypatch.setattr(module, "resolve_ref", counting)
    return count


# -- refused where a tool enters ----------------------------------------------------------


@pytest.mark.parametrize("keyword", KEYWORDS)
def test_a_40_level_chain_is_refused_as_a_library_tool_naming_it_and_the_budget(
        keyword: str) -> None:
    params = chain_schema(HOSTILE_LEVELS, keyword)
    assert len(json.dumps(params)) < 4000
    with pytest.raises(ToolSchemaBudgetError) as info:
        Tool(schema={"name": "deep_search", "parameters": params}, function=_never_called)
    error = info.value
    assert isinstance(error, ToolDefinitionError)
    assert (error.tool, error.budget, error.limit) == ("deep_search", "expansion",
                                                       DEFAULT_MAX_EXPANSION)
    assert error.found > DEFAULT_MAX_EXPANSION
    assert "'deep_search'" in str(error) and "'expansion'" in str(error)


def test_a_registry_refuses_the_tool_of_a_function_too() -> None:
    registry = ToolRegistry()
    openai = {"type": "function", "function": {"name": "chained",
                                                "parameters": chain_schema(HOSTILE_LEVELS,
                                                                           "anyOf")}}
    with pytest.raises(ToolSchemaBudgetError, match="'chained'"):
        registry.add(Tool(schema=openai, function=_never_called))
    assert len(registry) == 0


@pytest.mark.parametrize("keyword", KEYWORDS)
def test_a_40_level_chain_given_as_a_mapping_refuses_the_grammar_naming_the_budget(
        keyword: str) -> None:
    tool = {"type": "function", "function": {"name": "deep_search",
                                             "parameters": chain_schema(HOSTILE_LEVELS,
                                                                        keyword)}}
    with pytest.raises(GrammarSchemaError) as info:
        grammar_for("qwen_xml", [tool], plugins=plugins())
    assert info.value.tool == "deep_search" and info.value.keyword == "expansion"


def test_a_chain_within_the_budget_is_accepted_and_one_level_more_is_not() -> None:
    size = check_schema_size(chain_schema(WITHIN_LEVELS, "anyOf"), tool="t")
    assert size.expansion <= DEFAULT_MAX_EXPANSION
    with pytest.raises(ToolSchemaBudgetError):
        check_schema_size(chain_schema(WITHIN_LEVELS + 1, "anyOf"), tool="t")


@pytest.mark.parametrize("params", [
    {"$defs": {"a": {"anyOf": [{"type": "string"}, {"$ref": "#/$defs/a"}]}},
     "properties": {"x": {"$ref": "#/$defs/a"}}},
    {"type": "object", "allOf": [{"$ref": "#"}]},
    {"$defs": {"a": {"$anchor": "here", "not": {"$ref": "#here"}}},
     "properties": {"x": {"$ref": "#/$defs/a"}}},
], ids=["anyOf", "allOf-root", "anchor"])
def test_a_subschema_applied_to_a_value_through_itself_is_refused_as_a_cycle(
        params: dict[str, Any]) -> None:
    with pytest.raises(ToolSchemaBudgetError) as info:
        Tool(schema={"name": "loop", "parameters": params}, function=_never_called)
    assert info.value.budget == "cycle" and "'loop'" in str(info.value)


def test_a_schema_object_that_contains_itself_is_refused_as_a_cycle() -> None:
    properties: dict[str, Any] = {"type": "object"}
    properties["properties"] = {"again": properties}
    with pytest.raises(ToolSchemaBudgetError) as info:
        Tool(schema={"name": "ouroboros", "parameters": properties}, function=_never_called)
    assert info.value.budget == "cycle" and "contains itself" in str(info.value)


def test_references_are_followed_as_jsonschema_follows_them_anchors_and_ids() -> None:
    anchored = {f"n{i}": {"$anchor": f"a{i}", "anyOf": [{"$ref": f"#a{i + 1}"},
                                                        {"$ref": f"#a{i + 1}"}]}
                for i in range(HOSTILE_LEVELS)}
    anchored[f"n{HOSTILE_LEVELS}"] = {"$anchor": f"a{HOSTILE_LEVELS}", "type": "string"}
    by_id = {f"n{i}": {"$id": f"https://example.test/n{i}",
                       "anyOf": [{"$ref": f"n{i + 1}"}, {"$ref": f"n{i + 1}"}]}
             for i in range(HOSTILE_LEVELS)}
    by_id[f"n{HOSTILE_LEVELS}"] = {"$id": f"https://example.test/n{HOSTILE_LEVELS}",
                                   "type": "string"}
    for params in ({"$defs": anchored, "properties": {"x": {"$ref": "#a0"}}},
                   {"$id": "https://example.test/root", "$defs": by_id,
                    "properties": {"x": {"$ref": "n0"}}}):
        with pytest.raises(ToolSchemaBudgetError) as info:
            check_schema_size(params, tool="t")
        assert info.value.budget == "expansion"


def test_a_schema_over_the_node_or_depth_budget_is_refused_naming_it() -> None:
    wide = {"type": "object", "properties": {f"p{i}": {"type": "string"}
                                             for i in range(DEFAULT_MAX_NODES // 2)}}
    with pytest.raises(ToolSchemaBudgetError) as info:
        Tool(schema={"name": "wide", "parameters": wide}, function=_never_called)
    assert (info.value.tool, info.value.budget) == ("wide", "nodes")
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(DEFAULT_MAX_DEPTH):
        deep = {"type": "object", "properties": {"a": deep}}
    with pytest.raises(ToolSchemaBudgetError) as info:
        Tool(schema={"name": "deep", "parameters": deep}, function=_never_called)
    assert (info.value.tool, info.value.budget) == ("deep", "depth")


def test_a_python_object_used_in_many_places_counts_at_each() -> None:
    shared: Any = {"type": "string"}
    for _ in range(30):  # 2^30 places as JSON, 31 objects in Python
        shared = {"type": "object", "properties": {"a": shared, "b": shared}}
    with pytest.raises(ToolSchemaBudgetError) as info:
        check_schema_size(shared, tool="t", limits=SchemaLimits(max_depth=1_000))
    assert info.value.budget == "nodes"


def test_a_tree_schema_and_the_bfcl_shapes_are_within_every_budget() -> None:
    size = check_schema_size(TREE, tool="tree")
    assert size.expansion <= 3 and size.depth < DEFAULT_MAX_DEPTH
    tool = Tool(schema={"name": "tree", "parameters": TREE}, function=_never_called)
    assert tool.parameters["$defs"]["node"]["properties"]["children"]["items"] == \
        {"$ref": "#/$defs/node"}


# -- the HTTP route and MCP ---------------------------------------------------------------


@pytest.fixture(scope="module")
def idle_server() -> Iterator[str]:
    with running_server(scripted_app(ScriptedBackend([]))) as base:
        yield base


@pytest.mark.parametrize("keyword", KEYWORDS)
def test_a_40_level_chain_in_a_completions_request_is_a_400_naming_the_tool(
        idle_server: str, keyword: str) -> None:
    body = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "add", "parameters": {
                "type": "object", "properties": {"a": {"type": "integer"}}}}},
                {"type": "function", "function": {
                    "name": "deep_search", "parameters": chain_schema(HOSTILE_LEVELS,
                                                                      keyword)}}]}
    status, answer = json_request(idle_server, "POST", "/v1/chat/completions", body)
    assert status == 400
    error = answer["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == "tools[1].function.parameters"
    assert error["code"] == "tool_schema_too_complex"
    assert "'deep_search'" in error["message"] and "'expansion'" in error["message"]
    status, _ = json_request(idle_server, "GET", "/healthz")
    assert status == 200


@pytest.mark.process
@pytest.mark.parametrize("keyword", KEYWORDS)
def test_an_mcp_servers_hostile_tool_is_left_out_with_a_note_and_its_others_offered(
        keyword: str) -> None:
    pytest.importorskip("mcp")
    from toolwire.plugins.mcp_tools import MCPServers
    from toolwire.plugins.mcp_tools.config import server_from_command

    config = server_from_command(f"{sys.executable} {HOSTILE_SERVER} {keyword} "
                                 f"{HOSTILE_LEVELS}", name="chains")
    with MCPServers([config], connect_timeout=90.0) as servers:
        tools = servers.tools()
        notes = list(servers.notes)
    assert [t.name for t in tools] == ["add"]
    assert any("'hostile'" in note and "'chains'" in note and "'expansion'" in note
               for note in notes), notes


# -- each walk is linear -------------------------------------------------------------------


@pytest.mark.parametrize("keyword", KEYWORDS)
def test_types_and_nullability_of_a_20_level_chain_take_a_linear_number_of_look_ups(
        keyword: str, lookups: list[int]) -> None:
    params = chain_schema(WALK_LEVELS, keyword)
    params["$defs"][f"n{WALK_LEVELS}"] = {"type": ["string", "null"]}
    x = params["properties"]["x"]
    assert schema_types(x, params) == frozenset({"string", "null"})
    assert allows_null(x, params)
    index = ToolSchemaIndex(tool_parameters_by_name([{"name": "t", "parameters": params}]))
    assert index.is_string("t", "x") and not index.refuses_null("t", "x")
    assert index.coerce("t", "x", "plain words") == "plain words"
    assert lookups[0] <= 20 * (WALK_LEVELS + 2)


def test_normalization_copies_a_shared_object_once(lookups: list[int]) -> None:
    shared: Any = {"type": "float"}
    for _ in range(40):
        shared = {"type": "dict", "properties": {"a": shared, "b": shared}}
    notes: list[str] = []
    copy = normalize_schema(shared, notes)
    assert copy["type"] == "object" and copy["properties"]["a"] is copy["properties"]["b"]
    assert len(notes) == 41


@pytest.mark.parametrize("keyword", KEYWORDS)
@pytest.mark.parametrize("family", GRAMMAR_FAMILIES)
def test_the_grammar_of_a_20_level_chain_takes_a_linear_number_of_look_ups(
        family: str, keyword: str, lookups: list[int]) -> None:
    params = normalize_schema(chain_schema(WALK_LEVELS, keyword))
    # a tool object, as a Tool would be: the budget is the Tool's, this is the walk
    tool = SimpleNamespace(name="deep_search", parameters=params)
    fmt = plugins().parser(family).format
    grammar = build_grammar(fmt, [tool], resolve_tool_choice("required"))
    assert lookups[0] <= 40 * (WALK_LEVELS + 2)
    assert len(grammar.gbnf) < 400 * (WALK_LEVELS + 2)


def test_values_read_against_a_20_level_chain_take_a_linear_number_of_look_ups(
        lookups: list[int]) -> None:
    params = normalize_schema(chain_schema(WALK_LEVELS, "anyOf"))
    params["properties"]["n"] = {"type": "object", "properties": {"x": {"$ref": "#/$defs/n0"},
                                                                  "k": {"type": "integer"}}}
    ns = "]<]minimax[>["
    raw = f"{ns}<x>words{ns}</x>{ns}<k>7{ns}</k>"
    value = decode_nested_value(raw, ns, params["properties"]["n"], params)
    assert value == {"x": "words", "k": 7}
    assert lookups[0] <= 20 * (WALK_LEVELS + 2)


def test_validation_within_the_budget_applies_at_most_the_expansion_per_value() -> None:
    params = chain_schema(WITHIN_LEVELS, "anyOf")
    expansion = check_schema_size(params, tool="t").expansion
    validator = bounded_validator(params)
    with validation_steps(3 * expansion):  # a few keywords per applied subschema
        errors = list(validator.iter_errors({"x": 5}))
    assert errors and errors[0].validator == "anyOf"
    with validation_steps(3 * expansion):
        assert list(validator.iter_errors({"x": "fine"})) == []


@pytest.mark.parametrize("dialect", [None, "http://json-schema.org/draft-07/schema#"])
def test_branches_that_multiply_with_the_values_depth_stop_at_the_step_budget(
        dialect: str | None) -> None:
    params = descending_chain(HOSTILE_LEVELS, dialect)
    tool = Tool(schema={"name": "nest", "parameters": params}, function=_never_called)
    dispatcher = Dispatcher(ToolRegistry([tool]), timeout=None)
    value: Any = 5
    for _ in range(HOSTILE_LEVELS):
        value = {"a": value}
    with pytest.raises(ToolArgumentsError, match="steps") as info:
        dispatcher.check(ToolCall("c", "nest", {"x": value}))
    assert info.value.tool == "nest"
    good: Any = "leaf"
    for _ in range(HOSTILE_LEVELS):
        good = {"a": good}
    assert dispatcher.check(ToolCall("c", "nest", {"x": good}))[1] == {"x": good}


def test_the_step_budget_is_an_error_only_inside_validation_steps() -> None:
    validator = bounded_validator({"type": "object", "properties": {"a": {"type": "string"}}})
    with validation_steps(1), pytest.raises(ValidationStepsExceeded):
        list(validator.iter_errors({"a": 1}))
    assert len(list(validator.iter_errors({"a": 1}))) == 1


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.seen.append(self.path)
        body = json.dumps({"type": "string"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_a_remote_reference_is_never_fetched_and_the_model_is_told() -> None:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/schema.json"
        params = {"type": "object", "properties": {"x": {"$ref": url}}}
        dispatcher = Dispatcher(ToolRegistry([Tool(schema={"name": "remote",
                                                           "parameters": params},
                                                   function=_never_called)]), timeout=None)
        result = dispatcher.dispatch(ToolCall("c", "remote", {"x": 3}))
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert result.is_error and result.error_kind == "invalid_arguments"
    assert url in result.content and "never fetched" in result.content
    assert _Recorder.seen == []


# -- recursive schemas still work ------------------------------------------------------------


def _markup_chars(family: str) -> str:
    fmt = plugins().parser(family).format
    return "".join(sorted({c for marker in fmt.markup for c in marker}))


@pytest.mark.parametrize("family", GRAMMAR_FAMILIES)
def test_a_recursive_schema_gives_a_grammar_whose_sentences_read_back_as_valid_calls(
        family: str) -> None:
    tools = [{"name": "plant", "parameters": TREE}]
    grammar = grammar_for(family, tools, plugins=plugins(), max_calls=1)
    sampler = GbnfSampler(grammar.gbnf, _markup_chars(family))
    rng = random.Random(2028)
    for _ in range(6):
        text = sampler.sentence(rng)
        events = parse(family, [text], tools, prompt_tail="\n")
        calls = [(e.name, dict(e.arguments)) for e in events if isinstance(e, ToolCallEndEvent)]
        assert calls and call_problems(calls, tools) == [], text


def test_a_recursive_schema_types_validates_and_dispatches() -> None:
    tool = Tool(schema={"name": "plant", "parameters": TREE}, function=_never_called)
    index = ToolSchemaIndex({"plant": tool.parameters})
    assert index.types("plant", "root") == frozenset({"object"})
    tree = {"name": "a", "children": [{"name": "b", "children": [{"name": "c"}]}]}
    dispatcher = Dispatcher(ToolRegistry([tool]), timeout=None)
    assert dispatcher.dispatch(ToolCall("c", "plant", {"root": tree})).content == "ok"
    bad = dispatcher.dispatch(ToolCall("c", "plant", {"root": {"children": [{"name": 1}]}}))
    assert bad.is_error and bad.error_kind == "invalid_arguments"


# -- measured the same way wherever a tool is made (issue 40, item 4) ------------------------


def _untyped(values: int) -> dict[str, Any]:
    """Parameters of exactly ``values`` JSON values with no ``type`` at the root (toolwire
    adds one); the values are an enum's, which jsonschema checks quickly."""
    return {"properties": {"p": {"enum": list(range(values - 4))}}}


@pytest.mark.parametrize("values", [DEFAULT_MAX_NODES - 2, DEFAULT_MAX_NODES - 1,
                                    DEFAULT_MAX_NODES, DEFAULT_MAX_NODES + 1])
def test_a_tool_made_again_from_its_own_schema_gets_the_same_verdict(values: int) -> None:
    """The server made the tool from the client's schema and the model worker from the
    tool's normalized one: 20,000 untyped values were accepted, then a 500."""
    try:
        made = Tool({"name": "t", "parameters": _untyped(values)}, lambda **k: "")
    except ToolSchemaBudgetError:
        return
    again = Tool(dict(made.schema), lambda **k: "")
    assert again.schema == made.schema


def test_the_model_workers_wire_carries_every_tool_the_server_accepted() -> None:
    from toolwire.backends.worker_wire import decode_request, encode_request
    from toolwire.vocabulary.backend import ModelRequest
    from toolwire.vocabulary.history import Message

    for values in range(DEFAULT_MAX_NODES - 3, DEFAULT_MAX_NODES + 3):
        try:
            tool = Tool({"name": "t", "parameters": _untyped(values)}, lambda **k: "")
        except ToolSchemaBudgetError:
            continue
        request = ModelRequest((Message.user("hi"),), (tool,))
        assert decode_request(encode_request(request)).tools[0].schema == tool.schema
