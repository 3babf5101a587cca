"""The model repository: ``MODELS/NAME/VERSION/`` where VERSION is an integer directory
holding what ``flowjit compile`` writes (``libNAME.so``, ``NAME.h``, ``NAME.json``,
``NAME.safetensors``) and, last, the readiness marker ``READY``.

The readiness marker is the file ``READY`` in a version directory; it holds the digest of
the version's manifest (the ``digest`` string of ``NAME.json``) and is the last file a push
writes. ``flowjit push`` copies an artifact into a hidden temporary directory beside the
versions (``MODELS/NAME/.push-VERSION-PID``), writes ``READY`` there last, and renames the
directory to ``MODELS/NAME/VERSION`` (one atomic rename on the same file system). A server
uses a version directory only when its name is an integer and its ``READY`` names its
manifest's digest; anything else (a half-copied directory, a temporary one left by a killed
push, a directory copied by hand without the marker) is ignored.

A blessing (written by ``flowjit validate``) is ``BLESSING.json`` in the artifact
directory: ``{"verdict": "BLESSED" | "NOT_BLESSED", "digest": <the manifest's digest>,
"checks": [...], ...}``. ``push`` refuses an artifact without a blessing that says BLESSED
for its manifest's digest, unless forced.

A schema (``flowjit validate schema``'s JSON) is ``schema.json`` in the artifact directory,
copied with it; the server checks each request's inputs against it and counts anomalies.
``push`` refuses an artifact whose schema does not parse or does not fit the model's inputs
(``--force`` or not: the server would refuse the version).

This module uses no web framework; a schema is checked by ``flowjit.validate``'s own checks.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flowjit.aot.manifest import FORMAT
from flowjit.validate.errors import ValidateError
from flowjit.validate.live import LiveCheck

READY = "READY"
BLESSING = "BLESSING.json"
SCHEMA = "schema.json"
_TEMP_PREFIX = ".push-"


class PushError(Exception):
    """A push was refused or failed: the message says why and what to do."""


def find_manifest(directory: str | os.PathLike[str]) -> tuple[Path, dict[str, Any]]:
    """The one flowjit library manifest (``NAME.json``) of an artifact or version directory
    and its content; PushError when there is none or several."""
    directory = Path(directory)
    if not directory.is_dir():
        raise PushError(f"{directory} is not a directory: give the directory `flowjit compile -o DIR` wrote")
    found = []
    for p in sorted(directory.glob("*.json")):
        if p.name == BLESSING:
            continue
        try:
            content = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(content, dict) and content.get("format") == FORMAT:
            found.append((p, content))
    if len(found) != 1:
        names = ", ".join(p.name for p, _ in found) or "none"
        raise PushError(f"{directory} holds {len(found)} flowjit library manifests ({names}); a model version "
                        "holds exactly one: export each model into its own directory")
    return found[0]


def read_blessing(artifact: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The blessing of an artifact directory (``BLESSING.json``), or None when it has none
    or it is not a JSON object."""
    path = Path(artifact) / BLESSING
    try:
        content = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return content if isinstance(content, dict) else None


def blessing_problem(artifact: str | os.PathLike[str]) -> str | None:
    """Why the artifact is not blessed for its own manifest (None when it is): no
    ``BLESSING.json``, a verdict other than BLESSED, or a digest of another build."""
    _, manifest = find_manifest(artifact)
    blessing = read_blessing(artifact)
    if blessing is None:
        return (f"{Path(artifact) / BLESSING} is missing or unreadable: run `flowjit validate` on the artifact "
                "first, or push with --force")
    if blessing.get("verdict") != "BLESSED":
        return (f"{Path(artifact) / BLESSING} says {blessing.get('verdict')!r}, not 'BLESSED': fix what its checks "
                "report, or push with --force")
    if blessing.get("digest") != manifest.get("digest"):
        return (f"{Path(artifact) / BLESSING} blesses digest {str(blessing.get('digest'))[:12]}..., but the "
                f"artifact's manifest has {str(manifest.get('digest'))[:12]}...: validate this build again, or "
                "push with --force")
    return None


def model_inputs(manifest: dict[str, Any]) -> list[tuple[str, str, list[Any]]]:
    """The inputs of a library's manifest as (name, dtype name, per-example shape): each
    argument's shape without its first dimension, the batch."""
    return [(a["name"], a["dtype"], list(a["shape"][1:])) for a in manifest["args"] if a["kind"] == "argument"]


