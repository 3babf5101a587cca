"""One served version of a model: its signature (from the manifest), the checks and the
warm-up done before traffic reaches it, the decoding of requests against its signature
(TensorFlow Serving's JSON forms and NumPy's binary ones) and its unloading."""

from __future__ import annotations

import _ctypes  # dlclose of an unloaded version's library
import ctypes
import io
import math
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from flowjit.aot import AOTError, CompiledFunction, load_compiled
from flowjit.aot import manifest as mf
from flowjit.validate.errors import ValidateError

from . import repository

NPY = "application/x-npy"
NPZ = "application/x-npz"
WARMUP = "WARMUP.npz"   # a version's own recorded warm-up requests: one array per input, a batch each


# The header np.save writes for a plain C-ordered array (format 1.0), read without
# ast.literal_eval (np.load's 20 µs for a one-row request; this takes 2).
_NPY_HEADER = re.compile(rb"\{'descr': '([<>|=]?[a-zA-Z]\d+)', 'fortran_order': False, 'shape': \(([\d, ]*)\), \} *\n")


def read_npy(body: bytes) -> np.ndarray | None:
    """The array of an .npy file's bytes in np.save's plain form (format 1.0, C order, a
    numeric dtype), as a read-only view of ``body``; None for any other form (np.load
    reads or refuses it then)."""
    if body[:8] != b"\x93NUMPY\x01\x00" or len(body) < 10:
        return None
    start = 10 + int.from_bytes(body[8:10], "little")
    m = _NPY_HEADER.fullmatch(body, 10, start)
    if m is None:
        return None
    try:
        dtype = np.dtype(m.group(1).decode())
        shape = tuple(int(d) for d in m.group(2).split(b",") if d.strip())
    except (TypeError, ValueError):
        return None
    count = math.prod(shape)
    if dtype.kind not in "biuf" or len(body) - start != count * dtype.itemsize:
        return None
    arr = np.frombuffer(body, dtype, count, offset=start).reshape(shape)
    # np.empty's alignment, which a compiled library may count on (bytes' data always has it here)
    return arr if arr.ctypes.data % 16 == 0 else arr.copy()


