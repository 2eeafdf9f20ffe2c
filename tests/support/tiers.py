"""The suite's tiers: what each test uses, so ``pytest -m fast`` is the developer's loop.

Every test is in the ``fast`` tier unless it uses something slower:

========== ===================================================================
``process`` starts a process (``python -m toolwire``, a server, a client program)
``model``   runs a real model (llama.cpp, in-process or in a server)
``browser`` drives the dashboard in a real headless browser
``kit``     runs the conformance kit or the fuzzer, or their checks at volume
========== ===================================================================

A test is placed by what it uses: a mark on the test, its class or its module
(``pytestmark = pytest.mark.process``), or a fixture that carries a tier
(:func:`needs`, e.g. the browser and the real-model fixtures), and the older
marks ``llama``/``real_model`` (a model) and ``conformance_defaults`` (the kit).
The rest are marked ``fast`` at collection.

The placement is held to what a test really does: an audit hook watches every
test, and a test that starts a process, loads a llama.cpp model or runs the kit
(its :data:`toolwire.testing.KIT_AUDIT_EVENT`) without being in that tier fails at
teardown, naming what it started and the mark to add (on the fixture, when a
fixture started it). So no test
can slow the loop down unnoticed, and ``pytest -m fast`` stays about a minute.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, TypeVar

import attrs
import pytest

__all__ = ["TIERS", "Observed", "Watch", "declared", "missing", "needs", "observing", "tiers_of"]

TIERS: dict[str, str] = {
    "process": "starts a process (python -m toolwire, a server, a client program)",
    "model": "runs a real model (llama.cpp, in-process or in a server)",
    "browser": "drives the dashboard in a real headless browser",
    "kit": "runs the conformance kit or the fuzzer (toolwire.testing), or their checks at volume",
}
"""The slow tiers; ``fast`` is every test in none of them."""

_ALIASES = {"llama": "model", "real_model": "model", "conformance_defaults": "kit"}
"""Marks older than the tiers, and the tier each one means."""

_PROCESS_EVENTS = frozenset({"subprocess.Popen", "os.posix_spawn", "os.spawn", "os.fork",
                             "os.forkpty", "os.system", "os.exec"})

KIT_AUDIT_EVENT = "toolwire.testing.kit"
"""What :data:`toolwire.testing.KIT_AUDIT_EVENT` is (held equal by a test; not imported
here, so watching costs no import of the kit)."""

_INCIDENTAL = frozenset({"uname"})
"""Commands a library runs once to learn about the machine (``platform.processor()``
runs ``uname -p``): not the test's own process."""

_JOB_CHILD = "toolwire.isolation.job_child"
"""What the command of toolwire's job children holds: the warm children every chat
template renders in and patterns are matched in (:mod:`toolwire.isolation.jobs`),
started once per test process and reused. They are a part of rendering, as a thread
pool is, not a process of the test's own; a test of the children themselves starts
others (a program of its own, a model worker) and is marked ``process``."""

F = TypeVar("F", bound=Callable[..., Any])


def needs(*tiers: str) -> Callable[[F], F]:
    """Mark a fixture function as using ``tiers``: every test that uses it (directly or
    through another fixture) is placed in them."""
    unknown = set(tiers) - set(TIERS)
    if unknown:
        raise ValueError(f"unknown tiers {sorted(unknown)}; the tiers are {sorted(TIERS)}")

    def mark(function: F) -> F:
        function.__toolwire_tiers__ = frozenset(tiers)  # type: ignore[attr-defined]
        return function

    return mark


def tiers_of(item: pytest.Item) -> frozenset[str]:
    """The slow tiers a collected test is in (empty: ``fast``)."""
    found = {_ALIASES.get(m.name, m.name) for m in item.iter_markers()}
    info = getattr(item, "_fixtureinfo", None)
    for definitions in (info.name2fixturedefs.values() if info is not None else ()):
        for definition in definitions:
            found |= declared(definition.func)
    return frozenset(found & set(TIERS))


