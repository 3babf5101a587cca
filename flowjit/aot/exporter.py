"""``fj.export``: a traced program as a plain C shared library, its header, its manifest
and its variables' values.

The program is traced as ``fj.function`` traces it, run through the pass pipeline,
planned as the llvm backend's one native function (``codegen_cpu.program``) on one
thread, and rendered with a C entry instead of the CPython ones
(``program_emit.render_c_library``): arguments and results are caller-owned C-contiguous
arrays, constants are read-only data of the library, matmuls call the CBLAS library the
JIT uses (NumPy's bundled OpenBLAS, else the system's) by symbol. The object is built for
an explicit CPU (``x86-64-v3`` by default, so the library runs on any x86-64 CPU of the
last decade; ``native`` for this machine's) and linked by the system C compiler.

Variables the program reads are extra arguments after the user's (the manifest names
them) and their values are saved in ``NAME.safetensors``; variables it updates come back
as extra results after the outputs. ``load_compiled`` passes and updates them itself.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import safetensors.numpy

from flowjit.passes.constant_fold import constant_fold
from flowjit.passes.decompose import decompose
from flowjit.passes.pipeline import DEFAULT_PIPELINE, Pipeline
from flowjit.runtime.collection import collection_deferred
from flowjit.runtime.dispatch import compile_function
from flowjit.runtime.executable import Executable
from flowjit.tracer.function import ShapeDtype, TracedFunction, function
from flowjit.version import __version__

from . import manifest as mf
from .manifest import AOTError

# The pieces a large loop is planned in when the library may use every CPU: the pool
# runs min(pieces, its threads) of them, so this caps the threads a library ever uses.
ALL_CPUS = 64


@dataclass(frozen=True)
class Exported:
    """The files of an exported program (``library`` is None when no C compiler was found)."""

    name: str
    library: Path | None
    header: Path
    manifest: Path
    object: Path
    weights: Path | None


# C's keywords (C11 and C23), which no name in a header may be.
C_KEYWORDS = frozenset("""auto bool break case char const constexpr continue default do double else enum extern
false float for goto if inline int long nullptr register restrict return short signed sizeof static static_assert
struct switch thread_local true typedef typeof union unsigned void volatile while""".split())


def _c_name(text: str, taken: set[str]) -> str:
    """A C identifier for ``text`` (a leaf path, a variable's name) not in ``taken``."""
    base = re.sub(r"\W", "_", text).strip("_") or "value"
    if base[0].isdigit():
        base = f"v_{base}"
    if base in C_KEYWORDS:
        base = f"{base}_"
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}_{n}"
    taken.add(name)
    return name


def _where(op: Any) -> str:
    lines = op.attrs.get("lines") if op.primitive.role == "kernel" else None
    return f" at {lines or op.loc or 'an unknown line'}"


def _not_native(function: Any, message: str, name: str) -> AOTError:
    """The planner's refusal as an error naming the op and the user's line."""
    word = message.split()[0] if message else ""
    op = next((o for o in function.walk() if word and word in (o.name, o.attrs.get("name"))), None)
    if op is None:  # the program as a whole: no step to run, a result that is an argument
        return AOTError(f"cannot compile {name} ahead of time: {message}; a C library returns values its "
                        "kernels and matmuls compute")
    return AOTError(f"cannot compile {name} ahead of time: op {op.name}{_where(op)} has no native form "
                    f"({message}); host callbacks, queues, random draws, gathers and data-dependent shapes "
                    "cannot run in a C library yet. Keep them outside the exported function")


def _target(cpu: str) -> tuple[Any, dict[str, Any]]:
    from flowjit.codegen_cpu import jit
    machine = platform.machine()
    choices = ["native", *(mf.X86_LEVELS if machine in ("x86_64", "AMD64") else [])]
    if cpu not in choices:
        raise AOTError(f"unknown --cpu {cpu!r}; on this {machine} machine choose one of {', '.join(choices)}")
    target = jit.host_target(None if cpu == "native" else cpu)
    return target, {"name": cpu if cpu != "native" else f"native ({target.cpu})", "llvm_cpu": target.cpu,
                    "triple": target.triple, "machine": machine, "required_flags": mf.required_flags(cpu)}


