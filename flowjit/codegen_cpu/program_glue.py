"""The CPython entry points every native program shares: ``flowjit_program_call_list`` and
``flowjit_program_call_one``, METH_FASTCALL builtins whose ``self`` is a program's table
(``program_plan.T_*``). They check the arguments against the program's descriptor (the
table's ``T_DESC``, made by ``descriptor``), make its results, hand it its scratch block,
release the GIL where the plan says so and call the program's steps (``T_STEPS``: its
``fj_steps_v(tab, scratch, buffers)``); an argument they refuse (another dtype, shape or
layout) hands the call to Python (``T_FALLBACK_LIST``/``T_FALLBACK_ONE``).

flowjit's own code, the same for every program: compiled once per installation (as the
native pool is), so a program's module holds only its steps and kernels. Rendered per
program, this glue was most of a small program's IR (the zoo MLP's: 567 of 833 lines) and
took 4-5 ms of rendering and 3-4 ms of LLVM from every cold compile."""

from __future__ import annotations

import ctypes
import functools
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import jit, llvm_loops, objcache
from .llvm_loops import counted_loop
from .program_plan import (
    ARRAY_BASE,
    ARRAY_DATA,
    ARRAY_DESCR,
    ARRAY_DIMS,
    ARRAY_FLAGS,
    ARRAY_ND,
    DESCR_BYTEORDER,
    DESCR_TYPE_NUM,
    NPY_ALIGNED,
    NPY_C_CONTIGUOUS,
    NPY_WRITEABLE,
    OB_TYPE,
    SCRATCH_ALIGN,
    T_DESC,
    T_EMPTY,
    T_FALLBACK_LIST,
    T_FALLBACK_ONE,
    T_FIXED,
    T_NDARRAY,
    T_SCRATCH,
    T_STEPS,
    ProgramPlan,
)

# The descriptor's header (int64 words), then its sections: per argument (plan.args order)
# ndim, the count of NumPy type numbers it accepts, those numbers, its dims; per result (by
# slot) ndim, dims and the argument it may be (``Buffer.donor``, -1: none); per buffer
# the steps take (``own_buffers``) its argument's index, or
# -(slot + 1) for a result; per returned value (plan.results order) 2 * slot, + 1 when an
# earlier position returns the same array.
(D_NARGS, D_NRESULTS, D_SCRATCH, D_GIL, D_NOWN, D_NLIST, D_ARGS, D_RESULTS, D_OWN, D_LIST) = range(10)
D_HEADER = 10
CALL_LIST, CALL_ONE = "flowjit_program_call_list", "flowjit_program_call_one"
STEPS_SYMBOL = "fj_steps_v"


def type_nums(dtype: str) -> list[int]:
    """NumPy type numbers whose arrays hold ``dtype``'s values in its layout (int64 is
    both ``long`` and ``longlong`` on Linux)."""
    want = np.dtype(dtype)
    return sorted({np.dtype(c).num for c in np.typecodes["All"] if np.dtype(c) == want})


def own_buffers(plan: ProgramPlan) -> list[Any]:
    """The buffers a program's ``fj_steps_v`` takes, in order: its arguments and results
    (those that are not another buffer's alias), in ``plan.buffers`` order."""
    return [b for b in plan.buffers if b.kind in ("arg", "result") and not b.shares]


