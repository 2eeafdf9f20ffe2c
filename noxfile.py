"""nox sessions: tests, lint, typecheck, fuzz, bench, example_plugin, docs, engines."""

from __future__ import annotations

import nox

nox.options.sessions = ["tests", "lint", "typecheck", "docs"]
nox.options.reuse_existing_virtualenvs = True

EDITABLE = ("-e", ".[dev,local,remote]", "--config-settings", "editable_mode=strict")


@nox.session
def tests(session: nox.Session) -> None:
    """The whole test suite, on every core (scripts/test, which CI runs, adds the second
    pass in a fresh clone)."""
    session.install(*EDITABLE)
    session.run("python", "-m", "pytest", "-q", "-n", "auto", "--dist", "worksteal",
                *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over everything."""
    session.install("ruff")
    session.run("ruff", "check", "core", "plugins", "tests", "benchmarks", "noxfile.py")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict on the library (installed strictly editable, so mypy sees it)."""
    session.install(*EDITABLE)
    session.run("mypy", "--strict", "-p", "toolwire")


@nox.session(default=False)
def fuzz(session: nox.Session) -> None:
    """Property tests with the 'fuzz' hypothesis profile (many more examples), then every
    parser family on 100,000 fuzzed replies (``nox -s fuzz -- --replies N`` to change it)."""
    session.install(*EDITABLE)
    session.env["HYPOTHESIS_PROFILE"] = "fuzz"
    session.run("python", "-m", "pytest", "-q", "-k", "property or round_trip or garbage "
                "or chunking or fuzz or hostile")
    session.run("python", "scripts/fuzz_parsers.py", "--replies", "100000",
                "--json", "benchmarks/results/fuzz_parsers.json", *session.posargs)


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """All benchmarks: prints tables, writes benchmarks/results/*.json."""
    session.install(*EDITABLE)
    session.run("python", "-m", "benchmarks", *session.posargs)


@nox.session(default=False)
def example_plugin(session: nox.Session) -> None:
    """Install the example third-party plugin as its own distribution and test it."""
    session.install(*EDITABLE)
    python = f"{session.virtualenv.location}/bin/python"
    session.run("bash", "scripts/test_example_plugin", external=True, env={"PYTHON": python})


@nox.session(default=False)
def docs(session: nox.Session) -> None:
    """Check the docs: every hook documented, snippets run (tests marked 'docs')."""
    session.install(*EDITABLE)
    session.run("python", "-m", "pytest", "-q", "tests/unit/test_docs.py", *session.posargs)


@nox.session(default=False, venv_backend="none")
def engines(session: nox.Session) -> None:
    """toolwire in vLLM's and SGLang's parser slots, against the real engines: installs
    each into its own venv (scripts/ensure_engines) and runs tests/engines there."""
    session.run("bash", "scripts/test_engines", *session.posargs, external=True)
