"""The ``toolwire`` command line run in-process, as a test sees a process run it.

:func:`run_cli` calls :func:`toolwire.apps.cli.main.main` with ``argv`` and gives
back what a ``subprocess.run([sys.executable, "-m", "toolwire", ...])`` would: the
exit status and everything written to standard output and standard error. The
streams are real text streams over bytes, encoded as UTF-8 like a pipe's, and none
is a terminal, as under ``subprocess`` with pipes. The environment and the working
folder are the run's own and are put back afterwards.

Starting a Python process and importing toolwire costs about half a second a run;
this costs nothing, so the command line is tested through here. What only a real
process shows (an exit by a signal, Ctrl-C on a terminal, no traceback at all on
the way out, which modules ``python -m toolwire`` imports) keeps its own few tests
that start ``python -m toolwire`` (:func:`run_cli_process`).
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import attrs

__all__ = ["CliRun", "command_environment", "run_cli", "run_cli_process"]


@attrs.frozen
class CliRun:
    """What a run of the command line left: the names are ``subprocess``'s."""

    returncode: int
    stdout: str
    stderr: str


def command_environment(environ: Mapping[str, str] | None = None, *,
                     entry_points: bool = False) -> dict[str, str]:
    """The environment of a command run by a test: ``environ`` (default: this process's),
    with no entry-point plugin loaded unless ``entry_points`` (a result must not depend
    on what else happens to be installed)."""
    env = dict(os.environ if environ is None else environ)
    if not entry_points:
        env["TOOLWIRE_LOAD_PLUGINS"] = ""
    return env


def _pipe() -> io.TextIOWrapper:
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict",
                            write_through=True)


def _text(stream: io.TextIOWrapper) -> str:
    buffer = stream.buffer
    assert isinstance(buffer, io.BytesIO)
    return buffer.getvalue().decode("utf-8", "replace").replace("\r\n", "\n")


@contextlib.contextmanager
def _environment(env: Mapping[str, str] | None, cwd: str | os.PathLike[str] | None
                 ) -> Iterator[None]:
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    try:
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        if cwd is not None:
            os.chdir(cwd)
        yield
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)


def run_cli(*argv: str, stdin: str = "", env: Mapping[str, str] | None = None,
            cwd: str | os.PathLike[str] | None = None, entry_points: bool = False) -> CliRun:
    """Run ``toolwire ARGV`` in this process; its exit status and output.

    :param stdin: what standard input holds (not a terminal, as a pipe).
    :param env: the whole environment of the run (default: this process's); unless
        ``entry_points``, ``TOOLWIRE_LOAD_PLUGINS`` is set empty in it.
    :param cwd: the working folder of the run.
    """
    from toolwire.apps.cli.main import main

    out, err = _pipe(), _pipe()
    source = io.TextIOWrapper(io.BytesIO(stdin.encode("utf-8")), encoding="utf-8")
    streams = (sys.stdin, sys.stdout, sys.stderr)
    with _environment(command_environment(env, entry_points=entry_points), cwd):
        sys.stdin, sys.stdout, sys.stderr = source, out, err
        try:
            status = main(list(argv))
        except SystemExit as exit_:  # argparse's usage errors and --help
            code = exit_.code
            status = code if isinstance(code, int) else (0 if code is None else 1)
            if isinstance(code, str):
                err.write(code + "\n")
        finally:
            sys.stdin, sys.stdout, sys.stderr = streams
    return CliRun(status, _text(out), _text(err))


def run_cli_process(*argv: str, stdin: str = "", env: Mapping[str, str] | None = None,
                    cwd: str | Path | None = None, entry_points: bool = False,
                    timeout: float = 120) -> CliRun:
    """Run ``python -m toolwire ARGV`` as a real process: for what only a process shows."""
    done = subprocess.run([sys.executable, "-m", "toolwire", *argv], input=stdin,
                          capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env=command_environment(env, entry_points=entry_points), check=False)
    return CliRun(done.returncode, done.stdout, done.stderr)
