"""The docs cannot rot: every hook documented and tested, snippets equal their sources.

* docs/hooks.md has a section per hookspec in core/hookspecs.py, whose signature
  block is exactly the spec's signature, and whose example runs;
* every hook is exercised by at least one test in tests/;
* every code block titled with a source path (```python title="path"```) is a run
  of whole lines of that file (docs/plugin-tutorial.md shows the example plugin
  this way);
* the python examples of docs/testing-plugins.md run (with the example plugin
  of docs/examples on the import path, as if installed);
* docs/troubleshooting.md covers every environment variable the plugin manager reads.
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import DOCS, REPO
from toolwire.hooks import specs as hookspecs
from toolwire.testing import check_parser

TESTS = REPO / "tests"
EXAMPLE = DOCS / "examples" / "bracket_calls"

_FENCE = re.compile(r"^```(?P<info>[^\n]*)\n(?P<body>.*?)^```[ \t]*$", re.M | re.S)
_TITLE = re.compile(r'title="(?P<path>[^"]+)"')
_LINK = re.compile(r"\]\((?P<target>[^)#\s]+)(?:#[^)]*)?\)")


def _hooks() -> dict[str, Callable[..., Any]]:
    marker = f"{hookspecs.PROJECT_NAME}_spec"
    return {name: fn for name, fn in vars(hookspecs).items()
            if callable(fn) and hasattr(fn, marker)}


def _annotation(value: Any) -> str:
    return value if isinstance(value, str) else inspect.formatannotation(value)


def _signature(name: str, function: Callable[..., Any]) -> str:
    """``def name(a: T, ...) -> R`` as written in the source (annotations unevaluated)."""
    signature = inspect.signature(function)
    parameters = []
    for parameter in signature.parameters.values():
        text = parameter.name
        if parameter.annotation is not parameter.empty:
            text += f": {_annotation(parameter.annotation)}"
        if parameter.default is not parameter.empty:
            text += f" = {parameter.default!r}"
        parameters.append(text)
    returns = "" if signature.return_annotation is signature.empty \
        else f" -> {_annotation(signature.return_annotation)}"
    return f"def {name}({', '.join(parameters)}){returns}"


def _sections(path: Path) -> dict[str, str]:
    """``{heading text: body}`` for the ``## `` sections of a markdown file."""
    parts = re.split(r"^## (.+)$", path.read_text(encoding="utf-8"), flags=re.M)
    return {parts[i].strip().strip("`"): parts[i + 1] for i in range(1, len(parts), 2)}


def _blocks(text: str, info: str) -> list[str]:
    return [m.group("body") for m in _FENCE.finditer(text) if m.group("info").strip() == info]


def _titled_blocks() -> Iterator[tuple[str, str, str]]:
    for doc in sorted(DOCS.rglob("*.md")):
        for match in _FENCE.finditer(doc.read_text(encoding="utf-8")):
            title = _TITLE.search(match.group("info"))
            if title:
                yield doc.relative_to(REPO).as_posix(), title.group("path"), match.group("body")


def _run(code: str, label: str) -> None:
    exec(compile(code, label, "exec"), {"__name__": f"docs_example_{label}"})


