"""toolwire in SGLang's detector slot: ``python -m toolwire.engines.sglang ... --tool-call-parser toolwire``.

SGLang has no plugin mechanism for tool-call parsers: its detectors are the
static dict ``FunctionCallParser.ToolCallParserEnum``. The one supported way in
is this launcher (:mod:`.__main__`): it puts :class:`.detector.ToolwireDetector`
in that dict under ``toolwire`` and ``toolwire-<family>``, reads the served
model's chat template and chooses its family (a template no family claims stops
it with the reason), then hands over to SGLang's own ``sglang.launch_server``
with the same arguments, in the same process. :func:`.detector.register` does
the first part for a program that starts SGLang's server its own way.
"""

from __future__ import annotations

__all__: list[str] = []
