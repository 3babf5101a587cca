"""Safetensors files through the ``safetensors`` library, with our own header validation.

A file is an 8-byte little-endian length N, N bytes of UTF-8 JSON header, then one byte
buffer. The header maps each tensor name to ``{"dtype", "shape", "data_offsets": [begin,
end]}`` (offsets into the buffer) and may hold ``"__metadata__"``, a str->str map. The
``safetensors`` library (the format's reference implementation) writes the files and
reads the data, memory-mapped. Before it is given a file to read, ``read_header``
checks everything a truncated or corrupted file could break (header length, JSON,
dtypes, shapes, offsets against the file's size), reading only the header, and raises
``CorruptCheckpointError`` naming the file and the problem: the library's own errors say
less ("incomplete metadata, file not fully covered") and do not name the file.

Checksums. Safetensors carries none, so a flipped byte in the data would restore as a
wrong value. ``write_file`` stores a CRC-32 of each tensor's bytes (as laid out in the
file: C order, little-endian) in the metadata, under ``"flowjit.checksums"`` as
``{"algorithm": "crc32", "tensors": {name: "8 hex digits"}}``: other readers ignore
metadata they do not know, so the file stays plain safetensors. ``read_tensors`` checks
every array it reads against it (a mismatch is a ``CorruptCheckpointError`` naming the
file and the tensor) and warns (``CheckpointWarning``) for a file that has none, written
before checksums or by another program. The CRC is zlib's (``zlib.crc32``, the standard
library's, the CRC-32 of zip and PNG): like TensorFlow's CRC32C it catches every error
burst of up to 32 bits, so every flipped byte, and it needs no new dependency.
"""

from __future__ import annotations

import json
import math
import os
import re
import warnings
import zlib
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np
import safetensors
import safetensors.numpy

from flowjit.ir.errors import FlowjitError

# The spec's own limit: a larger length is a corrupt file, not a header to allocate.
MAX_HEADER_BYTES = 100_000_000
METADATA_KEY = "__metadata__"
# The metadata key holding the per-tensor checksums, and the one algorithm they use.
CHECKSUMS_KEY = "flowjit.checksums"
CHECKSUM_ALGORITHM = "crc32"
_HEX8 = re.compile(r"^[0-9a-f]{8}$")

# The safetensors code of each flowjit dtype (the spec's names: F32, I8, U64, BOOL...).
# The format has no code for complex128 (the safetensors library refuses it).
_CODE_BY_NAME = {"float32": "F32", "float64": "F64", "float16": "F16", "bool": "BOOL", "complex64": "C64",
                 **{f"{sign}int{bits}": f"{sign.upper() or 'I'}{bits}"
                    for sign in ("", "u") for bits in (8, 16, 32, 64)}}
_DTYPE_BY_CODE = {code: np.dtype(name).newbyteorder("<") for name, code in _CODE_BY_NAME.items()}


class CheckpointError(FlowjitError):
    """A checkpoint could not be written or read: a corrupt or truncated file, a file that
    does not match the state it is restored into, or a state that cannot be saved."""


class CorruptCheckpointError(CheckpointError):
    """A checkpoint file is damaged: truncated, not valid safetensors, or a tensor's data
    fails its checksum. ``CheckpointManager.restore`` skips such a file for an older one;
    a file that is sound but does not match the state is a plain ``CheckpointError``."""


class CheckpointWarning(UserWarning):
    """A checkpoint was read with less assurance than usual: it has no checksums (written
    before flowjit stored them, or by another program), or ``CheckpointManager.restore``
    skipped a damaged newer checkpoint for it."""


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of a file's header: its dtype code (``"F32"``), shape and byte range."""

    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def numpy_dtype(self) -> np.dtype:
        return _DTYPE_BY_CODE[self.dtype]


@dataclass(frozen=True)
class Header:
    """A validated header: the tensors by name, the raw metadata map, where data starts."""

    tensors: dict[str, TensorEntry]
    metadata: dict[str, str]
    data_start: int
    # Each tensor's CRC-32, or None for a file without checksums.
    checksums: dict[str, int] | None = None


def dtype_code(dtype: np.dtype) -> str:
    """The safetensors code of a NumPy dtype flowjit writes (``float32`` -> ``"F32"``)."""
    try:
        return _CODE_BY_NAME[np.dtype(dtype).name]
    except KeyError:
        hint = ("; safetensors has no complex128 code: keep a complex128 state as two float64 Variables "
                "(real and imaginary parts) or as complex64") if np.dtype(dtype) == np.complex128 else ""
        raise CheckpointError(f"dtype {np.dtype(dtype).name} cannot be checkpointed; flowjit writes "
                              f"{', '.join(_CODE_BY_NAME)}{hint}") from None


