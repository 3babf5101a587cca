"""``save``, ``restore`` and ``load``: one checkpoint file, written atomically.

A save writes a hidden temporary file next to the target, fsyncs it, renames it onto the
target with ``os.replace`` and fsyncs the directory, so a crash at any moment leaves
either the old file or the new one, never a torn one. A restore validates the whole
file against the state and reads all data before it assigns anything.
"""

from __future__ import annotations

import contextlib
import errno
import json
import operator
import os
import re
import secrets
import shutil
import socket
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from flowjit.checkpoint import safetensors_format as fmt
from flowjit.checkpoint.safetensors_format import CheckpointError, CorruptCheckpointError
from flowjit.checkpoint.state import flatten
from flowjit.tracer.core import current_trace
from flowjit.version import __version__

# The one key of the header's __metadata__ we own; its value is JSON (the spec allows
# only strings there).
FLOWJIT_KEY = "flowjit"

# ".<target>.tmp-<host>-<pid>-<token>", a save's staging directory: hidden, and never
# ending in ".safetensors", so a leftover from a killed save never looks like a checkpoint.
_TEMP_RE = re.compile(r"^\.(?P<target>.+)\.tmp-(?P<host>.*)-(?P<pid>\d+)-[0-9a-f]{8}$")


def save(path: str | os.PathLike[str], state: Any, *, step: int | None = None,
         metadata: dict[str, Any] | None = None) -> Path:
    """Write every Variable of ``state`` (a Variable, an Optimizer, or dicts/lists/tuples
    of them) to the safetensors file ``path``, with the step counter and the JSON-able
    ``metadata`` in its header. The write is atomic: readers, and a process killed at any
    instant, see the previous file or the complete new one. Returns the path written."""
    _require_eager("save")
    path = Path(path)
    variables = flatten(state).variables
    if step is not None:
        step = operator.index(step)
    if metadata is not None and not isinstance(metadata, dict):
        raise CheckpointError(f"checkpoint metadata must be a dict, not {type(metadata).__name__}")
    try:
        header_json = json.dumps({"version": __version__, "step": step, "metadata": metadata or {}})
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"checkpoint metadata must be JSON-serializable: {e}") from None
    arrays = {name: np.asarray(var) for name, var in variables.items()}
    _write_atomically(path, lambda tmp: fmt.write_file(tmp, arrays, {FLOWJIT_KEY: header_json}))
    return path


def restore(path: str | os.PathLike[str], state: Any, *, partial: bool = False) -> dict[str, Any]:
    """Assign every Variable of ``state`` its value from the checkpoint ``path``. Names,
    shapes and dtypes are checked first, and a ``CheckpointError`` lists every mismatch
    (missing in file, extra in file, shape, dtype) with nothing assigned; optimizer slots
    not created yet are created when the file has them. ``partial``: the file may hold
    tensors the state does not name, which are left unread (``tf.train.Saver``'s restore
    of a var_list; a model's weights from a file that also holds its optimizer's state);
    every Variable of the state must still be there. Every tensor read is checked
    against its checksum before anything is assigned: a damaged file is a
    ``CorruptCheckpointError`` naming it and the tensor (a file without checksums, written
    before flowjit stored them, restores with a ``CheckpointWarning``). Returns the
    metadata: ``{"step", "flowjit_version", "metadata"}`` (the user's dict)."""
    _require_eager("restore")
    path = Path(path)
    flat = flatten(state)
    with open(path, "rb") as f:
        header = fmt.read_header(f, os.fstat(f.fileno()).st_size, str(path))
        pending = {}
        problems = []
        for name in sorted(set(flat.variables) - set(header.tensors)):
            problems.append(f"missing in file: {name}")
        for name in sorted(set(header.tensors) - set(flat.variables)):
            slot = flat.pending_slot(name)
            if slot is not None:
                pending[name] = slot
            elif not partial:
                problems.append(f"extra in file: {name}")
        for name in sorted(header.tensors):
            entry = header.tensors[name]
            if name in flat.variables:
                want = flat.variables[name]
            elif name in pending:
                want = pending[name].var  # a slot has its variable's shape and dtype
            else:
                continue
            if entry.shape != tuple(want.shape):
                problems.append(f"shape of {name}: file {entry.shape} vs state {tuple(want.shape)}")
            if entry.numpy_dtype.name != want.dtype.np.name:
                problems.append(f"dtype of {name}: file {entry.numpy_dtype.name} vs state {want.dtype.np.name}")
        if problems:
            raise CheckpointError(f"checkpoint {path} does not match the state ({len(problems)} "
                                  f"problem{'s' if len(problems) > 1 else ''}); nothing was restored:\n  "
                                  + "\n  ".join(problems))
        metadata = _metadata(header, str(path))
    # Read everything before assigning anything: a read error leaves the state whole.
    wanted = [name for name in header.tensors if name in flat.variables or name in pending]
    arrays = fmt.read_tensors(path, header, wanted, str(path))
    for name, slot in pending.items():
        flat.variables[name] = slot.create()
    for name, var in flat.variables.items():
        var.assign(arrays[name])
    return metadata


