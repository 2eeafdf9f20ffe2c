"""README.md and docs/cli.md say what the command line does: the families it ships, its
commands, the chat's /commands, the extras the setup installs; and the plugin tutorial
shows complete files, not excerpts (issue 21, item 7)."""

from __future__ import annotations

import re
import tomllib

from tests.support.paths import DOCS, REPO
from toolwire.apps.cli.main import COMMANDS
from toolwire.apps.cli.repl import COMMANDS as REPL_COMMANDS
from toolwire.hooks.manager import PluginManager

README = (REPO / "README.md").read_text(encoding="utf-8")
CLI = (DOCS / "cli.md").read_text(encoding="utf-8")


def test_readme_counts_the_families_built_in() -> None:
    said = re.search(r"\((\d+) families built in", README)
    assert said is not None
    assert int(said.group(1)) == len(PluginManager(entry_points=False).parsers())


def test_readme_setup_installs_the_extras_its_commands_need() -> None:
    setup = re.search(r"pip install -e '\.\[([a-z,]+)\]'", README)
    assert setup is not None
    extras = set(setup.group(1).split(","))
    assert {"local", "remote", "serve"} <= extras
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert extras <= set(declared)
    assert "conformance TEMPLATE...` (needs the `test` extra)" in README


def test_readme_and_cli_guide_link_files_that_exist() -> None:
    for doc, text in ((REPO / "README.md", README), (DOCS / "cli.md", CLI)):
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if "://" not in target:
                assert (doc.parent / target).exists(), f"{doc.name} links to missing {target}"


def test_cli_guide_lists_every_command_and_every_chat_command() -> None:
    for module in COMMANDS:
        name = module.__name__.rsplit(".", 1)[1]
        assert f"| `toolwire {name}` |" in CLI, name
    for usage, _ in REPL_COMMANDS:
        shown = usage.replace("|", "\\|")
        assert f"| `{shown}` |" in CLI, usage


def test_the_plugin_tutorial_shows_each_example_file_whole() -> None:
    tutorial = (DOCS / "plugin-tutorial.md").read_text(encoding="utf-8")
    blocks = re.finditer(r'^```[^\n]*title="(?P<path>[^"]+)"[^\n]*\n(?P<body>.*?)^```[ \t]*$',
                         tutorial, re.M | re.S)
    shown = {m.group("path"): m.group("body") for m in blocks}
    assert len(shown) >= 4
    for path, body in shown.items():
        assert body == (REPO / path).read_text(encoding="utf-8"), f"{path} is shown in part"
