"""The ``flowjit`` command line: ``flowjit ir FILE.py:FUNC --arg f32[2,3] ...``,
``flowjit compile FILE.py:FUNC --arg f32[8,64] -o build/`` and
``flowjit explain FILE.py:FUNC --arg f32[4096,1024] [--run]``.

``ir`` traces a function of a Python file for abstract arguments and prints its IR as
text (parseable back) or JSON, at any pipeline stage; ``--stage loops`` prints every
kernel of the fused program as loop IR (flowjit.lowering), ``--stage kernels`` every
kernel's loop IR and the driver (the native program's plan). ``compile`` builds the function ahead of time
into a C shared library with its header and manifest (``flowjit.aot``). ``explain``
prints the program's kernels, what each moves and how long the machine's bounds say it
takes, and why fusion stopped where it did (``flowjit.explain``).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from flowjit.aot import AOTError, export
from flowjit.explain import explain
from flowjit.explain.core import _concrete
from flowjit.ir.dot import GraphvizMissing, to_dot, to_svg
from flowjit.ir.errors import FlowjitError, ParseError
from flowjit.ir.json_form import function_to_json
from flowjit.ir.parser import parse_type
from flowjit.runtime.executable import STAGES
from flowjit.runtime.profiler import profile
from flowjit.serving.cli import add_commands as add_serving_commands
from flowjit.tracer.function import IR_STAGES, ShapeDtype, TracedFunction, function
from flowjit.validate.cli import add_commands as add_validate_commands


def load_function(target: str) -> TracedFunction:
    """Import ``path/to/file.py:func`` and return it as an fj.function."""
    path, sep, name = target.rpartition(":")
    if not sep or not path or not name:
        raise SystemExit(f"flowjit: expected FILE.py:FUNCTION, got {target!r}")
    if not os.path.isfile(path):
        raise SystemExit(f"flowjit: no such file: {path}")
    directory = os.path.dirname(os.path.abspath(path))
    sys.path.insert(0, directory)
    try:
        mod_name = "_flowjit_cli_" + os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(mod_name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(directory)
    fn = getattr(module, name, None)
    if fn is None:
        raise SystemExit(f"flowjit: {path} has no function {name!r}")
    return fn if isinstance(fn, TracedFunction) else function(fn)


def parse_arg(text: str) -> ShapeDtype:
    """``f32[2,3]`` -> ShapeDtype((2, 3), float32)."""
    try:
        t = parse_type(text)
    except ParseError as e:
        raise SystemExit(f"flowjit: bad --arg {text!r}: {e.message} (expected e.g. f32[2,3] or i32[])") from None
    return ShapeDtype(t.shape, t.dtype)


def _function_and_args(ns: argparse.Namespace, command: str, options: str, example: str) -> tuple[Any, list]:
    """The function ``ns.target`` names and its ``--arg`` types, or one usage line (exit 2)
    naming the parameters when the target is not a function or the count is wrong."""
    try:
        fn = load_function(ns.target)
    except FlowjitError as e:  # the name is not a function
        ns.parser.error(f"{ns.target}: {e}; expected FILE.py:FUNCTION naming a function")
    arity = _arity(fn)
    params = [p for p in fn._sig.parameters if p not in fn.static_names] if fn._sig is not None else []
    listed = f" ({', '.join(params)})" if params else ""
    usage = (f"flowjit {command} {ns.target} {' '.join(['--arg TYPE'] * (arity or 1))} {options} (one TYPE per "
             f"parameter{listed}, such as {example})")
    args = [_explain_arg(ns, text, usage) for text in ns.arg]
    if arity is not None and len(args) != arity:
        ns.parser.error(f"{ns.target.rpartition(':')[2]} takes {arity} argument(s), got {len(args)} --arg; "
                        f"expected: {usage}")
    return fn, args


def cmd_ir(ns: argparse.Namespace) -> int:
    fn, args = _function_and_args(ns, "ir", "[--stage STAGE]", "f32[2,3] or i32[]")
    try:
        if ns.stage in ("kernels", "loops") and ns.format != "text":
            raise SystemExit(f"flowjit: --stage {ns.stage} prints text only; use --format text")
        if ns.stage == "kernels":
            sys.stdout.write(fn.kernels(*args))
            return 0
        ir = fn.ir(*args, stage=ns.stage)
    except FlowjitError as e:
        print(f"flowjit: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if ns.format == "json":
        print(json.dumps(function_to_json(ir), indent=2))
    elif ns.format in ("dot", "svg"):
        try:
            sys.stdout.write(to_dot(ir) if ns.format == "dot" else to_svg(ir))
        except GraphvizMissing as e:
            print(f"flowjit: {e}", file=sys.stderr)
            return 1
    else:
        sys.stdout.write(str(ir))
    return 0


def cmd_compile(ns: argparse.Namespace) -> int:
    fn = load_function(ns.target)
    func = ns.target.rpartition(":")[2]
    static = {}
    for text in ns.static:
        key, sep, value = text.partition("=")
        if not sep or not key.isidentifier():
            ns.parser.error(f"bad --static {text!r}: expected NAME=VALUE, such as --static n=4 or --static mode=train")
        try:
            static[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            static[key] = value  # a bare word is a string
    if static:
        if fn._sig is None or not set(static) <= set(fn._sig.parameters):
            ns.parser.error(f"--static {', '.join(static)}: {func} has no such parameter")
        fn = function(fn.fun, static_argnames=sorted(fn.static_names | set(static)))
    arity = _arity(fn)
    names = ", ".join(p for p in fn._sig.parameters if p not in fn.static_names) if fn._sig is not None else ""
    usage = (f"flowjit compile {ns.target} {' '.join(['--arg TYPE'] * (arity or 1))} -o build/ "
             f"(one TYPE per parameter{f' ({names})' if names else ''}, such as f32[8,64] or i32[8])")
    args = []
    for text in ns.arg:
        # A dimension may be a name (f32[B,784]): the library takes it at run time.
        head, bracket, dims = text.partition("[")
        bracket = bracket if text.endswith("]") else ""  # malformed: parse_type says why
        dim_texts = [d.strip() for d in dims[:-1].split(",")] if bracket else []
        symbolic = {i: d for i, d in enumerate(dim_texts) if d.isidentifier()}
        concrete = (f"{head}[{','.join('1' if i in symbolic else d for i, d in enumerate(dim_texts))}]"
                    if bracket else text)
        try:
            t = parse_type(concrete)
        except ParseError as e:
            ns.parser.error(f"bad --arg {text!r}: {e.message}; a type is a dtype (f16 f32 f64 i8 i16 i32 "
                            f"i64 u8 u16 u32 u64 bool) and a shape, such as f32[8,64], f32[B,64] (B given at run "
                            f"time), i32[8] or f32[]; expected: {usage}")
        args.append(ShapeDtype([symbolic.get(i, d) for i, d in enumerate(t.shape)], t.dtype))
    if arity is not None and len(args) != arity:
        ns.parser.error(f"{func} takes {arity} argument(s) ({names}), got {len(args)} --arg; expected: {usage}")
    try:
        done = export(fn, *args, path=ns.output, name=ns.name, cpu=ns.cpu, static=static,
                      threads=ns.threads, freeze=ns.freeze)
    except (AOTError, FlowjitError) as e:
        print(f"flowjit compile: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    for path in (done.library, done.header, done.manifest, done.weights):
        if path is not None:
            print(f"wrote {path}")
    return 0


def cmd_explain(ns: argparse.Namespace) -> int:
    fn, args = _function_and_args(ns, "explain", "[--run]", "f32[4096,1024] or i32[256]")
    if ns.format == "svg":  # the program at that stage as a picture
        try:
            sys.stdout.write(to_svg(fn.ir(*args, stage=ns.stage)))
        except (GraphvizMissing, FlowjitError) as e:
            print(f"flowjit explain: {e}", file=sys.stderr)
            return 1
        return 0
    try:
        found = explain(fn, *args, run=ns.run, stage=ns.stage)
    except FlowjitError as e:
        print(f"flowjit explain: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if ns.format == "json":
        print(json.dumps(found.to_json(), indent=2))
    else:
        sys.stdout.write(str(found))
    if ns.trace:
        _trace_runs(fn, args, ns.trace)
        print(f"wrote {ns.trace}: open it in https://ui.perfetto.dev or chrome://tracing", file=sys.stderr)
    return 0


def _trace_runs(fn: TracedFunction, args: list[ShapeDtype], path: str, calls: int = 5) -> None:
    """Run ``fn`` ``calls`` times on arrays of ``args``' types (as ``explain --run`` makes
    them) under ``fj.profile(path)``, after a call that compiles the program and its
    profiling build: the trace shows the steady state."""
    arrays = [_concrete(a) for a in args]
    with profile():
        fn(*arrays)
    with profile(path):
        for _ in range(calls):
            fn(*arrays)


def _explain_arg(ns: argparse.Namespace, text: str, usage: str) -> ShapeDtype:
    try:
        t = parse_type(text)
    except ParseError as e:
        ns.parser.error(f"bad --arg {text!r}: {e.message}; expected: {usage}")
    return ShapeDtype(t.shape, t.dtype)


def _arity(fn: TracedFunction) -> int | None:
    """How many positional arrays ``fn`` takes (None when its signature is unknown or
    takes *args)."""
    if fn._sig is None:
        return None
    params = [p for p in fn._sig.parameters.values() if p.name not in fn.static_names]
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return None
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty for p in params)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``flowjit`` command."""
    parser = argparse.ArgumentParser(prog="flowjit", description="Inspect and compile flowjit programs.")
    sub = parser.add_subparsers(dest="command", required=True)
    p_ir = sub.add_parser("ir", help="print the IR of a function for given argument types")
    p_ir.add_argument("target", help="path/to/file.py:function")
    p_ir.add_argument("--arg", action="append", default=[], metavar="TYPE",
                      help="an argument type such as f32[2,3] or i32[] (repeat per argument)")
    p_ir.add_argument("--stage", default="traced", choices=(*IR_STAGES, "kernels"),
                      help="pipeline stage to show; 'loops': each kernel as loop IR; "
                           "'kernels': each kernel's loop IR and the driver (the native program's plan)")
    p_ir.add_argument("--format", default="text", choices=("text", "json", "dot", "svg"),
                      help="text or JSON IR, or the graph as Graphviz DOT or SVG (fusions and control "
                           "blocks as clusters, devices as colours; svg needs Graphviz's dot)")
    p_ir.set_defaults(func=cmd_ir, parser=p_ir)
    p_c = sub.add_parser("compile", help="compile a function ahead of time into a C shared library",
                         description="Trace FILE.py:FUNCTION for the given argument types and build "
                                     "OUTPUT/libNAME.so, NAME.h (the C interface), NAME.json (the manifest "
                                     "fj.load_compiled reads) and, for Variables, NAME.safetensors.")
    p_c.add_argument("target", help="path/to/file.py:function")
    p_c.add_argument("--arg", action="append", default=[], metavar="TYPE",
                     help="an argument type such as f32[8,64] or i32[8] (repeat per argument)")
    p_c.add_argument("--static", action="append", default=[], metavar="NAME=VALUE",
                     help="the value of a static parameter, compiled in (a Python literal or a word)")
    p_c.add_argument("-o", "--output", default="build", help="the directory to write (default: build)")
    p_c.add_argument("--name", default=None, help="the library's name (default: the function's)")
    p_c.add_argument("--cpu", default="x86-64-v3",
                     help="the CPU to compile for: x86-64-v3 (default: any x86-64 CPU with AVX2), "
                          "x86-64, x86-64-v2, x86-64-v4, or native (this machine's)")
    p_c.add_argument("--threads", type=int, default=0,
                     help="the most threads a call runs its large loops on: 0 (default) every CPU of the "
                          "machine it runs on, 1 none but the caller's (no thread pool in the library)")
    p_c.add_argument("--freeze", action="store_true",
                     help="compile the values of the Variables the function reads into the library, so a C "
                          "caller passes only the arguments (default: they are arguments, saved in NAME.safetensors)")
    p_c.set_defaults(func=cmd_compile, parser=p_c)
    p_e = sub.add_parser("explain", help="the kernels of a function, the bytes and time of each, and why fusion "
                                         "stopped where it did",
                         description="Trace FILE.py:FUNCTION for the given argument types and print its kernels in "
                                     "execution order (ops, lines, bytes read and written, FLOPs, the machine bound "
                                     "and the time it predicts; with --run the measured median and the fraction of "
                                     "the bound), then every fusion boundary with the reason the fusion pass recorded.")
    p_e.add_argument("target", help="path/to/file.py:function")
    p_e.add_argument("--arg", action="append", default=[], metavar="TYPE",
                     help="an argument type such as f32[4096,1024] or i32[256] (repeat per argument)")
    p_e.add_argument("--run", action="store_true",
                     help="also run each kernel on random arguments and report its median time")
    p_e.add_argument("--format", default="text", choices=("text", "json", "svg"),
                     help="a text table, JSON, or the program as an SVG picture (Graphviz's dot)")
    p_e.add_argument("--trace", metavar="PATH",
                     help="also run the function 5 times under fj.profile and write the timeline to PATH "
                          "(Chrome's trace-event JSON: Perfetto, chrome://tracing)")
    p_e.add_argument("--stage", default="fused", choices=STAGES,
                     help="the pipeline stage to explain (default: fused; earlier stages list each op alone)")
    p_e.set_defaults(func=cmd_explain, parser=p_e)
    add_serving_commands(sub)
    add_validate_commands(sub)
    ns = parser.parse_args(argv)
    return ns.func(ns)


if __name__ == "__main__":
    sys.exit(main())
