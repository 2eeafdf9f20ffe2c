"""The tool the engine tests offer where any one tool will do (no engine imported here)."""

from __future__ import annotations

__all__ = ["WEATHER"]

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}}