@attrs.define
class Observed:
    """What one test did, as the audit hook saw it.

    :ivar by_fixtures: what each fixture set up for it started, by fixture (name and
        where it is defined); the rest is the test's own.
    """

    processes: list[str] = attrs.Factory(list)
    models: list[str] = attrs.Factory(list)
    kits: list[str] = attrs.Factory(list)
    paths: set[str] = attrs.Factory(set)
    by_fixtures: dict[str, tuple[frozenset[str], list[str]]] = attrs.Factory(dict)

    def uses(self) -> frozenset[str]:
        """The tiers of what was started (``process``, ``model``, ``kit``)."""
        return frozenset(tier for tier, started in (("process", self.processes),
                                                    ("model", self.models),
                                                    ("kit", self.kits)) if started)


def missing(uses: frozenset[str], tiers: frozenset[str]) -> frozenset[str]:
    """What of ``uses`` (``process``, ``model``) the ``tiers`` do not cover: a browser or
    a model may start processes; only ``model`` covers a model."""
    lacking = set()
    if "process" in uses and not tiers & {"process", "browser", "model"}:
        lacking.add("process")
    lacking |= {tier for tier in ("model", "kit") if tier in uses and tier not in tiers}
    return frozenset(lacking)


def declared(function: Callable[..., Any]) -> frozenset[str]:
    """The tiers a fixture function was marked with by :func:`needs`."""
    return frozenset(getattr(function, "__toolwire_tiers__", frozenset()))


class Watch:
    """The audit hook (installed once per process) and what it is watching now."""

    def __init__(self) -> None:
        self.current: Observed | None = None
        self.watched_folders: tuple[str, ...] = ()
        self.forbidden: tuple[str, ...] = ()
        self.lock = threading.Lock()
        sys.addaudithook(self._hook)
        sys.meta_path.insert(0, _LlamaFinder(self))

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        observed = self.current
        if event == KIT_AUDIT_EVENT:
            if observed is not None:
                observed.kits.append(" ".join(str(a) for a in args))
            return
        if event in _PROCESS_EVENTS:
            described = _describe(event, args)
            if observed is not None and described.split(" ")[0] not in _INCIDENTAL \
                    and _JOB_CHILD not in described:
                observed.processes.append(described[:160])
            return
        if event not in ("open", "os.listdir", "os.scandir") or not args:
            return
        path = args[0]
        if isinstance(path, bytes):
            path = path.decode("utf-8", "replace")
        if not isinstance(path, str):
            return  # a file descriptor
        if not path.startswith("/"):
            path = os.path.abspath(path)
        if self.forbidden and path.startswith(self.forbidden):
            raise PermissionError(
                f"{path}: this run must not read the shared test data from where the "
                "working tree has it; find it through tests/support/paths.py")
        if observed is not None and path.startswith(self.watched_folders):
            observed.paths.add(path)


def _describe(event: str, args: tuple[Any, ...]) -> str:
    if event in ("subprocess.Popen", "os.posix_spawn") and len(args) > 1:
        argv = args[1]
        words = [str(a) for a in argv] if isinstance(argv, Sequence) and not isinstance(
            argv, str | bytes) else [str(argv)]
        return " ".join(words)
    return event


class _LlamaFinder(importlib.abc.MetaPathFinder):
    """Wraps ``llama_cpp.Llama.__init__`` when llama_cpp is imported, so a model load is
    seen without importing llama_cpp in every test process."""

    def __init__(self, watch: Watch) -> None:
        self.watch = watch

    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if name != "llama_cpp.llama":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader, watch = spec.loader, self.watch
        execute = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            execute(module)
            llama = module.Llama
            init = llama.__init__

            def watched_init(self: Any, model_path: str, *args: Any, **kwargs: Any) -> None:
                if watch.current is not None:
                    watch.current.models.append(str(model_path))
                init(self, model_path, *args, **kwargs)

            llama.__init__ = watched_init

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


_WATCH: Watch | None = None


def observing(folders: Sequence[str] = (), forbidden: Sequence[str] = ()) -> Watch:
    """The process's one watch (installed on the first call), noting reads under
    ``folders`` as shared data and refusing any path under ``forbidden``."""
    global _WATCH
    if _WATCH is None:
        _WATCH = Watch()
        _WATCH.watched_folders = tuple(folders)
        _WATCH.forbidden = tuple(forbidden)
    return _WATCH
