"""``--no-repack``: a local model loads without llama.cpp's weight repacking (issue 31)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from toolwire.apps.cli.chat import add_chat_arguments
from toolwire.apps.cli.common import UsageError
from toolwire.apps.cli.model_options import check_model_options, generation_options
from toolwire.hooks.manager import PluginManager
from toolwire.testing.tiny_gguf import write_tiny_gguf


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_chat_arguments(parser)
    return parser.parse_args(list(argv))


def test_no_repack_reaches_the_local_backend_as_repack_false(tmp_path: Path) -> None:
    model = write_tiny_gguf(tmp_path / "m.gguf")
    args = _args("--model", str(model), "--no-repack", "--workspace", str(tmp_path))
    check_model_options(args, PluginManager(entry_points=False))
    assert generation_options(args, "llama_cpp")["repack"] is False
    default = _args("--model", str(model), "--workspace", str(tmp_path))
    assert "repack" not in generation_options(default, "llama_cpp")


@pytest.mark.parametrize("provider", ["openai", "completions"])
def test_no_repack_is_refused_for_a_remote_model(tmp_path: Path, provider: str) -> None:
    args = _args("--provider", provider, "--model", "m", "--base-url", "http://127.0.0.1:9",
                 "--no-repack", "--workspace", str(tmp_path))
    with pytest.raises(UsageError, match="--no-repack apply to a local model"):
        check_model_options(args, PluginManager(entry_points=False))
