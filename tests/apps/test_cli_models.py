"""``toolwire models`` and ``--model NAME``: GGUF models people already have, found in fake
Hugging Face, Ollama and LM Studio stores (real tiny GGUF files in each tool's layout),
through the real entry point."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.cli import CliRun, run_cli
from tests.support.model_stores import add_hf, add_lmstudio, add_ollama, tiny_gguf
from tests.support.templates import shared_template
from toolwire.apps.cli.serve import model_id_for
from toolwire.apps.local_models import (
    AmbiguousModelError,
    LocalModel,
    ModelNotFoundError,
    quantization_name,
    resolve_model,
)


def toolwire(*args: str, home: Path, env: dict[str, str] | None = None,
             cwd: Path | None = None) -> CliRun:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "OLLAMA_MODELS",
                          "TOOLWIRE_MODELS_DIR", "XDG_CACHE_HOME")}
    home.mkdir(parents=True, exist_ok=True)
    full = {**clean, "HOME": str(home), **(env or {})}
    return run_cli(*args, env=full, cwd=cwd or home)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A home folder with models in all three stores, and one folder of the user's."""
    home = tmp_path / "home"
    parts = tmp_path / "parts"
    qwen = shared_template("Qwen3.5-4B.jinja")
    add_hf(home / ".cache" / "huggingface" / "hub", "Qwen/Qwen3-4B-GGUF", {
        "Qwen3-4B-Q4_K_M.gguf": tiny_gguf(parts / "q.gguf", template=qwen),
        "mmproj-F16.gguf": tiny_gguf(parts / "mm.gguf", arch="clip", file_type=1),
        "big/Big-Q8_0-00001-of-00002.gguf": tiny_gguf(parts / "b1.gguf", file_type=7),
        "big/Big-Q8_0-00002-of-00002.gguf": tiny_gguf(parts / "b2.gguf", file_type=7),
    })
    from toolwire.testing.tiny_gguf import write_tiny_gguf

    add_ollama(home / ".ollama" / "models", "tiny", "latest",
               write_tiny_gguf(parts / "tiny.gguf"))
    add_lmstudio(home / ".lmstudio" / "models", "lmstudio-community", "Gemma-GGUF",
                 "gemma-Q8_0.gguf", tiny_gguf(parts / "g.gguf", arch="gemma3", file_type=7))
    return home


def listing(run: CliRun) -> dict[str, dict[str, Any]]:
    assert run.returncode == 0, run.stderr
    return {row["name"]: row for row in json.loads(run.stdout)}


def test_models_lists_each_store_with_size_architecture_quantization_and_family(
        home: Path) -> None:
    rows = listing(toolwire("models", "--json", home=home))
    assert set(rows) == {"hf:Qwen/Qwen3-4B-GGUF/Qwen3-4B-Q4_K_M.gguf",
                         "hf:Qwen/Qwen3-4B-GGUF/big/Big-Q8_0-00001-of-00002.gguf",
                         "ollama:tiny:latest",
                         "lmstudio:lmstudio-community/Gemma-GGUF/gemma-Q8_0.gguf"}
    qwen = rows["hf:Qwen/Qwen3-4B-GGUF/Qwen3-4B-Q4_K_M.gguf"]
    assert (qwen["source"], qwen["architecture"], qwen["quantization"], qwen["family"]) == (
        "hf", "qwen3", "Q4_K_M", "qwen_xml")
    assert qwen["size"] == Path(qwen["path"]).stat().st_size > 0
    assert "/snapshots/" in qwen["path"]
    tiny = rows["ollama:tiny:latest"]
    assert tiny["architecture"] == "llama" and Path(tiny["path"]).name.startswith("sha256-")
    gemma = rows["lmstudio:lmstudio-community/Gemma-GGUF/gemma-Q8_0.gguf"]
    assert (gemma["architecture"], gemma["quantization"]) == ("gemma3", "Q8_0")


def test_verify_selects_the_family_as_a_chat_does(home: Path) -> None:
    rows = listing(toolwire("models", "--json", "--verify", "--source", "hf", home=home))
    assert rows["hf:Qwen/Qwen3-4B-GGUF/Qwen3-4B-Q4_K_M.gguf"]["family"] == "qwen_xml"


def test_a_split_model_is_one_row_with_the_size_of_all_its_shards(home: Path) -> None:
    rows = listing(toolwire("models", "--json", home=home))
    big = rows["hf:Qwen/Qwen3-4B-GGUF/big/Big-Q8_0-00001-of-00002.gguf"]
    second = Path(big["path"]).with_name("Big-Q8_0-00002-of-00002.gguf")
    assert big["size"] == Path(big["path"]).stat().st_size + second.stat().st_size


