"""Shared test setup: the hypothesis profiles, the tiers, and the record of shared data.

* Hypothesis: ``default`` (the counts CI runs), ``loop`` (fewer examples, for
  ``pytest -m fast``, chosen by itself when that is the whole ``-m``), and ``fuzz``
  (many more, for ``nox -s fuzz``); ``HYPOTHESIS_PROFILE`` chooses one.
* Tiers (:mod:`tests.support.tiers`): each test is marked ``fast`` or by what slower
  thing it uses (``process``, ``model``, ``browser``, ``kit``), and an audit hook
  holds the mark to what the test really does.
* Shared data (:mod:`tests.support.paths`): ``--record-shared FILE`` appends the
  tests (and the modules, where collection read it) that read the real templates
  or schemas, so ``scripts/test`` can run exactly those again in a fresh clone
  without the data; ``TOOLWIRE_TEST_FORBIDDEN_DATA`` names folders no test may
  read (there: where the working tree's data is), to catch a path that bypasses
  the one module.

Support code lives in the :mod:`tests.support` package; tests import it by its
package path, nothing is put on ``sys.path``.
"""

from __future__ import annotations

import inspect
import os
import signal
from collections import Counter
from collections.abc import Generator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.support.paths import (
    MISSING_SCHEMAS,
    MISSING_TEMPLATES,
    SHARED,
    SHARED_SCHEMAS,
    SHARED_TEMPLATES,
)
from tests.support.tiers import TIERS, Observed, declared, missing, observing, tiers_of

FORBIDDEN_VARIABLE = "TOOLWIRE_TEST_FORBIDDEN_DATA"

settings.register_profile("default", max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("loop", max_examples=12, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("fuzz", max_examples=2000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
_profile = os.environ.get("HYPOTHESIS_PROFILE", "default")
settings.load_profile(_profile)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--record-shared", metavar="FILE", default=None,
                     help="append the tests and modules that read the real shared test data "
                          "to FILE (scripts/test runs them again in a fresh clone)")


def _folder(path: Path) -> str:
    return os.path.join(os.path.abspath(path), "")


def pytest_configure(config: pytest.Config) -> None:
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # a shell starts a background job (`cmd &`, nohup) with SIGINT ignored, and Python
        # then installs no Ctrl-C handler: the tests that deliver a Ctrl-C to themselves
        # (`_thread.interrupt_main`) would see nothing. The suite runs as a terminal does.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    config.addinivalue_line("markers", "fast: in-process and quick (every test in no other "
                                       "tier); pytest -m fast is the developer's loop")
    for tier, meaning in TIERS.items():
        config.addinivalue_line("markers", f"{tier}: {meaning}")
    global _profile
    if config.option.markexpr.strip() == "fast" and "HYPOTHESIS_PROFILE" not in os.environ:
        _profile = "loop"
        settings.load_profile(_profile)
    forbidden = [_folder(Path(p)) for p in os.environ.get(FORBIDDEN_VARIABLE, "").split(
        os.pathsep) if p.strip()]
    observing([_folder(p) for p in (SHARED, SHARED_TEMPLATES, SHARED_SCHEMAS)], forbidden)


def pytest_report_header(config: pytest.Config) -> str:
    return f"hypothesis profile: {_profile}"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        tiers = tiers_of(item)
        for tier in sorted(tiers - {m.name for m in item.iter_markers()}):
            item.add_marker(tier)
        if not tiers:
            item.add_marker("fast")


def _record(config: pytest.Config, line: str) -> None:
    target = config.getoption("record_shared")
    if target:
        with open(target, "a", encoding="utf-8") as out:
            out.write(line + "\n")


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, object, object]:
    if not isinstance(collector, pytest.Module):
        return (yield)
    watch = observing()
    watch.current = Observed()
    try:
        return (yield)
    finally:
        if watch.current.paths:
            _record(collector.config, f"module {collector.nodeid}")
        watch.current = None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    watch = observing()
    watch.current = Observed()
    item.stash[_OBSERVED] = watch.current
    try:
        return (yield)
    finally:
        if watch.current is not None and watch.current.paths:
            _record(item.config, f"test {item.nodeid}")
        watch.current = None