def descriptor(plan: ProgramPlan) -> np.ndarray:
    """``plan`` as the int64 words the shared entry points read (the layout above)."""
    results = sorted((b for b in plan.buffers if b.kind == "result" and not b.shares), key=lambda b: b.slot)
    assert [b.slot for b in results] == list(range(len(results))), "result slots are 0..n-1"
    args: list[int] = []
    for name in plan.args:
        buf = plan.buffer(name)
        nums = type_nums(buf.dtype)
        args += [len(buf.shape), len(nums), *nums, *buf.shape]
    outs: list[int] = []
    for b in results:
        outs += [len(b.shape), *b.shape, b.donor]
    own = [plan.args.index(b.name) if b.kind == "arg" else -(b.slot + 1) for b in own_buffers(plan)]
    slot_of = {b.name: b.slot for b in results}
    listed = [2 * slot_of[name] + (name in plan.results[:pos]) for pos, name in enumerate(plan.results)]
    scratch = -(-plan.scratch_bytes // SCRATCH_ALIGN) * SCRATCH_ALIGN if plan.scratch_bytes else 0
    head = [len(plan.args), len(results), scratch, int(plan.release_gil), len(own), len(listed)]
    starts, at = [], D_HEADER
    for section in (args, outs, own, listed):
        starts.append(at)
        at += len(section)
    return np.array([*head, *starts, *args, *outs, *own, *listed], np.int64)


def build_module() -> str:
    """The LLVM IR text of the two entry points (the module docstring)."""
    # Imported here: a process that loads the module from the object cache builds no IR.
    from llvmlite import ir

    I8, I32, I64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
    I8P, I64P, VOID = I8.as_pointer(), I64.as_pointer(), ir.VoidType()
    mod = ir.Module("flowjit_program_glue")

    def const(v: int, ty: Any = I64) -> Any:
        return ir.Constant(ty, v)

    def ext(name: str, ret: Any, params: list[Any]) -> Any:
        return ir.Function(mod, ir.FunctionType(ret, params), name)

    call_noargs, incref, decref = ext("PyObject_CallNoArgs", I8P, [I8P]), ext("Py_IncRef", VOID, [I8P]), \
        ext("Py_DecRef", VOID, [I8P])
    no_memory, aligned_alloc, free = ext("PyErr_NoMemory", I8P, []), ext("aligned_alloc", I8P, [I64, I64]), \
        ext("free", VOID, [I8P])
    save, restore = ext("PyEval_SaveThread", I8P, []), ext("PyEval_RestoreThread", VOID, [I8P])
    vectorcall = ext("PyObject_VectorcallDict", I8P, [I8P, I8P.as_pointer(), I64, I8P])
    list_new, list_set = ext("PyList_New", I8P, [I64]), ext("PyList_SetItem", I32, [I8P, I64, I8P])
    empty_t = ir.FunctionType(I8P, [I32, I64P, I8P, I32])
    steps_t = ir.FunctionType(I32, [I64P, I8P, I8P.as_pointer()])

    def field(b: ir.IRBuilder, obj: Any, offset: int, ty: Any) -> Any:
        return b.load(b.bitcast(b.gep(obj, [const(offset)], inbounds=True), ty.as_pointer()))

    def word(b: ir.IRBuilder, base: Any, i: Any) -> Any:
        return b.load(b.gep(base, [i if isinstance(i, ir.Value) else const(i)], inbounds=True))

    def either(b: ir.IRBuilder, cond: Any, then: Any, otherwise: Any) -> Any:
        """``then()`` where ``cond`` holds, else ``otherwise()``: the value they give."""
        with b.if_else(cond) as (yes, no):
            with yes:
                first, first_end = then(), b.block
            with no:
                second, second_end = otherwise(), b.block
        phi = b.phi(first.type)
        phi.add_incoming(first, first_end)
        phi.add_incoming(second, second_end)
        return phi

    # run(tab, args, nargs, results) -> 0 ran, 1 error set, 2 hand the call to Python
    run = ir.Function(mod, ir.FunctionType(I32, [I64P, I8P.as_pointer(), I64, I8P.as_pointer()]), "run")
    run.linkage = "internal"
    tab, args, nargs, results = run.args
    b = ir.IRBuilder(run.append_basic_block("entry"))
    fallback, failed = run.append_basic_block("fallback"), run.append_basic_block("failed")

    def check(cond: Any) -> None:
        ok = run.append_basic_block("ok")
        b.cbranch(cond, ok, fallback)
        b.position_at_end(ok)

    desc = b.inttoptr(word(b, tab, T_DESC), I64P)
    n_args, n_results, n_own = word(b, desc, D_NARGS), word(b, desc, D_NRESULTS), word(b, desc, D_NOWN)
    data = b.alloca(I8P, b.add(n_args, const(1)))
    bufs = b.alloca(I8P, b.add(n_own, const(1)))
    check(b.icmp_signed("==", nargs, n_args))
    ndarray = word(b, tab, T_NDARRAY)
    swapped = ord(">" if sys.byteorder == "little" else "<")
    # The arguments: exactly ndarray, C-contiguous and aligned, the traced ndim, dims and
    # dtype (in the native byte order).
    at = b.alloca(I64)
    b.store(word(b, desc, D_ARGS), at)

    def check_argument(i: Any) -> None:
        obj = word(b, args, i)
        p = b.load(at)
        check(b.icmp_unsigned("==", b.ptrtoint(field(b, obj, OB_TYPE, I8P), I64), ndarray))
        flags = b.and_(field(b, obj, ARRAY_FLAGS, I32), const(NPY_C_CONTIGUOUS | NPY_ALIGNED, I32))
        check(b.icmp_signed("==", flags, const(NPY_C_CONTIGUOUS | NPY_ALIGNED, I32)))
        nd = word(b, desc, p)
        check(b.icmp_signed("==", b.sext(field(b, obj, ARRAY_ND, I32), I64), nd))
        descr = field(b, obj, ARRAY_DESCR, I8P)
        check(b.icmp_unsigned("!=", field(b, descr, DESCR_BYTEORDER, I8), const(swapped, I8)))
        num = b.sext(field(b, descr, DESCR_TYPE_NUM, I32), I64)
        n_nums = word(b, desc, b.add(p, const(1)))
        nums_at = b.add(p, const(2))
        hit = run.append_basic_block("num_hit")

        def match(j: Any) -> None:
            go_on = run.append_basic_block("num_next")
            b.cbranch(b.icmp_signed("==", word(b, desc, b.add(nums_at, j)), num), hit, go_on)
            b.position_at_end(go_on)
        counted_loop(b, n_nums, "num", match)
        b.branch(fallback)  # no type number matched
        b.position_at_end(hit)
        dims_at = b.add(nums_at, n_nums)
        dims = field(b, obj, ARRAY_DIMS, I64P)
        counted_loop(b, nd, "dim", lambda d: check(b.icmp_signed("==", word(b, dims, d),
                                                                 word(b, desc, b.add(dims_at, d)))))
        b.store(field(b, obj, ARRAY_DATA, I8P), b.gep(data, [i], inbounds=True))
        b.store(b.add(dims_at, nd), at)
    counted_loop(b, n_args, "arg", check_argument)

    # The results: a donated argument's array where the call may overwrite it,
    # else from the pool (the table's allocator) or PyArray_Empty; NULL with an exception
    # set when one cannot be made.
    b.store(word(b, desc, D_RESULTS), at)
    fit = b.alloca(I8)

    def root(obj: Any) -> Any:
        """The object owning ``obj``'s memory: its chain of ``base`` followed while it is an
        ndarray with a base (NumPy collapses a view's base to the array owning the memory,
        but stops at an array whose base is another type: a memory map, the buffer pool's
        block)."""
        start = b.block
        head, step, done = (run.append_basic_block(f"root_{x}") for x in ("head", "step", "done"))
        b.branch(head)
        b.position_at_end(head)
        cur = b.phi(I8P)
        cur.add_incoming(obj, start)
        base = field(b, cur, ARRAY_BASE, I8P)
        is_array = b.icmp_unsigned("==", b.ptrtoint(field(b, cur, OB_TYPE, I8P), I64), ndarray)
        b.cbranch(b.and_(is_array, b.icmp_unsigned("!=", base, ir.Constant(I8P, None))), step, done)
        b.position_at_end(step)
        cur.add_incoming(base, step)
        b.branch(head)
        b.position_at_end(done)
        return cur

    def overwritable(obj: Any, donor: Any) -> Any:
        """Whether donated argument ``obj`` (number ``donor``; checked as an argument:
        C-contiguous, aligned, the result's dims) may become the result: writable, and no
        other argument is it or shares the object owning its memory (``root``)."""
        writable = b.and_(field(b, obj, ARRAY_FLAGS, I32), const(NPY_WRITEABLE, I32))
        b.store(b.zext(b.icmp_signed("!=", writable, const(0, I32)), I8), fit)
        owner = root(obj)

        def other(j: Any) -> None:
            with b.if_then(b.icmp_signed("!=", j, donor)):
                with b.if_then(b.icmp_unsigned("==", root(word(b, args, j)), owner)):
                    b.store(const(0, I8), fit)
        counted_loop(b, n_args, "other", other)
        return b.icmp_unsigned("!=", b.load(fit), const(0, I8))

    def make_result(s: Any) -> None:
        p = b.load(at)
        nd = word(b, desc, p)
        alloc = word(b, tab, b.add(const(T_FIXED + 1), b.mul(s, const(2))))
        donor = word(b, desc, b.add(p, b.add(nd, const(1))))

        def from_empty() -> Any:
            dtype = b.inttoptr(word(b, tab, b.add(const(T_FIXED), b.mul(s, const(2)))), I8P)
            b.call(incref, [dtype])  # PyArray_Empty steals a reference to the dtype
            empty = b.inttoptr(word(b, tab, T_EMPTY), empty_t.as_pointer())
            shape = b.gep(desc, [b.add(p, const(1))], inbounds=True)
            return b.call(empty, [b.trunc(nd, I32), shape, dtype, const(0, I32)])

        def new() -> Any:
            return either(b, b.icmp_unsigned("!=", alloc, const(0)),
                          lambda: b.call(call_noargs, [b.inttoptr(alloc, I8P)]), from_empty)

        def donated() -> Any:
            obj = word(b, args, donor)

            def taken() -> Any:
                b.call(incref, [obj])
                return obj
            return either(b, overwritable(obj, donor), taken, new)
        obj = either(b, b.icmp_signed(">=", donor, const(0)), donated, new)
        b.store(obj, b.gep(results, [s], inbounds=True))
        ok = run.append_basic_block("allocated")
        b.cbranch(b.icmp_unsigned("==", b.ptrtoint(obj, I64), const(0)), failed, ok)
        b.position_at_end(ok)
        b.store(b.add(p, b.add(nd, const(2))), at)
    counted_loop(b, n_results, "result", make_result)

    # The buffers the steps take: each argument's data or each result's.
    own_at = word(b, desc, D_OWN)

    def place(k: Any) -> None:
        code = word(b, desc, b.add(own_at, k))
        ptr = either(b, b.icmp_signed(">=", code, const(0)), lambda: word(b, data, code),
                     lambda: field(b, word(b, results, b.sub(const(-1), code)), ARRAY_DATA, I8P))
        b.store(ptr, b.gep(bufs, [k], inbounds=True))
    counted_loop(b, n_own, "own", place)

    # Scratch: the program's cached block if no other call holds it, else a new one.
    size = word(b, desc, D_SCRATCH)
    has_scratch = b.icmp_signed("!=", size, const(0))
    slot = b.gep(tab, [const(T_SCRATCH)], inbounds=True)
    take, taken, new, got = (run.append_basic_block(f"scratch_{x}") for x in ("take", "taken", "new", "got"))
    no_scratch = run.append_basic_block("scratch_nomem")
    start = b.block
    b.cbranch(has_scratch, take, taken)
    b.position_at_end(take)
    held = b.inttoptr(b.atomic_rmw("xchg", slot, const(0), "acq_rel"), I8P)
    b.cbranch(b.icmp_unsigned("==", b.ptrtoint(held, I64), const(0)), new, taken)
    b.position_at_end(new)
    fresh = b.call(aligned_alloc, [const(SCRATCH_ALIGN), size])
    b.cbranch(b.icmp_unsigned("==", b.ptrtoint(fresh, I64), const(0)), no_scratch, got)
    b.position_at_end(got)
    b.branch(taken)
    b.position_at_end(taken)
    scratch = b.phi(I8P)
    scratch.add_incoming(ir.Constant(I8P, None), start)
    scratch.add_incoming(held, take)
    scratch.add_incoming(fresh, got)

    steps = b.inttoptr(word(b, tab, T_STEPS), steps_t.as_pointer())

    def released() -> Any:
        state = b.call(save, [])
        got = b.call(steps, [tab, scratch, bufs])
        b.call(restore, [state])
        return got
    status = either(b, b.icmp_signed("!=", word(b, desc, D_GIL), const(0)), released,
                    lambda: b.call(steps, [tab, scratch, bufs]))
    with b.if_then(has_scratch):
        old = b.atomic_rmw("xchg", slot, b.ptrtoint(scratch, I64), "acq_rel")
        with b.if_then(b.icmp_unsigned("!=", old, const(0))):
            b.call(free, [b.inttoptr(old, I8P)])
    ran, nomem = run.append_basic_block("ran"), run.append_basic_block("nomem")
    b.cbranch(b.icmp_signed("==", status, const(0, I32)), ran, nomem)
    b.position_at_end(ran)
    b.ret(const(0, I32))
    for block in (nomem, no_scratch):
        b.position_at_end(block)
        b.call(no_memory, [])
        b.branch(failed)

    b.position_at_end(failed)  # an exception is set: drop the results made so far

    def drop(j: Any) -> None:
        at_j = b.gep(results, [j], inbounds=True)
        b.call(decref, [b.load(at_j)])   # Py_DecRef takes NULL (a result not made)
        b.store(ir.Constant(I8P, None), at_j)
    counted_loop(b, n_results, "drop", drop)
    b.ret(const(1, I32))
    b.position_at_end(fallback)
    b.ret(const(2, I32))

    for name, handler_slot in ((CALL_LIST, T_FALLBACK_LIST), (CALL_ONE, T_FALLBACK_ONE)):
        fn = ir.Function(mod, ir.FunctionType(I8P, [I8P, I8P.as_pointer(), I64]), name)
        self_, fargs, fnargs = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        ftab = b.bitcast(field(b, self_, ARRAY_DATA, I8P), I64P)
        fdesc = b.inttoptr(word(b, ftab, T_DESC), I64P)
        count = word(b, fdesc, D_NRESULTS)
        made = b.alloca(I8P, b.add(count, const(1)))
        counted_loop(b, count, "zero", lambda j: b.store(ir.Constant(I8P, None), b.gep(made, [j], inbounds=True)))
        rc = b.call(run, [ftab, fargs, fnargs, made])
        ok, error, python = (fn.append_basic_block(x) for x in ("ok", "error", "python"))
        sw = b.switch(rc, error)
        sw.add_case(const(0, I32), ok)
        sw.add_case(const(2, I32), python)
        b.position_at_end(error)
        b.ret(ir.Constant(I8P, None))
        b.position_at_end(python)
        handler = b.inttoptr(word(b, ftab, handler_slot), I8P)
        b.ret(b.call(vectorcall, [handler, fargs, fnargs, ir.Constant(I8P, None)]))
        b.position_at_end(ok)
        listed_at = word(b, fdesc, D_LIST)
        if name == CALL_ONE:
            b.ret(word(b, made, b.ashr(word(b, fdesc, listed_at), const(1))))
            continue
        n_list = word(b, fdesc, D_NLIST)
        lst = b.call(list_new, [n_list])
        have, nolist = fn.append_basic_block("list"), fn.append_basic_block("nolist")
        b.cbranch(b.icmp_unsigned("==", b.ptrtoint(lst, I64), const(0)), nolist, have)
        b.position_at_end(nolist)
        counted_loop(b, count, "drop", lambda j: b.call(decref, [word(b, made, j)]))
        b.ret(ir.Constant(I8P, None))
        b.position_at_end(have)

        def set_item(pos: Any) -> None:   # called at once, in this iteration
            code = word(b, fdesc, b.add(listed_at, pos))
            item = word(b, made, b.ashr(code, const(1)))
            with b.if_then(b.icmp_signed("!=", b.and_(code, const(1)), const(0))):
                b.call(incref, [item])   # the list holds each reference it is given
            b.call(list_set, [lst, pos, item])
        counted_loop(b, n_list, "item", set_item)
        b.ret(lst)
    return str(mod)


@functools.cache
def _source_digest() -> str:
    return objcache.source_digest(__file__, llvm_loops.__file__)   # its loops are llvm_loops'


_CONSTANTS = (OB_TYPE, ARRAY_DATA, ARRAY_ND, ARRAY_DIMS, ARRAY_DESCR, ARRAY_FLAGS, DESCR_BYTEORDER,
              DESCR_TYPE_NUM, NPY_C_CONTIGUOUS, NPY_ALIGNED, SCRATCH_ALIGN, T_DESC, T_EMPTY, T_FALLBACK_LIST,
              T_FALLBACK_ONE, T_FIXED, T_NDARRAY, T_SCRATCH, T_STEPS)


@functools.cache
def entry_points() -> tuple[int, int]:
    """The addresses of ``flowjit_program_call_list`` and ``flowjit_program_call_one``,
    compiled once per installation (``objcache.runtime_directory()``) and kept for the life
    of the process: every program's builtins point into it."""
    lib = jit.load_source(f"; flowjit program entry points {_source_digest()} {_CONSTANTS} {sys.byteorder}",
                          build_module, name="flowjit_program_glue", runtime=True)
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(lib))
    return lib.address(CALL_LIST), lib.address(CALL_ONE)


def steps_entry(steps: Any, own: Sequence[Any], module: Any) -> None:
    """Define ``fj_steps_v(tab, scratch, buffers)`` in ``module``: the program's ``steps``
    function called with each of its ``own`` buffers' pointers read from ``buffers``."""
    from llvmlite import ir
    I8P, I64 = ir.IntType(8).as_pointer(), ir.IntType(64)
    fn = ir.Function(module, ir.FunctionType(ir.IntType(32), [I64.as_pointer(), I8P, I8P.as_pointer()]),
                     STEPS_SYMBOL)
    tab, scratch, buffers = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    ptrs = [b.load(b.gep(buffers, [ir.Constant(I64, k)], inbounds=True)) for k in range(len(own))]
    b.ret(b.call(steps, [tab, scratch, *ptrs]))
