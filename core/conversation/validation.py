"""jsonschema validation of a call's arguments, bounded in work and kept local.

The dispatcher validates with jsonschema, which applies keywords without
remembering what it already checked: ``anyOf`` branches that each descend into
the same part of a value multiply with the value's depth (two branches, 40
levels: 2^40 steps), even for a schema small enough for every limit of
:mod:`toolwire.vocabulary.schema_size`. So a validator from
:func:`bounded_validator` counts every keyword it applies and, inside
:func:`validation_steps`, stops with :class:`ValidationStepsExceeded` once a
validation has taken its allowance: :data:`VALIDATION_STEPS` and
:data:`VALIDATION_STEPS_PER_VALUE` for each JSON value of the arguments
(:func:`step_allowance`; an ordinary call takes a few dozen steps, about 15 for
each value of a large one).

Its regular expressions (``pattern``, ``patternProperties`` and the
``additionalProperties`` that depends on them) are matched by
:mod:`toolwire.vocabulary.patterns`, with the ``regex`` package's timeout (a
validation's matches share
:attr:`~toolwire.limits.PatternLimits.match_seconds`, and its deadline), never by
Python's ``re``, which backtracks holding the interpreter lock: a value the timeout
stops is a validation error the model reads ("could not be checked against the
pattern").

A schema from outside that is not a tool's parameters (an MCP tool's
``outputSchema``) passes the same one place: :func:`checked_validator` measures
it against the schema limits and checks it is a JSON schema, and
:func:`value_problems` checks a value against it within the same step allowance
and, given one, a deadline.

It also never fetches a ``$ref`` from the network (jsonschema's default
registry would, with ``urllib`` and no timeout): a remote reference is
unresolvable, and the dispatcher says so to the model. A ``$schema`` inside a
subschema would make jsonschema switch to another draft's validator, one that
does not count; the copy the validator checks against leaves it out (the
root's ``$schema`` chooses the draft, as before).
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

import jsonschema
import referencing
import referencing.exceptions
from jsonschema.exceptions import SchemaError, ValidationError
from jsonschema.protocols import Validator
from jsonschema.validators import extend, validator_for

from ..errors import ToolDefinitionError
from ..limits import PATTERN_LIMITS, SchemaLimits
from ..vocabulary.patterns import PatternError, compile_pattern, search
from ..vocabulary.schema_size import check_schema_size

__all__ = ["VALIDATION_STEPS", "VALIDATION_STEPS_PER_VALUE", "ValidationStepsExceeded",
           "bounded_validator", "checked_validator", "step_allowance", "validation_steps",
           "value_problems"]

VALIDATION_STEPS: Final = SchemaLimits().validation_steps
"""The keywords any validation of a call's arguments may apply (jsonschema takes
about half a second for them on a busy 2-core machine)..."""
VALIDATION_STEPS_PER_VALUE: Final = SchemaLimits().validation_steps_per_value
"""... and the keywords it may apply in addition for each JSON value the arguments
hold, so large arguments are checked in time linear in their size."""

_DATA_KEYWORDS: Final = frozenset({"enum", "const", "default", "examples"})
_NAMED_SCHEMAS: Final = frozenset({"properties", "patternProperties", "$defs", "definitions",
                                   "dependentSchemas", "dependencies"})


class ValidationStepsExceeded(Exception):
    """A validation inside :func:`validation_steps` took more keywords than allowed, or
    ran past its deadline.

    :ivar steps: the allowance that was used up (or that was left unused).
    :ivar timed_out: the deadline came first.
    """

    def __init__(self, steps: int, *, timed_out: bool = False) -> None:
        super().__init__("validation ran past its deadline" if timed_out
                         else f"validation took more than {steps:,} steps")
        self.steps = steps
        self.timed_out = timed_out


_CLOCK_EVERY: Final = 256
"""Steps between two looks at the clock, when a validation has a deadline."""


class _Allowance:
    """The steps left to one validation (and the time left to its pattern matches). The
    share of the arguments' values is added once, when the fixed share runs out: an
    ordinary call never counts them."""

    __slots__ = ("arguments", "deadline", "left", "matching", "steps")

    def __init__(self, steps: int, arguments: Any, deadline: float | None = None) -> None:
        self.steps = steps
        self.left = steps
        self.arguments = arguments
        self.deadline = deadline
        self.matching = PATTERN_LIMITS.match_seconds

    def match_seconds(self) -> float:
        """The time the next pattern match may take."""
        if self.deadline is None:
            return self.matching
        return min(self.matching, self.deadline - time.monotonic())

    def spend(self) -> None:
        """Take one step; raise when none is left (or the deadline has passed)."""
        self.left -= 1
        if self.deadline is not None and self.left % _CLOCK_EVERY == 0 and \
                time.monotonic() > self.deadline:
            raise ValidationStepsExceeded(self.steps, timed_out=True)
        if self.left >= 0:
            return
        if self.arguments is not _NO_ARGUMENTS:
            share = VALIDATION_STEPS_PER_VALUE * _values_in(self.arguments)
            self.arguments = _NO_ARGUMENTS
            self.steps += share
            self.left += share
            if self.left >= 0:
                return
        raise ValidationStepsExceeded(self.steps)


_NO_ARGUMENTS: Final = object()
_ALLOWANCE: contextvars.ContextVar[_Allowance | None] = contextvars.ContextVar(
    "toolwire_validation_steps", default=None)


def _values_in(arguments: Any) -> int:
    values = 0
    stack = [arguments]
    while stack:
        value = stack.pop()
        values += 1
        if isinstance(value, Mapping):
            stack.extend(value.values())
        elif isinstance(value, list | tuple):
            stack.extend(value)
    return values


def step_allowance(arguments: Any) -> int:
    """The steps a validation of ``arguments`` may take (see the module doc)."""
    return VALIDATION_STEPS + VALIDATION_STEPS_PER_VALUE * _values_in(arguments)


class validation_steps:
    """``with validation_steps(steps, arguments):`` bounds the validations of bounded
    validators in the block to ``steps`` keywords, and (given ``arguments``)
    :data:`VALIDATION_STEPS_PER_VALUE` more for each of their JSON values; given a
    ``deadline`` (``time.monotonic()`` seconds), also to that time.

    :raises ValidationStepsExceeded: from inside the block, once they are used up.
    """

    __slots__ = ("_allowance", "_token")

    def __init__(self, steps: int, arguments: Any = _NO_ARGUMENTS, *,
                 deadline: float | None = None) -> None:
        self._allowance = _Allowance(steps, arguments, deadline)
        self._token: contextvars.Token[_Allowance | None] | None = None

    def __enter__(self) -> None:
        self._token = _ALLOWANCE.set(self._allowance)

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _ALLOWANCE.reset(self._token)
            self._token = None


KeywordFunction = Callable[[Any, Any, Any, Any], Any]


def _counted(function: KeywordFunction) -> KeywordFunction:
    def counted(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        allowance = _ALLOWANCE.get()
        if allowance is not None:
            allowance.spend()
        return function(validator, value, instance, schema)

    return counted


class _Unchecked(Exception):
    """A text could not be matched against a pattern (internal: a validation error)."""


def _matches(pattern: str, text: str) -> bool:
    allowance = _ALLOWANCE.get()
    seconds = allowance.match_seconds() if allowance is not None else \
        PATTERN_LIMITS.match_seconds
    started = time.monotonic()
    try:
        return search(compile_pattern(pattern), text, seconds)
    except PatternError as exc:
        raise _Unchecked(f"the schema's pattern {pattern!r} cannot be used: {exc}") from None
    except TimeoutError:
        raise _Unchecked(f"a value of {len(text):,} characters could not be checked against "
                         f"the pattern {pattern!r} within {PATTERN_LIMITS.match_seconds:g} s; "
                         "send a shorter one") from None
    finally:
        if allowance is not None:
            allowance.matching -= time.monotonic() - started


def _pattern(validator: Any, pattern: Any, instance: Any, schema: Any) -> Any:
    if not validator.is_type(instance, "string") or not isinstance(pattern, str):
        return
    try:
        matched = _matches(pattern, instance)
    except _Unchecked as exc:
        yield ValidationError(str(exc))
        return
    if not matched:
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: Any, instance: Any, schema: Any) -> Any:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            try:
                matched = _matches(pattern, key)
            except _Unchecked as exc:
                yield ValidationError(str(exc), path=[key])
                continue
            if matched:
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, extra: Any, instance: Any, schema: Any) -> Any:
    # jsonschema's own, with the property names matched by the timed matcher
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras = []
    try:
        for key in instance:
            if key not in properties and not any(_matches(p, key) for p in patterns):
                extras.append(key)
    except _Unchecked as exc:
        yield ValidationError(str(exc))
        return
    if validator.is_type(extra, "object"):
        for key in extras:
            yield from validator.descend(instance[key], extra, path=key)
    elif not extra and extras:
        names = ", ".join(repr(key) for key in sorted(extras, key=str))
        if patterns:
            verb = "does" if len(extras) == 1 else "do"
            listed = ", ".join(repr(p) for p in sorted(patterns))
            yield ValidationError(f"{names} {verb} not match any of the regexes: {listed}")
        else:
            verb = "was" if len(extras) == 1 else "were"
            yield ValidationError(f"Additional properties are not allowed ({names} {verb} "
                                  "unexpected)")


_BOUNDED_KEYWORDS: Final[dict[str, KeywordFunction]] = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
}
"""The keywords that match regular expressions, in place of jsonschema's."""

