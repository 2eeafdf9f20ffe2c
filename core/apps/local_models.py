"""GGUF models people already have: found in other tools' stores, named, described.

Nothing is downloaded. :func:`find_models` looks in

* the Hugging Face hub cache (``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else
  ``~/.cache/huggingface/hub``): ``models--ORG--REPO/snapshots/REV/FILE.gguf``,
  named ``hf:ORG/REPO/FILE.gguf``;
* Ollama's store (``$OLLAMA_MODELS``, else ``~/.ollama/models``): each manifest
  under ``manifests/HOST/NAMESPACE/MODEL/TAG`` names its GGUF blob by the media type
  ``application/vnd.ollama.image.model``; named ``ollama:MODEL:TAG`` (the library's
  models), ``ollama:NAMESPACE/MODEL:TAG`` or ``ollama:HOST/NAMESPACE/MODEL:TAG``;
* LM Studio's models folder (``~/.lmstudio/models``, and the older
  ``~/.cache/lm-studio/models``): ``PUBLISHER/REPO/FILE.gguf``, named
  ``lmstudio:PUBLISHER/REPO/FILE.gguf``;
* folders the user names (``--models-dir``, ``$TOOLWIRE_MODELS_DIR``, several joined
  by ``os.pathsep``), searched a few levels deep, named ``dir:RELATIVE/PATH.gguf``.

A model split into shards (``NAME-00001-of-00003.gguf``) is listed once, by its
first shard (which llama.cpp loads), with the size of all its shards; vision
projectors (``mmproj*.gguf``) are left out. Stores are untrusted: a manifest that
is not JSON, or names a blob by anything but a sha256 digest, is skipped.

:func:`resolve_model` turns what a user typed for ``--model`` into one model: an
exact name, a name without its store prefix, or a unique substring.
:func:`describe_model` reads a model's header (never its tensors) for the
architecture, the quantization and the parser family its chat template selects:
by default the family plugin that scores the template highest (milliseconds);
with ``verify=True`` exactly as a chat selects it (the template renders probe calls
that the parser must read back, or a parser is derived: tens of milliseconds).
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import attrs

from ..errors import ParserConflictError, ParserNotFoundError, ToolwireError
from ..hooks.manager import PluginManager

__all__ = [
    "MODELS_DIR_VARIABLE",
    "SOURCES",
    "AmbiguousModelError",
    "LocalModel",
    "ModelDescription",
    "ModelNotFoundError",
    "ModelStore",
    "describe_model",
    "find_models",
    "model_stores",
    "quantization_from_name",
    "quantization_name",
    "resolve_model",
    "shard_set",
]

MODELS_DIR_VARIABLE = "TOOLWIRE_MODELS_DIR"
SOURCES = ("hf", "ollama", "lmstudio", "dir")
"""The store prefixes of model names, in the order stores are listed."""

_OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
_OLLAMA_REGISTRY = "registry.ollama.ai"
_DIGEST = re.compile(r"sha256[:-]([0-9a-f]{64})")
_SHARD = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
_MAX_DEPTH = 6
_MAX_MANIFEST_BYTES = 1 << 20


@attrs.frozen
class ModelStore:
    """One place models are looked for.

    :ivar source: ``hf``, ``ollama``, ``lmstudio`` or ``dir``.
    :ivar root: the folder.
    """

    source: str
    root: Path


@attrs.frozen
class LocalModel:
    """A GGUF model found on this machine.

    :ivar name: the short name ``--model`` accepts (``ollama:qwen3:4b``).
    :ivar source: the store it was found in (see :data:`SOURCES`).
    :ivar path: the file to load (the first shard of a split model).
    :ivar size: bytes on disk, all shards together.
    """

    name: str
    source: str
    path: Path
    size: int


@attrs.frozen
class ModelDescription:
    """What a model's GGUF header says, for a listing.

    :ivar architecture: ``general.architecture`` (``qwen3``, ``llama``...).
    :ivar quantization: from ``general.file_type`` (``Q4_K_M``), else from the
        file name, else ``None``.
    :ivar family: the parser family its chat template selects: the best-scoring
        family plugin, or with ``verify`` as a chat selects it (``derived`` when no
        plugin's claim holds but a parser could be derived); ``None`` when none applies.
    :ivar context_length: the trained context length, when the header says.
    :ivar problem: why the header or the template could not be read.
    """

    architecture: str | None = None
    quantization: str | None = None
    family: str | None = None
    context_length: int | None = None
    problem: str | None = None


class ModelNotFoundError(ToolwireError, LookupError):
    """No model file or found model has the name the user gave."""


class AmbiguousModelError(ToolwireError, LookupError):
    """More than one found model matches the name the user gave.

    :ivar candidates: the matching names.
    """

    def __init__(self, message: str, *, candidates: Sequence[str]) -> None:
        super().__init__(message)
        self.candidates = tuple(candidates)


def model_stores(environ: Mapping[str, str] | None = None, home: Path | None = None,
                 extra_dirs: Sequence[str | os.PathLike[str]] = ()) -> list[ModelStore]:
    """The places to look, from the environment and ``extra_dirs`` (``--models-dir``).

    :param environ: the variables to read (default ``os.environ``).
    :param home: the home folder (default ``Path.home()``).
    """
    env = os.environ if environ is None else environ
    home = home if home is not None else Path.home()
    stores: list[ModelStore] = []
    hub = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
    if hub:
        stores.append(ModelStore("hf", Path(hub)))
    elif env.get("HF_HOME"):
        stores.append(ModelStore("hf", Path(env["HF_HOME"]) / "hub"))
    else:
        cache = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else home / ".cache"
        stores.append(ModelStore("hf", cache / "huggingface" / "hub"))
    ollama = env.get("OLLAMA_MODELS")
    stores.append(ModelStore("ollama", Path(ollama) if ollama else home / ".ollama" / "models"))
    stores.append(ModelStore("lmstudio", home / ".lmstudio" / "models"))
    stores.append(ModelStore("lmstudio", home / ".cache" / "lm-studio" / "models"))
    named = [*extra_dirs, *(p for p in env.get(MODELS_DIR_VARIABLE, "").split(os.pathsep) if p)]
    for folder in named:
        stores.append(ModelStore("dir", Path(folder).expanduser()))
    return stores


def find_models(stores: Sequence[ModelStore], *,
                sources: Sequence[str] | None = None) -> list[LocalModel]:
    """Every GGUF model in ``stores`` (only those of ``sources``, when given).

    A store that does not exist or cannot be read is skipped. The same file
    reached twice (a folder named twice, a symlink) is listed once.
    """
    found: list[LocalModel] = []
    seen: set[Path] = set()
    for store in stores:
        if sources is not None and store.source not in sources:
            continue
        if not store.root.is_dir():
            continue
        scan = {"hf": _scan_hf, "ollama": _scan_ollama}.get(store.source, _scan_tree)
        for model in scan(store):
            key = _real(model.path)
            if key in seen:
                continue
            seen.add(key)
            found.append(model)
    return found


def resolve_model(wanted: str, models: Sequence[LocalModel]) -> LocalModel:
    """The one model ``wanted`` names.

    Tried in order: an exact name (``ollama:qwen3`` also finds the tag
    ``latest``); a name without its store prefix (``qwen3:4b``); a substring of
    one name only (case-insensitive; of the name after its store prefix, unless
    ``wanted`` has a prefix itself).

    :raises ModelNotFoundError: nothing matches.
    :raises AmbiguousModelError: several models match at the first rule that
        matches any; the message lists them.
    """
    text = wanted.strip()
    lowered = text.lower()
    prefixed = _unprefixed(lowered) != lowered

    def searched(model: LocalModel) -> str:  # "llama" must not find every "ollama:" model
        return model.name.lower() if prefixed else _unprefixed(model.name).lower()

    rules = (
        lambda m: m.name == text or m.name == f"{text}:latest",
        lambda m: m.name.lower() in (lowered, f"{lowered}:latest"),
        lambda m: _unprefixed(m.name).lower() in (lowered, f"{lowered}:latest"),
        lambda m: lowered in searched(m),
    )
    for rule in rules:
        matches = [m for m in models if rule(m)]
        if len(matches) == 1:
            return matches[0]
        if matches:
            names = sorted(m.name for m in matches)
            shown = "\n  ".join(names[:20]) + ("\n  ..." if len(names) > 20 else "")
            raise AmbiguousModelError(
                f"{wanted!r} matches {len(names)} models; give one of:\n  {shown}",
                candidates=names)
    raise ModelNotFoundError(f"no model file or found model is named {wanted!r}")


def describe_model(model: LocalModel, plugins: PluginManager, *,
                   verify: bool = False) -> ModelDescription:
    """Read ``model``'s header: architecture, quantization, the parser family.

    Only the header and the key/value section are read (milliseconds, whatever
    the model's size). Never raises for a bad file: ``problem`` says what failed.

    :param verify: select the family as a chat does (renders the template; slower)
        instead of by the plugins' scores alone.
    """
    from ..gguf.metadata import read_gguf_metadata

    guess = quantization_from_name(model.path.name)
    try:
        meta = read_gguf_metadata(model.path)
    except (OSError, ToolwireError) as exc:
        return ModelDescription(quantization=guess, problem=str(exc))
    quantization = quantization_name(meta.scalars.get("general.file_type")) or guess
    template = meta.template_for(tools=True)
    family: str | None = None
    problem: str | None = None
    if template is None:
        problem = "no chat template in the metadata"
    else:
        try:
            family = _family(template[1], plugins, verify)
        except (ParserNotFoundError, ParserConflictError):
            family = None
        except ToolwireError as exc:
            problem = f"chat template: {exc}"
    return ModelDescription(meta.architecture, quantization, family, meta.context_length,
                            problem)


def _family(source: str, plugins: PluginManager, verify: bool) -> str | None:
    from ..families.selection import score_parsers, select_parser

    if verify:
        return select_parser(source, plugins).spec.name
    ranking = score_parsers(source, plugins)
    if not ranking or ranking[0][1] <= 0.0:
        return None
    if len(ranking) > 1 and ranking[1][1] == ranking[0][1]:
        return None  # a tie: only selecting as a chat does can tell
    return ranking[0][0].name


def quantization_name(file_type: object) -> str | None:
    """``general.file_type`` as llama.cpp names it (``15`` -> ``Q4_K_M``); ``None`` if unknown."""
    if not isinstance(file_type, int) or isinstance(file_type, bool):
        return None
    import gguf

    try:
        name = gguf.LlamaFileType(file_type).name
    except ValueError:
        return None
    if name == "GUESSED":
        return None
    return name.removeprefix("MOSTLY_").removeprefix("ALL_")


_QUANT_IN_NAME = re.compile(
    r"(?<![A-Za-z0-9])(I?Q\d(?:_[A-Z0-9]+)*|BF16|F16|F32|MXFP4(?:_MOE)?)(?![A-Za-z0-9])",
    re.IGNORECASE)


def quantization_from_name(filename: str) -> str | None:
    """The quantization a file's name says (``Qwen3-4B-Q4_K_M.gguf`` -> ``Q4_K_M``), or ``None``."""
    found = _QUANT_IN_NAME.findall(filename.removesuffix(".gguf"))
    return found[-1].upper() if found else None


def shard_set(filename: str) -> list[str] | None:
    """Every shard's name of the split model ``filename`` belongs to
    (``m-00002-of-00003.gguf`` -> the three names), or ``None`` for a single file."""
    match = _SHARD.search(filename)
    if match is None:
        return None
    prefix, total, suffix = filename[:match.start()], match.group(2), filename[match.end(2):]
    return [f"{prefix}-{number:05d}-of-{total}{suffix}" for number in range(1, int(total) + 1)]


def _unprefixed(name: str) -> str:
    source, sep, rest = name.partition(":")
    return rest if sep and source in SOURCES else name


def _real(path: Path) -> Path:
    try:
        return path.resolve()
    except OSError:
        return path


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _gguf_files(root: Path, max_depth: int = _MAX_DEPTH) -> Iterator[Path]:
    """The ``.gguf`` files under ``root``, a few levels deep, symlinked folders not followed
    (a loop cannot trap the walk); unreadable folders are skipped."""
    base_depth = len(root.parts)
    for folder, dirs, files in os.walk(root, onerror=lambda exc: None):
        here = Path(folder)
        if len(here.parts) - base_depth >= max_depth:
            dirs.clear()
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if name.lower().endswith(".gguf"):
                yield here / name


def _not_a_file(path: Path) -> bool:
    """Whether ``path`` is there but is no regular file (a FIFO, a device, a link to one):
    reading its header could block for ever or never end, so it is no model."""
    try:
        return not stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False  # not there (a dangling link): reported or skipped by the caller


def _models_in(paths: Sequence[Path]) -> Iterator[tuple[Path, int]]:
    """``(file to load, total size)`` per model: shards folded, projectors dropped, and
    what is not a regular file skipped."""
    shards: dict[tuple[Path, str], dict[str, Path]] = {}
    for path in paths:
        if path.name.lower().startswith("mmproj") or _not_a_file(path):
            continue
        match = _SHARD.search(path.name)
        if match is None:
            yield path, _size(path)
            continue
        shards.setdefault((path.parent, path.name[:match.start()]), {})[match.group(1)] = path
    for parts in shards.values():
        first = parts.get("00001")
        if first is not None:
            yield first, sum(_size(p) for p in parts.values())


def _scan_tree(store: ModelStore) -> Iterator[LocalModel]:
    for path, size in _models_in(list(_gguf_files(store.root))):
        relative = path.relative_to(store.root).as_posix()
        yield LocalModel(f"{store.source}:{relative}", store.source, path, size)


def _scan_hf(store: ModelStore) -> Iterator[LocalModel]:
    for repo_dir in sorted(store.root.glob("models--*")):
        parts = repo_dir.name.split("--")[1:]
        if not parts or not all(parts):
            continue
        repo = "/".join(parts)
        snapshots = repo_dir / "snapshots"
        if not snapshots.is_dir():
            continue
        main = _read_small(repo_dir / "refs" / "main")
        revisions = sorted((d for d in snapshots.iterdir() if d.is_dir()),
                           key=lambda d: (d.name != main, -_mtime(d)))
        listed: set[str] = set()
        for revision in revisions:
            for path, size in _models_in(list(_gguf_files(revision))):
                relative = path.relative_to(revision).as_posix()
                if relative in listed or not path.exists():  # a dangling blob link
                    continue
                listed.add(relative)
                yield LocalModel(f"hf:{repo}/{relative}", "hf", path, size)


def _scan_ollama(store: ModelStore) -> Iterator[LocalModel]:
    manifests = store.root / "manifests"
    blobs = store.root / "blobs"
    if not manifests.is_dir():
        return
    for manifest in sorted(p for p in manifests.glob("*/*/*/*") if p.is_file()):
        host, namespace, model, tag = manifest.relative_to(manifests).parts
        digest = _ollama_model_digest(manifest)
        if digest is None:
            continue
        blob = next((b for b in (blobs / f"sha256-{digest}", blobs / f"sha256:{digest}")
                     if b.is_file()), None)
        if blob is None:
            continue
        if host == _OLLAMA_REGISTRY and namespace == "library":
            short = f"{model}:{tag}"
        elif host == _OLLAMA_REGISTRY:
            short = f"{namespace}/{model}:{tag}"
        else:
            short = f"{host}/{namespace}/{model}:{tag}"
        yield LocalModel(f"ollama:{short}", "ollama", blob, _size(blob))


def _ollama_model_digest(manifest: Path) -> str | None:
    """The hex digest of the manifest's GGUF layer, or ``None`` for a manifest to skip."""
    try:
        with manifest.open("rb") as file:
            raw = file.read(_MAX_MANIFEST_BYTES + 1)
        if len(raw) > _MAX_MANIFEST_BYTES:
            return None
        data = json.loads(raw)
    except (OSError, ValueError):
        return None
    layers = data.get("layers") if isinstance(data, dict) else None
    if not isinstance(layers, list):
        return None
    for layer in layers:
        if isinstance(layer, dict) and layer.get("mediaType") == _OLLAMA_MODEL_LAYER:
            match = _DIGEST.fullmatch(str(layer.get("digest", "")))
            return match.group(1) if match else None
    return None


def _read_small(path: Path) -> str | None:
    try:
        with path.open("r", encoding="utf-8") as file:
            return file.read(256).strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
