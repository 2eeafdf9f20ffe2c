"""Whether llama.cpp may repack a model's weights on this CPU, asked once of a child process.

llama.cpp loads quantized weights into "extra buffer types" by default: it
repacks them for the CPU's wider kernels (CPU_REPACK) or its matrix unit (AMX).
On some CPUs such a kernel crashes the process in ``llama_decode`` (llama.cpp's
AMX kernels on AVX512+AMX hosts, for instance); the same model loaded without
repacking (``llama_model_params.use_extra_bufts = False``) runs correctly.
A crash kills the process, so it cannot be caught in-process: the first time a
(llama.cpp build, CPU, GGUF file type) is seen, :func:`repack_verdict` loads the
user's model in a child process (:mod:`.repack_child`) that decodes a few tokens.
A child killed by a signal means "load without repacking here". The answer is
kept in the user's cache folder (``$XDG_CACHE_HOME/toolwire/repack-probe.json``,
by default ``~/.cache/toolwire``), so the probe runs once, not on every load.

:data:`PROBE_VARIABLE` set to ``skip`` never probes (llama.cpp's default,
repacking on), ``force`` probes again even when the answer is cached.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import hashlib
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from toolwire.plugin_api import ChildEnd, SupervisedChild

from .repack_child import CRASH_HOOK_VARIABLE

__all__ = [
    "CACHE_FILE",
    "CRASH_HOOK_VARIABLE",
    "PROBE_VARIABLE",
    "ProbeVerdict",
    "cache_path",
    "probe_identity",
    "repack_verdict",
]

PROBE_VARIABLE: Final = "TOOLWIRE_REPACK_PROBE"
"""``skip``: never probe (repacking stays on); ``force``: probe even when cached."""

CACHE_FILE: Final = "repack-probe.json"

_ALL_F32: Final = 0  # general.file_type of a model with no quantized or half tensors
_BASE_TIMEOUT: Final = 60.0
_TIMEOUT_PER_GB: Final = 30.0
_CACHE_VERSION: Final = 1
_MAX_ENTRIES: Final = 256  # one per build, CPU and file type: a bound for a shared cache


@attrs.frozen
class ProbeVerdict:
    """How to load a model, and what to tell the user.

    :ivar repack: load with llama.cpp's weight repacking (its default).
    :ivar probed: a child process ran now (``False``: the cache answered, or no
        probe was needed).
    :ivar crash: how the probe child died (``"SIGSEGV"``...), ``""`` when it did not.
    :ivar note: one sentence for the user when repacking is off because of a crash.
    """

    repack: bool
    probed: bool = False
    crash: str = ""
    note: str = ""


def cache_path(environ: Mapping[str, str] | None = None) -> Path:
    """The probe's cache file: ``$XDG_CACHE_HOME/toolwire/repack-probe.json``
    (``~/.cache/toolwire/...`` when the variable is unset or empty)."""
    env = os.environ if environ is None else environ
    base = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else (
        Path.home() / ".cache")
    return base / "toolwire" / CACHE_FILE


def _library_folder() -> Path:
    import llama_cpp.llama_cpp as lib

    return Path(lib.__file__).parent / "lib"


def _find_library(stem: str) -> Path | None:
    folder = _library_folder()
    for pattern in (f"lib{stem}.*", f"{stem}.*"):
        for found in sorted(folder.glob(pattern)):
            if found.is_file():
                return found
    return None


def _ggml_text(function: str) -> str:
    found = _find_library("ggml-base")
    if found is None:
        return ""
    try:
        base = ctypes.CDLL(str(found))
        call = getattr(base, function)
    except (OSError, AttributeError):
        return ""
    call.restype = ctypes.c_char_p
    call.argtypes = []
    value = call()
    return value.decode("utf-8", "replace") if value else ""


def _build_identity() -> dict[str, Any]:
    import llama_cpp

    cpu_library = _find_library("ggml-cpu")
    stat = cpu_library.stat() if cpu_library is not None else None
    return {
        "llama_cpp_python": str(getattr(llama_cpp, "__version__", "")),
        "ggml": _ggml_text("ggml_version"),
        "ggml_commit": _ggml_text("ggml_commit"),
        "system_info": bytes(llama_cpp.llama_print_system_info()).decode(
            "utf-8", "replace").strip(),
        # the same version rebuilt (another machine's flags) is another build
        "libggml_cpu": [stat.st_size, int(stat.st_mtime)] if stat else None,
    }


def _cpu_identity() -> dict[str, Any]:
    flags: set[str] = set()
    model = ""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("flags", "Features"):
            flags.update(value.split())
        elif key == "model name" and not model:
            model = value.strip()
    return {"machine": platform.machine(), "model": model or platform.processor(),
            "flags_sha256": hashlib.sha256(" ".join(sorted(flags)).encode()).hexdigest()[:16]}


def probe_identity(file_type: int | None) -> dict[str, Any]:
    """What the probe's answer depends on: the llama.cpp build, the CPU, the file type."""
    return {"build": _build_identity(), "cpu": _cpu_identity(), "file_type": file_type}