_CLASSES: dict[type[Any], type[Any]] = {}
_CLASSES_LOCK = threading.Lock()


def _counting_class(base: type[Any]) -> type[Any]:
    with _CLASSES_LOCK:
        made = _CLASSES.get(base)
        if made is None:
            made = extend(base, validators={  # type: ignore[no-untyped-call]
                keyword: _counted(_BOUNDED_KEYWORDS.get(keyword, function))
                for keyword, function in base.VALIDATORS.items()})
            _CLASSES[base] = made
        return made


def bounded_validator(schema: Mapping[str, Any], base: type[Any] | None = None) -> Validator:
    """A validator of ``schema`` that counts its steps and resolves only references
    inside the schema (and the JSON Schema metaschemas).

    :param base: the jsonschema validator class to count the steps of (default:
        the one of the schema's ``$schema``, 2020-12 without one).
    """
    copy = _without_inner_dialects(schema, root=True)
    if base is None:
        base = validator_for(copy, default=jsonschema.Draft202012Validator)
    cls = _counting_class(base)
    validator: Validator = cls(copy, registry=referencing.Registry())
    return validator


def checked_validator(schema: Mapping[str, Any], *, tool: str,
                      part: str = "output schema") -> Validator:
    """The bounded validator of a schema from outside, once it passed what a tool's
    parameters pass: the schema limits (its regular expressions compiled within
    theirs) and jsonschema's check that it is a schema at all.

    :raises ToolSchemaBudgetError: over a limit (naming ``tool``, ``part`` and the
        limit).
    :raises ToolDefinitionError: it is not a valid JSON schema.
    """
    check_schema_size(schema, tool=tool, part=part)
    copy = dict(schema)
    base = validator_for(copy, default=jsonschema.Draft202012Validator)
    try:
        base.check_schema(copy)
    except SchemaError as exc:
        raise ToolDefinitionError(f"tool {tool!r}: its {part} is not a valid JSON schema: "
                                  f"{exc.message}") from exc
    return bounded_validator(copy, base)


