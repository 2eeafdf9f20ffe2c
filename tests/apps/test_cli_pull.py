"""``toolwire pull`` through its real entry point against a stand-in hub on 127.0.0.1
(``HF_ENDPOINT``), with the real :mod:`huggingface_hub` client: the model lands in the hub
cache where ``toolwire models`` lists it and ``toolwire chat --model`` finds it, its
checksum is the hub's or it is refused, and every name that is not there is one line."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("huggingface_hub")

from tests.support.cli import CliRun, run_cli_process
from tests.support.openai_wire_server import free_port
from tests.support.stand_in_hub import COMMIT, HubRepo, StandInHub, stand_in_hub
from toolwire.apps.cli.common import UsageError
from toolwire.apps.cli.pull import choose_file, verify_file
from toolwire.errors import ToolwireError
from toolwire.templates.default_template import DEFAULT_CHAT_TEMPLATE
from toolwire.testing.tiny_gguf import write_tiny_gguf

# huggingface_hub reads its variables once, at import: each pull is a process of its own
pytestmark = pytest.mark.process


@pytest.fixture(scope="module")
def model_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A tiny real model whose template selects a parser (toolwire's default, Qwen-style)."""
    folder = tmp_path_factory.mktemp("model")
    return write_tiny_gguf(folder / "m.gguf", DEFAULT_CHAT_TEMPLATE).read_bytes()


@pytest.fixture
def hub() -> Iterator[StandInHub]:
    with stand_in_hub() as running:
        yield running


def toolwire(hub: StandInHub | str, home: Path, *args: str) -> CliRun:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("HF_", "HUGGINGFACE_", "OLLAMA_", "XDG_CACHE"))}
    env.update({"HF_ENDPOINT": hub if isinstance(hub, str) else hub.url,
                "HF_HOME": str(home / "hf"), "HOME": str(home)})
    return run_cli_process(*args, env=env)  # huggingface_hub reads its variables at import


def blobs(home: Path) -> list[Path]:
    return sorted(p for p in (home / "hf" / "hub").glob("models--*/blobs/*") if p.is_file())


def test_a_pulled_model_is_listed_by_models_and_found_by_chat(
        hub: StandInHub, tmp_path: Path, model_bytes: bytes) -> None:
    hub.repos["org/Tiny-GGUF"] = HubRepo({
        "tiny-Q4_K_M.gguf": model_bytes, "tiny-Q8_0.gguf": model_bytes + b"\0",
        "mmproj-tiny-F16.gguf": b"projector", "README.md": b"# tiny\n"})
    pulled = toolwire(hub, tmp_path, "pull", "org/Tiny-GGUF")
    assert pulled.returncode == 0, pulled.stderr
    name = "hf:org/Tiny-GGUF/tiny-Q4_K_M.gguf"
    assert f"pulled {name} " in pulled.stdout and "parser family qwen_xml" in pulled.stdout
    assert f"toolwire chat --model {name}" in pulled.stdout
    snapshot = tmp_path / "hf" / "hub" / "models--org--Tiny-GGUF" / "snapshots" / COMMIT
    assert (snapshot / "tiny-Q4_K_M.gguf").read_bytes() == model_bytes
    assert not (snapshot / "tiny-Q8_0.gguf").exists()  # only the one chosen
    assert (tmp_path / "hf" / "hub" / "models--org--Tiny-GGUF" / "refs" / "main").read_text() \
        == COMMIT
    assert [p.name for p in blobs(tmp_path)] == [hashlib.sha256(model_bytes).hexdigest()]
    assert all(path != "/api/agent-harnesses" for _, path, _ in hub.requests)  # no telemetry

    listed = toolwire(hub, tmp_path, "models", "--json")
    (row,) = json.loads(listed.stdout)
    assert row["name"] == name and row["family"] == "qwen_xml"
    assert Path(row["path"]) == snapshot / "tiny-Q4_K_M.gguf"

    chat = toolwire(hub, tmp_path, "chat", "--model", "tiny-Q4_K_M", "--message", "hi",
                    "--max-tokens", "4", "--temperature", "0", "--workspace", str(tmp_path))
    assert f"loading tiny-Q4_K_M ({snapshot / 'tiny-Q4_K_M.gguf'}) ..." in chat.stderr
    # random weights write noise until the token limit: the run ends, with no traceback
    assert chat.returncode in (0, 1) and "Traceback" not in chat.stderr


