"""Test helpers for toolwire users and plugin authors.

* :class:`ScriptedBackend`: a stand-in model that replays given raw replies
  through the real parser pipeline (filters + the family's parser).
* :func:`isolated_plugin_manager`: a plugin manager that loads no entry points.
* The pytest plugin (``toolwire.testing.pytest_plugin``, loaded automatically
  through the ``pytest11`` entry point) adds the ``registered`` and
  ``plugin_manager`` fixtures.
"""

from __future__ import annotations

from .scripted import ScriptedBackend, isolated_plugin_manager

__all__ = ["ScriptedBackend", "isolated_plugin_manager"]
