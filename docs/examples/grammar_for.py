"""The grammar that holds a Qwen model to one call of ``search``, printed."""

import toolwire


@toolwire.tool(read_only=True)
def search(query: str, limit: int = 10) -> str:
    """Search the notes.

    :param query: words to look for
    :param limit: how many hits to return
    """
    return f"{limit} hits for {query!r}"


grammar = toolwire.grammar_for("qwen_xml", [search], tool_choice="required",
                               parallel_tool_calls=False)
print(grammar.family, grammar.tool_choice, grammar.lazy)  # qwen_xml required False
print(grammar.gbnf.splitlines()[0])  # root ::= calls

lazy = toolwire.grammar_for("qwen_xml", [search], tool_choice="auto")
print(lazy.lazy, lazy.triggers)  # True ('<tool_call>',)

try:
    toolwire.grammar_for("qwen_xml", [{"name": "tag", "parameters": {
        "type": "object", "patternProperties": {"^x-": {"type": "string"}}}}])
except toolwire.GrammarSchemaError as exc:
    print(exc.tool, exc.path, exc.keyword)  # tag / patternProperties