def write_npy(array: np.ndarray) -> bytes:
    """``array`` as the bytes np.save writes (format 1.0), without its file object: a plain
    numeric array's header is formatted directly; any other goes through np.save."""
    if array.dtype.kind not in "biuf" or not array.flags.c_contiguous:
        buf = io.BytesIO()
        np.save(buf, array, allow_pickle=False)
        return buf.getvalue()
    header = f"{{'descr': '{array.dtype.str}', 'fortran_order': False, 'shape': {array.shape!r}, }}"
    pad = 64 - (10 + len(header) + 1) % 64
    header = header + " " * (pad % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode("latin-1") + array.tobytes()


class BadRequest(Exception):
    """A request the server answers with a 4xx: ``status`` and a message naming the problem
    and the expected form."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


class VersionRefused(Exception):
    """A version directory that cannot be served (corrupt, partial, tampered, failing its
    warm-up): the message says why."""


@dataclass(frozen=True)
class Tensor:
    """An input or output of a served function: name, dtype and shape (the batch dimension
    as a name when symbolic)."""

    name: str
    dtype: np.dtype
    shape: tuple

    def to_json(self) -> dict[str, Any]:
        """The metadata form: ``{"name", "dtype", "shape"}`` with -1 for the batch size."""
        return {"name": self.name, "dtype": self.dtype.name,
                "shape": [d if isinstance(d, int) else -1 for d in self.shape]}


class Signature:
    """The inputs and outputs of a library's manifest, and how requests batch along its
    leading dimension: ``symbolic`` (any batch size) or ``fixed`` (padded up to the
    compiled size) or neither (each request must match the shapes exactly)."""

    def __init__(self, manifest: dict[str, Any]):
        for p in manifest["params"]:
            if not p.get("static") and p["tree"]["kind"] != "leaf":
                raise VersionRefused(f"parameter {p['name']!r} is a {p['tree']['kind']}: flowjit serve serves "
                                     "functions whose every parameter is one array; export a function of arrays")
        self.inputs = [Tensor(a["name"], np.dtype(a["dtype"]), tuple(a["shape"]))
                       for a in manifest["args"] if a["kind"] == "argument"]
        self.outputs = [Tensor(r["name"], np.dtype(r["dtype"]), tuple(r["shape"]))
                        for r in manifest["results"] if r["kind"] == "output"]
        self.input_names = [t.name for t in self.inputs]
        self.output_tree = manifest["output_tree"]
        symbol = manifest.get("symbolic")
        leading = {t.shape[0] if t.shape else None for t in self.inputs + self.outputs}
        self.symbolic = bool(symbol) and leading == {symbol}
        self.fixed = None if self.symbolic or len(leading) != 1 or not isinstance(next(iter(leading)), int) \
            else next(iter(leading))
        self.batchable = self.symbolic or self.fixed is not None

    def to_json(self) -> dict[str, Any]:
        """The metadata form: inputs and outputs by name, and the batching it allows."""
        return {"inputs": {t.name: t.to_json() for t in self.inputs},
                "outputs": {t.name: t.to_json() for t in self.outputs},
                "batching": "symbolic" if self.symbolic else ("padded" if self.fixed else "none")}

    # ---- requests ---------------------------------------------------------------------

    def _convert(self, value: Any, t: Tensor, where: str, exact_dtype: bool) -> np.ndarray:
        if isinstance(value, np.ndarray):
            if exact_dtype and value.dtype != t.dtype:
                raise BadRequest(f"{where}: input {t.name!r} must be {t.dtype.name}, got {value.dtype.name}; "
                                 f"send a {t.dtype.name} array")
            arr = value
        else:
            try:
                arr = np.asarray(value)
            except ValueError:
                raise BadRequest(f"{where}: input {t.name!r} is a ragged list; send a rectangular nested list of "
                                 f"numbers of shape {self._row_text(t)}") from None
        if arr.dtype.kind not in "biuf":
            raise BadRequest(f"{where}: input {t.name!r} must hold numbers ({t.dtype.name}), got "
                             f"{'a ragged or mixed list' if arr.dtype == object else arr.dtype.name}")
        if arr.dtype != t.dtype:
            if t.dtype.kind in "iub" and arr.dtype.kind == "f":
                if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
                    raise BadRequest(f"{where}: input {t.name!r} is {t.dtype.name}: send whole numbers, not "
                                     f"fractions")
            if t.dtype.kind in "iu" and arr.size:
                info = np.iinfo(t.dtype)
                if arr.min() < info.min or arr.max() > info.max:
                    raise BadRequest(f"{where}: input {t.name!r} is {t.dtype.name}: a value is out of its range "
                                     f"[{info.min}, {info.max}]")
            arr = arr.astype(t.dtype)
        return arr

    def _row_text(self, t: Tensor) -> str:
        return f"{t.dtype.name}[{','.join(map(str, t.shape))}]"

    def _check_batch(self, arrays: list[np.ndarray], where: str) -> int:
        """The batch size of ``arrays`` (one per input), checking shapes against the
        signature."""
        rows = None
        for arr, t in zip(arrays, self.inputs):
            if self.batchable:
                ok = arr.ndim == len(t.shape) and arr.shape[1:] == t.shape[1:]
                if ok and self.fixed is not None and arr.shape[0] > self.fixed:
                    raise BadRequest(f"{where}: input {t.name!r} has {arr.shape[0]} rows; this version was "
                                     f"compiled for at most {self.fixed} ({self._row_text(t)}): send fewer rows")
            else:
                ok = arr.shape == t.shape
            if not ok:
                expect = (f"shape (N, {', '.join(map(str, t.shape[1:]))}) for N rows" if self.batchable
                          else f"shape {t.shape}")
                raise BadRequest(f"{where}: input {t.name!r} must have {expect} ({self._row_text(t)}), "
                                 f"got shape {arr.shape}")
            n = arr.shape[0] if self.batchable else 1
            if rows is not None and n != rows:
                raise BadRequest(f"{where}: the inputs have different numbers of rows ({rows} and {n}); "
                                 "send the same number of rows of each input")
            rows = n
        return rows or 0

    def decode_json(self, body: Any) -> tuple[list[np.ndarray], int, str]:
        """Arrays (one per input), rows, and the form (``instances`` or ``inputs``) of a
        JSON request body in TensorFlow Serving's form."""
        if not isinstance(body, dict) or ("instances" in body) == ("inputs" in body):
            raise BadRequest('the body must be a JSON object with "instances" (a list of rows) or "inputs" '
                             '(columns), not both: e.g. {"instances": [[...], [...]]}')
        names = self.input_names
        if "instances" in body:
            rows = body["instances"]
            if not isinstance(rows, list) or not rows:
                raise BadRequest('"instances" must be a non-empty list of rows')
            if not self.batchable and len(rows) != 1:
                raise BadRequest(f'"instances": this version takes exactly one instance of its fixed shapes '
                                 f'({", ".join(self._row_text(t) for t in self.inputs)}), got {len(rows)}')
            if len(self.inputs) == 1 and not isinstance(rows[0], dict):
                arrays = [self._convert(rows if self.batchable else rows[0], self.inputs[0], '"instances"', False)]
                return arrays, self._check_batch(arrays, '"instances"'), "instances"
            for r in rows:
                if not isinstance(r, dict) or sorted(r) != sorted(names):
                    raise BadRequest(f'"instances": each instance must be an object with the inputs {names} '
                                     f'as keys')
            columns = [[r[n] for r in rows] for n in names]
            arrays = [self._convert(c if self.batchable else c[0], t, '"instances"', False)
                      for c, t in zip(columns, self.inputs)]
            return arrays, self._check_batch(arrays, '"instances"'), "instances"
        given = body["inputs"]
        if len(self.inputs) == 1 and not isinstance(given, dict):
            given = {names[0]: given}
        if not isinstance(given, dict) or sorted(given) != sorted(names):
            raise BadRequest(f'"inputs" must be an object with the inputs {names} as keys'
                             + (" (or the one input's value)" if len(names) == 1 else ""))
        arrays = [self._convert(given[t.name], t, '"inputs"', False) for t in self.inputs]
        return arrays, self._check_batch(arrays, '"inputs"'), "inputs"

    def decode_binary(self, body: bytes, content_type: str) -> tuple[list[np.ndarray], int, str]:
        """Arrays, rows and form of an ``application/x-npy`` (one input) or
        ``application/x-npz`` (inputs by name) body; dtypes must match exactly."""
        loaded = read_npy(body) if content_type == NPY else None
        try:
            if loaded is None:
                loaded = np.load(io.BytesIO(body), allow_pickle=False)
        except Exception as e:  # ValueError, EOFError, zipfile.BadZipFile ...
            raise BadRequest(f"the body is not a valid {'.npy' if content_type == NPY else '.npz'} file ({e}); "
                             f"write it with np.save / np.savez and allow_pickle=False") from None
        if content_type == NPY:
            if not isinstance(loaded, np.ndarray):
                raise BadRequest("an application/x-npy body holds one array (np.save); send several inputs as "
                                 "application/x-npz (np.savez)")
            if len(self.inputs) != 1:
                raise BadRequest(f"this model takes {len(self.inputs)} inputs "
                                 f"({', '.join(t.name for t in self.inputs)}): send them as application/x-npz")
            arrays = [self._convert(loaded, self.inputs[0], "the .npy body", True)]
        else:
            if isinstance(loaded, np.ndarray) or sorted(loaded.files) != sorted(t.name for t in self.inputs):
                raise BadRequest(f"an application/x-npz body must hold the inputs "
                                 f"{[t.name for t in self.inputs]} by name (np.savez(f, name=array, ...))")
            arrays = [self._convert(loaded[t.name], t, "the .npz body", True) for t in self.inputs]
        return arrays, self._check_batch(arrays, "the body"), content_type

    def encode(self, outputs: list[np.ndarray], form: str) -> tuple[bytes, str] | dict[str, Any]:
        """A response: a JSON-able dict for the JSON forms (``predictions`` rows for
        ``instances``, ``outputs`` for ``inputs``), bytes and content type for binary."""
        if len(outputs) == 1 and form in ("instances", "inputs"):
            return {"predictions" if form == "instances" else "outputs": outputs[0].tolist()}
        names = [t.name for t in self.outputs]
        if form == "instances":
            lists = [o.tolist() for o in outputs]
            return {"predictions": [dict(zip(names, row)) for row in zip(*lists)]}
        if form == "inputs":
            return {"outputs": {n: o.tolist() for n, o in zip(names, outputs)}}
        if form == NPY and len(outputs) == 1:
            return write_npy(outputs[0]), NPY
        buf = io.BytesIO()
        np.savez(buf, **dict(zip(names, outputs)))
        return buf.getvalue(), NPZ


class LoadedVersion:
    """A version loaded, checked and warmed up. ``run(arrays)`` calls the library on a
    batch and returns the outputs' arrays; ``acquire``/``release`` count the requests that
    hold it, and ``unload`` waits for them, then drops the library and closes it.
    ``checks``: the checks of the schema the version carries (``schema.json``; a
    ``flowjit.validate.LiveCheck``), None when it carries none."""

    def __init__(self, model: str, version: int, directory: Path):
        self.model, self.version, self.directory = model, version, directory
        marker = repository.ready_digest(directory)
        if marker is None:
            raise VersionRefused(f"{directory} has no readiness marker {repository.READY}: it is incomplete")
        try:
            man_path, manifest = repository.find_manifest(directory)
        except repository.PushError as e:
            raise VersionRefused(str(e)) from None
        if manifest.get("digest") != marker:
            raise VersionRefused(f"{directory}/{repository.READY} names digest {marker[:12]}... but its manifest "
                                 f"has {str(manifest.get('digest'))[:12]}...: the version was changed after its push")
        try:
            self.fn: CompiledFunction | None = load_compiled(man_path)
        except (AOTError, OSError, ValueError, KeyError) as e:
            raise VersionRefused(f"{directory}: {e}") from None
        self.manifest = manifest
        self.digest = manifest["digest"]
        self.signature = Signature(manifest)
        try:
            # The checks of the version's schema on each request's inputs (None: it carries none).
            self.checks = repository.live_check(directory, manifest)
        except ValidateError as e:
            raise VersionRefused(str(e)) from None
        self._inflight = 0
        self._retired = False
        self._lock = threading.Lock()       # acquire and release take it alone (C-level, no Condition wrapper)
        self._cond = threading.Condition(self._lock)
        self.loaded_at = time.time()
        self.cost: tuple[float, float] = (0.0, 0.0)   # seconds = a * rows + b, fitted at warm-up

    def run(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        """The outputs (one array per output) of the library on one batch; a fixed-size
        library's batch is padded to its size and the padding cut from the outputs."""
        fn = self.fn
        if fn is None:
            raise RuntimeError(f"version {self.version} of {self.model} is unloaded")
        sig = self.signature
        rows = arrays[0].shape[0] if sig.batchable else None
        if sig.fixed is not None and rows != sig.fixed:
            arrays = [np.concatenate([a, np.zeros((sig.fixed - rows, *a.shape[1:]), a.dtype)]) for a in arrays]
        out = fn(*arrays)
        leaves = mf.flatten(sig.output_tree, out, "output")
        if sig.fixed is not None and rows != sig.fixed:
            leaves = [x[:rows] for x in leaves]
        return leaves

    def warm_up(self, sizes: list[int]) -> None:
        """Run the version on its recorded warm-up requests (``WARMUP.npz``) or on zeros at
        each batch size of ``sizes``; check every output's shape and dtype; fit the batch
        time as a * rows + b. VersionRefused when a run fails."""
        sig = self.signature
        try:
            recorded = self.directory / WARMUP
            if recorded.is_file():
                arrays, _, _ = sig.decode_binary(recorded.read_bytes(), NPZ)
                self._check_outputs(self.run(arrays), arrays[0].shape[0] if sig.batchable else None)
            points = []
            for n in (sizes if sig.symbolic else [sig.fixed] if sig.fixed else [None]):
                arrays = [np.zeros(((n,) + t.shape[1:]) if n is not None else t.shape, t.dtype) for t in sig.inputs]
                self._check_outputs(self.run(arrays), n)
                times = []
                for _ in range(9):
                    t0 = time.perf_counter()
                    self.run(arrays)
                    times.append(time.perf_counter() - t0)
                points.append((n or 1, float(np.median(times))))   # the median: a busy machine's outliers aside
        except BadRequest as e:
            raise VersionRefused(f"{self.directory}/{WARMUP}: {e}") from None
        except (ValueError, TypeError, MemoryError, RuntimeError) as e:
            raise VersionRefused(f"{self.directory}: the warm-up run failed: {e}") from None
        self.cost = fit_cost(points)

    def _check_outputs(self, outputs: list[np.ndarray], rows: int | None) -> None:
        for o, t in zip(outputs, self.signature.outputs):
            want = tuple(rows if not isinstance(d, int) else d for d in t.shape)
            if self.signature.fixed is not None and rows is not None:
                want = (rows, *t.shape[1:])
            if o.dtype != t.dtype or (rows is not None and o.shape != want):
                raise VersionRefused(f"{self.directory}: output {t.name!r} came back {o.dtype}{list(o.shape)}, "
                                     f"expected {t.dtype}{list(want)}")

    def acquire(self) -> bool:
        """Count one more request holding this version; False (nothing counted) once the
        version is retired: the request must pick the version serving now."""
        with self._lock:
            if self._retired:
                return False
            self._inflight += 1
            return True

    def retire(self) -> None:
        """No request may acquire the version from now on (those holding it finish)."""
        with self._cond:
            self._retired = True

    def release(self) -> None:
        """Count one request fewer."""
        with self._lock:
            self._inflight -= 1
            if self._inflight == 0:
                self._cond.notify_all()

    @property
    def inflight(self) -> int:
        """Requests holding this version now."""
        return self._inflight

    def wait_idle(self, timeout: float = 60.0) -> bool:
        """Wait (up to ``timeout`` s) until no request holds this version; True when none does."""
        with self._cond:
            return self._cond.wait_for(lambda: self._inflight == 0, timeout)

    def unload(self, timeout: float = 60.0) -> bool:
        """Wait (up to ``timeout`` s) for the requests holding the version, then drop its
        library and close it (dlclose) so its memory returns; True when closed. A library
        with its own thread pool stays mapped (its threads may still run its code)."""
        with self._cond:
            self._cond.wait_for(lambda: self._inflight == 0, timeout)
            if self._inflight:
                return False
            fn, self.fn = self.fn, None
        if fn is None:
            return False
        lib = fn._lib
        handle = lib._handle
        pool = bool(self.manifest.get("pool"))
        del fn, lib   # nothing calls into the library after this: closing it is safe
        if pool:
            return False
        try:
            _ctypes.dlclose(handle)
        except (OSError, AttributeError):
            return False
        return True


# The thread-count setters of the BLAS libraries an AOT library links (NumPy's bundled
# OpenBLAS, ILP64 and LP64, and a plain OpenBLAS), tried in order.
_BLAS_SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads", "openblas_set_num_threads")


def limit_blas_threads(manifest: dict[str, Any], threads: int) -> bool:
    """Set the BLAS library a version links (its manifest's ``blas``) to ``threads``
    threads, process-wide; True when a setter was found. A served batch is small, and
    OpenBLAS fanning a 64x128 product out over the cores of a busy machine took 1000x
    longer (535 µs a row instead of 0.5 on two shared cores)."""
    library = (manifest.get("blas") or {}).get("library")
    if not library or threads <= 0:
        return False
    try:
        lib = ctypes.CDLL(library)
    except OSError:
        return False
    for symbol in _BLAS_SETTERS:
        setter = getattr(lib, symbol, None)
        if setter is not None:
            setter.argtypes = [ctypes.c_int]
            setter.restype = None
            setter(threads)
            return True
    return False


def fit_cost(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least squares of seconds = a * rows + b over (rows, seconds), both >= 0."""
    if not points:
        return 0.0, 0.0
    if len(points) == 1:
        return 0.0, max(points[0][1], 0.0)
    n = np.array([p[0] for p in points], float)
    s = np.array([p[1] for p in points], float)
    a, b = np.polyfit(n, s, 1)
    a = max(float(a), 0.0)
    b = max(float(b), 0.0)
    if not (math.isfinite(a) and math.isfinite(b)):
        return 0.0, float(s.max())
    return a, b