def value_problems(validator: Validator, value: Any, *, deadline: float | None = None,
                   limit: int = 5) -> list[str]:
    """What is wrong with ``value`` under ``validator`` (at most ``limit`` problems, each
    with where it is), checked within :func:`step_allowance` of it and ``deadline``.

    :raises ValidationStepsExceeded: the steps or the time ran out first.
    """
    try:
        with validation_steps(VALIDATION_STEPS, value, deadline=deadline):
            errors = sorted(validator.iter_errors(value), key=lambda e: [str(p) for p in e.path])
    except referencing.exceptions.Unresolvable as exc:
        return [f"the schema refers to {exc.ref!r}, which is not inside it (references are "
                "never fetched)"]
    problems = []
    for error in errors[:limit]:
        where = "/".join(str(p) for p in error.path)
        problems.append(f"at /{where}: {error.message}" if where else error.message)
    if len(errors) > limit:
        problems.append(f"and {len(errors) - limit} more")
    return problems


def _without_inner_dialects(value: Any, *, root: bool = False) -> Any:
    """A copy of a schema without ``$schema`` below its root (data kept as it is)."""
    if isinstance(value, list):
        return [_without_inner_dialects(item) for item in value]
    if not isinstance(value, Mapping):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        if key == "$schema" and isinstance(item, str) and not root:
            continue
        if key in _DATA_KEYWORDS:
            out[key] = item
        elif key in _NAMED_SCHEMAS and isinstance(item, Mapping):
            # names here are the schema's own (a property called "enum" is a schema)
            out[key] = {name: _without_inner_dialects(sub) for name, sub in item.items()}
        else:
            out[key] = _without_inner_dialects(item)
    return out