@pytest.fixture
def example_plugin_importable(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The example plugin on the import path, cwd at the repo root (as the docs assume)."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.chdir(REPO)
    had = "toolwire_bracket_calls" in sys.modules
    yield
    if not had:
        sys.modules.pop("toolwire_bracket_calls", None)


# -- hooks ---------------------------------------------------------------------------------


def test_hookspecs_are_found() -> None:
    assert {"register_parsers", "on_tool_call"} <= set(_hooks())


@pytest.mark.parametrize("hook", sorted(_hooks()))
def test_every_hook_has_a_section_with_its_exact_signature(hook: str) -> None:
    sections = _sections(DOCS / "hooks.md")
    assert hook in sections, f"docs/hooks.md has no '## `{hook}`' section"
    signatures = _blocks(sections[hook], "python signature")
    assert signatures, f"the {hook} section has no ```python signature block"
    assert signatures[0].strip() == _signature(hook, _hooks()[hook])


def test_every_hooks_section_documents_a_hook() -> None:
    assert set(_sections(DOCS / "hooks.md")) == set(_hooks())


@pytest.mark.parametrize("hook", sorted(_hooks()))
def test_every_hook_example_runs(hook: str) -> None:
    examples = _blocks(_sections(DOCS / "hooks.md")[hook], "python")
    assert examples, f"the {hook} section has no runnable example"
    for number, code in enumerate(examples):
        _run(code, f"{hook}_{number}")


@pytest.mark.parametrize("hook", sorted(_hooks()))
def test_every_hook_is_exercised_by_a_test(hook: str) -> None:
    users = [p.name for p in sorted(TESTS.rglob("test_*.py"))
             if p.name != "test_docs.py" and hook in p.read_text(encoding="utf-8")]
    assert users, f"no test in tests/ exercises the {hook} hook"


# -- snippets from tested files ------------------------------------------------------------


def test_the_tutorial_shows_the_example_plugin_from_its_files() -> None:
    shown = {path for doc, path, _ in _titled_blocks() if doc == "docs/plugin-tutorial.md"}
    base = "docs/examples/bracket_calls/"
    assert {base + "pyproject.toml", base + "toolwire_bracket_calls/__init__.py",
            base + "toolwire_bracket_calls/template.jinja",
            base + "tests/test_bracket_calls.py"} <= shown


@pytest.mark.parametrize(("doc", "path", "body"), list(_titled_blocks()),
                         ids=lambda value: value if "\n" not in value else "")
def test_snippet_matches_its_source_file(doc: str, path: str, body: str) -> None:
    source = REPO / path
    assert source.is_file(), f"{doc} quotes {path}, which does not exist"
    lines, snippet = source.read_text(encoding="utf-8").splitlines(), body.splitlines()
    assert snippet, f"{doc} has an empty block titled {path}"
    starts = [i for i in range(len(lines) - len(snippet) + 1)
              if lines[i:i + len(snippet)] == snippet]
    assert starts, (f"a block in {doc} titled {path} is not a run of lines of that file; "
                    "copy it from the file again")


def test_docs_links_point_to_existing_files() -> None:
    for name in ("plugin-tutorial.md", "hooks.md", "testing-plugins.md", "troubleshooting.md"):
        doc = DOCS / name
        for match in _LINK.finditer(doc.read_text(encoding="utf-8")):
            target = match.group("target")
            if "://" not in target:
                assert (doc.parent / target).exists(), f"{name} links to missing {target}"


# -- testing guide and troubleshooting -----------------------------------------------------


@pytest.mark.kit
@pytest.mark.usefixtures("example_plugin_importable")
def test_testing_guide_examples_run() -> None:
    examples = _blocks((DOCS / "testing-plugins.md").read_text(encoding="utf-8"), "python")
    assert len(examples) >= 4
    for number, code in enumerate(examples):
        _run(code, f"testing_plugins_{number}")


def test_testing_guide_lists_check_parser_parameters() -> None:
    (block,) = _blocks((DOCS / "testing-plugins.md").read_text(encoding="utf-8"),
                       "python signature")
    (function,) = ast.parse(block.strip() + ": ...").body
    assert isinstance(function, ast.FunctionDef)
    documented = [a.arg for a in (*function.args.args, *function.args.kwonlyargs)]
    assert documented == list(inspect.signature(check_parser).parameters)


def test_troubleshooting_covers_every_plugin_environment_variable() -> None:
    from toolwire.hooks import manager as plugin_manager

    source = Path(plugin_manager.__file__).read_text(encoding="utf-8")
    variables = set(re.findall(r"TOOLWIRE_[A-Z_]+", source))
    text = (DOCS / "troubleshooting.md").read_text(encoding="utf-8")
    assert variables and all(v in text for v in variables)
    for topic in ("no_parser", "PluginWarning", "toolwire conformance", "parser_error"):
        assert topic in text
