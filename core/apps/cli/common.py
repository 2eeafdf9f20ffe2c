"""What the command-line commands share: input errors, option values, JSON files,
template sources, and advice written for the command line.

Exit status, for every command: 0 on success, 2 for a usage or input problem
(:class:`UsageError`, a template no parser claims, a malformed GGUF file), 1
for anything else that failed.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from ...extras import extra_hint

if TYPE_CHECKING:
    from ...hooks.manager import PluginManager

__all__ = ["UsageError", "at_least", "check_family", "cli_advice", "did_you_mean",
           "existing_folder", "extra_hint", "fail", "fraction", "load_tools", "read_json_file",
           "template_source"]


class UsageError(Exception):
    """A problem with what the user asked for: exit status 2."""


def fail(message: str) -> NoReturn:
    """Stop the command with an input error (exit status 2)."""
    raise UsageError(message)


def at_least(minimum: float, kind: Callable[[str], Any] = int,
             maximum: float | None = None) -> Callable[[str], Any]:
    """An argparse ``type=`` that reads ``kind`` and refuses values below ``minimum``
    (or above ``maximum``)."""

    def read(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        if value != value or value < minimum:  # NaN fails too
            raise argparse.ArgumentTypeError(f"must be at least {minimum:g}, not {text}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"must be at most {maximum:g}, not {text}")
        return value

    read.__name__ = kind.__name__  # argparse names the type in its messages
    return read


def existing_folder(text: str) -> str:
    """An argparse ``type=`` for a folder that must exist (``--models-dir``)."""
    folder = Path(text).expanduser()
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(
            f"{text} is not a folder" if folder.exists() else f"{text} does not exist")
    return text


def fraction(text: str) -> float:
    """An argparse ``type=`` for a number in (0, 1] (``--top-p``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be above 0 and at most 1, not {text}")
    return value


def did_you_mean(given: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` when a known name is close to ``given``, else ``""``."""
    names = list(known)
    by_lower = {n.lower(): n for n in names}
    close = difflib.get_close_matches(given.lower(), list(by_lower), n=3, cutoff=0.6)
    if not close:
        return ""
    return " (did you mean " + " or ".join(repr(by_lower[c]) for c in close) + "?)"


def check_family(family: str, plugins: PluginManager) -> None:
    """Stop with an input error, and the closest names, when no parser has ``family``.

    ``derived`` (a parser derived from the template itself) is always a family.
    """
    from ...families.selection import DERIVED_FAMILY

    known = [*sorted(plugins.parsers()), DERIVED_FAMILY]
    if family not in known:
        fail(f"--family {family}: no parser family has that name{did_you_mean(family, known)}; "
             "'toolwire plugins' lists them")


_PYTHON_ADVICE = re.compile(
    r"(?<![\w-])(family|api_key|base_url|model_path|model|provider)="
    r"(?:\.\.\.|'([^']*)'|(?=[\s(),.;]|$))")
_PYTHON_PHRASES = (
    ("the api_key passed to the backend", "the key in the variable --api-key-env names"),
    ("the api_key argument", "the key --api-key-env gave"),
)
_FLAGS = {"family": ("--family", "NAME"), "api_key": ("--api-key-env", "VARIABLE"),
          "base_url": ("--base-url", "URL"), "model_path": ("--model", "PATH"),
          "model": ("--model", "NAME"), "provider": ("--provider", "NAME")}


_OPTION_NAMES = re.compile(r"(?<![\w-])(n_ctx|max_tokens)(?![\w=])")
_OPTION_FLAGS = {"n_ctx": "--ctx-size", "max_tokens": "--max-tokens"}


def cli_advice(message: str) -> str:
    """Advice written for Python callers (``pass api_key=...``, ``family=...``, ``raise
    n_ctx``) rewritten with the command line's flags (``--api-key-env VARIABLE``,
    ``--family NAME``, ``--ctx-size``)."""

    def flag(match: re.Match[str]) -> str:
        name, value = _FLAGS[match.group(1)]
        return f"{name} {match.group(2) or value}"

    for python, flags in _PYTHON_PHRASES:
        message = message.replace(python, flags)
    message = _PYTHON_ADVICE.sub(flag, message)
    return _OPTION_NAMES.sub(lambda m: _OPTION_FLAGS[m.group(1)], message)


def read_json_file(path: str, what: str) -> Any:
    """The JSON value in ``path``; a clear input error otherwise."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        fail(f"{what} file not found: {path}")
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"cannot read {what} file {path}: {exc}")
    except ValueError as exc:
        fail(f"{what} file {path} is not valid JSON: {exc}")


def load_tools(path: str | None) -> list[Any] | None:
    """An OpenAI-style tools list from a JSON file (``None`` when no file is given)."""
    if path is None:
        return None
    tools = read_json_file(path, "tools")
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        fail(f"tools file {path} must hold a JSON list of OpenAI-style tool objects")
    return tools


def template_source(path: str, *, tools: bool = True) -> tuple[str, str]:
    """Read a chat template from a ``.gguf`` file or a template file.

    :returns: (source key, template source)
    """
    file = Path(path)
    if not file.exists():
        fail(f"file not found: {path}")
    if file.is_dir():
        fail(f"{path} is a folder, not a chat template or .gguf file")
    if file.suffix.lower() == ".gguf":
        from ...gguf.metadata import read_gguf_metadata

        try:
            meta = read_gguf_metadata(file)
        except OSError as exc:
            fail(f"cannot read {path}: {exc.strerror or exc}")
        found = meta.template_for(tools=tools)
        if found is None:
            fail(f"{path} has no tokenizer.chat_template in its metadata")
        return found
    try:
        return "file", file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"cannot read template {path}: {exc}")