def test_pulling_again_checks_the_cached_file_without_downloading_it(
        hub: StandInHub, tmp_path: Path, model_bytes: bytes) -> None:
    hub.repos["org/Tiny-GGUF"] = HubRepo({"tiny.gguf": model_bytes})
    assert toolwire(hub, tmp_path, "pull", "org/Tiny-GGUF:tiny.gguf").returncode == 0
    hub.requests.clear()
    again = toolwire(hub, tmp_path, "pull", "org/Tiny-GGUF:tiny.gguf")
    assert again.returncode == 0, again.stderr
    assert [m for m, path, _ in hub.requests if path.endswith("/tiny.gguf")] == ["HEAD", "HEAD"]


def test_a_connection_broken_mid_file_is_resumed_where_it_broke(
        hub: StandInHub, tmp_path: Path) -> None:
    # bigger than the client's 10 MiB read, so some of it has arrived when the cut comes
    content = os.urandom(24 << 20)
    hub.repos["org/Big-GGUF"] = HubRepo({"big.gguf": content}, cut_after={"big.gguf": 16 << 20})
    run = toolwire(hub, tmp_path, "pull", "org/Big-GGUF:big.gguf")
    assert run.returncode == 0, run.stderr
    gets = [{k.lower(): v for k, v in headers.items()} for method, path, headers
            in hub.requests if method == "GET" and path.endswith("/big.gguf")]
    assert len(gets) == 2 and "range" not in gets[0]
    resumed_at = int(gets[1]["range"].removeprefix("bytes=").removesuffix("-"))
    assert 0 < resumed_at <= 16 << 20
    (blob,) = blobs(tmp_path)
    assert blob.read_bytes() == content
    assert "warning" in run.stderr  # random bytes: pulled and checked, but no GGUF header


def test_a_download_that_does_not_match_the_hubs_sha256_is_refused_and_deleted(
        hub: StandInHub, tmp_path: Path, model_bytes: bytes) -> None:
    hub.repos["org/Tiny-GGUF"] = HubRepo({"tiny.gguf": model_bytes}, corrupt={"tiny.gguf"})
    run = toolwire(hub, tmp_path, "pull", "org/Tiny-GGUF:tiny.gguf")
    assert run.returncode == 1
    (line,) = [x for x in run.stderr.splitlines() if x.startswith("toolwire: ")]
    assert f"the hub says {hashlib.sha256(model_bytes).hexdigest()}" in line
    assert "corrupt and was deleted" in line and "Traceback" not in run.stderr
    assert blobs(tmp_path) == []
    assert list((tmp_path / "hf" / "hub").glob("models--*/snapshots/*/tiny.gguf")) == []
    assert json.loads(toolwire(hub, tmp_path, "models", "--json").stdout) == []


@pytest.mark.parametrize(("source", "extra", "message"), [
    ("org/Absent-GGUF", [], "org/Absent-GGUF: no such model repository on "),
    ("org/Absent-GGUF:m.gguf", [], "org/Absent-GGUF: no such model repository on "),
    ("org/Tiny-GGUF:other.gguf", [], "org/Tiny-GGUF has no such file on "),
    ("org/Tiny-GGUF", ["--revision", "v9"], "org/Tiny-GGUF has no revision 'v9' on "),
    ("not a repo", [], "'not a repo' is not a model repository"),
    ("org/Tiny-GGUF:README.md", [], "the file to pull must be a .gguf file"),
    ("org/Tiny-GGUF:../../etc/x.gguf", [], "the file to pull must be a .gguf file"),
])
def test_what_is_not_there_is_a_one_line_input_error(
        hub: StandInHub, tmp_path: Path, model_bytes: bytes, source: str, extra: list[str],
        message: str) -> None:
    hub.repos["org/Tiny-GGUF"] = HubRepo({"tiny.gguf": model_bytes})
    run = toolwire(hub, tmp_path, "pull", source, *extra)
    assert run.returncode == 2
    (line,) = run.stderr.splitlines()
    assert line.startswith("toolwire: ") and message in line
    assert blobs(tmp_path) == []


