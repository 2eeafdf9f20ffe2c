"""The server's bounds: :class:`toolwire.limits.ServerLimits`, where every bound is
declared; importable here too, where ``docs/openai-server.md`` first named it."""

from __future__ import annotations

from ...limits import ServerLimits

__all__ = ["ServerLimits"]
