"""What an AOT library's manifest (``NAME.json``) holds and how it is checked, shared by
``export`` (which writes it) and ``load_compiled`` (which reads it with the standard
library and NumPy only: no tracer, no compiler).

The manifest's ``digest`` is the SHA-256 of its content (every key but ``digest``,
``library_sha256`` and ``ir`` (the IR text file beside the library and its hash), as
canonical JSON); the library exports the same string as
``NAME_digest``, so a manifest edited after the build (a shape, a dtype, the CPU) no
longer matches the library it describes. Pytrees are stored as JSON nodes
(``{"kind": "leaf"}``, ``{"kind": "tuple"|"list", "children": [...]}``, ``{"kind":
"dict", "keys": [...], "children": [...]}``, ``{"kind": "namedtuple", "name": ...,
"fields": [...], "children": [...]}``, ``{"kind": "none"}``).
"""

from __future__ import annotations

import collections
import hashlib
import json
import platform
import re
from typing import Any

import numpy as np

from flowjit.ir.errors import FlowjitError

FORMAT = "flowjit-aot-1"

# The C type of each dtype's elements in memory (bool is one byte).
C_TYPES = {"float16": "uint16_t", "float32": "float", "float64": "double", "bool": "uint8_t",
           "complex64": "flowjit_complex64_t", "complex128": "flowjit_complex128_t",
           **{f"{sign}int{bits}": f"{sign}int{bits}_t" for sign in ("", "u") for bits in (8, 16, 32, 64)}}
# A complex element in a header: the layout of C's float _Complex and C++'s std::complex<float>
# (real part first), as a struct, which both languages accept.
C_COMPLEX_TYPEDEFS = ["#ifndef FLOWJIT_COMPLEX_TYPES", "#define FLOWJIT_COMPLEX_TYPES",
                      "typedef struct { float re, im; } flowjit_complex64_t;",
                      "typedef struct { double re, im; } flowjit_complex128_t;", "#endif", ""]

