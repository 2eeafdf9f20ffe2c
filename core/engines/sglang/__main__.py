"""``python -m toolwire.engines.sglang [sglang.launch_server's arguments]``.

Puts toolwire's detectors in SGLang's ``ToolCallParserEnum``
(:func:`toolwire.engines.sglang.detector.register`), then, when
``--tool-call-parser`` names one of them, reads the served model's chat template
(``--chat-template FILE``, else the tokenizer of ``--tokenizer-path`` or
``--model-path``) and chooses its family, so a template no family claims stops
here with the reason instead of at the first request. Then it hands over to
SGLang's own ``sglang.launch_server`` with the same arguments, in this process.
"""

from __future__ import annotations

import runpy
import sys
from collections.abc import Sequence
from pathlib import Path

import toolwire

from .detector import PARSER_NAME, ToolwireDetector, register

__all__ = ["main", "served_template"]


def _option(argv: Sequence[str], name: str) -> str | None:
    """The value of ``--name VALUE`` or ``--name=VALUE`` (the last one given)."""
    value = None
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
    return value


def served_template(argv: Sequence[str]) -> str | None:
    """The chat template SGLang will serve, read as SGLang reads it (``None``: none found).

    :raises OSError: ``--chat-template`` names a file that cannot be read.
    """
    given = _option(argv, "--chat-template")
    if given is not None and Path(given).is_file():
        return Path(given).read_text(encoding="utf-8")
    source = _option(argv, "--tokenizer-path") or _option(argv, "--model-path")
    if source is None:
        return None
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(
        source, trust_remote_code="--trust-remote-code" in argv)
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("tool_use") or template.get("default")
    return template if isinstance(template, str) else None


def main(argv: Sequence[str] | None = None) -> None:
    """Register toolwire's detectors, check the family, run SGLang's launcher."""
    args = list(sys.argv[1:] if argv is None else argv)
    parser_name = _option(args, "--tool-call-parser") or ""
    template = None
    if parser_name == PARSER_NAME:
        try:
            template = served_template(args)
        except Exception as exc:  # SGLang itself will say what is wrong with the model
            print(f"toolwire: cannot read the served chat template ahead ({exc}); the "
                  "family is chosen at the first request", file=sys.stderr)
        else:
            try:
                family = ToolwireDetector.choose_family(template)
            except toolwire.ToolwireError as exc:
                raise SystemExit(f"toolwire: --tool-call-parser {PARSER_NAME}: {exc}") from exc
            print(f"toolwire: tool calls are read as the {family.name} family",
                  file=sys.stderr)
    register(template)
    sys.argv = ["sglang.launch_server", *args]
    runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