def test_an_unreachable_hub_is_a_one_line_failure(tmp_path: Path) -> None:
    nobody = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    run = toolwire(nobody, tmp_path, "pull", "org/Tiny-GGUF:tiny.gguf")
    assert run.returncode == 1
    (line,) = [x for x in run.stderr.splitlines() if x.startswith("toolwire: ")]
    assert line.startswith(f"toolwire: cannot pull org/Tiny-GGUF from {nobody}: ")
    assert "Traceback" not in run.stderr


def test_a_split_model_is_pulled_whole_and_listed_once(
        hub: StandInHub, tmp_path: Path, model_bytes: bytes) -> None:
    hub.repos["org/Split-GGUF"] = HubRepo({
        "Q4_K_M/split-Q4_K_M-00001-of-00002.gguf": model_bytes,
        "Q4_K_M/split-Q4_K_M-00002-of-00002.gguf": b"second shard",
        "split-Q8_0.gguf": model_bytes})
    run = toolwire(hub, tmp_path, "pull", "org/Split-GGUF")
    assert run.returncode == 0, run.stderr
    assert "in 2 files" in run.stdout
    (row,) = json.loads(toolwire(hub, tmp_path, "models", "--json").stdout)
    assert row["name"] == "hf:org/Split-GGUF/Q4_K_M/split-Q4_K_M-00001-of-00002.gguf"
    assert row["size"] == len(model_bytes) + len(b"second shard")


def test_several_models_and_no_preferred_one_ask_the_user_to_name_one(
        hub: StandInHub, tmp_path: Path, model_bytes: bytes) -> None:
    hub.repos["org/Tiny-GGUF"] = HubRepo({"tiny-Q8_0.gguf": model_bytes,
                                          "tiny-F16.gguf": model_bytes})
    run = toolwire(hub, tmp_path, "pull", "org/Tiny-GGUF")
    assert run.returncode == 2
    assert "holds 2 GGUF models and none Q4_K_M; name one: toolwire pull org/Tiny-GGUF:FILE" \
        in run.stderr
    assert "tiny-Q8_0.gguf" in run.stderr and "tiny-F16.gguf" in run.stderr
    assert blobs(tmp_path) == []


def test_without_huggingface_hub_pull_names_the_extra(tmp_path: Path) -> None:
    script = ("import sys; sys.modules['huggingface_hub'] = None; "
              "from toolwire.apps.cli.main import main; "
              "sys.exit(main(['pull', 'org/Tiny-GGUF']))")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env={**os.environ, "TOOLWIRE_LOAD_PLUGINS": ""}, timeout=60)
    assert run.returncode == 2
    assert run.stderr == ("toolwire: toolwire pull needs the hub extra (huggingface_hub): "
                          "pip install -e '.[hub]' in toolwire's source folder\n")


def test_the_file_taken_from_a_listing() -> None:
    assert choose_file("r", ["README.md", "m.gguf"]) == "m.gguf"
    assert choose_file("r", ["a-Q8_0.gguf", "a-Q4_K_M.gguf", "a-Q4_K_S.gguf",
                             "mmproj-a-Q4_K_M.gguf"]) == "a-Q4_K_M.gguf"
    assert choose_file("r", ["x-00001-of-00002.gguf", "x-00002-of-00002.gguf"]) \
        == "x-00001-of-00002.gguf"
    with pytest.raises(UsageError, match=r"holds no \.gguf file"):
        choose_file("r", ["README.md", "model.safetensors"])
    with pytest.raises(UsageError, match="several Q4_K_M"):
        choose_file("r", ["a-Q4_K_M.gguf", "b-Q4_K_M.gguf"])


