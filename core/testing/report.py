"""What :func:`~toolwire.testing.check_parser` reports: one result per property."""

from __future__ import annotations

from typing import Any, Literal

import attrs

from ..errors import (
    ToolwireError,
)

__all__ = ["KIT_AUDIT_EVENT", "ConformanceError", "ConformanceReport", "PropertyResult"]

KIT_AUDIT_EVENT = "toolwire.testing.kit"
"""The audit event (:func:`sys.audit`) the kit raises when :func:`check_parser` or
:func:`fuzz_parser` starts, with the parser's name and the template's label: a test
suite's audit hook can tell which of its tests run the kit (toolwire's own puts them
in its ``kit`` tier)."""

PROPERTIES: tuple[str, ...] = (
    "round_trip",
    "chunking_invariance",
    "no_markup_in_text",
    "garbage_never_raises",
    "argument_typing",
    "parallel_calls",
    "drifted_calls",
    "detection",
)
"""The property names, in the order they run and are reported."""

Status = Literal["passed", "failed", "skipped"]

# -- the report -------------------------------------------------------------------------


class ConformanceError(ToolwireError, AssertionError):
    """A parser failed :func:`check_parser`; :attr:`report` says which properties.

    It is an :class:`AssertionError`, so pytest shows it as a test failure.
    """

    def __init__(self, report: ConformanceReport) -> None:
        super().__init__(report.describe_failures())
        self.report = report


@attrs.frozen
class PropertyResult:
    """The outcome of one property.

    :ivar name: the property (one of :data:`PROPERTIES`).
    :ivar status: ``"passed"``, ``"failed"`` or ``"skipped"``.
    :ivar examples: examples tried (up to and including the first failure).
    :ivar falsifying_text: the text the parser was fed in the smallest failing
        example (cut to 2000 characters), when there is one.
    :ivar error: what went wrong, for a failure.
    :ivar reason: why the property was skipped.
    """

    name: str
    status: Status
    examples: int = 0
    falsifying_text: str | None = None
    error: str | None = None
    reason: str | None = None

    @property
    def passed(self) -> bool:
        """``True`` unless the property failed (a skipped property did not fail)."""
        return self.status != "failed"

    def to_dict(self) -> dict[str, Any]:
        """This result as JSON-ready data."""
        return attrs.asdict(self)


@attrs.frozen
class ConformanceReport:
    """What :func:`check_parser` found, property by property.

    :ivar family: the parser family checked.
    :ivar plugin: the plugin that registered it.
    :ivar template: a label for the template (file name or sha256 prefix).
    :ivar results: one :class:`PropertyResult` per property, in :data:`PROPERTIES` order.
    :ivar markers: the template markup learnt (empty when it could not render a call).
    :ivar notes: what the suite learnt about the template (dropped content, no
        parallel calls, ...).
    """

    family: str
    plugin: str
    template: str
    results: tuple[PropertyResult, ...]
    markers: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        """``True`` when no property failed."""
        return all(r.passed for r in self.results)

    @property
    def failed(self) -> tuple[str, ...]:
        """The names of the failed properties."""
        return tuple(r.name for r in self.results if r.status == "failed")

    @property
    def statuses(self) -> dict[str, Status]:
        """``{property name: status}``."""
        return {r.name: r.status for r in self.results}

    @property
    def examples(self) -> int:
        """Examples tried over all properties."""
        return sum(r.examples for r in self.results)

    def __getitem__(self, name: str) -> PropertyResult:
        for result in self.results:
            if result.name == name:
                return result
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        """This report as JSON-ready data (what ``toolwire conformance --json`` prints)."""
        return {"family": self.family, "plugin": self.plugin, "template": self.template,
                "passed": self.passed, "markers": list(self.markers),
                "notes": list(self.notes), "properties": [r.to_dict() for r in self.results]}

    def describe_failures(self) -> str:
        """A readable account of every failed property (empty when all passed)."""
        lines = []
        for result in self.results:
            if result.status != "failed":
                continue
            lines.append(f"{self.family} on {self.template}: property {result.name!r} failed "
                         f"after {result.examples} example(s): {result.error}")
            if result.falsifying_text is not None:
                lines.append(f"  falsifying text: {result.falsifying_text!r}")
        return "\n".join(lines)

    def format_table(self) -> str:
        """The results as a small text table (property, status, examples, detail)."""
        rows = [("property", "status", "examples", "detail")]
        for r in self.results:
            detail = r.error if r.status == "failed" else r.reason or ""
            first = (detail or "").splitlines()[0] if detail else ""
            rows.append((r.name, r.status.upper(), str(r.examples), first[:90]))
        widths = [max(len(row[i]) for row in rows) for i in range(3)]
        return "\n".join(f"{a:<{widths[0]}}  {b:<{widths[1]}}  {c:>{widths[2]}}  {d}".rstrip()
                         for a, b, c, d in rows)


