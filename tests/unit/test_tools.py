"""The tool registry: schemas derived from typed functions, explicit schemas, names, flags."""

from __future__ import annotations

import re
from typing import Any, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

import toolwire
from toolwire import DuplicateToolError, Tool, ToolDefinitionError, ToolRegistry, tool


def _params(t: Tool) -> dict[str, Any]:
    return dict(t.parameters)


def test_scalar_annotations_map_to_json_schema_types() -> None:
    @tool
    def f(s: str, i: int, x: float, b: bool) -> str:
        return ""

    props = _params(f)["properties"]
    assert props == {"s": {"type": "string"}, "i": {"type": "integer"},
                     "x": {"type": "number"}, "b": {"type": "boolean"}}
    assert _params(f)["required"] == ["s", "i", "x", "b"]


def test_list_and_dict_annotations_describe_their_items() -> None:
    @tool
    def f(tags: list[str], matrix: list[list[int]], options: dict, counts: dict[str, int],
          anything: dict[str, Any]) -> str:
        return ""

    props = _params(f)["properties"]
    assert props["tags"] == {"type": "array", "items": {"type": "string"}}
    assert props["matrix"] == {"type": "array",
                               "items": {"type": "array", "items": {"type": "integer"}}}
    assert props["options"] == {"type": "object"}
    assert props["counts"] == {"type": "object", "additionalProperties": {"type": "integer"}}
    assert props["anything"] == {"type": "object"}


def test_literal_becomes_an_enum_with_its_type() -> None:
    @tool
    def f(order: Literal["asc", "desc"], level: Literal[1, 2, 3]) -> str:
        return ""

    props = _params(f)["properties"]
    assert props["order"] == {"enum": ["asc", "desc"], "type": "string"}
    assert props["level"] == {"enum": [1, 2, 3], "type": "integer"}


def test_optional_parameter_admits_null_and_is_not_required() -> None:
    @tool
    def f(query: str, limit: int | None = None, after: str | None = None) -> str:
        return ""

    params = _params(f)
    assert params["properties"]["limit"] == {"type": ["integer", "null"]}
    assert params["properties"]["after"] == {"type": ["string", "null"]}
    assert params["required"] == ["query"]


def test_parameters_with_defaults_are_optional_and_show_the_default() -> None:
    @tool
    def f(query: str, limit: int = 10, exact: bool = False) -> str:
        return ""

    params = _params(f)
    assert params["required"] == ["query"]
    assert params["properties"]["limit"] == {"type": "integer", "default": 10}
    assert params["properties"]["exact"] == {"type": "boolean", "default": False}


def test_function_without_required_parameters_has_no_required_list() -> None:
    @tool
    def f(limit: int = 3) -> str:
        return ""

    assert "required" not in _params(f)


def test_sphinx_docstring_gives_description_and_parameter_texts() -> None:
    @tool
    def search(query: str, limit: int = 10) -> str:
        """Search the notes for words.

        :param query: words to look for
        :param limit: how many hits to return,
            at most 100
        :returns: the hits, one a line
        """
        return ""

    assert search.description == "Search the notes for words."
    props = _params(search)["properties"]
    assert props["query"]["description"] == "words to look for"
    assert props["limit"]["description"] == "how many hits to return, at most 100"


def test_description_is_all_the_docstring_text_before_the_parameters() -> None:
    @tool
    def search(query: str) -> str:
        """Search the notes.

        Matches whole words only.

        :param query: words to look for
        """
        return ""

    assert search.description == "Search the notes.\n\nMatches whole words only."


def test_google_docstring_args_block_describes_parameters() -> None:
    @tool
    def search(query: str, limit: int = 10) -> str:
        """Search the notes.

        Args:
            query (str): words to look for
            limit: how many hits
                to return

        Returns:
            the hits
        """
        return ""

    props = _params(search)["properties"]
    assert search.description == "Search the notes."
    assert props["query"]["description"] == "words to look for"
    assert props["limit"]["description"] == "how many hits to return"


def test_decorator_options_set_name_description_read_only_and_timeout() -> None:
    @tool(name="find_notes", description="Find notes.", read_only=True, timeout=2.5)
    def f(query: str) -> str:
        """Ignored because a description was given."""
        return query

    assert isinstance(f, Tool)
    assert (f.name, f.description, f.read_only, f.timeout) == ("find_notes", "Find notes.",
                                                              True, 2.5)
    assert f.schema["name"] == "find_notes"


def test_tools_are_writable_unless_marked_read_only() -> None:
    @tool
    def write(text: str) -> str:
        return text

    assert write.read_only is False


def test_decorated_function_can_still_be_called_directly() -> None:
    @tool(read_only=True)
    def add(a: int, b: int = 1) -> int:
        return a + b

    assert add(2, b=3) == 5


def test_workspace_parameter_is_hidden_from_the_model() -> None:
    @tool
    def write(path: str, workspace: str) -> str:
        return ""

    params = _params(write)
    assert list(params["properties"]) == ["path"]
    assert params["required"] == ["path"]
    assert write.accepts_workspace is True


