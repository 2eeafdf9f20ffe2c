"""Shared test setup: the hypothesis profiles (``default``, and ``fuzz`` for nox).

Support code lives in the :mod:`tests.support` package; tests import it by its
package path, nothing is put on ``sys.path``.
"""

from __future__ import annotations

import os
from collections import Counter

import pytest
from hypothesis import HealthCheck, settings

from tests.support.paths import MISSING_SCHEMAS, MISSING_TEMPLATES

settings.register_profile("default", max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("fuzz", max_examples=2000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say in one line how many tests skipped for want of the real third-party data."""
    wanting: Counter[str] = Counter()
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = getattr(report, "longrepr", None)
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else ""
        for missing in (MISSING_TEMPLATES, MISSING_SCHEMAS):
            if missing in str(reason):
                wanting[missing] += 1
    for missing, count in wanting.items():
        terminalreporter.write_line(f"{count} tests skipped: {missing}", yellow=True)
