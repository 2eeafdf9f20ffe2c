"""The suite's own machinery: tiers held to what a test does, and shared data recorded and
forbidden (tests/support/tiers.py, tests/conftest.py), run on small suites of their own."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.paths import REPO

SUITE = '''
import subprocess, sys
import pytest
from tests.support.tiers import needs

@pytest.fixture
@needs("process")
def child():
    return subprocess.run([sys.executable, "-c", "pass"], check=True)

def test_quiet():
    assert True

def test_starts_a_process():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

@pytest.mark.process
def test_starts_a_process_and_says_so():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

def test_uses_a_fixture_that_says_so(child):
    assert child.returncode == 0

def test_reads(tmp_path):
    import os
    data = os.environ["DATA"]
    assert open(os.path.join(data, "templates", "x.jinja")).read() == "x"
'''


def _suite(tmp_path: Path, *args: str, **environ: str) -> subprocess.CompletedProcess[str]:
    """Run SUITE with the project's conftest, from a folder of its own."""
    folder = tmp_path / "suite"
    (folder / "tests").mkdir(parents=True)
    (folder / "tests" / "conftest.py").write_text("from tests_of_the_project.conftest import *\n")
    (folder / "tests" / "test_it.py").write_text(textwrap.dedent(SUITE))
    link = tmp_path / "imports" / "tests_of_the_project"
    link.parent.mkdir()
    link.symlink_to(REPO / "tests", target_is_directory=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "imports"), str(REPO)]),
           "TOOLWIRE_TEST_SHARED": str(tmp_path / "data"), **environ}
    data = tmp_path / "data" / "templates"
    data.mkdir(parents=True)
    (data / "x.jinja").write_text("x")
    env["DATA"] = str(tmp_path / "data")
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "no:randomly", "--rootdir", str(folder), *args],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=300,
                          check=False)


@pytest.mark.process
def test_a_test_that_starts_a_process_unmarked_fails_naming_the_mark(tmp_path: Path) -> None:
    run = _suite(tmp_path)
    assert "1 error" in run.stdout, run.stdout
    assert "test_starts_a_process: the test started a process" in run.stdout
    assert "is not marked 'process'" in run.stdout
    for fine in ("test_quiet", "test_starts_a_process_and_says_so",
                 "test_uses_a_fixture_that_says_so"):
        assert f"{fine}:" not in run.stdout


@pytest.mark.process
def test_fast_is_every_test_no_slower_tier_claims(tmp_path: Path) -> None:
    run = _suite(tmp_path, "-m", "fast", "--collect-only", "-v")
    assert "test_quiet" in run.stdout and "test_reads" in run.stdout
    assert "test_starts_a_process_and_says_so" not in run.stdout
    assert "test_uses_a_fixture_that_says_so" not in run.stdout
    assert "hypothesis profile: loop" in run.stdout


@pytest.mark.process
def test_the_tests_that_read_shared_data_are_recorded(tmp_path: Path) -> None:
    record = tmp_path / "record"
    _suite(tmp_path, "--record-shared", str(record), "-k", "reads or quiet")
    assert record.read_text().splitlines() == ["test tests/test_it.py::test_reads"]


@pytest.mark.process
def test_a_read_of_the_forbidden_folder_fails_the_test(tmp_path: Path) -> None:
    run = _suite(tmp_path, "-k", "reads",
                 TOOLWIRE_TEST_FORBIDDEN_DATA=str(tmp_path / "data"))
    assert "1 failed" in run.stdout, run.stdout
    assert "must not read the shared test data" in run.stdout


def test_the_watch_knows_the_kits_audit_event() -> None:
    from tests.support import tiers
    from toolwire.testing import KIT_AUDIT_EVENT

    assert tiers.KIT_AUDIT_EVENT == KIT_AUDIT_EVENT


@pytest.mark.process
def test_scripts_test_gives_pytest_its_options_in_a_form_the_first_parse_keeps(
        tmp_path: Path) -> None:
    """scripts/test's own pytest line, run as CI runs it: from a checkout in a temporary
    folder, with the record file beside it. An option the suite's conftest adds is known
    only once the conftest is loaded, so a value given as a separate word is first taken
    for a path: pytest then finds its rootdir in the folder both share, loads no conftest
    and refuses the option (CI's exit 4)."""
    checkout = tmp_path / "checkout"
    shutil.copytree(REPO / "tests", checkout / "tests",
                    ignore=shutil.ignore_patterns("__pycache__", ".hypothesis"))
    for name in ("pyproject.toml", "setup.cfg"):
        shutil.copy(REPO / name, checkout)
    line = next(text for text in (REPO / "scripts" / "test").read_text().splitlines()
                if text.startswith(".venv/bin/python -m pytest"))
    words = line.split()[3:]  # after the interpreter, -m and pytest
    record = tmp_path / "record"
    record.touch()  # as mktemp makes it: pytest takes only a path that exists for one
    arguments = [word.replace('"$record"', str(record)) for word in words if word != '"$@"']
    assert all("$" not in word for word in arguments), arguments
    # --markers reads the whole configuration (conftest included) and collects nothing
    result = subprocess.run([sys.executable, "-m", "pytest", *arguments, "--markers"],
                            cwd=checkout, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "@pytest.mark.process" in result.stdout


@pytest.mark.process
def test_a_suite_started_with_ctrl_c_ignored_still_delivers_a_ctrl_c_to_its_tests(
        tmp_path: Path) -> None:
    """As a shell starts a background job (``bash .ci/run &``): SIGINT ignored."""
    import signal
    folder = tmp_path / "suite"
    (folder / "tests").mkdir(parents=True)
    (folder / "tests" / "conftest.py").write_text("from tests_of_the_project.conftest import *\n")
    (folder / "tests" / "test_it.py").write_text(textwrap.dedent('''
        import _thread, time
        import pytest

        def test_ctrl_c():
            with pytest.raises(KeyboardInterrupt):
                _thread.interrupt_main()
                time.sleep(30)
    '''))
    link = tmp_path / "imports" / "tests_of_the_project"
    link.parent.mkdir()
    link.symlink_to(REPO / "tests", target_is_directory=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "imports"), str(REPO)])}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "--rootdir", str(folder)], cwd=folder, env=env, capture_output=True,
                         text=True, timeout=300,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert "1 passed" in run.stdout, run.stdout