def test_explicit_schema_tool_keeps_its_schema_and_flags() -> None:
    schema = {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {"type": "object",
                       "properties": {"city": {"type": "string"},
                                      "unit": {"type": "string", "enum": ["c", "f"]}},
                       "required": ["city"]},
    }
    t = Tool(schema=schema, function=lambda city, unit="c": f"{city} {unit}", read_only=True)
    assert t.name == "get_weather"
    assert t.description == "Current weather for a city."
    assert t.parameters == schema["parameters"]
    assert t.read_only is True
    assert t.openai_schema() == {"type": "function", "function": schema}


def test_explicit_schema_may_be_given_in_the_openai_tools_form() -> None:
    schema = {"name": "ping", "description": "Ping.",
              "parameters": {"type": "object", "properties": {}}}
    t = Tool(schema={"type": "function", "function": schema}, function=lambda: "pong")
    assert dict(t.schema) == schema


def test_explicit_schema_drops_a_workspace_property() -> None:
    t = Tool(schema={"name": "w", "parameters": {
        "type": "object", "properties": {"workspace": {"type": "string"}},
        "required": ["workspace"]}}, function=lambda workspace: "", accepts_workspace=True)
    assert t.parameters == {"type": "object", "properties": {}}


def test_explicit_schema_with_non_standard_type_names_is_normalised() -> None:
    t = Tool(schema={"name": "f", "parameters": {
        "type": "dict", "properties": {"x": {"type": "float"}}}}, function=lambda x: "")
    assert t.parameters == {"type": "object", "properties": {"x": {"type": "number"}}}


@pytest.mark.parametrize("schema, words", [
    ({"name": "has space"}, "not a valid identifier"),
    ({"name": ""}, "not a valid identifier"),
    ({"name": "f", "parameters": {"type": "array"}}, "type 'object'"),
    ({"name": "f", "parameters": {"type": "object", "properties": {},
                                  "required": ["ghost"]}}, "ghost"),
    ({"name": "f", "parameters": {"type": "object", "properties": {
        "p": {"type": "string", "pattern": "("}}}}, "not a valid JSON schema"),
])
def test_unusable_explicit_schema_is_a_definition_error(schema: dict[str, Any],
                                                        words: str) -> None:
    with pytest.raises(ToolDefinitionError, match=words) as info:
        Tool(schema=schema, function=lambda: "")
    assert isinstance(info.value, TypeError)


class Point:
    """A type that has no JSON schema."""


def test_annotation_without_a_json_schema_is_a_definition_error_naming_the_parameter() -> None:
    def f(where: Point) -> str:
        return ""

    with pytest.raises(ToolDefinitionError, match="'where'"):
        tool(f)


def test_positional_only_parameter_is_a_definition_error() -> None:
    def f(a: int, /) -> str:
        return ""

    with pytest.raises(ToolDefinitionError, match="positional-only"):
        tool(f)


def test_registry_refuses_a_second_tool_with_the_same_name() -> None:
    @tool
    def search(query: str) -> str:
        return ""

    @tool(name="search")
    def other(text: str) -> str:
        return ""

    registry = ToolRegistry([search])
    with pytest.raises(DuplicateToolError, match="'search'") as info:
        registry.add(other)
    assert isinstance(info.value, ValueError)
    assert registry["search"] is search
    assert len(registry) == 1


def test_registry_wraps_plain_functions_and_keeps_registration_order() -> None:
    def zeta(x: int) -> int:
        return x

    def alpha(y: str) -> str:
        return y

    registry = ToolRegistry()
    made = registry.add(zeta)
    registry.add(alpha)
    assert isinstance(made, Tool)
    assert registry.names() == ["zeta", "alpha"]
    assert "zeta" in registry
    assert registry.get("missing") is None


def test_read_only_registry_view_offers_only_read_only_tools() -> None:
    @tool(read_only=True)
    def read(path: str) -> str:
        return ""

    @tool
    def write(path: str, text: str) -> str:
        return ""

    registry = ToolRegistry([read, write])
    assert [t.name for t in registry.offered(read_only=True)] == ["read"]
    assert [t.name for t in registry.offered(read_only=False)] == ["read", "write"]


def test_tool_is_exported_at_the_package_root() -> None:
    assert toolwire.tool is tool
    assert toolwire.Tool is Tool


# -- a name matches its rule whole (issue 40, item 7) -------------------------------------

_VALID_NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.\-]{0,127}", fullmatch=True)
_AROUND = st.sampled_from(["", "\n", "\r\n", " ", "\t", "\x00", "é", "-", "_", "9"])


@pytest.mark.parametrize("name", ["x\n", "x\r\n", "lookup\n", "a" * 128 + "\n", "\nx"])
def test_a_name_with_a_line_break_around_it_is_not_a_tool_name(name: str) -> None:
    with pytest.raises(ToolDefinitionError, match="not a valid identifier"):
        Tool(schema={"name": name}, function=lambda: "")


@given(_AROUND, _VALID_NAMES, _AROUND)
def test_a_tool_name_is_accepted_exactly_when_all_of_it_follows_the_rule(
        before: str, name: str, after: str) -> None:
    name = before + name + after
    whole = re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.\-]{0,127}", name) is not None
    try:
        made = Tool(schema={"name": name}, function=lambda: "")
    except ToolDefinitionError:
        assert not whole
    else:
        assert whole and made.name == name
