"""What goes wrong when a grammar is asked for.

::

    ToolwireError
    ├── GrammarError (ValueError)            no grammar can say this
    │   ├── GrammarFormatError               the family's record (or parser) cannot be
    │   │                                    written as a grammar
    │   └── GrammarSchemaError               a tool's schema uses a keyword the grammar
    │                                        cannot express, or a name the markup cannot carry
    └── ToolChoiceError (ValueError)         a tool_choice that is not one of the OpenAI forms,
                                             or names a tool that is not offered

Both reach the caller of :func:`toolwire.grammar_for`; during a chat turn a
backend turns a :class:`GrammarError` into an ``error`` event (``tool_choice``
``"required"`` or a named tool) or a one-time ``grammar_unavailable``
diagnostic (``"auto"``, which then runs unconstrained).
"""

from __future__ import annotations

from ..errors import ToolwireError

__all__ = ["GrammarError", "GrammarFormatError", "GrammarSchemaError", "ToolChoiceError"]


class GrammarError(ToolwireError, ValueError):
    """No grammar can be written for this family, these tools and this choice.

    :ivar family: the family whose calls were to be constrained.
    """

    def __init__(self, message: str, *, family: str = "") -> None:
        super().__init__(message)
        self.family = family


class GrammarFormatError(GrammarError):
    """The family's record (or its hand-written parser) cannot be written as a grammar.

    :ivar feature: what the grammar cannot say (``GrammarArguments``, ``no record``...).
    """

    def __init__(self, message: str, *, family: str = "", feature: str = "") -> None:
        super().__init__(message, family=family)
        self.feature = feature


class GrammarSchemaError(GrammarError):
    """A tool's schema cannot be written as a grammar.

    :ivar tool: the tool's name.
    :ivar path: where in its parameters (``/properties/tags/items``).
    :ivar keyword: the JSON-schema keyword (``patternProperties``...), or ``name``
        for a tool or parameter name the family's markup cannot carry.
    """

    def __init__(self, message: str, *, family: str = "", tool: str = "", path: str = "",
                 keyword: str = "") -> None:
        super().__init__(message, family=family)
        self.tool = tool
        self.path = path
        self.keyword = keyword


class ToolChoiceError(ToolwireError, ValueError):
    """A ``tool_choice`` that is not ``"auto"``, ``"required"``, ``"none"`` or
    ``{"type": "function", "function": {"name": ...}}`` naming an offered tool."""
