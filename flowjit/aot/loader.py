"""``fj.load_compiled``: an exported library (``fj.export`` / ``flowjit compile``) as a
Python callable, through ctypes and its manifest alone: no tracer call, no compiler, no
numba or llvmlite. A fresh process's first result costs its imports (Python, NumPy,
flowjit) and about a millisecond to check and load the library."""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import safetensors.numpy

from flowjit.version import __version__

from . import manifest as mf
from .manifest import AOTError

# The entry's return codes (codegen_cpu.program_emit's C_ERR_*, which this module may
# not import: it loads LLVM's IR builder).
_ERRORS = {1: (MemoryError, "out of memory for its scratch or a kernel's temporary memory"),
           2: (ValueError, "its scratch block is misaligned"),
           3: (ValueError, "an argument or result pointer is NULL"),
           4: (ValueError, "its symbolic dimension is negative")}


def _manifest_path(path: Path, name: str | None) -> Path:
    if path.is_dir():
        if name is not None:
            return path / f"{name}.json"
        found = sorted(p for p in path.glob("*.json") if _is_manifest(p))
        if len(found) != 1:
            raise AOTError(f"{path} holds {len(found)} flowjit libraries "
                           f"({', '.join(p.stem for p in found) or 'none'}): pass name=... to pick one")
        return found[0]
    if path.suffix == ".json":
        return path
    if path.suffix == ".so":  # libNAME.so
        return path.with_name(f"{path.stem.removeprefix('lib')}.json")
    raise AOTError(f"{path}: expected a build directory, NAME.json or libNAME.so")


def _is_manifest(p: Path) -> bool:
    try:
        return json.loads(p.read_text()).get("format") == mf.FORMAT
    except (OSError, ValueError, AttributeError):
        return False


class CompiledFunction:
    """A function compiled ahead of time: call it with the arguments the function was
    exported for (NumPy arrays, in the same pytrees); it returns NumPy arrays in the
    function's output structure. ``variables`` holds the values of the Variables it reads
    (loaded from the library's safetensors file; updated in place of the old ones when the
    function assigns them). ``manifest`` is the library's manifest."""

    def __init__(self, manifest: dict[str, Any], directory: Path):
        self.manifest = manifest
        self.name = manifest["name"]
        lib_path = directory / manifest["library"]
        where = str(lib_path)
        try:
            self._lib = ctypes.CDLL(where)
        except OSError as e:
            blas = (manifest.get("blas") or {}).get("library")
            needs = f"; it links the BLAS library {blas}, which must be installed where it was" if blas else ""
            raise AOTError(f"cannot load {where}: {e}{needs}") from None
        try:  # a char array of the digest's 64 hex digits and a NUL
            embedded = (ctypes.c_char * 65).in_dll(self._lib, f"{self.name}_digest").value.decode(errors="replace")
        except ValueError:
            embedded = None
        if embedded != manifest["digest"]:
            raise AOTError(f"{where} does not match its manifest (the library's digest differs): "
                           "rebuild both with `flowjit compile` or fj.export")
        entry = getattr(self._lib, self.name)
        entry.restype = ctypes.c_int32
        # A symbolic dimension (f32[B,784]) is the entry's fourth argument.
        self._symbol = manifest.get("symbolic")
        entry.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p] + ([ctypes.c_int64] if self._symbol
                                                                                 else [])
        self._entry = entry
        self._args = [(a["name"], np.dtype(a["dtype"]), tuple(a["shape"])) for a in manifest["args"]]
        self._results = [(np.dtype(r["dtype"]), tuple(r["shape"])) for r in manifest["results"]]
        self._params = [p for p in manifest["params"] if not p.get("static")]
        self._n_user = sum(a["kind"] == "argument" for a in manifest["args"])
        self._n_out = sum(r["kind"] == "output" for r in manifest["results"])
        self._updated = [r["name"] for r in manifest["results"] if r["kind"] == "variable"]
        self._flat = all(p["tree"]["kind"] == "leaf" for p in self._params)
        self._single = manifest["output_tree"]["kind"] == "leaf"
        self._in_type = ctypes.c_void_p * max(len(self._args), 1)
        self._out_type = ctypes.c_void_p * max(len(self._results), 1)
        self.variables: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()   # variables change as one: a call reads or writes them all
        if manifest.get("variables"):
            file = directory / manifest["variables"]["file"]
            try:
                saved = safetensors.numpy.load_file(str(file))
            except Exception as e:  # the library's own SafetensorError, OSError
                raise AOTError(f"cannot read the variables of {self.name} from {file}: {e}") from None
            for (label, dtype, shape), a in zip(self._args[self._n_user:], manifest["args"][self._n_user:]):
                value = saved.get(label)
                if value is None or value.dtype != dtype or value.shape != shape:
                    raise AOTError(f"{file} has no variable {label!r} of {mf.spec_text(dtype, shape)}: it does not "
                                   f"belong to this library; rebuild both with `flowjit compile`")
                self.variables[label] = np.ascontiguousarray(value)

    def _shapes(self, leaves: list[Any]) -> tuple[int | None, list[tuple], list[tuple]]:
        """The symbolic dimension's value (from the first argument that has it) and the
        arguments' and results' shapes with it filled in; without one, as declared."""
        if not self._symbol:
            return None, [s for _, _, s in self._args], [s for _, s in self._results]
        batch = None
        for x, (label, dtype, shape) in zip(leaves, self._args):
            if self._symbol in shape and np.ndim(x) == len(shape):
                batch = np.shape(x)[shape.index(self._symbol)]
                break
        if batch is None:  # a variable-only program: no argument carries it
            raise TypeError(f"{self.name}: no argument gives the size of {self._symbol}")

        def fill(shape: tuple) -> tuple:
            return tuple(batch if d == self._symbol else d for d in shape)
        return batch, [fill(s) for _, _, s in self._args], [fill(s) for _, s in self._results]

    def _leaves(self, args: tuple) -> tuple[list[np.ndarray], int | None, list[tuple]]:
        """The argument arrays as the library takes them, the symbolic dimension's value
        and the results' shapes."""
        if self._flat and len(args) == self._n_user and not self._symbol:
            # Every parameter one array: arrays already as the library takes them go as they are.
            for x, (_, dtype, shape) in zip(args, self._args):
                if type(x) is not np.ndarray or x.dtype != dtype or x.shape != shape or not x.flags.c_contiguous:
                    break
            else:
                return list(args), None, [s for _, s in self._results]
        if len(args) != len(self._params):
            raise TypeError(f"{self.name} takes {len(self._params)} argument(s) "
                            f"({', '.join(p['name'] for p in self._params)}), got {len(args)}")
        leaves: list[Any] = []
        for p, a in zip(self._params, args):
            leaves += mf.flatten(p["tree"], a, p["name"])
        batch, shapes, result_shapes = self._shapes(leaves + list(self.variables.values()))
        out = []
        for x, (label, dtype, _), shape in zip(leaves, self._args, shapes):
            if isinstance(x, (bool, int, float)) and not isinstance(x, np.generic):
                x = np.asarray(x, dtype)   # a Python scalar takes the argument's dtype, as in the JIT
            arr = np.asarray(x)
            if arr.dtype != dtype:
                raise TypeError(f"{self.name}: argument {label!r} must be {mf.spec_text(dtype, shape)}, got a "
                                f"{arr.dtype} array; convert it with .astype(np.{dtype})")
            if arr.shape != shape:
                declared = next(s for n, _, s in self._args if n == label)
                given = f" ({self._symbol} from the arguments)" if batch is not None else ""
                raise ValueError(f"{self.name}: argument {label!r} must have shape {shape} "
                                 f"({mf.spec_text(dtype, declared)}), got {arr.shape}; the library was compiled "
                                 f"for that shape only{given}")
            out.append(np.ascontiguousarray(arr))
        return out, batch, result_shapes

    def __call__(self, *args: Any) -> Any:
        """Run the library on ``args``; its outputs in the function's structure."""
        leaves, batch, shapes = self._leaves(args)
        results = [np.empty(shape, dtype) for (dtype, _), shape in zip(self._results, shapes)]
        outs = self._out_type(*[r.ctypes.data for r in results])
        if not self.variables:
            self._run(leaves, outs, batch)
        else:
            with self._lock if self._updated else _NO_LOCK:
                variables = [self.variables[label] for label, _, _ in self._args[self._n_user:]]
                self._run(leaves + variables, outs, batch)
                for label, new in zip(self._updated, results[self._n_out:]):
                    self.variables[label] = new
        if self._single:
            return results[0]
        return mf.unflatten(self.manifest["output_tree"], results[:self._n_out])

    def _run(self, arrays: list[np.ndarray], outs: Any, batch: int | None = None) -> None:
        ins = self._in_type(*[a.ctypes.data for a in arrays])
        # ctypes releases the GIL for the call
        rc = self._entry(ins, outs, None) if batch is None else self._entry(ins, outs, None, batch)
        if rc:
            kind, what = _ERRORS.get(rc, (RuntimeError, f"error code {rc}"))
            raise kind(f"{self.name}: the compiled library failed: {what}")

    def __repr__(self) -> str:
        sig = ", ".join(f"{n}: {mf.spec_text(d, s)}" for n, d, s in self._args[:self._n_user])
        return f"<fj.load_compiled {self.name}({sig}) for {self.manifest['cpu']['name']}>"


