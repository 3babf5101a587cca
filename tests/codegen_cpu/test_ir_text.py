"""codegen_cpu.ir_text: a module's text is llvmlite's own, and the module it came from is
freed by reference counts, not left to the collector (its builder links run both ways)."""

from __future__ import annotations

import gc

import llvmlite.ir as ir
import numpy as np

import flowjit as fj
from flowjit.codegen_cpu.ir_text import module_text


def _loop_module() -> ir.Module:
    """A function summing 0..n-1 in a loop (a phi fed by a later block), calling a declared one."""
    i64 = ir.IntType(64)
    m = ir.Module("probe")
    callee = ir.Function(m, ir.FunctionType(i64, [i64]), "declared")
    fn = ir.Function(m, ir.FunctionType(i64, [i64]), "count")
    entry, head, body, done = (fn.append_basic_block(n) for n in ("entry", "head", "body", "done"))
    b = ir.IRBuilder(entry)
    b.branch(head)
    b.position_at_end(head)
    i, acc = b.phi(i64, "i"), b.phi(i64, "acc")
    i.add_incoming(ir.Constant(i64, 0), entry)
    acc.add_incoming(ir.Constant(i64, 0), entry)
    b.cbranch(b.icmp_signed("<", i, fn.args[0]), body, done)
    b.position_at_end(body)
    i.add_incoming(b.add(i, ir.Constant(i64, 1)), body)
    acc.add_incoming(b.add(acc, b.call(callee, [i])), body)
    b.branch(head)
    b.position_at_end(done)
    b.ret(acc)
    fn.attributes.add("nounwind")
    m.add_metadata([ir.Constant(i64, 1)])
    return m


def _unreachable_llvmlite_objects(make) -> int:
    """How many llvmlite.ir objects only the collector would free after ``make()`` ran."""
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        make()
        gc.collect()
        return sum(type(o).__module__.startswith("llvmlite.ir") for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was:
            gc.enable()


def test_the_text_is_llvmlites_and_the_module_is_freed_without_the_collector():
    assert module_text(_loop_module()) == str(_loop_module())
    assert _unreachable_llvmlite_objects(lambda: str(_loop_module())) > 0      # what it was before
    assert _unreachable_llvmlite_objects(lambda: module_text(_loop_module())) == 0


def test_a_first_compile_leaves_no_builder_objects_to_the_collector(tmp_path, monkeypatch):
    # An empty disk cache: the kernels and the program's steps are rendered (llvmlite's IR
    # builder), compiled, and the builder's modules dropped.
    monkeypatch.setenv("FLOWJIT_CACHE_DIR", str(tmp_path))
    compiled = fj.cache_stats()["compiled"]
    x = np.linspace(-1, 1, 3 * 37, dtype=np.float32).reshape(3, 37)

    def call() -> None:
        f = fj.function(lambda a: fj.tanh(a * 2.0 + 1.0).sum(axis=1) / fj.exp(a).sum(axis=1))
        np.testing.assert_allclose(f(x), np.tanh(x * 2.0 + 1.0).sum(axis=1) / np.exp(x).sum(axis=1), rtol=1e-5)
    assert _unreachable_llvmlite_objects(call) == 0
    assert fj.cache_stats()["compiled"] > compiled
