"""Quantized models run where llama.cpp's weight repacking crashes (issue 31, item 1),
and a closed model raises instead of reaching freed memory.

The crash this guards against (llama.cpp's AMX kernels on AVX512+AMX CPUs) happens on
some machines and not on others, and it kills the process it happens in. So no test
here decodes with repacking on inside pytest, and none assumes what this machine's CPU
does: the probe child gives both verdicts through its test hook (a real crash, by a
read of address 0 or ``abort()``, or a healthy exit), on a real Q4_0 model that
llama.cpp repacks; the one test that decodes with repacking forced on does it in a
child process and holds the outcome to the real probe's verdict for this machine.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.quantized_gguf import write_q4_0_gguf
from toolwire import BackendError, CancelToken, DiagnosticEvent, ErrorEvent, Message, TurnEnd
from toolwire.testing.tiny_gguf import write_tiny_gguf
from toolwire.vocabulary.backend import ModelRequest

llama_cpp = pytest.importorskip("llama_cpp")

from toolwire.plugins.llama_cpp import repack_probe  # noqa: E402
from toolwire.plugins.llama_cpp.backend import LlamaCppBackend  # noqa: E402

pytestmark = pytest.mark.llama

OPTIONS: dict[str, Any] = {"n_ctx": 256, "max_tokens": 4, "n_threads": 1, "progress": False,
                           "temperature": 0.0}


@pytest.fixture(autouse=True)
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test has its own cache folder and no probe setting from outside."""
    home = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    monkeypatch.delenv(repack_probe.PROBE_VARIABLE, raising=False)
    monkeypatch.delenv(repack_probe.CRASH_HOOK_VARIABLE, raising=False)
    return home


@pytest.fixture(scope="module")
def q4_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_q4_0_gguf(tmp_path_factory.mktemp("q4") / "tiny-q4_0.gguf")


def _no_probe(path: Path) -> None:
    raise AssertionError("the probe child ran although it should not")


def _notices(backend: LlamaCppBackend) -> list[DiagnosticEvent]:
    items = list(backend.stream_turn(ModelRequest((Message.user("hi"),)), CancelToken()))
    assert isinstance(items[-1], TurnEnd) and items[-1].reason in ("stop", "length")
    return [e for e in items if isinstance(e, DiagnosticEvent) and e.code == "repack_disabled"]


def _entries() -> dict[str, Any]:
    entries: dict[str, Any] = json.loads(repack_probe.cache_path().read_text())["entries"]
    return entries


@pytest.mark.parametrize(("hook", "signal_name"), [("segv", "SIGSEGV"), ("abort", "SIGABRT")])
def test_a_probe_child_killed_by_a_signal_loads_the_model_without_repacking_and_says_so_once(
        q4_model: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        hook: str, signal_name: str) -> None:
    monkeypatch.setenv(repack_probe.CRASH_HOOK_VARIABLE, hook)
    backend = LlamaCppBackend(q4_model, **{**OPTIONS, "progress": True})
    try:
        assert backend.repack is False
        assert backend.llama.model_params.use_extra_bufts is False
        # the patched defaults were put back: the next Llama() repacks again
        assert llama_cpp.llama_cpp.llama_model_default_params().use_extra_bufts is True
        first, second = _notices(backend), _notices(backend)
        assert len(first) == 1 and second == []
        assert signal_name in first[0].message and "--no-repack" in first[0].message
        assert "\n" not in first[0].message and len(first[0].message) < 160  # one short line
        assert signal_name not in capsys.readouterr().err  # said once: by the diagnostic
    finally:
        backend.close()
    (entry,) = _entries().values()
    assert entry["repack"] is False and entry["crash"] == signal_name
    assert entry["identity"]["file_type"] == 2  # MOSTLY_Q4_0