def test_the_text_listing_has_a_header_and_a_row_per_model(home: Path) -> None:
    run = toolwire("models", home=home)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].split() == ["NAME", "SIZE", "ARCH", "QUANT", "FAMILY", "PATH"]
    assert len(lines) == 5
    assert any(line.startswith("ollama:tiny:latest ") for line in lines)
    assert "KB" in run.stdout


def test_environment_variables_and_models_dir_choose_where_to_look(tmp_path: Path) -> None:
    hub, ollama, mine, also = (tmp_path / n for n in ("hub", "ollama", "mine", "also"))
    add_hf(hub, "org/repo", {"m-Q4_K_M.gguf": tiny_gguf(tmp_path / "a.gguf")})
    add_ollama(ollama, "qwen3", "4b", tiny_gguf(tmp_path / "b.gguf"))
    tiny_gguf(mine / "sub" / "custom-Q5_K_M.gguf", file_type=None)
    tiny_gguf(also / "other.gguf")
    run = toolwire("models", "--json", "--models-dir", str(mine), home=tmp_path / "empty",
                   env={"HF_HUB_CACHE": str(hub), "OLLAMA_MODELS": str(ollama),
                        "TOOLWIRE_MODELS_DIR": str(also)})
    rows = listing(run)
    assert set(rows) == {"hf:org/repo/m-Q4_K_M.gguf", "ollama:qwen3:4b",
                         "dir:sub/custom-Q5_K_M.gguf", "dir:other.gguf"}
    assert rows["dir:sub/custom-Q5_K_M.gguf"]["quantization"] == "Q5_K_M"  # from the name
    only = listing(toolwire("models", "--json", "--source", "ollama", home=tmp_path / "empty",
                            env={"OLLAMA_MODELS": str(ollama)}))
    assert set(only) == {"ollama:qwen3:4b"}


def test_hf_home_holds_the_hub_cache(tmp_path: Path) -> None:
    add_hf(tmp_path / "hfhome" / "hub", "org/repo", {"x.gguf": tiny_gguf(tmp_path / "x.gguf")})
    rows = listing(toolwire("models", "--json", home=tmp_path / "empty",
                            env={"HF_HOME": str(tmp_path / "hfhome")}))
    assert set(rows) == {"hf:org/repo/x.gguf"}


def test_hostile_or_broken_store_entries_are_skipped_or_reported(tmp_path: Path) -> None:
    home = tmp_path / "home"
    store = home / ".ollama" / "models"
    add_ollama(store, "good", "latest", tiny_gguf(tmp_path / "g.gguf"))
    manifests = store / "manifests" / "registry.ollama.ai" / "library"
    (manifests / "escape").mkdir(parents=True)
    (manifests / "escape" / "latest").write_text(json.dumps({"layers": [
        {"mediaType": "application/vnd.ollama.image.model",
         "digest": "sha256:../../../../etc/passwd"}]}))
    (manifests / "garbage").mkdir()
    (manifests / "garbage" / "latest").write_bytes(b"\xff\x00 not json")
    (manifests / "gone").mkdir()
    (manifests / "gone" / "latest").write_text(json.dumps({"layers": [
        {"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:" + "f" * 64}]}))
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "truncated.gguf").write_bytes(b"GGUF\x03\x00\x00\x00")
    (mine / "dangling.gguf").symlink_to(mine / "nowhere.gguf")
    (mine / "loop").symlink_to(mine)
    run = toolwire("models", "--json", "--models-dir", str(mine), home=home)
    rows = listing(run)
    assert set(rows) == {"ollama:good:latest", "dir:truncated.gguf", "dir:dangling.gguf"}
    assert "truncated.gguf" in rows["dir:truncated.gguf"]["problem"]
    assert rows["dir:dangling.gguf"]["problem"]
    assert "Traceback" not in run.stderr


def test_no_models_is_not_an_error_and_says_where_it_looked(tmp_path: Path) -> None:
    run = toolwire("models", home=tmp_path)
    assert run.returncode == 0 and run.stdout == ""
    assert "no GGUF models found" in run.stderr
    assert str(tmp_path / ".ollama" / "models") in run.stderr


# -- --model NAME ----------------------------------------------------------------------------


def test_an_ambiguous_model_name_lists_the_candidates(home: Path) -> None:
    run = toolwire("chat", "--model", "gguf", "--message", "hi", home=home)
    assert run.returncode == 2
    assert "matches 3 models" in run.stderr
    assert "hf:Qwen/Qwen3-4B-GGUF/Qwen3-4B-Q4_K_M.gguf" in run.stderr
    assert "lmstudio:lmstudio-community/Gemma-GGUF/gemma-Q8_0.gguf" in run.stderr
    assert "loading" not in run.stderr and "Traceback" not in run.stderr


@pytest.mark.parametrize("name", ["nothing-like-it", "ollama:gemma", "missing/model.gguf"])
def test_a_model_name_that_matches_nothing_is_an_input_error(home: Path, name: str) -> None:
    run = toolwire("chat", "--model", name, "--message", "hi", home=home)
    assert run.returncode == 2
    assert f"--model {name}" in run.stderr and "toolwire models" in run.stderr
    assert str(home / ".ollama" / "models") in run.stderr