def test_a_file_is_checked_against_a_git_blob_id_or_refused_without_a_checksum(
        tmp_path: Path) -> None:
    small = tmp_path / "small.gguf"
    small.write_bytes(b"GGUF small")
    blob_id = hashlib.sha1(b"blob 10\0GGUF small").hexdigest()
    assert verify_file(small, etag=f'"{blob_id}"', size=10) == f"git-sha1:{blob_id}"
    with pytest.raises(ToolwireError, match="bytes arrived, the hub says 11"):
        verify_file(small, etag=blob_id, size=11)
    assert not small.exists()
    small.write_bytes(b"GGUF small")
    with pytest.raises(ToolwireError, match="gave no checksum"):
        verify_file(small, etag="W/\"not-a-hash\"", size=10)
    assert not small.exists()


# -- nothing outside the cache (issue 40, item 6) -----------------------------------------

REPO_DIR = Path("hf") / "hub" / "models--org--Tiny-GGUF"


def files_outside(home: Path, *kept: Path) -> list[Path]:
    """Every file or link under ``home`` that is neither in the hub's cache nor one of
    ``kept``."""
    cache = home / "hf" / "hub"
    return sorted(p for p in home.rglob("*")
                  if not p.is_dir() and p not in kept and cache not in p.parents)


@pytest.mark.parametrize(("header", "value"), [
    ("X-Linked-Etag", '"../../../victim/important.txt"'),
    ("X-Linked-Etag", '"../../../../victim/important.txt"'),
    ("X-Repo-Commit", "../../../victim"),
    ("X-Repo-Commit", "0123456789abcdef0123456789abcdef01234567/../../../victim"),
    ("X-Linked-Etag", '"\x1b]0;owned\x07deadbeef"'),
])
def test_a_hub_etag_or_commit_that_would_be_a_path_is_refused_and_touches_nothing(
        hub: StandInHub, tmp_path: Path, model_bytes: bytes, header: str, value: str) -> None:
    victims = [tmp_path / "hf" / "victim" / "important.txt",
               tmp_path / "victim" / "important.txt"]
    for victim in victims:
        victim.parent.mkdir(parents=True, exist_ok=True)
        victim.write_text("keep me")
    hub.repos["org/Tiny-GGUF"] = HubRepo({"tiny.gguf": model_bytes},
                                         headers={"tiny.gguf": {header: value}})
    run = toolwire(hub, tmp_path, "pull", "org/Tiny-GGUF:tiny.gguf")
    assert run.returncode == 1, run.stderr
    (line,) = [x for x in run.stderr.splitlines() if x.startswith("toolwire: ")]
    assert header in line and "Traceback" not in run.stderr
    assert "\x1b" not in run.stderr + run.stdout
    assert all(victim.read_text() == "keep me" for victim in victims)
    assert files_outside(tmp_path, *victims) == []
    assert blobs(tmp_path) == []


def test_a_file_name_from_the_hub_that_is_not_a_plain_path_is_never_taken(
        hub: StandInHub, tmp_path: Path, model_bytes: bytes) -> None:
    hub.repos["org/Tiny-GGUF"] = HubRepo({
        "../../../escape-Q4_K_M.gguf": model_bytes, "/abs-Q4_K_M.gguf": model_bytes,
        "\x1b]0;owned\x07-Q4_K_M.gguf": model_bytes, "a/./b-Q4_K_M.gguf": model_bytes,
        "tiny-Q8_0.gguf": model_bytes})
    run = toolwire(hub, tmp_path, "pull", "org/Tiny-GGUF")
    assert run.returncode == 0, run.stderr
    assert "pulled hf:org/Tiny-GGUF/tiny-Q8_0.gguf " in run.stdout
    assert "\x1b" not in run.stderr + run.stdout
    assert files_outside(tmp_path) == []


def test_every_line_pull_prints_shows_hub_names_escaped(
        hub: StandInHub, tmp_path: Path, model_bytes: bytes) -> None:
    hub.repos["org/Tiny-GGUF"] = HubRepo({"a\x1b[2J-Q8_0.gguf": model_bytes,
                                          "b\x9b31m-F16.gguf": model_bytes,
                                          "c-Q5_0.gguf": model_bytes, "d-F16.gguf": model_bytes})
    run = toolwire(hub, tmp_path, "pull", "org/Tiny-GGUF")
    assert run.returncode == 2
    assert "c-Q5_0.gguf" in run.stderr
    assert not any(c in run.stderr + run.stdout for c in ("\x1b", "\x9b"))


