"""llama-cpp-python's own OpenAI-compatible server, run as a child process on 127.0.0.1.

:class:`LlamaCppServer` starts ``python -m llama_cpp.server`` (the ``server``
extra of llama-cpp-python) with a GGUF model on a free port, waits until
``GET /v1/models`` answers, and stops the process (and only it) on exit. The
tests of the ``completions`` backend and its benchmark drive it with the tiny
model of :mod:`toolwire.testing.tiny_gguf`, whose output a GBNF
grammar sent in each request forces.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

from tests.support.openai_wire_server import free_port

__all__ = ["LlamaCppServer"]


class LlamaCppServer:
    """A running ``python -m llama_cpp.server`` (a context manager).

    :param model: the GGUF file to serve.
    :param n_ctx: the server's context size.
    :param log: where the server's output goes (a file path).
    :param startup: seconds to wait for it to answer.
    """

    def __init__(self, model: Path, *, n_ctx: int = 4096, log: Path | None = None,
                 startup: float = 60.0) -> None:
        self.model = model
        self.n_ctx = n_ctx
        self.port = free_port()
        self.log = log or model.with_suffix(".server.log")
        self.startup = startup
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def root(self) -> str:
        """The server's address."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LlamaCppServer:
        """Start the server and wait until it answers.

        :raises RuntimeError: it exited or did not answer within ``startup`` seconds
            (the message holds the end of its log).
        """
        command = [sys.executable, "-m", "llama_cpp.server", "--model", str(self.model),
                   "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", str(self.n_ctx),
                   "--n_threads", "1", "--n_threads_batch", "1", "--verbose", "False"]
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        deadline = time.monotonic() + self.startup
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited ({self.process.returncode}): "
                                   f"{self._log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.root}/v1/models", timeout=2) as answer:
                    if answer.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"llama_cpp.server did not answer in {self.startup:g} s: "
                           f"{self._log_tail()}")

    def stop(self) -> None:
        """Stop the server process (terminate, then kill after 10 s)."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def log_text(self) -> str:
        """What the server has written so far."""
        try:
            return self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def wait_for_log(self, text: str, timeout: float = 5.0) -> bool:
        """Wait until ``text`` appears in the server's output; return whether it did."""
        deadline = time.monotonic() + timeout
        while text not in self.log_text():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def _log_tail(self) -> str:
        return self.log_text()[-2000:] or "(no log)"

    def __enter__(self) -> LlamaCppServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