def live_check(directory: str | os.PathLike[str], manifest: dict[str, Any]) -> LiveCheck | None:
    """The checks (a ``flowjit.validate.LiveCheck``) of the schema an artifact or version
    directory carries (``schema.json``) on the inputs of its ``manifest``; None when it
    carries none. ValidateError naming the file when the schema does not parse, names an
    input with another type or shape, or lacks one."""
    path = Path(directory) / SCHEMA
    if not path.is_file():
        return None
    return LiveCheck.from_file(path, model_inputs(manifest))


def versions(model_dir: str | os.PathLike[str]) -> list[int]:
    """Every integer-named version directory of a model, complete or not, in order."""
    model_dir = Path(model_dir)
    try:
        entries = list(os.scandir(model_dir))
    except OSError:
        return []
    return sorted(int(e.name) for e in entries if e.name.isdigit() and e.is_dir())


def ready_digest(version_dir: str | os.PathLike[str]) -> str | None:
    """The digest a version's readiness marker holds, or None while it has none."""
    try:
        return (Path(version_dir) / READY).read_text().strip() or None
    except OSError:
        return None


def complete_versions(model_dir: str | os.PathLike[str]) -> list[int]:
    """The versions of a model whose readiness marker is written, in order."""
    return [v for v in versions(model_dir) if ready_digest(Path(model_dir) / str(v)) is not None]


def models(root: str | os.PathLike[str]) -> list[str]:
    """The model names of a repository: its directories not starting with a dot."""
    try:
        return sorted(e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith("."))
    except OSError:
        return []


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _clean_stale_temps(model_dir: Path) -> None:
    """Remove temporary directories of pushes whose process is gone (killed mid-copy)."""
    for entry in model_dir.glob(f"{_TEMP_PREFIX}*"):
        pid = entry.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not _pid_alive(int(pid)):
            shutil.rmtree(entry, ignore_errors=True)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _copy_durably(src_dir: Path, dst_dir: Path, skip: frozenset[str] = frozenset()) -> None:
    """Every file of ``src_dir`` and its folders (the library's bundled BLAS in ``libs/``)
    copied into ``dst_dir``, each file and folder synced to disk; top-level names in
    ``skip`` left out."""
    for src in sorted(src_dir.iterdir()):
        if src.name in skip:
            continue
        dst = dst_dir / src.name
        if src.is_dir():
            dst.mkdir()
            _copy_durably(src, dst)
            _fsync_dir(dst)
        elif src.is_file():
            shutil.copyfile(src, dst)
            with open(dst, "rb+") as f:
                os.fsync(f.fileno())


def push(artifact: str | os.PathLike[str], model_dir: str | os.PathLike[str], *, force: bool = False,
         log: Callable[[str], None] = print) -> tuple[int, Path]:
    """Publish the compiled artifact directory ``artifact`` as the next version of the model
    directory ``model_dir`` (``MODELS/NAME``, created if missing): copied into a temporary
    directory beside the versions, the readiness marker written last, renamed into place.
    Refuses (PushError) an artifact without a blessing for its manifest's digest unless
    ``force``, and one whose schema (``schema.json``) does not fit its inputs. Returns the
    version number and its directory."""
    artifact, model_dir = Path(artifact), Path(model_dir)
    _, manifest = find_manifest(artifact)
    problem = blessing_problem(artifact)
    if problem is not None:
        if not force:
            raise PushError(f"refusing to push {artifact}: {problem}")
        log(f"flowjit push: --force: pushing {artifact} although {problem.split(':')[0]}")
    try:
        live_check(artifact, manifest)
    except ValidateError as e:
        raise PushError(f"refusing to push {artifact}: {e}") from None
    model_dir.mkdir(parents=True, exist_ok=True)
    _clean_stale_temps(model_dir)
    version = (max(versions(model_dir), default=0)) + 1
    temp = model_dir / f"{_TEMP_PREFIX}{version}-{os.getpid()}"
    shutil.rmtree(temp, ignore_errors=True)
    temp.mkdir()
    try:
        _copy_durably(artifact, temp, skip=frozenset({READY}))
        with open(temp / READY, "w") as f:
            f.write(manifest["digest"] + "\n")
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(temp)
        while True:  # another push may have taken the number: take the next one
            target = model_dir / str(version)
            try:
                os.rename(temp, target)
                break
            except OSError:
                if not target.exists():
                    raise
                version += 1
        _fsync_dir(model_dir)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    log(f"flowjit push: {artifact} is version {version} of {model_dir.name} ({target})")
    return version, target