def test_a_link_planted_in_a_shared_cache_never_gets_its_target_read_or_deleted(
        hub: StandInHub, tmp_path: Path, model_bytes: bytes) -> None:
    """A colleague's file, linked from a shared cache where the blob would be."""
    colleague = tmp_path / "colleague" / "notes.gguf"
    colleague.parent.mkdir()
    colleague.write_bytes(b"the colleague's own file")
    blob = tmp_path / REPO_DIR / "blobs" / hashlib.sha256(model_bytes).hexdigest()
    blob.parent.mkdir(parents=True)
    blob.symlink_to(colleague)
    hub.repos["org/Tiny-GGUF"] = HubRepo({"tiny.gguf": model_bytes})
    run = toolwire(hub, tmp_path, "pull", "org/Tiny-GGUF:tiny.gguf")
    assert run.returncode == 1
    (line,) = [x for x in run.stderr.splitlines() if x.startswith("toolwire: ")]
    assert "outside the cache" in line and "not a file the hub's client wrote" in line
    assert colleague.read_bytes() == b"the colleague's own file"
    blob.unlink()  # what the message asks of the user
    again = toolwire(hub, tmp_path, "pull", "org/Tiny-GGUF:tiny.gguf")
    assert again.returncode == 0, again.stderr
    assert blob.read_bytes() == model_bytes


def test_a_corrupt_download_deletes_its_snapshot_link_and_blob_entries_only(
        tmp_path: Path) -> None:
    """The blob entry is itself a link (the hub client's shared store does that): the
    entry goes, what it points to stays."""
    store = tmp_path / "hub" / "store.bin"
    store.parent.mkdir()
    store.write_bytes(b"GGUF bytes")
    blob = tmp_path / "hub" / "models--o--r" / "blobs" / ("0" * 64)
    blob.parent.mkdir(parents=True)
    blob.symlink_to(store)
    pointer = tmp_path / "hub" / "models--o--r" / "snapshots" / COMMIT / "m.gguf"
    pointer.parent.mkdir(parents=True)
    pointer.symlink_to(Path("..") / ".." / "blobs" / ("0" * 64))
    with pytest.raises(ToolwireError, match="corrupt and was deleted"):
        verify_file(pointer, etag="1" * 64, size=None)
    assert not pointer.is_symlink() and not blob.is_symlink()
    assert store.read_bytes() == b"GGUF bytes"


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_a_fifo_or_a_device_in_the_cache_is_refused_in_seconds(
        hub: StandInHub, tmp_path: Path, model_bytes: bytes, kind: str) -> None:
    blob = tmp_path / REPO_DIR / "blobs" / hashlib.sha256(model_bytes).hexdigest()
    blob.parent.mkdir(parents=True)
    if kind == "fifo":
        os.mkfifo(blob)
    else:
        blob.symlink_to(kind)
    hub.repos["org/Tiny-GGUF"] = HubRepo({"tiny.gguf": model_bytes})
    # without the check, hashing it never ends: the run's timeout is the failure
    run = toolwire(hub, tmp_path, "pull", "org/Tiny-GGUF:tiny.gguf")
    assert run.returncode == 1
    assert "not a file the hub's client wrote" in run.stderr
    assert Path("/dev/zero").exists()


@pytest.mark.parametrize("source", ["a/.", "a/..", "./a", "org/.hidden", "org/name.",
                                    "org/-x", "org/a--b", "org/a..b"])
def test_a_repository_name_the_hub_could_not_have_is_an_input_error(
        tmp_path: Path, source: str) -> None:
    from toolwire.apps.cli.main import main

    assert main(["pull", source]) == 2


def test_an_input_error_quoting_a_name_prints_it_escaped(
        capsys: pytest.CaptureFixture[str]) -> None:
    from toolwire.apps.cli.main import main

    assert main(["pull", "org/x:a\x1b]0;owned\x07.gguf"]) == 2
    err = capsys.readouterr().err
    assert "\\x1b]0;owned\\x07" in err and "\x1b" not in err
