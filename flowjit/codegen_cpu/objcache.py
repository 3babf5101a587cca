"""Object code on disk, content-addressed: ``FLOWJIT_CACHE_DIR/objects/<key>.o``.

The key hashes the LLVM IR text (or, for a kernel, its loop IR and the digest of the
renderer's sources: ``render.kernel_identity``) with everything else that decides the
machine code (CPU name and features, llvmlite and LLVM versions, this package's version). Each entry starts
with a header (magic, the key, the payload's length and its SHA-256), so an entry that is
corrupt, truncated or was written for another key is refused and recompiled, never
executed. Writers go through a temporary file of their own renamed into place, so a
process reading while others fill the same cache never sees half an entry.

flowjit's own runtime (the native thread pool, the GEMMs split over it), whose modules do
not depend on the user's program, is machine code of the installation, not of a user's
cache: its entries live beside the package, in ``runtime_directory()``
(``codegen_cpu/__pycache__/runtime``, as Python keeps its bytecode in ``__pycache__``), in
the same format and under the same keys, so another CPU or llvmlite gets entries of its
own. The first process that needs one writes it; every later one reads it whatever its
``FLOWJIT_CACHE_DIR``. Where that directory cannot be written (a read-only site-packages)
``jit.load_source`` keeps them in the user's cache as it does a program's.
"""

from __future__ import annotations

import hashlib
import os
import struct
import tempfile
import threading

MAGIC = b"FJLLOBJ1"
# magic, key (32 raw bytes of SHA-256), payload length, payload SHA-256
_HEADER = struct.Struct("<8s32sQ32s")

_stats = {"compiled": 0, "loaded": 0, "reused": 0, "rejected": 0}
_stats_lock = threading.Lock()
_unwritable: set[str] = set()


def count(what: str) -> None:
    """Add one to counter ``what`` (compiled, loaded, reused or rejected)."""
    with _stats_lock:
        _stats[what] += 1


def stats() -> dict[str, int]:
    """Modules this process compiled, loaded from disk, reused from memory, and disk
    entries it refused (corrupt, truncated or foreign) and compiled again."""
    with _stats_lock:
        return dict(_stats)


def key(ir_text: str, fingerprint: str) -> str:
    """The cache key (hex SHA-256) of IR text ``ir_text`` compiled under ``fingerprint``."""
    h = hashlib.sha256(fingerprint.encode())
    h.update(b"\0")
    h.update(ir_text.encode())
    return h.hexdigest()


def source_digest(*paths: str) -> str:
    """The hex SHA-256 of the files at ``paths``: the Python sources that build one of
    flowjit's own modules (its file, and every file whose code or calling convention its IR
    takes), for that module's key: a change to any of them compiles it again."""
    h = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            h.update(f.read())
        h.update(b"\0")
    return h.hexdigest()


def _base() -> str:
    return os.environ.get("FLOWJIT_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "flowjit")


def directory() -> str:
    """The object directory, ``FLOWJIT_CACHE_DIR`` (default ~/.cache/flowjit) + ``objects``."""
    return os.path.join(_base(), "objects")


def path(k: str, where: str | None = None) -> str:
    """Where the entry of key ``k`` lives (in ``where``, by default ``directory()``)."""
    return os.path.join(where or directory(), f"{k}.o")


def notes_directory() -> str:
    """Where facts about this machine are remembered (``jit.host_fingerprint``), away
    from the object code: ``FLOWJIT_CACHE_DIR`` + ``hosts``."""
    return os.path.join(_base(), "hosts")


# Beside the package, as Python's bytecode is; FLOWJIT_RUNTIME_DIR moves it (tests, packagers).
_RUNTIME_DEFAULT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "__pycache__", "runtime")


def runtime_directory() -> str:
    """Where the object code of flowjit's own runtime modules is kept, once per
    installation: ``FLOWJIT_RUNTIME_DIR`` if set, else ``codegen_cpu/__pycache__/runtime``
    beside this file. Not emptied with ``FLOWJIT_CACHE_DIR``; deleting it is always safe
    (the next process that needs an entry compiles it again)."""
    return os.environ.get("FLOWJIT_RUNTIME_DIR") or _RUNTIME_DEFAULT


def runtime_notes_directory() -> str:
    """The host fingerprint notes of the runtime's entries (``runtime_directory()`` +
    ``hosts``): a process with an empty user cache finds the runtime's keys without LLVM."""
    return os.path.join(runtime_directory(), "hosts")


def encode(k: str, obj: bytes) -> bytes:
    """The bytes of an entry: header then object code."""
    return _HEADER.pack(MAGIC, bytes.fromhex(k), len(obj), hashlib.sha256(obj).digest()) + obj


def decode(k: str, data: bytes) -> bytes | None:
    """The object code of entry bytes ``data`` if they are a whole, intact entry for key
    ``k``; None otherwise."""
    if len(data) < _HEADER.size:
        return None
    magic, kbytes, length, digest = _HEADER.unpack_from(data)
    obj = data[_HEADER.size:]
    if (magic != MAGIC or kbytes != bytes.fromhex(k) or length != len(obj)
            or hashlib.sha256(obj).digest() != digest):
        return None
    return obj


def read(k: str, where: str | None = None) -> bytes | None:
    """The cached object code of key ``k`` (in ``where``, by default ``directory()``), or
    None when there is no entry or it is not valid (then counted as rejected; the caller
    compiles and overwrites it)."""
    try:
        with open(path(k, where), "rb") as f:
            data = f.read()
    except OSError:
        return None
    obj = decode(k, data)
    if obj is None:
        count("rejected")
    return obj


def write(k: str, obj: bytes, where: str | None = None, mode: int | None = None) -> bool:
    """Store object code ``obj`` under key ``k`` atomically (in ``where``, by default
    ``directory()``); False (and no error) when the cache directory cannot be written,
    since the code still runs from memory. ``mode``: the entry's permissions (by default
    the temporary file's 0600; the runtime directory's are read by every user)."""
    d = where or directory()
    if d in _unwritable:
        return False
    try:
        os.makedirs(d, exist_ok=True)
        # mkstemp gives a name of its own to every thread and process: two writers of one
        # key never share a temporary file, and os.replace makes the entry appear whole.
        fd, tmp = tempfile.mkstemp(prefix=f".{k[:16]}.", suffix=".tmp", dir=d)
    except OSError:
        _unwritable.add(d)
        return False
    try:
        with os.fdopen(fd, "wb") as f:
            if mode is not None:
                os.fchmod(f.fileno(), mode)
            f.write(encode(k, obj))
        os.replace(tmp, path(k, d))
        return True
    except OSError:
        return False
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def save_failed(ir_text: str) -> str | None:
    """Write IR text LLVM rejected to ``FLOWJIT_CACHE_DIR/failed/`` for a bug report;
    its path, or None when that directory cannot be written."""
    d = os.path.join(_base(), "failed")
    try:
        os.makedirs(d, exist_ok=True)
        p = os.path.join(d, f"{hashlib.sha256(ir_text.encode()).hexdigest()[:20]}.ll")
        with open(p, "w") as f:
            f.write(ir_text)
        return p
    except OSError:
        return None
