"""toolwire in SGLang's detector slot (``--tool-call-parser toolwire``).

``python -m toolwire.engines.sglang [launch_server's arguments]`` starts SGLang with it.

SGLang names its detectors in a static dict,
``FunctionCallParser.ToolCallParserEnum``, with no registry of its own. The launcher
(:mod:`.__main__`) puts :class:`.detector.ToolwireDetector` in that dict under
``toolwire`` and ``toolwire-<family>``, reads the served model's chat template and
chooses its family (a template no family claims stops it with the reason), then
hands over to SGLang's own ``sglang.launch_server`` with the same arguments, in
the same process. SGLang 0.5.23 also runs general plugins (its
``sglang.srt.plugins`` entry-point group) early in every process, and toolwire's
entry point there does the registration alone, so ``sglang serve ...
--tool-call-parser toolwire`` works too. :func:`.detector.register` does
the first part for a program that starts SGLang's server its own way.
"""

from __future__ import annotations

__all__: list[str] = []
