"""Fake model stores laid out as Hugging Face, Ollama and LM Studio lay them out, holding
tiny GGUF files, for tests and the benchmark of ``toolwire models``.

The GGUF files are small but real (:func:`tests.support.gguf_builders.write_gguf`, or
the runnable tiny model of :mod:`toolwire.testing.tiny_gguf`); the folder
layouts follow each tool's documented cache format:

* Hugging Face: ``hub/models--ORG--REPO/{blobs/SHA, snapshots/REV/FILE -> blob, refs/main}``;
* Ollama: ``models/manifests/registry.ollama.ai/library/NAME/TAG`` (JSON naming
  layers by media type and digest) and ``models/blobs/sha256-HEX``;
* LM Studio: ``.lmstudio/models/PUBLISHER/REPO/FILE.gguf``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import gguf

from tests.support.gguf_builders import write_gguf

__all__ = ["QWEN_TEMPLATE_FILE", "add_hf", "add_lmstudio", "add_ollama", "tiny_gguf"]

QWEN_TEMPLATE_FILE = "Qwen3.5-4B.jinja"
OLLAMA_MODEL = "application/vnd.ollama.image.model"


def tiny_gguf(path: Path, *, arch: str = "qwen3", template: str | None = None,
              file_type: int | None = 15) -> Path:
    """A small GGUF header-and-tensors file with ``general.file_type`` (15 is Q4_K_M)."""
    extra: Callable[[gguf.GGUFWriter], None] | None = None
    if file_type is not None:
        def extra(writer: gguf.GGUFWriter) -> None:
            writer.add_file_type(file_type)
    path.parent.mkdir(parents=True, exist_ok=True)
    kwargs = {} if template is None else {"template": template}
    return write_gguf(path, arch=arch, extra=extra, **kwargs)


def add_hf(hub: Path, repo: str, files: dict[str, Path], *, revision: str = "a" * 40,
           main: bool = True) -> dict[str, Path]:
    """Put ``files`` (name in the repo -> a GGUF to copy) in the hub cache as a download
    of ``repo`` at ``revision``: blobs by content hash, snapshot links to them."""
    folder = hub / ("models--" + repo.replace("/", "--"))
    placed: dict[str, Path] = {}
    for name, source in files.items():
        data = source.read_bytes()
        blob = folder / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = folder / "snapshots" / revision / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(blob)
        placed[name] = link
    if main:
        (folder / "refs").mkdir(parents=True, exist_ok=True)
        (folder / "refs" / "main").write_text(revision)
    return placed


def add_ollama(models: Path, name: str, tag: str, source: Path, *,
               namespace: str = "library", host: str = "registry.ollama.ai") -> Path:
    """Pull ``source`` into an Ollama store as ``name:tag``; return the blob."""
    data = source.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    blob = models / "blobs" / f"sha256-{digest}"
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(data)
    template = models / "blobs" / f"sha256-{'0' * 64}"
    template.write_text("{{ .Prompt }}")
    manifest = models / "manifests" / host / namespace / name / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                   "digest": f"sha256:{'1' * 64}", "size": 10},
        "layers": [{"mediaType": OLLAMA_MODEL, "digest": f"sha256:{digest}",
                    "size": len(data)},
                   {"mediaType": "application/vnd.ollama.image.template",
                    "digest": f"sha256:{'0' * 64}", "size": 13}]}))
    return blob


def add_lmstudio(models: Path, publisher: str, repo: str, filename: str, source: Path) -> Path:
    """Put ``source`` in an LM Studio models folder."""
    target = models / publisher / repo / filename
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    return target
