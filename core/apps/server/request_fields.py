"""Reading one field of a request body: a typed value, or a ``400`` that names the field.

Every model API the server speaks (:mod:`.completion_request`,
:mod:`.responses_request`, :mod:`.messages_request`) reads its numbers, integers,
flags and strings through these, so a bad value is refused the same way in each:
a :class:`~.http_input.RequestError` whose ``param`` is the field's path.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .http_input import RequestError

__all__ = ["bad_value", "read_boolean", "read_integer", "read_model", "read_number",
           "read_string"]


def bad_value(param: str, message: str) -> RequestError:
    """The ``400`` of a field whose value is wrong (code ``invalid_value``)."""
    return RequestError(400, f"{param}: {message}", param=param, code="invalid_value")


def read_number(data: Mapping[str, Any], key: str, low: float, high: float,
                param: str | None = None) -> float | None:
    """``data[key]``: a finite number from ``low`` to ``high``, or ``None`` when absent."""
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise bad_value(param or key, "must be a number")
    if not low <= value <= high:
        raise bad_value(param or key, f"must be between {low:g} and {high:g}")
    return float(value)


def read_integer(data: Mapping[str, Any], key: str, low: int,
                 param: str | None = None) -> int | None:
    """``data[key]``: an integer of at least ``low``, or ``None`` when absent."""
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_value(param or key, "must be an integer")
    if value < low:
        raise bad_value(param or key, f"must be at least {low}")
    return value


def read_boolean(data: Mapping[str, Any], key: str, default: bool,
                 param: str | None = None) -> bool:
    """``data[key]``: ``true`` or ``false``, or ``default`` when absent or null."""
    value = data.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise bad_value(param or key, "must be true or false")
    return value


def read_string(data: Mapping[str, Any], key: str, param: str | None = None) -> str | None:
    """``data[key]``: a string, or ``None`` when absent or null."""
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise bad_value(param or key, "must be a string")
    return value


def read_model(data: Any) -> str:
    """The ``model`` a body names (every model API's first field).

    :raises RequestError: ``400``: the body is not a JSON object, or names no model.
    """
    if not isinstance(data, Mapping):
        raise RequestError(400, "the body must be a JSON object", code="invalid_value")
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise bad_value("model", "must name the model (GET /v1/models lists it)")
    return model
