"""``toolwire pull REPO[:FILE]``: a GGUF model from the Hugging Face hub, checked.

The file is downloaded with :mod:`huggingface_hub` (the ``hub`` extra) into the
hub's cache, ``models--ORG--NAME/{blobs,refs,snapshots}``, which ``toolwire
models`` lists and ``toolwire chat --model`` finds; the hub's own client shows a
progress bar on a terminal and resumes a broken connection where it broke. The
client checks only a file's size, so every file is then hashed here against the
checksum the hub gives for it (an LFS file's ETag is its sha256; a small file's
is its git blob id), and a file that does not match is deleted and refused.

The hub (``HF_ENDPOINT`` may name anyone's) is untrusted: its answers name the
paths the client writes (the ETag a blob, the commit a snapshot), so every answer
about a file is checked before the client reads it (:func:`_guard_hub_answers`):
a commit that is not 40 hex digits or a checksum that is not one is refused, and
nothing is written. A file name from the hub's listing is taken only when it is a
plain relative path. The cache may be shared: what the repository's cache holds
that the hub's client would not have written (a link to outside the cache, a
FIFO, a device) is refused before anything reads it, and a bad download is
deleted entry by entry (its snapshot link, its blob inside the cache), never by
following a link. Names from the hub are printed escaped, as every line the
command line prints.

Without ``FILE`` the repository's ``.gguf`` files are listed: a single model, or
the one ``Q4_K_M`` quantization, is taken; otherwise the user is asked to name
one. A model split into shards (``NAME-00001-of-00003.gguf``) is pulled whole.
``HF_ENDPOINT`` names another hub (a mirror), ``HF_TOKEN`` a token for gated or
private repositories, ``HF_HUB_CACHE`` / ``HF_HOME`` the cache (the same folder
``toolwire models`` reads). Telemetry is off unless ``HF_HUB_DISABLE_TELEMETRY``
says otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import stat
import sys
import unicodedata
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs

from ...errors import ToolwireError
from ...hooks.manager import PluginManager
from ..local_models import (
    LocalModel,
    describe_model,
    model_stores,
    quantization_from_name,
    shard_set,
)
from .common import UsageError, extra_hint, fail
from .models import human_size
from .terminal_text import terminal_safe

__all__ = ["PREFERRED_QUANTIZATION", "HubFile", "choose_file", "plain_repo_path", "register",
           "run_pull", "verify_file"]

PREFERRED_QUANTIZATION = "Q4_K_M"
"""Taken when a repository holds several quantizations: small, and good enough to call tools."""

_REPO_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?"
_REPO = re.compile(f"{_REPO_PART}/{_REPO_PART}")
"""A repository id as the hub allows it: ``ORG/NAME``, each starting and ending with a
letter, digit or ``_`` (``--`` and ``..`` are refused separately)."""
_SHA256 = re.compile(r"[0-9a-f]{64}")
_GIT_SHA1 = re.compile(r"[0-9a-f]{40}")
_COMMIT = _GIT_SHA1
_FILE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}")
"""What an ETag must be to name a blob: one plain file name, never ``.``, ``..`` or a path."""
_CHUNK = 1 << 20
_CHECKED_HEADERS = ("X-Repo-Commit", "X-Linked-Etag", "ETag")


@attrs.frozen
class HubFile:
    """One file pulled: where it is and what it was checked against.

    :ivar filename: its path in the repository.
    :ivar path: the file in the cache (a snapshot's link to its blob).
    :ivar size: its size in bytes.
    :ivar checksum: ``sha256:HEX`` or ``git-sha1:HEX``, as the hub gave it.
    """

    filename: str
    path: Path
    size: int
    checksum: str


def register(subparsers: Any) -> None:
    """Add the ``pull`` command."""
    p = subparsers.add_parser(
        "pull", help="download a GGUF model from the Hugging Face hub (checked)",
        description="Download a GGUF model from the Hugging Face hub into its cache, where "
                    "'toolwire models' lists it and 'chat --model' finds it; its sha256 is "
                    "checked against the hub's. Without FILE, the repository's only model or "
                    f"its {PREFERRED_QUANTIZATION} file is taken. Needs the hub extra.")
    p.add_argument("source", metavar="REPO[:FILE]",
                   help="a model repository (Qwen/Qwen3-4B-GGUF), optionally with the .gguf "
                        "file to take from it")
    p.add_argument("--revision", default="main",
                   help="a branch, tag or commit of the repository (default: main)")
    p.set_defaults(run=run_pull)


def run_pull(args: argparse.Namespace, plugins: PluginManager) -> int:
    """Run ``toolwire pull``; return 0 when every file arrived and matched the hub's checksum."""
    repo, filename = _read_source(args.source)
    hub = _hub()
    cache = next(s.root for s in model_stores() if s.source == "hf")
    endpoint = os.environ.get("HF_ENDPOINT", "").rstrip("/") or "https://huggingface.co"
    with _hub_errors(hub, repo, args.revision, endpoint), _guard_hub_answers(hub, endpoint):
        # the listing first, also when a file is named: one request, which the hub client
        # does not retry, so a hub that is not there is said at once (its downloads retry
        # for half a minute), and a file that is not in the repository before any download
        listed = [s.rfilename for s in hub.HfApi().model_info(
            repo, revision=None if args.revision == "main" else args.revision).siblings or ()]
        if filename is None:
            filename = choose_file(repo, listed)
        elif filename not in listed:
            fail(f"{repo} has no such file on {endpoint} (toolwire pull {repo} lists its "
                 "GGUF files)")
        names = shard_set(Path(filename).name) or [Path(filename).name]
        folder = str(Path(filename).parent)
        pulled = [_pull_one(hub, repo, name if folder == "." else f"{folder}/{name}",
                            args.revision, cache)
                  for name in names]
    first = pulled[0]
    relative = first.path.relative_to(_snapshot_of(first.path)).as_posix()
    name = f"hf:{repo}/{relative}"
    size = sum(f.size for f in pulled)
    about = describe_model(LocalModel(name, "hf", first.path, size), plugins)
    facts = ", ".join(x for x in (about.architecture, about.quantization,
                                  f"parser family {about.family}" if about.family else
                                  "no parser family claims its template") if x)
    print(terminal_safe(f"pulled {name} ({human_size(size)} in {len(pulled)} file"
                        f"{'s' if len(pulled) > 1 else ''}, checksums match the hub's; "
                        f"{facts})\n  {first.path}\nchat with it:\n  toolwire chat --model "
                        f"{name}"))
    if about.problem:
        print(terminal_safe(f"toolwire: warning: {name}: {about.problem}"), file=sys.stderr)
    return 0


def _read_source(source: str) -> tuple[str, str | None]:
    repo, sep, filename = source.strip().partition(":")
    if not _REPO.fullmatch(repo) or ".." in repo or "--" in repo:
        fail(f"{source!r} is not a model repository: give ORG/NAME (Qwen/Qwen3-4B-GGUF), "
             "optionally :FILE.gguf")
    if not sep:
        return repo, None
    if not filename.lower().endswith(".gguf") or not plain_repo_path(filename):
        fail(f"{source}: the file to pull must be a .gguf file in the repository "
             f"(toolwire pull {repo} lists them)")
    return repo, filename


def plain_repo_path(name: str) -> bool:
    """Whether ``name`` is a plain relative path in a repository: parts that are not
    empty, ``.`` or ``..``, no backslash, no control or format character. A name from
    the hub that is not is never downloaded (it could become a path elsewhere, or
    write to the terminal)."""
    if not name or name.startswith("/") or "\\" in name:
        return False
    if any(unicodedata.category(c)[0] == "C" for c in name):
        return False
    return all(part not in ("", ".", "..") for part in name.split("/"))


def _hub() -> Any:
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    try:
        import huggingface_hub
    except ImportError:
        fail(f"toolwire pull needs the hub extra (huggingface_hub): {extra_hint('hub')}")
    return huggingface_hub


def choose_file(repo: str, files: Sequence[str]) -> str:
    """The GGUF model to take from a repository's file list when the user named none.

    Vision projectors are left out and a split model counts once (its first shard);
    a name that is not a plain relative path (:func:`plain_repo_path`) is never taken.
    One model is taken; among several, the one :data:`PREFERRED_QUANTIZATION`.

    :raises UsageError: no GGUF model, or several and not one preferred: the
        message lists them.
    """
    models = sorted(f for f in files if f.lower().endswith(".gguf") and plain_repo_path(f)
                    and not Path(f).name.lower().startswith("mmproj")
                    and (shard_set(Path(f).name) or [Path(f).name])[0] == Path(f).name)
    if len(models) == 1:
        return models[0]
    preferred = [f for f in models if quantization_from_name(Path(f).name)
                 == PREFERRED_QUANTIZATION]
    if len(preferred) == 1:
        return preferred[0]
    if not models:
        fail(f"{repo} holds no .gguf file (toolwire runs GGUF models; a repository whose "
             "name ends in -GGUF usually has them)")
    shown = "\n  ".join(models[:40]) + ("\n  ..." if len(models) > 40 else "")
    fail(f"{repo} holds {len(models)} GGUF models and "
         f"{'several' if preferred else 'none'} {PREFERRED_QUANTIZATION}; name one: "
         f"toolwire pull {repo}:FILE\n  {shown}")


def _pull_one(hub: Any, repo: str, filename: str, revision: str, cache: Path) -> HubFile:
    repo_cache = cache / ("models--" + repo.replace("/", "--"))
    _refuse_foreign_blobs(repo_cache, cache)
    path = Path(hub.hf_hub_download(repo, filename, revision=revision, cache_dir=cache))
    commit = _snapshot_of(path).name
    # pinned to the commit the file came from, so the checksum is that file's
    meta = hub.get_hf_file_metadata(hub.hf_hub_url(repo, filename, revision=commit))
    print(terminal_safe(f"checking {filename} ..."), file=sys.stderr, flush=True)
    _check_cached(path, repo_cache, cache)
    checksum = verify_file(path, etag=meta.etag, size=meta.size)
    return HubFile(filename, path, path.stat().st_size, checksum)


def _not_the_hubs(entry: Path, cache: Path) -> str:
    """Why ``entry`` (in a repository's cache) is not what the hub's client writes there,
    or ``""``: it must be a regular file, or a link that leads to one inside the cache
    (the client's shared blob store links blobs that way)."""
    try:
        mode = os.lstat(entry).st_mode
    except FileNotFoundError:
        return ""
    if stat.S_ISREG(mode):
        return ""
    if not stat.S_ISLNK(mode):
        return "a FIFO, socket or device"
    target = Path(os.path.realpath(entry))
    if Path(os.path.realpath(cache)) not in target.parents:
        return f"a link to {target}, outside the cache"
    try:
        if not stat.S_ISREG(os.stat(entry).st_mode):
            return f"a link to {target}, which is not a regular file"
    except OSError:
        return ""  # a dangling link: the client replaces it
    return ""


def _refuse_foreign_blobs(repo_cache: Path, cache: Path) -> None:
    """Refuse to pull into a repository cache holding blobs the hub's client would not
    write: reading or replacing them could block for ever or reach outside the cache.
    Nothing is deleted: it may be someone else's."""
    try:
        entries = sorted(os.scandir(repo_cache / "blobs"), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        why = _not_the_hubs(Path(entry.path), cache)
        if why:
            raise ToolwireError(
                f"the cache holds {entry.path}, {why}: not a file the hub's client wrote. "
                "toolwire reads and deletes only files in the cache; remove it and pull again")


def _check_cached(path: Path, repo_cache: Path, cache: Path) -> None:
    """The file the client returned must be its snapshot's link to a blob of the cache
    (or, where links are not used, a regular file in the snapshot)."""
    why = _not_the_hubs(path, cache)
    if not why and path.is_symlink():
        blob = Path(os.path.normpath(path.parent / os.readlink(path)))
        if repo_cache / "blobs" != blob.parent:
            why = f"a link to {blob}, not to a blob of the repository's cache"
        else:
            why = _not_the_hubs(blob, cache)
    if why:
        raise ToolwireError(
            f"the cache holds {path}, {why}: not a file the hub's client wrote. toolwire "
            "reads and deletes only files in the cache; remove it and pull again")


def _snapshot_of(path: Path) -> Path:
    """The ``snapshots/COMMIT`` folder a cached file is in."""
    for parent in path.parents:
        if parent.parent.name == "snapshots":
            return parent
    raise ToolwireError(f"{path} is not in a hub cache snapshot")


def verify_file(path: Path, *, etag: str | None, size: int | None) -> str:
    """Check the file at ``path`` against the hub's ETag and size; delete it if it differs.

    :returns: the checksum that matched (``sha256:HEX`` or ``git-sha1:HEX``).
    :raises ToolwireError: the size or the checksum differs, or the hub gave no
        checksum to check against (the file is deleted in every case).
    """
    expected = (etag or "").strip().strip('"').removeprefix("W/").strip('"').lower()
    if _SHA256.fullmatch(expected):
        kind, digest = "sha256", _digest(path, hashlib.sha256())
    elif _GIT_SHA1.fullmatch(expected):
        header = f"blob {path.stat().st_size}\0".encode()
        kind, digest = "git-sha1", _digest(path, hashlib.sha1(header, usedforsecurity=False))
    else:
        _discard(path)
        raise ToolwireError(f"{path.name}: the hub gave no checksum to check it against "
                            f"(ETag {etag!r}); the download was deleted")
    actual_size = path.stat().st_size
    if size is not None and actual_size != size:
        _discard(path)
        raise ToolwireError(f"{path.name}: {actual_size} bytes arrived, the hub says {size}; "
                            "the download was deleted, pull again")
    if digest != expected:
        _discard(path)
        raise ToolwireError(f"{path.name}: its {kind} is {digest}, the hub says {expected}: "
                            "the download is corrupt and was deleted; pull again")
    return f"{kind}:{digest}"


def _digest(path: Path, hasher: Any) -> str:
    with path.open("rb") as file:
        while chunk := file.read(_CHUNK):
            hasher.update(chunk)
    return str(hasher.hexdigest())


def _discard(path: Path) -> None:
    """Delete a cached file that failed its check: the snapshot's link and the blob it
    names in the same cache folder, each entry itself (a link is removed, never what it
    points to)."""
    entries = [path]
    if path.is_symlink():
        blob = Path(os.path.normpath(path.parent / os.readlink(path)))
        if blob.parent.name == "blobs" and blob.parent.parent in path.parents:
            entries.append(blob)
    for entry in entries:
        try:
            entry.unlink()
        except FileNotFoundError:
            pass


@contextmanager
def _guard_hub_answers(hub: Any, endpoint: str) -> Iterator[None]:
    """Check every answer of the hub's client about a file before the client reads it.

    The client names the blob it writes after the answer's ETag and the snapshot
    after its commit, so a hub answering ``ETag: "../../x"`` would write (and a
    failed check then delete) a file outside the cache. Here a response hook on the
    client's shared session refuses such an answer: on every answer about a file (a
    ``resolve`` path, or any answer naming a commit, which the client needs to use
    it) the commit must be 40 hex digits and the ETag the client reads
    (``X-Linked-Etag``, else ``ETag``, normalized as it does) one plain file name.
    (:func:`verify_file` then wants a checksum in it.)
    """
    session = hub.get_session()

    def check(response: Any) -> None:
        if "/resolve/" not in response.request.url.path and \
                "X-Repo-Commit" not in response.headers:
            return
        for name in _CHECKED_HEADERS:
            value = response.headers.get(name)
            if value is None or (name == "ETag" and "X-Linked-Etag" in response.headers):
                continue
            clean = value.lstrip("W/").strip('"') if name != "X-Repo-Commit" else value
            if not (_COMMIT if name == "X-Repo-Commit" else _FILE_NAME).fullmatch(clean):
                what = "a commit (40 hex digits)" if name == "X-Repo-Commit" else \
                    "a plain file name"
                raise ToolwireError(
                    f"the hub at {endpoint} answered {name}: {value!r}, which is not {what}; "
                    "it would name a file of the cache, so nothing was written")

    hooks = dict(session.event_hooks)
    session.event_hooks = {**hooks, "response": [*hooks.get("response", []), check]}
    try:
        yield
    finally:
        session.event_hooks = hooks


@contextmanager
def _hub_errors(hub: Any, repo: str, revision: str, endpoint: str) -> Iterator[None]:
    """The hub client's errors as the command line's: a name that is not there is an
    input error (one line), anything else that failed is a failure (one line)."""
    try:
        yield
    except (ToolwireError, UsageError):
        raise
    except Exception as exc:
        errors = hub.errors
        where = f"on {endpoint}"
        named: list[tuple[type[BaseException], str]] = [
            (errors.GatedRepoError, f"{repo} is gated {where}: accept its terms there and set "
                                    "HF_TOKEN to a token of yours"),
            (errors.RepositoryNotFoundError, f"{repo}: no such model repository {where} (a "
                                             "private one needs HF_TOKEN)"),
            (errors.RevisionNotFoundError, f"{repo} has no revision {revision!r} {where}"),
            (errors.RemoteEntryNotFoundError, f"{repo} has no such file {where} (toolwire pull "
                                              f"{repo} lists its GGUF files)"),
        ]
        for error, message in named:
            if isinstance(exc, error):
                raise UsageError(message) from exc
        text = str(exc).strip()
        first = text.splitlines()[0] if text else type(exc).__name__
        raise ToolwireError(f"cannot pull {repo} from {endpoint}: {first}") from exc