def tensor_checksum(arr: np.ndarray) -> int:
    """The CRC-32 (``zlib.crc32``) of ``arr``'s bytes as a safetensors file holds them: C
    order, little-endian."""
    arr = np.asarray(arr)
    # Not ascontiguousarray: it turns 0-d arrays into shape (1,).
    return zlib.crc32(np.asarray(arr, dtype=arr.dtype.newbyteorder("<"), order="C"))


def write_file(path: str | os.PathLike[str], tensors: dict[str, np.ndarray],
               metadata: dict[str, str] | None = None) -> None:
    """Write ``tensors`` (name -> array of a flowjit dtype) and the str->str ``metadata``
    to the safetensors file ``path`` with the ``safetensors`` library, which lays the
    arrays out and pads the header so the data starts 8-byte aligned, adding each
    tensor's checksum to the metadata (``CHECKSUMS_KEY``). Every array is made
    C-contiguous first: the library copies ``nbytes`` from an array's data pointer, so a
    strided view (a transpose, a step slice) would be written as the wrong elements."""
    contiguous = {}
    for name, value in tensors.items():
        arr = np.asarray(value)
        dtype_code(arr.dtype)
        # Not ascontiguousarray: it turns 0-d arrays into shape (1,).
        contiguous[name] = np.asarray(arr, order="C")
    if metadata and CHECKSUMS_KEY in metadata:
        raise CheckpointError(f"the metadata key {CHECKSUMS_KEY!r} is the checksums' own; use another key")
    sums = {name: f"{tensor_checksum(contiguous[name]):08x}" for name in sorted(contiguous)}
    metadata = {**(metadata or {}),
                CHECKSUMS_KEY: json.dumps({"algorithm": CHECKSUM_ALGORITHM, "tensors": sums})}
    safetensors.numpy.save_file(contiguous, os.fspath(path), metadata=metadata)


