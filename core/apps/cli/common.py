"""What the command-line commands share: input errors, JSON files, template sources.

Exit status, for every command: 0 on success, 2 for a usage or input problem
(:class:`UsageError`, a template no parser claims, a malformed GGUF file), 1
for anything else that failed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NoReturn

__all__ = ["UsageError", "fail", "load_tools", "read_json_file", "template_source"]


class UsageError(Exception):
    """A problem with what the user asked for: exit status 2."""


def fail(message: str) -> NoReturn:
    """Stop the command with an input error (exit status 2)."""
    raise UsageError(message)


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
    if file.suffix.lower() == ".gguf":
        from ...templates.gguf import read_gguf_metadata

        meta = read_gguf_metadata(file)
        found = meta.template_for(tools=tools)
        if found is None:
            fail(f"{path} has no tokenizer.chat_template in its metadata")
        return found
    try:
        return "file", file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"cannot read template {path}: {exc}")