_OBSERVED = pytest.StashKey[Observed]()


@pytest.fixture(autouse=True)
def _sigint_handler_kept() -> Generator[None, None, None]:
    """Every test leaves Ctrl-C's handler as it found it. A test (or the code it drives)
    that set SIGINT to SIG_IGN or SIG_DFL and kept it would silently disarm every later
    test in the same process that delivers a Ctrl-C (``_thread.interrupt_main`` does
    nothing then): the handler is put back and the test that changed it fails, named."""
    before = signal.getsignal(signal.SIGINT)
    yield
    after = signal.getsignal(signal.SIGINT)
    if after is not before:
        signal.signal(signal.SIGINT, before)
        pytest.fail(f"the test left SIGINT's handler set to {after!r} (it was {before!r})",
                    pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[object], request: pytest.FixtureRequest
                         ) -> Generator[None, object, object]:
    """Note what each fixture's setup starts, so a slow fixture is named, not its first test."""
    observed = observing().current
    if observed is None:
        return (yield)
    processes, models, kits = (len(observed.processes), len(observed.models),
                               len(observed.kits))
    try:
        return (yield)
    finally:
        inner = {p for _, what in observed.by_fixtures.values() for p in what}  # its fixtures'
        started = Observed([p for p in observed.processes[processes:] if p not in inner],
                           [m for m in observed.models[models:] if m not in inner],
                           [k for k in observed.kits[kits:] if k not in inner])
        if started.uses():
            where = f"{fixturedef.argname} ({inspect.getsourcefile(fixturedef.func)})"
            observed.by_fixtures[where] = (started.uses() - declared(fixturedef.func),
                                           started.processes + started.models + started.kits)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if call.when != "teardown" or report.failed:
        return report
    observed = item.stash.get(_OBSERVED, None)
    if observed is None:
        return report
    tiers = tiers_of(item)
    # a fixture that starts something says so, unless every test using it is marked anyway
    wrong = [f"the fixture {where} started {what[0]} but is not marked "
             f"@tests.support.tiers.needs({', '.join(repr(t) for t in sorted(lacking))})"
             for where, (uses, what) in observed.by_fixtures.items()
             if (lacking := missing(uses, tiers))]
    from_fixtures = {p for _, what in observed.by_fixtures.values() for p in what}
    own = [p for p in observed.processes if p not in from_fixtures]
    models = [m for m in observed.models if m not in from_fixtures]
    kits = [k for k in observed.kits if k not in from_fixtures]
    lacking = missing(Observed(own, models, kits).uses(), tiers)
    if "process" in lacking:
        wrong.append(f"the test started a process ({own[0]}) but is not marked "
                     "'process' (or 'model'/'browser')")
    if "model" in lacking:
        wrong.append(f"the test loaded a llama.cpp model ({models[0]}) but is not marked "
                     "'model'")
    if "kit" in lacking:
        wrong.append(f"the test ran the conformance kit or the fuzzer ({kits[0]}) but is not "
                     "marked 'kit'")
    if wrong:
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid}: {'; and '.join(wrong)}. Mark the test, its class "
                           "or module (pytestmark = pytest.mark.TIER) or the fixture, so "
                           "'pytest -m fast' stays in-process and quick (tests/support/tiers.py).")
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say in one line how many tests skipped for want of the real third-party data."""
    wanting: Counter[str] = Counter()
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = getattr(report, "longrepr", None)
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else ""
        for absent in (MISSING_TEMPLATES, MISSING_SCHEMAS):
            if absent in str(reason):
                wanting[absent] += 1
    for absent, count in wanting.items():
        terminalreporter.write_line(f"{count} tests skipped: {absent}", yellow=True)