def read_header(f: BinaryIO, size: int, source: str) -> Header:
    """Read and validate the header of the ``size``-byte file ``f`` (named ``source`` in
    errors): every entry well formed, the byte ranges tiling the buffer without holes or
    overlaps, and the file exactly as long as the header says (shorter means truncated)."""
    def corrupt(problem: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(f"{source} is not a valid safetensors checkpoint: {problem}")

    if size < 8:
        raise corrupt(f"the file has {size} bytes, fewer than the 8 of the header length (truncated?)")
    f.seek(0)
    n = int.from_bytes(f.read(8), "little")
    if n < 2 or n > MAX_HEADER_BYTES:
        raise corrupt(f"header length {n} is out of range")
    if 8 + n > size:
        raise corrupt(f"header length {n} runs past the end of the {size}-byte file (truncated?)")
    raw = f.read(n)
    try:
        parsed = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicate_keys)
    except (UnicodeDecodeError, ValueError) as e:
        raise corrupt(f"the header is not valid JSON ({e})") from None
    if not isinstance(parsed, dict):
        raise corrupt("the header is not a JSON object")

    metadata = parsed.pop(METADATA_KEY, {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise corrupt(f"{METADATA_KEY} is not a map of strings to strings")

    tensors: dict[str, TensorEntry] = {}
    for name, info in parsed.items():
        tensors[name] = _entry(name, info, corrupt)

    # Spec: the buffer is entirely indexed, without holes; anything else is damage.
    position = 0
    for name, entry in sorted(tensors.items(), key=lambda item: (item[1].begin, item[1].end)):
        if entry.begin != position:
            raise corrupt(f"tensor {name!r} starts at byte {entry.begin} of the data, expected {position} "
                          "(overlapping or missing bytes)")
        position = entry.end
    expected = 8 + n + position
    if size < expected:
        raise corrupt(f"the data ends at byte {expected} but the file has only {size} bytes (truncated)")
    if size > expected:
        raise corrupt(f"{size - expected} unexpected bytes after the data")
    checksums = _checksums(metadata.get(CHECKSUMS_KEY), tensors, corrupt)
    return Header(tensors, dict(metadata), 8 + n, checksums)


def _checksums(raw: str | None, tensors: dict[str, TensorEntry], corrupt: Any) -> dict[str, int] | None:
    """The checksums ``raw`` (the value of ``CHECKSUMS_KEY``) records for ``tensors``, or
    None when the file has none; anything malformed is damage to the header."""
    if raw is None:
        return None
    try:
        parsed = json.loads(raw)
    except ValueError as e:
        raise corrupt(f"the checksums in {CHECKSUMS_KEY} are not valid JSON ({e})") from None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("tensors"), dict):
        raise corrupt(f"the checksums in {CHECKSUMS_KEY} are not an object with a \"tensors\" map")
    if parsed.get("algorithm") != CHECKSUM_ALGORITHM:
        raise corrupt(f"the checksums use algorithm {parsed.get('algorithm')!r}, which this flowjit cannot check "
                      f"(it knows {CHECKSUM_ALGORITHM!r}); read the file with the flowjit that wrote it")
    sums = parsed["tensors"]
    for name in sorted(tensors):
        if name not in sums:
            raise corrupt(f"no checksum for tensor {name!r} in {CHECKSUMS_KEY}")
    for name in sorted(sums):
        if name not in tensors:
            raise corrupt(f"{CHECKSUMS_KEY} has a checksum for {name!r}, which is not a tensor of the file")
    for name in sorted(sums):
        if not isinstance(sums[name], str) or not _HEX8.match(sums[name]):
            raise corrupt(f"the checksum of {name!r} is {sums[name]!r}, not 8 lowercase hex digits")
    return {name: int(value, 16) for name, value in sums.items()}


def read_tensors(path: str | os.PathLike[str], header: Header, names: list[str], source: str) -> dict[str, np.ndarray]:
    """Read the arrays ``names`` of the file ``path`` whose ``header`` was validated, with
    the ``safetensors`` library (it memory-maps the file and copies each array out). The
    library parses the header again; if that disagrees with ``header`` (tensors, dtypes,
    shapes, metadata), the file was replaced between the two reads, and the arrays would
    not belong to the metadata already returned: a ``CheckpointError``, nothing mixed.
    Each array is then checked against its checksum (``CorruptCheckpointError`` naming
    the file and the tensor); a file without checksums is read with a
    ``CheckpointWarning``."""
    try:
        with safetensors.safe_open(os.fspath(path), framework="np") as f:
            same = sorted(f.keys()) == sorted(header.tensors) and (f.metadata() or {}) == header.metadata
            out = {name: f.get_tensor(name) for name in names} if same else {}
    except safetensors.SafetensorError as e:
        # Our validation passed, so the library saw another file or a case we do not check.
        raise CorruptCheckpointError(f"{source} is not a valid safetensors checkpoint: {e}") from None
    # Dtypes and shapes are compared on the arrays: PySafeSlice.get_dtype is missing from
    # older releases of the library.
    if not same or any((arr.dtype.name, arr.shape) != (header.tensors[name].numpy_dtype.name,
                                                        header.tensors[name].shape) for name, arr in out.items()):
        raise CheckpointError(f"{source} changed while it was being read (another process replaced it); "
                              "read it again")
    if header.checksums is None:
        warnings.warn(CheckpointWarning(
            f"{source} has no checksums (written before flowjit stored them, or by another program): a "
            "damaged byte in its data cannot be checked; save it again to add them"), stacklevel=3)
        return out
    for name in sorted(out):
        got, want = tensor_checksum(out[name]), header.checksums[name]
        if got != want:
            raise CorruptCheckpointError(
                f"{source}: tensor {name!r} is corrupt: its data's CRC-32 is {got:08x}, the header records "
                f"{want:08x} (the file was damaged after it was written); restore an earlier checkpoint "
                "(CheckpointManager.restore() falls back to the newest one that verifies)")
    return out


def _entry(name: str, info: Any, corrupt: Any) -> TensorEntry:
    if not isinstance(info, dict):
        raise corrupt(f"entry {name!r} is not an object")
    code, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if code not in _DTYPE_BY_CODE:
        raise corrupt(f"tensor {name!r} has unsupported dtype {code!r} (readable: {', '.join(_DTYPE_BY_CODE)})")
    if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
        raise corrupt(f"tensor {name!r} has invalid shape {shape!r}")
    if (not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_count(o) for o in offsets)
            or offsets[0] > offsets[1]):
        raise corrupt(f"tensor {name!r} has invalid data_offsets {offsets!r}")
    nbytes = math.prod(shape) * _DTYPE_BY_CODE[code].itemsize
    if offsets[1] - offsets[0] != nbytes:
        raise corrupt(f"tensor {name!r} of dtype {code} and shape {shape} needs {nbytes} bytes, "
                      f"but its data_offsets {offsets} span {offsets[1] - offsets[0]}")
    return TensorEntry(code, tuple(shape), offsets[0], offsets[1])


def _is_count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json.loads keeps the last of repeated keys silently; in a header that hides a tensor.
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"repeated key {key!r}")
        out[key] = value
    return out