def test_a_healthy_probe_keeps_repacking_and_the_cached_answer_is_used_next_time(
        q4_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(repack_probe.CRASH_HOOK_VARIABLE, "healthy")
    backend = LlamaCppBackend(q4_model, **OPTIONS)
    assert backend.repack is True and backend.llama.model_params.use_extra_bufts is True
    backend.close()
    (entry,) = _entries().values()
    assert entry["repack"] is True and entry["crash"] == ""
    monkeypatch.delenv(repack_probe.CRASH_HOOK_VARIABLE)
    monkeypatch.setattr(repack_probe, "_run_child", _no_probe)
    again = LlamaCppBackend(q4_model, **OPTIONS)
    # no turn here: decoding with repacking on may crash this CPU (see the child test);
    # the repack_disabled notice comes from the note alone (the crash tests show it)
    assert again.repack is True and again.repack_note == ""
    again.close()


def test_a_cached_crash_loads_without_repacking_with_no_new_probe(
        q4_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(repack_probe.CRASH_HOOK_VARIABLE, "segv")
    LlamaCppBackend(q4_model, **OPTIONS).close()
    monkeypatch.delenv(repack_probe.CRASH_HOOK_VARIABLE)
    monkeypatch.setattr(repack_probe, "_run_child", _no_probe)
    backend = LlamaCppBackend(q4_model, **OPTIONS)
    assert backend.repack is False and backend.llama.model_params.use_extra_bufts is False
    (notice,) = _notices(backend)
    assert "earlier test load" in notice.message
    backend.close()


def test_force_probes_again_and_skip_never_probes(q4_model: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(repack_probe.CRASH_HOOK_VARIABLE, "segv")
    LlamaCppBackend(q4_model, **OPTIONS).close()
    monkeypatch.setenv(repack_probe.CRASH_HOOK_VARIABLE, "healthy")
    monkeypatch.setenv(repack_probe.PROBE_VARIABLE, "force")
    forced = LlamaCppBackend(q4_model, **OPTIONS)
    assert forced.repack is True  # the child ran again, and did not crash this time
    forced.close()
    assert [e["repack"] for e in _entries().values()] == [True]
    monkeypatch.setenv(repack_probe.PROBE_VARIABLE, "skip")
    monkeypatch.setattr(repack_probe, "_run_child", _no_probe)
    skipped = LlamaCppBackend(q4_model, **OPTIONS)
    assert skipped.repack is True
    skipped.close()


@pytest.mark.parametrize("repack", [False, True])
def test_the_repack_option_decides_without_a_probe(q4_model: Path, cache_home: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   repack: bool) -> None:
    monkeypatch.setattr(repack_probe, "_run_child", _no_probe)
    backend = LlamaCppBackend(q4_model, repack=repack, **OPTIONS)
    assert backend.repack is repack
    assert backend.llama.model_params.use_extra_bufts is repack
    assert backend.repack_note == ""  # a choice the user made is not news to them
    if not repack:  # a turn with repacking on runs in a child (the test below)
        assert _notices(backend) == []
    backend.close()
    assert not cache_home.exists()


_FORCED_ON_TURN = """
import json, sys
from toolwire import CancelToken, DiagnosticEvent, Message, TurnEnd
from toolwire.plugins.llama_cpp import repack_probe
from toolwire.plugins.llama_cpp.backend import LlamaCppBackend
from toolwire.vocabulary.backend import ModelRequest

def no_probe(path):
    raise AssertionError("the probe child ran although repack=True was given")

repack_probe._run_child = no_probe
backend = LlamaCppBackend(sys.argv[1], repack=True, **json.loads(sys.argv[2]))
print(json.dumps({"repack": backend.repack, "note": backend.repack_note,
                  "extra_bufts": backend.llama.model_params.use_extra_bufts}), flush=True)
items = list(backend.stream_turn(ModelRequest((Message.user("hi"),)), CancelToken()))
print(json.dumps({"end": items[-1].reason if isinstance(items[-1], TurnEnd) else None,
                  "notices": [e.code for e in items if isinstance(e, DiagnosticEvent)
                              and e.code == "repack_disabled"]}), flush=True)
backend.close()
"""


def test_a_turn_with_repacking_forced_on_runs_in_a_child_and_agrees_with_the_probe(
        q4_model: Path, cache_home: Path) -> None:
    """The forced-on load decides without a probe; whether its turn then runs is this CPU's
    business, so it runs in a child, and a crash there must be what the probe also sees."""
    child = subprocess.run([sys.executable, "-c", _FORCED_ON_TURN, str(q4_model),
                            json.dumps(OPTIONS)], capture_output=True, text=True,
                           timeout=300, check=False)
    lines = [json.loads(line) for line in child.stdout.splitlines() if line.startswith("{")]
    assert lines and lines[0] == {"repack": True, "note": "", "extra_bufts": True}, child.stderr
    if child.returncode == 0:
        assert lines[1]["end"] in ("stop", "length") and lines[1]["notices"] == []
        probe = repack_probe._run_child(q4_model)
        assert probe is not None and probe.signal_name == ""
    else:
        died = signal.Signals(-child.returncode).name if child.returncode < 0 else ""
        assert died, f"the child failed without a crash:\n{child.stderr[-2000:]}"
        probe = repack_probe._run_child(q4_model)
        assert probe is not None and probe.signal_name, \
            f"the turn died of {died} but the probe finds this CPU healthy"
    assert not cache_home.exists()


def test_a_model_with_only_f32_weights_needs_no_probe(tmp_path: Path, cache_home: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(repack_probe, "_run_child", _no_probe)
    backend = LlamaCppBackend(write_tiny_gguf(tmp_path / "f32.gguf"), **OPTIONS)
    assert backend.repack is True
    backend.close()
    assert not cache_home.exists()


def test_the_answer_is_kept_per_build_cpu_and_file_type() -> None:
    q4_0, q4_1 = repack_probe.probe_identity(2), repack_probe.probe_identity(3)
    assert q4_0["build"] == q4_1["build"] and q4_0["cpu"] == q4_1["cpu"]
    assert repack_probe._key(q4_0) != repack_probe._key(q4_1)
    assert q4_0["build"]["llama_cpp_python"] == llama_cpp.__version__
    assert q4_0["build"]["system_info"]  # the compiled-in CPU features (AMX, AVX512...)


def test_the_cache_lives_in_the_user_cache_folder(tmp_path: Path) -> None:
    assert repack_probe.cache_path({"XDG_CACHE_HOME": str(tmp_path)}) == (
        tmp_path / "toolwire" / "repack-probe.json")
    assert repack_probe.cache_path({"XDG_CACHE_HOME": ""}) == (
        Path.home() / ".cache" / "toolwire" / "repack-probe.json")


def test_an_unreadable_cache_is_probed_again(q4_model: Path, cache_home: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(repack_probe.CRASH_HOOK_VARIABLE, "healthy")
    path = repack_probe.cache_path()
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    backend = LlamaCppBackend(q4_model, **OPTIONS)
    assert backend.repack is True
    backend.close()
    assert [e["repack"] for e in _entries().values()] == [True]


# -- a closed model -------------------------------------------------------------------------


def test_a_closed_backend_raises_a_closed_backend_error_and_its_turns_end_with_that_error(
        tmp_path: Path) -> None:
    backend = LlamaCppBackend(write_tiny_gguf(tmp_path / "m.gguf"), **OPTIONS)
    backend.close()
    backend.close()
    items = list(backend.stream_turn(ModelRequest((Message.user("hi"),)), CancelToken()))
    assert isinstance(items[0], ErrorEvent) and items[0].kind == "closed"
    assert items[-1] == TurnEnd("error")
    for call in (lambda: backend.tokenize("hello"), backend.special_tokens,
                 backend.end_markers, lambda: backend.encode_prompt("x")):
        with pytest.raises(BackendError) as raised:
            call()
        assert raised.value.kind == "closed"


def test_a_llama_closed_by_its_owner_is_refused_before_any_native_call(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "m.gguf")
    llama = llama_cpp.Llama(str(path), n_ctx=256, n_threads=1, verbose=False)
    backend = LlamaCppBackend(path, model=llama, max_tokens=4, progress=False)
    llama.close()
    items = list(backend.stream_turn(ModelRequest((Message.user("hi"),)), CancelToken()))
    assert isinstance(items[0], ErrorEvent) and items[0].kind == "closed"
    with pytest.raises(BackendError, match="closed") as raised:
        LlamaCppBackend(path, model=llama, max_tokens=4, progress=False)
    assert raised.value.kind == "closed"


_GIVEN_MODEL = """
import sys, llama_cpp
from toolwire.plugins.llama_cpp import backend as module
llama = llama_cpp.Llama(sys.argv[1], n_ctx=256, n_threads=1, verbose=False)
assert module._LOG_FILTER.installed is None
module.LlamaCppBackend(sys.argv[1], model=llama, max_tokens=4, progress=False)
assert module._LOG_FILTER.installed is not None and module._LOG_FILTER.verbose is False
"""


def test_a_model_passed_in_gets_the_log_filter_too(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "m.gguf")
    done = subprocess.run([sys.executable, "-c", _GIVEN_MODEL, str(path)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
