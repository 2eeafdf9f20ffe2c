"""The package: what it installs, what importing it costs, its public API and errors."""

from __future__ import annotations

import configparser
import importlib.metadata
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

import toolwire
from toolwire import errors

HEAVY = ("llama_cpp", "openai")


def run_python(code: str, cwd: Path) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=cwd, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.process
def test_import_toolwire_does_not_import_heavy_backends(tmp_path: Path) -> None:
    out = run_python(
        "import json, sys, toolwire; "
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))", tmp_path)
    assert json.loads(out) == []


@pytest.mark.process
def test_loading_the_builtin_plugins_does_not_import_heavy_backends(tmp_path: Path) -> None:
    out = run_python(
        "import json, sys, toolwire; "
        "manager = toolwire.PluginManager(entry_points=False); "
        "manager.describe(); manager.backends(); "
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))", tmp_path)
    assert json.loads(out) == []


@pytest.mark.process
def test_only_toolwire_is_installed_at_the_top_level(tmp_path: Path) -> None:
    out = run_python(
        "import importlib.util, json, toolwire.plugins.qwen_xml as q; "
        "print(json.dumps([importlib.util.find_spec(n) is not None "
        "for n in ('core', 'plugins')] + [q.__name__]))", tmp_path)
    assert json.loads(out) == [False, False, "toolwire.plugins.qwen_xml"]


@pytest.mark.process
def test_a_script_beside_the_clone_imports_the_installed_toolwire(tmp_path: Path) -> None:
    """`git clone` names the clone toolwire: a script run from the folder holding it must
    not import that folder as an empty namespace package (setup.cfg makes every editable
    install strict, a path entry that Python's own search finds first)."""
    repository = Path(__file__).resolve().parents[2]
    (tmp_path / "toolwire").symlink_to(repository, target_is_directory=True)
    (tmp_path / "script.py").write_text("import toolwire\nprint(hasattr(toolwire, 'tool'))\n")
    done = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout.strip()) == (0, "True"), done.stderr


def test_every_editable_install_is_strict() -> None:
    config = configparser.ConfigParser()
    config.read(Path(__file__).resolve().parents[2] / "setup.cfg")
    assert config.get("editable_wheel", "mode") == "strict"


def test_installed_distribution_publishes_plugins_script_and_pytest_fixtures() -> None:
    dist = importlib.metadata.distribution("toolwire")
    assert dist.version == toolwire.__version__
    eps = dist.entry_points
    assert eps.select(group="toolwire")["qwen_xml"].value == "toolwire.plugins.qwen_xml"
    assert eps.select(group="console_scripts")["toolwire"].value == "toolwire.apps.cli.main:main"
    assert eps.select(group="pytest11")["toolwire"].value == "toolwire.testing.pytest_plugin"


def test_package_ships_type_information() -> None:
    spec = importlib.util.find_spec("toolwire")
    assert spec is not None and spec.origin is not None
    assert (Path(spec.origin).parent / "py.typed").exists()


def test_every_public_name_exists() -> None:
    missing = [name for name in toolwire.__all__ if not hasattr(toolwire, name)]
    assert missing == []
    assert len(set(toolwire.__all__)) == len(toolwire.__all__)


@pytest.mark.process
def test_command_line_runs_as_a_module(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "toolwire", "plugins", "--json"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60,
                          env={"TOOLWIRE_LOAD_PLUGINS": "", "PATH": ""})
    assert done.returncode == 0, done.stderr
    names = [p["name"] for p in json.loads(done.stdout)]
    assert "toolwire.plugins.qwen_xml" in names


# -- the error hierarchy -------------------------------------------------------------


@pytest.mark.parametrize("error, builtin", [
    (errors.PluginConflictError, ValueError),
    (errors.ToolDefinitionError, TypeError),
    (errors.DuplicateToolError, ValueError),
    (errors.UnknownToolError, LookupError),
    (errors.ToolArgumentsError, ValueError),
    (errors.ToolPermissionError, PermissionError),
    (errors.ToolTimeoutError, TimeoutError),
    (errors.ParserNotFoundError, LookupError),
    (errors.ParserConflictError, ValueError),
    (errors.BackendNotFoundError, LookupError),
    (errors.TemplateError, ValueError),
    (errors.TemplateSecurityError, ValueError),
    (errors.GGUFError, ValueError),
])
def test_errors_also_inherit_the_matching_builtin(error: type[Exception],
                                                  builtin: type[Exception]) -> None:
    assert issubclass(error, errors.ToolwireError)
    assert issubclass(error, builtin)


def test_every_error_derives_from_toolwire_error_and_is_exported() -> None:
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert issubclass(cls, errors.ToolwireError), name
        assert getattr(toolwire, name) is cls, name


def test_tool_call_errors_carry_the_tool_and_sit_under_one_base() -> None:
    for cls in (errors.UnknownToolError, errors.ToolArgumentsError, errors.ToolPermissionError,
                errors.ToolExecutionError, errors.ToolTimeoutError):
        error = cls("for the model", tool="search")
        assert isinstance(error, errors.ToolCallError)
        assert error.tool == "search" and str(error) == "for the model"


def test_plugin_errors_carry_the_plugin_name() -> None:
    conflict = errors.PluginConflictError("parser", "qwen_xml", "a", "b")
    assert isinstance(conflict, errors.PluginError)
    assert conflict.plugin == "b"
    assert str(conflict) == "parser 'qwen_xml' is registered by both plugin 'a' and plugin 'b'"
    assert errors.PluginLoadError("x", plugin="p").plugin == "p"


def test_error_tree_in_the_docstring_names_every_error() -> None:
    doc = errors.__doc__ or ""
    assert [name for name in errors.__all__ if name not in doc] == []
