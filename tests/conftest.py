"""Shared test setup: the hypothesis profiles (``default``, and ``fuzz`` for nox).

Support code lives in the :mod:`tests.support` package; tests import it by its
package path, nothing is put on ``sys.path``.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile("default", max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("fuzz", max_examples=2000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