def test_a_folder_given_as_model_is_an_input_error(home: Path) -> None:
    run = toolwire("chat", "--model", str(home), "--message", "hi", home=home)
    assert run.returncode == 2 and "is a folder" in run.stderr


@pytest.mark.model
def test_a_found_model_runs_by_its_short_name(home: Path) -> None:
    pytest.importorskip("llama_cpp")
    run = toolwire("chat", "--model", "ollama:tiny", "--message", "hi", "--json",
                   "--no-tools", "--max-tokens", "4", "--seed", "1", "--temperature", "0",
                   home=home)
    assert "Traceback" not in run.stderr
    events = [json.loads(line) for line in run.stdout.splitlines() if line.strip()]
    assert events and events[-1]["type"] == "done", run.stderr
    assert events[-1]["reason"] in ("stop", "length")


@pytest.mark.model
def test_a_unique_substring_names_a_model(home: Path) -> None:
    pytest.importorskip("llama_cpp")
    run = toolwire("chat", "--model", "tiny", "--message", "hi", "--no-tools",
                   "--max-tokens", "2", "--seed", "1", home=home)
    assert run.stderr.startswith("loading tiny (")
    assert "sha256-" in run.stderr.splitlines()[0]
    assert run.returncode in (0, 1) and "Traceback" not in run.stderr


def test_serve_names_a_found_model_by_its_short_name() -> None:
    def args(given: str) -> argparse.Namespace:
        return argparse.Namespace(model_id=None, demo=False, provider=None,
                                  model="/store/blobs/sha256-abc", model_given=given)

    assert model_id_for(args("ollama:qwen3:4b")) == "qwen3:4b"
    assert model_id_for(args("hf:Qwen/Qwen3-4B-GGUF/Qwen3-4B-Q4_K_M.gguf")) == \
        "Qwen3-4B-Q4_K_M"


# -- resolution rules, in-process -------------------------------------------------------------


def models(*names: str) -> list[LocalModel]:
    return [LocalModel(n, n.split(":")[0], Path("/m") / str(i), 1) for i, n in enumerate(names)]


def test_resolution_prefers_exact_then_unprefixed_then_a_unique_substring() -> None:
    found = models("ollama:qwen3:4b", "ollama:qwen3:latest", "hf:Qwen/Qwen3-4B-GGUF/q4.gguf",
                   "dir:qwen3-notes.gguf")
    assert resolve_model("ollama:qwen3", found).name == "ollama:qwen3:latest"
    assert resolve_model("qwen3:4b", found).name == "ollama:qwen3:4b"
    assert resolve_model("OLLAMA:QWEN3:4B", found).name == "ollama:qwen3:4b"
    assert resolve_model("notes", found).name == "dir:qwen3-notes.gguf"
    with pytest.raises(AmbiguousModelError) as ambiguous:
        resolve_model("qwen", found)
    assert len(ambiguous.value.candidates) == 4
    with pytest.raises(ModelNotFoundError):
        resolve_model("llama", found)


names = st.lists(st.from_regex(r"(hf|ollama|lmstudio|dir):[a-z0-9/._-]{1,12}(:[a-z0-9]{1,4})?",
                               fullmatch=True), min_size=1, max_size=8, unique=True)


@given(names)
def test_every_listed_name_resolves_to_its_own_model(listed: list[str]) -> None:
    found = models(*listed)
    for model in found:
        assert resolve_model(model.name, found) == model


@pytest.mark.parametrize(("file_type", "name"), [(15, "Q4_K_M"), (0, "F32"), (1, "F16"),
                                                 (7, "Q8_0"), (32, "BF16"), (1024, None),
                                                 (9999, None), (True, None), ("15", None)])
def test_quantization_is_named_from_the_file_type(file_type: object, name: str | None) -> None:
    assert quantization_name(file_type) == name


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_a_fifo_or_a_device_named_like_a_model_is_skipped(tmp_path: Path, kind: str) -> None:
    store = tmp_path / "home" / ".cache" / "huggingface" / "hub"
    add_hf(store, "org/repo", {"good.gguf": tiny_gguf(tmp_path / "g.gguf")})
    (snapshot,) = (store / "models--org--repo" / "snapshots").iterdir()
    planted = snapshot / "planted.gguf"
    mine = tmp_path / "mine"
    mine.mkdir()
    for path in (planted, mine / "planted.gguf"):
        if kind == "fifo":
            os.mkfifo(path)
        else:
            path.symlink_to(kind)
    # reading either one's header would never end: the run's timeout is the failure
    rows = listing(toolwire("models", "--json", "--models-dir", str(mine),
                            home=tmp_path / "home"))
    assert set(rows) == {"hf:org/repo/good.gguf"}
