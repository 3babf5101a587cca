"""The loop-IR verifier: a kernel every renderer may trust."""

from __future__ import annotations

from flowjit.lowering.loops import (
    INDEX,
    Accumulator,
    AccValue,
    Const,
    Expr,
    If,
    Kernel,
    Let,
    Load,
    Loop,
    Prim,
    Store,
    Update,
    Var,
)
from flowjit.lowering.scalar import ACCUMULATOR_KINDS, OPS, kind_of, result_dtype


class LoopIRError(Exception):
    """A malformed loop-IR kernel; the message names the kernel and the statement."""


def verify_kernel(k: Kernel) -> None:
    """Check ``k``: every variable and accumulator defined before use and visible where
    used, loads only from inputs and stores only to outputs with one int64 index per
    dimension, loop bounds int64, each op's operand count and dtypes as ``scalar.OPS``
    declares, stores and updates of matching dtypes. Raises LoopIRError naming the kernel."""
    _Verifier(k).run()


class _Verifier:
    def __init__(self, k: Kernel):
        self.k = k
        self.buffers = {b.name: b for b in k.buffers}
        if len(self.buffers) != len(k.buffers):
            self.fail("two buffers share a name")

    def fail(self, msg: str, where: object = None) -> None:
        at = f" in {where!r}" if where is not None else ""
        raise LoopIRError(f"kernel {self.k.name}: {msg}{at}")

    def run(self) -> None:
        scope: dict = {}
        for s in self.k.sizes:
            b = self.buffers.get(s.buffer)
            if b is None or not 0 <= s.dim < b.rank:
                self.fail(f"size {s.name} reads dimension {s.dim} of {s.buffer}, which it lacks")
            scope[s.name] = INDEX
        for b in self.k.buffers:
            if b.role not in ("in", "out", "temp"):
                self.fail(f"buffer {b.name} has role {b.role!r}, not in, out or temp")
            if b.role == "temp" and len(b.shape) != b.rank:
                self.fail(f"temp {b.name} of rank {b.rank} has {len(b.shape)} sizes")
            for n in b.shape:
                if self.expr(n, scope, {}, b.name) != INDEX:
                    self.fail(f"a size of temp {b.name} is not int64")
        if self.k.in_place and len(self.k.in_place) != len(self.k.outputs):
            self.fail("in_place needs one entry per output")
        for o, names in zip(self.k.outputs, self.k.in_place):
            for name in names:
                b = self.buffers.get(name)
                if b is None or b.role != "in" or (b.dtype, b.rank) != (o.dtype, o.rank):
                    self.fail(f"{o.name} may not overwrite {name}: not an input of its dtype and rank")
        self.block(self.k.body, scope, {})

    def block(self, body: tuple, vars_: dict, accs: dict) -> None:
        vars_, accs = dict(vars_), dict(accs)
        for s in body:
            if isinstance(s, Loop):
                for e in (s.start, s.stop):
                    if self.expr(e, vars_, accs, s) != INDEX:
                        self.fail("a loop bound is not int64", s.var)
                if s.step == 0:
                    self.fail("a loop step of 0", s.var)
                self.define(s.var, vars_, accs)
                inner = dict(vars_)
                inner[s.var] = INDEX
                self.block(s.body, inner, accs)
            elif isinstance(s, Let):
                d = self.expr(s.value, vars_, accs, s)
                self.define(s.name, vars_, accs)
                vars_[s.name] = d
            elif isinstance(s, Store):
                b = self.buffers.get(s.buffer)
                if b is None or b.role == "in":
                    self.fail(f"a store to {s.buffer}, not an output or temp", s)
                self.index(b, s.index, vars_, accs, s)
                if self.expr(s.value, vars_, accs, s) != b.dtype:
                    self.fail(f"a {s.value.dtype.short} value stored into {b.dtype.short} {b.name}", s)
            elif isinstance(s, Accumulator):
                if s.kind not in ACCUMULATOR_KINDS:
                    self.fail(f"unknown accumulator kind {s.kind}", s)
                if self.expr(s.start, vars_, accs, s) != s.dtype:
                    self.fail("an accumulator's start has another dtype", s)
                if s.name in vars_:
                    self.fail(f"{s.name} is already defined", s)
                accs[s.name] = s
            elif isinstance(s, Update):
                acc = accs.get(s.name)
                if acc is None:
                    self.fail(f"update of accumulator {s.name} before its declaration", s)
                d = self.expr(s.value, vars_, accs, s)
                is_arg = acc.kind in ("argmax", "argmin")
                if is_arg != (s.position is not None):
                    self.fail("a position is given exactly for argmax/argmin updates", s)
                if is_arg and self.expr(s.position, vars_, accs, s) != INDEX:
                    self.fail("an arg position is not int64", s)
                if d != acc.dtype and not (acc.kind in ("sum", "prod") and d.is_float):
                    self.fail(f"a {d.short} value into a {acc.dtype.short} accumulator", s)
            elif isinstance(s, If):
                if self.expr(s.cond, vars_, accs, s).name != "bool":
                    self.fail("an if condition is not bool", s)
                self.block(s.then, vars_, accs)
                self.block(s.orelse, vars_, accs)
            else:
                self.fail("not a statement", s)

    def define(self, name: str, vars_: dict, accs: dict) -> None:
        if name in vars_ or name in accs:
            self.fail(f"{name} is defined twice in one scope")

    def index(self, b, index: tuple, vars_: dict, accs: dict, where: object) -> None:
        if len(index) != b.rank:
            self.fail(f"{b.name} has rank {b.rank}, indexed with {len(index)} expressions", where)
        for e in index:
            if self.expr(e, vars_, accs, where) != INDEX:
                self.fail(f"an index of {b.name} is not int64", where)

    def expr(self, e: Expr, vars_: dict, accs: dict, where: object):
        if isinstance(e, Const):
            return e.dtype
        if isinstance(e, Var):
            if e.name not in vars_:
                self.fail(f"{e.name} is used before it is defined (or outside its loop)", where)
            if vars_[e.name] != e.dtype:
                self.fail(f"{e.name} is {vars_[e.name].short}, used as {e.dtype.short}", where)
            return e.dtype
        if isinstance(e, AccValue):
            acc = accs.get(e.name)
            if acc is None:
                self.fail(f"accumulator {e.name} read before its declaration", where)
            want = INDEX if acc.kind in ("argmax", "argmin") else acc.dtype
            if e.dtype != want:
                self.fail(f"accumulator {e.name} read as {e.dtype.short}, holds {want.short}", where)
            return e.dtype
        if isinstance(e, Load):
            b = self.buffers.get(e.buffer)
            if b is None:
                self.fail(f"a load from unknown buffer {e.buffer}", where)
            self.index(b, e.index, vars_, accs, where)
            if e.dtype != b.dtype:
                self.fail(f"a load of {b.dtype.short} {b.name} typed {e.dtype.short}", where)
            return e.dtype
        if isinstance(e, Prim):
            if e.op not in OPS:
                self.fail(f"unknown op {e.op}", where)
            arity, kinds, rule = OPS[e.op]
            if len(e.args) != arity:
                self.fail(f"{e.op} takes {arity} operands, got {len(e.args)}", where)
            ds = [self.expr(a, vars_, accs, where) for a in e.args]
            operands = ds[1:] if rule == "same2" else ds
            if rule == "same2" and ds[0].name != "bool":
                self.fail("a select condition is not bool", where)
            if rule == "cast" and e.dtype.is_bool:
                self.fail("a cast to bool (write x != 0)", where)
            if any(kind_of(d) not in kinds for d in operands):
                self.fail(f"{e.op} of {', '.join(d.short for d in operands)}", where)
            if rule != "cast" and len(set(operands)) > 1:
                self.fail(f"{e.op} of mixed dtypes {', '.join(d.short for d in operands)}", where)
            if rule != "cast" and e.dtype != result_dtype(e.op, e.args):
                self.fail(f"{e.op} typed {e.dtype.short}", where)
            return e.dtype
        self.fail("not an expression", e)