# /proc/cpuinfo flags each x86-64 level needs (the psABI's micro-architecture levels).
_X86_BASE = ["cmov", "cx8", "fpu", "fxsr", "mmx", "sse", "sse2"]
_X86_V2 = _X86_BASE + ["cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3"]
_X86_V3 = _X86_V2 + ["abm", "avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "movbe", "xsave"]
_X86_V4 = _X86_V3 + ["avx512bw", "avx512cd", "avx512dq", "avx512f", "avx512vl"]
X86_LEVELS = {"x86-64": _X86_BASE, "x86-64-v2": _X86_V2, "x86-64-v3": _X86_V3, "x86-64-v4": _X86_V4}
# Flags of instruction sets a compiler may use for the host CPU (``--cpu native``).
_ISA_FLAG = re.compile(r"^(sse\w*|ssse3|pni|avx\w*|fma\w*|bmi\w*|f16c|abm|movbe|popcnt|cx16|lahf_lm|xsave\w*|adx|"
                       r"sha_ni|aes|pclmulqdq|vaes|vpclmulqdq|gfni|amx\w*|asimd\w*|sve\w*|fp|fphp)$")


class AOTError(FlowjitError):
    """An ahead-of-time build or load failed: the message says what and how to fix it."""


def digest(manifest: dict[str, Any]) -> str:
    """The SHA-256 of ``manifest``'s content (all but ``digest``, ``library_sha256`` and ``ir``)."""
    content = {k: v for k, v in manifest.items() if k not in ("digest", "library_sha256", "ir")}
    return hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def host_flags() -> set[str]:
    """This machine's CPU feature flags (the first CPU's ``flags`` or ``Features`` line of
    /proc/cpuinfo); empty where there is no such file."""
    try:
        with open("/proc/cpuinfo") as f:
            first = f.read(1 << 16).split("\n\n")[0]
    except OSError:
        return set()
    for line in first.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("flags", "features"):
            return set(value.split())
    return set()


def required_flags(cpu: str) -> list[str]:
    """The CPU flags code built for ``cpu`` needs: an x86-64 level's, or for ``native``
    every instruction-set flag of this machine."""
    if cpu in X86_LEVELS:
        return list(X86_LEVELS[cpu])
    return sorted(f for f in host_flags() if _ISA_FLAG.match(f))


def check_cpu(target: dict[str, Any], where: str) -> None:
    """Raise AOTError unless this machine can run code built for ``target`` (the
    manifest's ``cpu`` entry): the same machine architecture and every required flag."""
    machine = platform.machine()
    if target.get("machine") != machine:
        raise AOTError(f"{where} was built for a {target.get('machine')} CPU ({target.get('name')}); this machine "
                       f"is {machine}: rebuild it here with `flowjit compile ... --cpu x86-64-v3` (or native)")
    have = host_flags()
    missing = [f for f in target.get("required_flags", []) if f not in have]
    if have and missing:
        raise AOTError(f"{where} was built for CPU {target.get('name')}, which has {', '.join(missing)}; this "
                       f"CPU does not: rebuild it with `flowjit compile ... --cpu x86-64-v3` or `--cpu native` "
                       f"on this machine")


# ---- pytrees as JSON -------------------------------------------------------------------------

def tree_from_def(tree: Any) -> dict[str, Any]:
    """A flowjit ``TreeDef`` (``flowjit.tracer.pytree``) as a JSON node."""
    kids = [tree_from_def(c) for c in tree.children]
    if tree.kind in ("leaf", "none"):
        return {"kind": tree.kind}
    if tree.kind in ("tuple", "list"):
        return {"kind": tree.kind, "children": kids}
    if tree.kind == "dict":
        return {"kind": "dict", "keys": [str(k) for k in tree.meta], "children": kids}
    return {"kind": "namedtuple", "name": tree.meta.__name__, "fields": list(tree.meta._fields), "children": kids}


def num_leaves(node: dict[str, Any]) -> int:
    """The leaves of a JSON pytree node."""
    if node["kind"] == "leaf":
        return 1
    return sum(num_leaves(c) for c in node.get("children", []))


def leaf_paths(node: dict[str, Any], path: str) -> list[str]:
    """The path of each leaf of a JSON pytree node, as ``flatten_with_paths`` names them
    (``output[0]``, ``output['loss']``)."""
    kind = node["kind"]
    if kind == "leaf":
        return [path]
    if kind == "dict":
        return [p for k, c in zip(node["keys"], node["children"]) for p in leaf_paths(c, f"{path}[{k!r}]")]
    if kind == "namedtuple":
        return [p for f, c in zip(node["fields"], node["children"]) for p in leaf_paths(c, f"{path}.{f}")]
    return [p for i, c in enumerate(node.get("children", [])) for p in leaf_paths(c, f"{path}[{i}]")]


def flatten(node: dict[str, Any], value: Any, path: str) -> list[Any]:
    """The leaves of ``value`` laid out as ``node`` says; TypeError naming ``path`` where
    its structure differs."""
    kind = node["kind"]
    if kind == "leaf":
        return [value]
    if kind == "none":
        if value is not None:
            raise TypeError(f"{path} must be None, got {type(value).__name__}")
        return []
    kids = node["children"]
    if kind == "dict":
        if not isinstance(value, dict) or sorted(map(str, value)) != node["keys"]:
            got = sorted(map(str, value)) if isinstance(value, dict) else type(value).__name__
            raise TypeError(f"{path} must be a dict with keys {node['keys']}, got {got}")
        by_key = {str(k): v for k, v in value.items()}
        return [x for k, c in zip(node["keys"], kids) for x in flatten(c, by_key[k], f"{path}[{k!r}]")]
    if not isinstance(value, (tuple, list)) or len(value) != len(kids):
        raise TypeError(f"{path} must be a {kind} of {len(kids)} items, got {type(value).__name__}"
                        f"{f' of {len(value)}' if isinstance(value, (tuple, list)) else ''}")
    return [x for i, (c, v) in enumerate(zip(kids, value)) for x in flatten(c, v, f"{path}[{i}]")]


def unflatten(node: dict[str, Any], leaves: list[Any]) -> Any:
    """The pytree of ``node`` with ``leaves`` in order."""
    it = iter(leaves)

    def build(n: dict[str, Any]) -> Any:
        kind = n["kind"]
        if kind == "leaf":
            return next(it)
        if kind == "none":
            return None
        kids = [build(c) for c in n["children"]]
        if kind == "dict":
            return dict(zip(n["keys"], kids))
        if kind == "list":
            return kids
        if kind == "namedtuple":
            return _namedtuple(n["name"], tuple(n["fields"]))(*kids)
        return tuple(kids)
    return build(node)


_namedtuples: dict[tuple[str, tuple[str, ...]], type] = {}


def _namedtuple(name: str, fields: tuple[str, ...]) -> type:
    # The user's class is not importable here: a namedtuple of the same name and fields.
    found = _namedtuples.get((name, fields))
    if found is None:
        found = _namedtuples[(name, fields)] = collections.namedtuple(name, fields)  # type: ignore[misc]
    return found


def spec_text(dtype: str, shape: Any) -> str:
    """``float32[8,64]``: a dtype and shape as errors and the header show them."""
    return f"{np.dtype(dtype).name}[{','.join(map(str, shape))}]"
