"""The ``openai`` SDK's exception classes, for the core's failure mapping.

What a failure means (its ``kind`` and message) is decided once for every HTTP
backend by :func:`toolwire.plugin_api.classify_exception`; this plugin only names
the SDK it uses. The ``openai`` SDK is imported when a failure is classified.
"""

from __future__ import annotations

import functools

from toolwire.plugin_api import SDKErrors

__all__ = ["openai_errors"]


@functools.cache
def openai_errors() -> SDKErrors:
    """The ``openai`` SDK's status, timeout, connection and API error classes."""
    import openai

    return SDKErrors.of(openai)