def _key(identity: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:24]


def _read_cache(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != _CACHE_VERSION:
        return {}
    entries = data.get("entries")
    return entries if isinstance(entries, dict) else {}


def _write_cache(path: Path, key: str, entry: Mapping[str, Any]) -> None:
    """Add ``entry`` to the cache file, atomically (a reader never sees half a file)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        entries = _read_cache(path)
        entries[key] = dict(entry)
        while len(entries) > _MAX_ENTRIES:
            entries.pop(next(iter(entries)))
        handle, temporary = tempfile.mkstemp(prefix=".repack-probe-", dir=path.parent)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                json.dump({"version": _CACHE_VERSION, "entries": entries}, out, indent=1)
            os.replace(temporary, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
    except OSError:
        pass  # a read-only cache folder: the probe runs again next time, nothing worse


def _run_child(path: Path) -> ChildEnd | None:
    """Run the probe child on ``path`` (a supervised child: it dies with this process);
    how it ended (``None``: it timed out, and was killed)."""
    size_gb = path.stat().st_size / 1e9
    child = SupervisedChild(
        # the file, not the module: the child imports llama_cpp alone, not toolwire
        [sys.executable, "-P", str(Path(__file__).with_name("repack_child.py")), str(path)],
        pipe=False, quiet=True)
    end = child.wait(_BASE_TIMEOUT + _TIMEOUT_PER_GB * size_gb)
    if end is None:
        child.kill()
    return end


def _has_extra_buffers(identity: Mapping[str, Any]) -> bool:
    info = str(identity["build"].get("system_info", ""))
    return "REPACK = 1" in info or "AMX" in info


def _crash_note(path: Path, crash: str, *, cached: bool) -> str:
    """One short line: what crashed, and what toolwire did about it."""
    when = "an earlier test load" if cached else "a test load"
    return (f"llama.cpp's weight repacking crashed ({crash}) in {when} on this CPU: "
            f"{path.name} runs without it (--no-repack skips the test)")


def repack_verdict(path: Path, file_type: int | None, *,
                   environ: Mapping[str, str] | None = None,
                   before_probe: Callable[[], None] | None = None) -> ProbeVerdict:
    """Whether to load the model at ``path`` with weight repacking.

    :param before_probe: called just before a child process is started (to say so).

    Asks the cache first, then (once per build, CPU and file type) a child process.
    A file with only F32 weights, or a build without extra buffer types, needs no
    probe. A child that fails without a crash (a file llama.cpp cannot load) or
    times out decides nothing and is not cached: the real load reports its own error.
    """
    env = os.environ if environ is None else environ
    mode = env.get(PROBE_VARIABLE, "").strip().lower()
    if mode == "skip" or file_type == _ALL_F32:
        return ProbeVerdict(repack=True)
    identity = probe_identity(file_type)
    if not _has_extra_buffers(identity):
        return ProbeVerdict(repack=True)
    key = _key(identity)
    cache = cache_path(env)
    if mode != "force":
        entry = _read_cache(cache).get(key)
        if isinstance(entry, dict) and isinstance(entry.get("repack"), bool):
            crash = str(entry.get("crash") or "")
            return ProbeVerdict(repack=entry["repack"], crash=crash,
                                note="" if entry["repack"] else _crash_note(path, crash or
                                                                            "a signal",
                                                                            cached=True))
    if before_probe is not None:
        before_probe()
    started = time.perf_counter()
    end = _run_child(path)
    if end is None:
        return ProbeVerdict(repack=True, probed=True)
    crash = end.signal_name
    if end.status != 0 and not crash:
        return ProbeVerdict(repack=True, probed=True)
    _write_cache(cache, key, {
        "repack": not crash, "crash": crash, "file": path.name,
        "seconds": round(time.perf_counter() - started, 3),
        "checked": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "identity": identity})
    if not crash:
        return ProbeVerdict(repack=True, probed=True)
    return ProbeVerdict(repack=False, probed=True, crash=crash,
                        note=_crash_note(path, crash, cached=False))
