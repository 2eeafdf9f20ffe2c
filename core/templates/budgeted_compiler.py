"""The code Jinja generates for a template, routed through the render's budget.

Jinja compiles a template to Python. The sandbox intercepts calls, attribute
look-ups and the operators it lists; what it cannot intercept is written here
into the generated code instead: ``+`` (a guard only where its operands are not
two short strings or two integers), ``~``, list, tuple and dict literals, and
``{{ value }}`` of a value that may not be a string (measured before ``str()``
prints it; most of a template's output is surely text and is left as Jinja
writes it). Every ``{% for %}`` iterable is passed through the filter named
:data:`LOOP_FILTER` by the environment (Jinja allows no custom node types).
"""

from __future__ import annotations

from typing import Any, Final

from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame, optimizeconst

from .render_budget import UNCOUNTED_SIZE

__all__ = ["LOOP_FILTER", "BudgetedCodeGenerator"]

LOOP_FILTER: Final = "_toolwire_loop_items"
"""The filter every ``{% for %}`` iterable is passed through, so that each item is a
step of the budget."""


class BudgetedCodeGenerator(CodeGenerator):
    """Jinja's code generator, routing what can build large values through the budget.

    ``~``, list/tuple/dict literals and ``{{ value }}`` are not operations the
    sandbox can intercept, so their generated code calls the environment's
    guards instead; ``+`` calls its guard directly, which costs half of the
    sandbox's ``call_binop`` route on the operator templates use most.
    """

    @optimizeconst
    def visit_Add(self, node: nodes.BinExpr, frame: Frame) -> None:
        # Inline for the common cases, two short strings or two integers (neither can
        # grow a value much); anything else goes through the guard. Both operands are
        # evaluated once, left first, into names of their own.
        self._guard_names = getattr(self, "_guard_names", 0) + 1
        left, right = f"t_add{self._guard_names}_l", f"t_add{self._guard_names}_r"
        # (`&` rather than `and` so that both sides are evaluated whatever the first is.)
        self.write(f"({left} + {right} if ((type({left} := ")
        self.visit(node.left, frame)
        self.write(f") is str) & (type({right} := ")
        self.visit(node.right, frame)
        self.write(f") is str) and len({left}) + len({right}) <= {UNCOUNTED_SIZE}) or "
                   f"(type({left}) is int and type({right}) is int) "
                   f"else environment.guarded_add({left}, {right}))")

    @optimizeconst
    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.guarded_concat((")
        for operand in node.nodes:
            self.visit(operand, frame)
            self.write(", ")
        self.write("))")

    def _output_child_pre(self, node: nodes.Expr, frame: Frame, finalize: Any) -> None:
        # `{{ value }}`: a value that is not a string is measured before str() prints it
        super()._output_child_pre(node, frame, finalize)
        if not _surely_text(node):
            self.write("(t_out if type(t_out := ")

    def _output_child_post(self, node: nodes.Expr, frame: Frame, finalize: Any) -> None:
        if not _surely_text(node):
            self.write(") is str else environment.guarded_output(t_out))")
        super()._output_child_post(node, frame, finalize)

    def visit_List(self, node: nodes.List, frame: Frame) -> None:
        self.write("environment.guarded_literal(")
        super().visit_List(node, frame)
        self.write(")")

    def visit_Dict(self, node: nodes.Dict, frame: Frame) -> None:
        self.write("environment.guarded_literal(")
        super().visit_Dict(node, frame)
        self.write(")")

    def visit_Tuple(self, node: nodes.Tuple, frame: Frame) -> None:
        if node.ctx != "load":  # a loop or assignment target
            super().visit_Tuple(node, frame)
            return
        self.write("environment.guarded_literal(")
        super().visit_Tuple(node, frame)
        self.write(")")


# Filters whose result is always a string (``safe``'s is a Markup, also text).
_TEXT_FILTERS: Final = frozenset({
    "capitalize", "center", "e", "escape", "filesizeformat", "forceescape", "format", "indent",
    "join", "lower", "pprint", "replace", "safe", "string", "striptags", "title", "tojson",
    "trim", "truncate", "upper", "urlencode", "urlize", "wordwrap", "xmlattr",
})


def _surely_text(node: nodes.Expr) -> bool:
    """Whether an output expression can only be a string (or raise): one that need not
    be measured before it is printed (most of a real template's output)."""
    if isinstance(node, nodes.Const):
        return isinstance(node.value, str)
    if isinstance(node, nodes.TemplateData | nodes.Concat):
        return True
    if isinstance(node, nodes.Filter):
        return node.name in _TEXT_FILTERS
    if isinstance(node, nodes.Add):  # a string plus anything is a string or a TypeError
        return _surely_text(node.left) or _surely_text(node.right)
    if isinstance(node, nodes.CondExpr):
        return node.expr2 is not None and _surely_text(node.expr1) and _surely_text(node.expr2)
    return False