def load(path: str | os.PathLike[str], names: Sequence[str] | None = None
         ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Read a checkpoint (or any safetensors file) for inspection, without a state:
    returns its arrays by name, in name order, and its metadata as ``restore`` does (for
    a file flowjit did not write, ``"metadata"`` holds the raw string map). The arrays are
    checked against their checksums as in ``restore``. ``names``: only those tensors are
    read (a KeyError names one the file lacks)."""
    path = Path(path)
    header = _header(path)
    metadata = _metadata(header, str(path))
    wanted = list(header.tensors) if names is None else list(names)
    missing = [n for n in wanted if n not in header.tensors]
    if missing:
        raise KeyError(f"checkpoint {path} has no tensor named {', '.join(map(repr, missing))} "
                       f"(it holds {len(header.tensors)}: see fj.checkpoint.contents)")
    arrays = fmt.read_tensors(path, header, wanted, str(path))
    return dict(sorted(arrays.items())), metadata


def contents(path: str | os.PathLike[str]) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Each tensor of a checkpoint (or any safetensors file) as ``name -> (shape, dtype)``,
    in name order, from the file's header alone: nothing else is read."""
    header = _header(Path(path))
    return {name: (tuple(e.shape), e.numpy_dtype) for name, e in sorted(header.tensors.items())}


def _header(path: Path) -> fmt.Header:
    with open(path, "rb") as f:
        return fmt.read_header(f, os.fstat(f.fileno()).st_size, str(path))


def temporary_name(target: str) -> str:
    """The name of a fresh staging directory for a save of ``target`` (in its directory)."""
    return f".{target}.tmp-{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"


def stale_temporaries(directory: Path, target_re: re.Pattern[str]) -> list[Path]:
    """Staging directories (or temporary files) in ``directory`` for targets matching ``target_re`` left by saves of
    processes of this host that no longer run (killed mid-save). Temporaries of live
    processes, or of other hosts sharing the directory, may be saves in progress."""
    host = socket.gethostname()
    out = []
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(directory):
            m = _TEMP_RE.match(entry.name)
            if m and target_re.match(m["target"]) and m["host"] == host and not _alive(int(m["pid"])):
                out.append(Path(entry.path))
    return out


def remove_temporary(leftover: Path) -> None:
    """Delete a temporary of a killed save: a staging directory (or, from older versions,
    a file), and whatever the writer left inside it. Already gone is fine."""
    if leftover.is_dir() and not leftover.is_symlink():
        shutil.rmtree(leftover, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            leftover.unlink()


def _write_atomically(path: Path, write: Any) -> None:
    directory = path.parent
    directory.mkdir(parents=True, exist_ok=True)
    # A private staging directory, not a temporary file: the safetensors library makes its
    # own temporary next to the name it is given (``.tmpXXXXXX``, renamed onto it), which a
    # killed save would leave in the user's directory under a name no one can attribute.
    staging = directory / temporary_name(path.name)
    staging.mkdir(0o777)  # fails if it exists: the name is ours alone
    tmp = staging / path.name
    try:
        write(tmp)
        # The library creates its file 0600; a checkpoint gets a plain file's mode (the umask's),
        # which the directory just made with 0777 shows.
        os.chmod(tmp, stat.S_IMODE(staging.stat().st_mode) & 0o666)
        fd = os.open(tmp, os.O_WRONLY | getattr(os, "O_BINARY", 0))
        try:
            os.fsync(fd)  # the data is on disk before the name points at it
        finally:
            os.close(fd)
        os.replace(tmp, path)
    finally:
        remove_temporary(staging)
    _fsync_directory(directory)  # ... and the rename itself survives a power loss


def _fsync_directory(directory: Path) -> None:
    if os.name == "nt":  # directories cannot be opened for fsync there; rename is durable enough
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as e:
        # Some filesystems do not support fsync of a directory; the file itself is synced.
        if e.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def _alive(pid: int) -> bool:
    if pid == os.getpid() or os.name == "nt":  # os.kill(pid, 0) terminates the process on Windows
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # e.g. another user's process: alive
    return True


def _metadata(header: fmt.Header, source: str) -> dict[str, Any]:
    raw = header.metadata.get(FLOWJIT_KEY)
    if raw is None:
        return {"step": None, "flowjit_version": None, "metadata": dict(header.metadata)}
    try:
        info = json.loads(raw)
        return {"step": info["step"], "flowjit_version": info["version"], "metadata": info["metadata"]}
    except (ValueError, TypeError, KeyError) as e:
        raise CorruptCheckpointError(f"{source}: the flowjit metadata in the header is corrupt ({e!r})") from None


def _require_eager(what: str) -> None:
    if current_trace() is not None:
        raise CheckpointError(f"fj.checkpoint.{what} inside a traced function: checkpoints read and write "
                              "Variables eagerly; call it between steps, outside @fj.function")