def _trace(f: Callable[..., Any], args: tuple, static: dict[str, Any]) -> tuple[Any, Any, list, dict[str, Any]]:
    tf = f if isinstance(f, TracedFunction) else function(f)
    if static and not set(static) <= tf.static_names:
        tf = function(tf.fun, static_argnames=sorted(tf.static_names | set(static)))
    kwargs = dict(static)
    if static and tf._sig is not None:
        # The example arrays are the parameters that are not static, in order, wherever
        # the static ones sit among them.
        names = [p.name for p in tf._sig.parameters.values() if p.name not in static
                 and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        kwargs.update(zip(names, args))
        args = args[len(names):]
    key, _, _, structure = tf._signature(args, kwargs)
    entry, _ = tf._lookup(args, kwargs)
    return tf, entry, structure, {k[0]: k[2] for k in key if k[1] == "static"}


def _plan(entry: Any, name: str, threads: int, sequential: bool = False) -> tuple[Any, Any, list[np.ndarray]]:
    from flowjit.codegen_cpu.program_plan import NotNative, plan_program
    # Planned for every size of a symbolic dimension (sequential), a mean's divisor stays an
    # element_count its kernel reads from the sizes it is given, not a literal of one size,
    # and an op that makes an array from its shape (take_along_axis's row offsets, an iota)
    # stays an op its kernel computes, not a folded array of one size.
    exe = compile_function(entry.function, backend="llvm", parallel=False,
                           passes={"fold_shapes": False} if sequential else None,
                           pipeline=SYMBOLIC_PIPELINE if sequential else DEFAULT_PIPELINE)
    if not isinstance(exe, Executable):
        raise AOTError(f"cannot compile {name} ahead of time: it is placed on several devices "
                       f"({type(exe).__name__}); remove its fj.device scopes")
    for kernel, why in exe.fallbacks.items():
        op = next((o for o in exe.function.walk() if o.attrs.get("name") == kernel), None)
        raise AOTError(f"cannot compile {name} ahead of time: kernel {kernel}"
                       f"{_where(op) if op is not None else ''} has no native form ({why})")
    for op in exe.function.walk():
        if op.primitive.role == "scalar_function":
            raise AOTError(f"cannot compile {name} ahead of time: op {op.name}{_where(op)} calls SciPy's C function "
                           f"of it (scipy.special.cython_special), which a C library cannot link; keep "
                           f"{op.name} outside the exported function, or run the function with fj.function")
    try:
        parts = threads or ALL_CPUS
        plan, constants = plan_program(exe.function, exe.lowered.kernels, parts > 1, parts, exe.lowered.blocks,
                                       sequential)
    except NotNative as e:
        raise _not_native(exe.function, str(e), name) from None
    return exe, plan, constants


# For every size of a symbolic dimension: no array made from one size of it (constant_fold),
# no decomposition whose row counts are not lines in it (decompose).
_SYMBOLIC_PASSES = {"constant_fold": functools.partial(constant_fold, fold_growing=False),
                    "decompose": functools.partial(decompose, fixed_sizes=False)}
SYMBOLIC_PIPELINE = Pipeline([(name, _SYMBOLIC_PASSES.get(name, fn)) for name, fn in DEFAULT_PIPELINE.passes])

# The sizes a symbolic dimension is traced at: multiples of 64, so every size and offset of
# the three plans is a multiple of the scratch alignment and lines fit them exactly.
SYMBOLIC_SAMPLES = (64, 128, 192)
# The sizes tried when those meet a dimension of the program itself: an MLP 64-128-10 traced
# at B = 128 has one size variable for B and its hidden width (equal there), so its kernel
# differs from the one traced at 64 although nothing in it depends on B.
SYMBOLIC_SAMPLES_AGAIN = (320, 448, 576)


def _symbol(example_args: tuple) -> str | None:
    """The one symbolic dimension's name among the example arguments' shapes, or None."""
    names = {d for a in example_args if isinstance(a, ShapeDtype) for d in a.shape if isinstance(d, str)}
    if len(names) > 1:
        raise AOTError(f"one symbolic dimension at a time: the arguments name {', '.join(sorted(names))}")
    return names.pop() if names else None


def _at(example_args: tuple, size: int) -> tuple:
    """The example arguments with every symbolic dimension ``size``."""
    return tuple(ShapeDtype([size if isinstance(d, str) else d for d in a.shape], a.dtype)
                 if isinstance(a, ShapeDtype) else a for a in example_args)


def _symbolic_plan(f: Callable[..., Any], example_args: tuple, static: dict[str, Any], symbol: str,
                   name: str) -> tuple[Any, Any, list[np.ndarray]]:
    """One plan for every size of ``symbol``: the program traced and planned at
    ``SYMBOLIC_SAMPLES`` (intermediates laid out one after another, no thread pool), and
    the plans unified (``program.unify_plans``); an AOTError names what changes with it
    otherwise."""
    from flowjit.codegen_cpu.program_plan import NotNative, unify_plans
    first: NotNative | None = None
    for samples in (SYMBOLIC_SAMPLES, SYMBOLIC_SAMPLES_AGAIN):
        planned = []
        for size in samples:
            _, entry, _, _ = _trace(f, _at(example_args, size), static)
            planned.append(_plan(entry, name, 1, sequential=True))
        try:
            plan = unify_plans([p for _, p, _ in planned], samples)
            break
        except NotNative as e:
            first = first or e
    else:
        raise AOTError(f"cannot compile {name} for any {symbol}: {first}") from None
    constants = planned[0][2]
    for _, _, other in planned[1:]:
        if len(other) != len(constants) or any(a.shape != b.shape or not np.array_equal(a, b)
                                               for a, b in zip(constants, other)):
            raise AOTError(f"cannot compile {name} for any {symbol}: a constant of the program changes with "
                           f"{symbol} (an array made from its size): make that dimension static")
    return planned[0][0], plan, constants


def _shape(shape: tuple, symbol: str | None, label: str) -> list:
    """A buffer's shape for the manifest: the symbolic dimension by its name."""
    from flowjit.codegen_cpu.program_plan import Affine
    out: list = []
    for d in shape:
        if isinstance(d, Affine):
            if (d.a, d.b) != (1, 0):
                raise AOTError(f"{label} has a dimension of {d!r} for symbolic {symbol}: only {symbol} itself "
                               "may be symbolic in an argument or result's shape")
            out.append(symbol)
        else:
            out.append(d)
    return out


def _blas(plan: Any) -> tuple[dict[str, str], int, str | None]:
    from flowjit.codegen_cpu.blas import blas_functions
    from flowjit.codegen_cpu.program_plan import Gemm, Lapack, walk_steps
    if not any(isinstance(s, Gemm | Lapack) for s in walk_steps(plan.steps)):
        return {}, 64, None
    found = blas_functions()
    if not found:
        raise AOTError("a matmul or a linear-algebra op needs a BLAS library and none was found: install NumPy 2 "
                       "(its wheels bundle OpenBLAS with LAPACK) or the system's (apt-get install "
                       "libopenblas-dev), or set FLOWJIT_BLAS")
    return {r: f.symbol for r, f in found.items()}, found["sgemm"].int_bits, found["sgemm"].library


# NumPy's wheels bundle their OpenBLAS (and its Fortran runtime) in this folder, each
# library finding the others beside it ($ORIGIN): a folder that travels as a whole.
BUNDLED_LIBRARY_DIR = "numpy.libs"


def _bundle_blas(blas_library: str, out: Path) -> tuple[str, str]:
    """The BLAS a library links and the rpath that finds it at run time. NumPy's bundled
    OpenBLAS is placed beside the library, in ``OUT/libs/`` (hard links where the file
    system allows, else copies), found through ``$ORIGIN/libs``: the output folder is
    relocatable, to another directory or machine. Any other BLAS (a system one, or
    ``FLOWJIT_BLAS``) is linked where it is, to be found there or by the system's loader."""
    source = os.path.dirname(blas_library)
    if os.path.basename(source) != BUNDLED_LIBRARY_DIR:
        return blas_library, source
    libs = out / "libs"
    libs.mkdir(exist_ok=True)
    for entry in sorted(os.listdir(source)):
        if ".so" not in entry:
            continue
        target = libs / entry
        if target.exists():
            target.unlink()
        try:
            os.link(os.path.join(source, entry), target)
        except OSError:  # another file system
            shutil.copy2(os.path.join(source, entry), target)
    return str(libs / os.path.basename(blas_library)), "$ORIGIN/libs"


def _compiler() -> list[str] | None:
    """The C compiler's command: ``CC`` (which may carry flags), else cc, gcc or clang;
    None when there is none."""
    env = shlex.split(os.environ.get("CC", ""))
    if env:
        return env if shutil.which(env[0]) else None
    found = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    return [found] if found else None


def export(f: Callable[..., Any], *example_args: Any, path: str | os.PathLike[str] = "build",
           name: str | None = None, cpu: str = "x86-64-v3", static: dict[str, Any] | None = None,
           threads: int = 0, freeze: bool = False) -> Exported:
    """Compile ``f`` (an ``fj.function`` or a plain function) for arguments like
    ``example_args`` (arrays, or ``fj.ShapeDtype`` for shapes alone) into ``path``:
    ``libNAME.so`` (C entry ``int32_t NAME(const NAME_args*, NAME_results*, void *scratch)``),
    ``NAME.h``, ``NAME.json`` (the manifest ``fj.load_compiled`` reads), ``NAME.o``, ``NAME.ir``
    (the traced program's IR text, which ``flowjit validate model`` interprets) and,
    when ``f`` reads Variables, ``NAME.safetensors``. ``cpu``: ``x86-64-v3`` (the default:
    portable to any x86-64 CPU with AVX2), another x86-64 level, or ``native``. ``static``:
    values of ``f``'s static parameters by name (compiled in; the library does not take
    them). ``threads``: the most threads a call runs its large loops on, 0 (the default)
    for every CPU of the machine it runs on (``FLOWJIT_NUM_THREADS`` caps them there), 1
    for the caller's thread alone (no thread pool in the library). ``freeze``: the values
    of the Variables ``f`` reads are compiled into the library (a C caller passes only
    the arguments; no safetensors file) instead of being extra arguments; refused for
    Variables ``f`` updates. A program
    with no native form raises AOTError naming the op and line before any file is written;
    with no C compiler the object, header and manifest are written and AOTError says what
    to install."""
    with collection_deferred():   # runtime.collection: the collector held back while it compiles
        return _export(f, *example_args, path=path, name=name, cpu=cpu, static=static, threads=threads,
                       freeze=freeze)


def _export(f: Callable[..., Any], *example_args: Any, path: str | os.PathLike[str] = "build",
            name: str | None = None, cpu: str = "x86-64-v3", static: dict[str, Any] | None = None,
            threads: int = 0, freeze: bool = False) -> Exported:
    from flowjit.codegen_cpu import jit
    from flowjit.codegen_cpu.program_emit import render_c_library
    from flowjit.codegen_cpu.program_plan import SCRATCH_ALIGN, Affine, links_pool
    target, cpu_entry = _target(cpu)
    tf, entry, structure, statics = _trace(f, _at(example_args, SYMBOLIC_SAMPLES[0]), dict(static or {}))
    name = name or re.sub(r"\W", "_", tf.__name__)
    if not re.fullmatch(r"[A-Za-z_]\w*", name) or name in C_KEYWORDS:
        raise AOTError(f"--name {name!r} is not a C identifier: use letters, digits and underscores, "
                       "not a C keyword")
    if threads < 0:
        raise AOTError(f"threads={threads}: give 0 (every CPU), 1 (no thread pool) or the most threads to use")
    if freeze and entry.assigned:
        updated = ", ".join(v.name for v in entry.assigned)
        raise AOTError(f"cannot freeze the Variables of {name}: it updates {updated}; export it without freeze "
                       "(its variables are then arguments and results)")
    symbol = _symbol(example_args)
    if symbol is None:
        exe, plan, constants = _plan(entry, name, threads)
    else:
        exe, plan, constants = _symbolic_plan(f, example_args, dict(static or {}), symbol, name)
    blas, int_bits, blas_library = _blas(plan)

    taken: set[str] = set()
    params, args = [], []
    n_user = len(exe.function.args) - len(entry.variables)
    leaf_names: list[str] = []
    for pname, tree, names in structure:
        if tree is None:
            params.append({"name": pname, "static": repr(statics[pname])})  # compiled in
            continue
        params.append({"name": pname, "tree": mf.tree_from_def(tree)})
        leaf_names += names
    var_names = [v.name for v in entry.variables]
    frozen = {i: np.ascontiguousarray(v._value) for i, v in enumerate(entry.variables, n_user)} if freeze else {}
    for i, a in enumerate(exe.function.args):
        var = i >= n_user
        if i in frozen:
            continue
        label = var_names[i - n_user] if var else leaf_names[i]
        args.append({"name": label, "c_name": _c_name(label, taken), "dtype": a.type.dtype.np.name,
                     "shape": _shape(plan.buffer(plan.args[i]).shape, symbol, label),
                     "kind": "variable" if var else "argument"})
    output_tree = mf.tree_from_def(entry.out_tree)
    out_paths = [re.sub(r"\['?([^'\]]*)'?\]", r".\1", p) for p in mf.leaf_paths(output_tree, "output")]
    n_out = len(out_paths)
    results = []
    for j, v in enumerate(exe.function.returns):
        if j < n_out:
            label, kind = out_paths[j], "output"
        else:
            label, kind = entry.assigned[j - n_out].name, "variable"
        c_name = _c_name(f"{label}_new" if kind == "variable" else label, taken)
        results.append({"name": label, "c_name": c_name, "dtype": v.type.dtype.np.name,
                        "shape": _shape(plan.buffer(plan.results[j]).shape, symbol, label), "kind": kind})
    ir_hash = hashlib.sha256(f"{exe.function}\n{plan!r}".encode()).hexdigest()
    manifest: dict[str, Any] = {
        "format": mf.FORMAT, "name": name, "entry": name, "library": f"lib{name}.so", "header": f"{name}.h",
        "flowjit_version": __version__, "ir_hash": ir_hash, "cpu": cpu_entry,
        "params": params, "args": args, "results": results, "output_tree": output_tree,
        "variables": {"file": f"{name}.safetensors", "names": var_names} if var_names and not freeze else None,
        "frozen": {"names": var_names, "sha256": hashlib.sha256(b"".join(v.tobytes() for v in frozen.values()))
                   .hexdigest()} if frozen else None,
        "symbolic": symbol,
        "scratch_bytes": ({"per": plan.scratch_bytes.a, "base": plan.scratch_bytes.b}
                          if isinstance(plan.scratch_bytes, Affine) else plan.scratch_bytes),
        "scratch_align": SCRATCH_ALIGN, "threads": 1 if symbol else threads,
        "pool": links_pool(plan),
        "blas": {"library": blas_library, "symbols": blas, "int_bits": int_bits} if blas else None,
    }
    manifest["digest"] = mf.digest(manifest)
    # The traced program's IR, kept beside the library so `flowjit validate model` can run
    # flowjit's interpreter on it (outside the digest, as the library's own hash is).
    ir_text = str(entry.function)
    manifest["ir"] = {"file": f"{name}.ir", "sha256": hashlib.sha256(ir_text.encode()).hexdigest(),
                      "batch": SYMBOLIC_SAMPLES[0] if symbol else None,
                      "frozen_values": f"{name}.ir.safetensors" if frozen else None}
    text = render_c_library(plan, constants, name, blas, int_bits, manifest["digest"], frozen,
                            symbolic=symbol is not None, native_ldexp=target.native_ldexp(),
                            native_fma=target.native_fma(), clear_upper=target.has_avx())
    obj = jit.compile_object(text, target, name)

    # Every check passed: now the files.
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    obj_path, header, man_path = out / f"{name}.o", out / f"{name}.h", out / f"{name}.json"
    obj_path.write_bytes(obj)
    header.write_text(render_header(manifest))
    (out / manifest["ir"]["file"]).write_text(ir_text)
    if frozen:  # the interpreter needs the values the library has compiled in
        safetensors.numpy.save_file({n: v for n, v in zip(var_names, frozen.values())},
                                    str(out / manifest["ir"]["frozen_values"]))
    weights = None
    if manifest["variables"]:
        weights = out / f"{name}.safetensors"
        safetensors.numpy.save_file({v.name: np.ascontiguousarray(v._value) for v in entry.variables},
                                    str(weights), metadata={"digest": manifest["digest"]})
    library = out / f"lib{name}.so"
    cc = _compiler()
    error = None
    if cc is None:
        error = AOTError(f"no C compiler found to link {library}"
                         f"{' (CC=' + os.environ['CC'] + ' is not a program)' if os.environ.get('CC') else ''}: "
                         f"install one (apt-get install gcc, or clang) or set CC; {obj_path}, {header} and "
                         f"{man_path} are written, link them with `cc -shared -o {library} {obj_path} -lm`")
    else:
        command = [*cc, "-shared", "-o", str(library), str(obj_path)]
        if blas_library:
            linked, rpath = _bundle_blas(blas_library, out)
            command += [linked, f"-Wl,-rpath,{rpath}"]
        command += ["-lm", *(["-pthread"] if manifest["pool"] else [])]  # before glibc 2.34 pthread is apart
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            error = AOTError(f"linking {library} failed ({' '.join(command)}): {done.stderr.strip()[:2000]}")
    manifest["library_sha256"] = (hashlib.sha256(library.read_bytes()).hexdigest()
                                  if error is None else None)
    man_path.write_text(json.dumps(manifest, indent=2) + "\n")
    if error is not None:
        raise error
    return Exported(name, library, header, man_path, obj_path, weights)


def render_header(manifest: dict[str, Any]) -> str:
    """The C header of an exported program (see the module docstring of flowjit.aot)."""
    from flowjit.codegen_cpu.program_emit import C_ERR_ALIGN, C_ERR_NOMEM, C_ERR_NULL, C_ERR_SIZE, C_OK
    name = manifest["name"]
    up = name.upper()
    symbol = manifest.get("symbolic")
    tail = f", int64_t {symbol}" if symbol else ""
    scratch = manifest["scratch_bytes"]
    lines = [
        f"/* {name}.h: the C interface of lib{name}.so, generated by flowjit {manifest['flowjit_version']}",
        " * (`flowjit compile` / fj.export); do not edit.",
        " *",
        f" * int32_t {name}(const {name}_args *in, {name}_results *out, void *scratch{tail});",
        " *   in:  a pointer per argument, each to a C-contiguous array of the shape and type below;",
        " *   out: a pointer per result, each to caller-allocated memory of the shape and type below;",
        f" *   scratch: {up}_SCRATCH_BYTES{f'({symbol})' if symbol else ''} bytes aligned to {up}_SCRATCH_ALIGN, "
        "or NULL (the call then",
        " *     allocates and frees its own). A thread may pass its own scratch to every call it makes.",
        *([f" *   {symbol}: the size of the symbolic dimension {symbol} of the shapes below, at least 0."]
          if symbol else []),
        f" *   returns {up}_OK, or an error code (nothing useful is written then).",
        " * The entry point keeps no state between calls: threads may call it at once, each with its",
        " * own out arrays and scratch.",
    ]
    if manifest["pool"]:
        most = "every CPU" if not manifest["threads"] else f"at most {manifest['threads']} threads"
        lines += [f" * Large loops run on {most} (FLOWJIT_NUM_THREADS caps them): the library's own thread pool",
                  " * starts on the first call; while it runs one call's loop, other calls run theirs on",
                  " * their own thread."]
    if manifest["frozen"]:
        lines.append(f" * The values of Variables {', '.join(manifest['frozen']['names'])} are compiled in.")
    if manifest["variables"]:
        lines.append(f" * Variables are arguments too: their trained values are in {manifest['variables']['file']}"
                     " (safetensors, by the names below).")
    lines += [" */", f"#ifndef FLOWJIT_{up}_H", f"#define FLOWJIT_{up}_H", "", "#include <stddef.h>",
              "#include <stdint.h>", "", "#ifdef __cplusplus", 'extern "C" {', "#endif", "",
              f'#define {up}_FLOWJIT_VERSION "{manifest["flowjit_version"]}"',
              f'#define {up}_IR_HASH "{manifest["ir_hash"]}"',
              f'#define {up}_DIGEST "{manifest["digest"]}"',
              f'#define {up}_CPU "{manifest["cpu"]["name"]}"',
              (f"#define {up}_SCRATCH_BYTES({symbol}) ((size_t)({scratch['per']} * (int64_t)({symbol}) + "
               f"{scratch['base']}))" if isinstance(scratch, dict) else
               f"#define {up}_SCRATCH_BYTES{f'({symbol})' if symbol else ''} {scratch}"),
              f"#define {up}_SCRATCH_ALIGN {manifest['scratch_align']}",
              "", "/* return codes */", f"#define {up}_OK {C_OK}",
              f"#define {up}_ERR_NOMEM {C_ERR_NOMEM}  /* the scratch or a kernel's temporary memory could not "
              "be allocated */",
              f"#define {up}_ERR_ALIGN {C_ERR_ALIGN}  /* scratch is not aligned to {up}_SCRATCH_ALIGN bytes */",
              f"#define {up}_ERR_NULL {C_ERR_NULL}   /* in, out or one of their pointers is NULL */",
              *([f"#define {up}_ERR_SIZE {C_ERR_SIZE}   /* {symbol} is negative */"] if symbol else []),
              "", f"#define {up}_NUM_ARGS {len(manifest['args'])}",
              f"#define {up}_NUM_RESULTS {len(manifest['results'])}", ""]

    def describe(entry: dict[str, Any], role: str) -> list[str]:
        c = f"{up}_{entry['c_name'].upper()}"
        shape = entry["shape"]
        fixed = int(np.prod([d for d in shape if not isinstance(d, str)], dtype=np.int64))
        size = (f"#define {c}_SIZE({symbol}) ((int64_t)({symbol}) * {fixed})  /* elements */" if symbol in shape
                else f"#define {c}_SIZE {fixed}  /* elements */")
        dims = ", ".join("-1" if isinstance(d, str) else str(d) for d in shape) or "0"
        return [f"/* {role} {entry['name']}: {mf.spec_text(entry['dtype'], shape)}"
                f"{f' (-1 in the shape: {symbol})' if symbol in shape else ''} */",
                f"#define {c}_NDIM {len(shape)}", size, f'#define {c}_DTYPE "{entry["dtype"]}"',
                f"static const int64_t {name}_{entry['c_name']}_shape[{max(len(shape), 1)}] = {{{dims}}};"]
    for a in manifest["args"]:
        lines += describe(a, "variable (argument)" if a["kind"] == "variable" else "argument")
    for r in manifest["results"]:
        lines += describe(r, "updated variable (result)" if r["kind"] == "variable" else "result")
    lines += [""]
    if any(e["dtype"].startswith("complex") for e in (*manifest["args"], *manifest["results"])):
        lines += mf.C_COMPLEX_TYPEDEFS
    lines += ["typedef struct {"]
    lines += [f"    const {mf.C_TYPES[a['dtype']]} *{a['c_name']};" for a in manifest["args"]] or ["    void *unused;"]
    lines += [f"}} {name}_args;", "", "typedef struct {"]
    lines += [f"    {mf.C_TYPES[r['dtype']]} *{r['c_name']};" for r in manifest["results"]]
    lines += [f"}} {name}_results;", "",
              f"int32_t {name}(const {name}_args *in, {name}_results *out, void *scratch{tail});",
              f"extern const char {name}_digest[];  /* == {up}_DIGEST: the header matches the library */",
              "", "#ifdef __cplusplus", "}", "#endif", "", f"#endif  /* FLOWJIT_{up}_H */", ""]
    return "\n".join(lines)