class _NoLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NO_LOCK = _NoLock()


def load_compiled(path: str | os.PathLike[str], name: str | None = None) -> CompiledFunction:
    """The library exported into ``path`` (a build directory, ``NAME.json`` or
    ``libNAME.so``; ``name`` picks one of several in a directory) as a callable. Refuses,
    with AOTError and before any native code runs, a library built for another CPU or
    another flowjit version, or one whose manifest was edited (digest mismatch)."""
    man_path = _manifest_path(Path(path), name)
    try:
        manifest = json.loads(man_path.read_text())
    except (OSError, ValueError) as e:
        raise AOTError(f"cannot read the manifest {man_path}: {e}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != mf.FORMAT:
        raise AOTError(f"{man_path} is not a flowjit library manifest ({mf.FORMAT})")
    if manifest.get("digest") != mf.digest(manifest):
        raise AOTError(f"{man_path} was modified after it was built (its digest does not match its content): "
                       "rebuild the library with `flowjit compile` or fj.export")
    if manifest["flowjit_version"] != __version__:
        raise AOTError(f"{man_path} was built by flowjit {manifest['flowjit_version']}, this is flowjit "
                       f"{__version__}: rebuild it with this version's `flowjit compile`")
    mf.check_cpu(manifest["cpu"], str(man_path))
    lib = man_path.parent / manifest["library"]
    if not lib.is_file():
        raise AOTError(f"{lib} is missing (was the library linked? run `cc -shared -o {lib} "
                       f"{man_path.parent / manifest['name']}.o -lm`)")
    if manifest.get("library_sha256") and hashlib.sha256(lib.read_bytes()).hexdigest() != manifest["library_sha256"]:
        raise AOTError(f"{lib} is not the library its manifest {man_path} describes (its SHA-256 differs): "
                       "rebuild both with `flowjit compile`")
    return CompiledFunction(manifest, man_path.parent)
