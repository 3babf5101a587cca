"""The plan of a whole program as one native function (see ``program``): buffers at fixed
offsets of one scratch block, and steps (kernel calls, BLAS ``gemm`` calls, copies, control
ops with their blocks' plans). ``plan_program`` makes it from a fused program whose kernel
ops are already lowered to loop IR, or raises ``NotNative`` saying which op has no native
form; ``program_emit`` renders it; ``program`` compiles, loads and calls it. The ABI
constants of NumPy's arrays that the rendered code reads live here too."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from flowjit.ir.primitives.layout import swaps_last_two_axes
from flowjit.ir.records import compile_records, record
from flowjit.lowering.backend import LoweredProgram, NoProgram
from flowjit.lowering.loops import If, Kernel, Loop

from . import kernel_abi
from .fourier_routine import kernel_for
from .parallel import OVERSPLIT
from .pthread_pool import NATIVE_PARALLEL_MIN_ELEMENTS

# NumPy's ABI for compiled extensions: byte offsets in PyArrayObject_fields and PyArray_Descr.
OB_TYPE = 8
ARRAY_DATA, ARRAY_ND, ARRAY_DIMS, ARRAY_BASE, ARRAY_DESCR, ARRAY_FLAGS = 16, 24, 32, 48, 56, 64
DESCR_BYTEORDER, DESCR_TYPE_NUM = 26, 28
NPY_C_CONTIGUOUS, NPY_ALIGNED, NPY_WRITEABLE = 0x1, 0x100, 0x400
PYARRAY_EMPTY = 184           # PyArray_Empty's index in NumPy's C-API table
METH_FASTCALL = 0x80
# Below this many elements of work in a call, the GIL stays held: releasing and taking it
# back costs more than the call.
GIL_MIN_ELEMENTS = 1 << 15
# Where a program's scratch block starts (an ahead-of-time library's caller aligns it so): the
# plan aligns buffers to it, and a loop step its own scratch.
SCRATCH_ALIGN = 64
# A kernel's temps from this size live in the scratch block. Measured on the zoo: calloc'd
# temps of 0.4-0.8 MiB (the CNN's batch norm) never page-faulted, several of 2 MiB (the
# transformer's training step) 2,900 times a call; and a kernel handed scratch for its temps
# is called through a function of its own, 5-7 ms more of LLVM for the CNN's steps.
TEMP_SCRATCH_MIN_BYTES = 1 << 20
# CBLAS enums.
ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
# A product of fewer multiply-adds than this runs on one BLAS thread: below it, waking the
# BLAS's other threads costs more than they save, and on a machine whose cores are busy with
# other work they may not run for a time slice (a 64x128x64 product of the digits MLP took
# 100x longer with OpenBLAS's 2 threads beside two busy processes). From it, the gemm a
# program calls (blas.blas_functions' address, blas.GEMM_SPLIT_MIN_WORK) cuts the product
# into blocks over flowjit's native pool, each block on one BLAS thread; with
# FLOWJIT_NUM_THREADS=1 the BLAS keeps its own threading there. 4M multiply-adds (an LSTM
# step's 64x128x512 products: 72 us on one thread, 53 us in two pieces on 2 cores; at 2M
# two pieces are no faster than one thread).
BLAS_PARALLEL_MIN_WORK = 1 << 22
# A convolution's windows that only its product reads are made and multiplied a block of
# output rows at a time (``ConvGemm``) from this size of the whole windows: a block's windows
# stay in the core's cache between the routine writing them and the BLAS reading them, where
# the whole windows (9x the input for a 3x3) go out to memory and back. A ResNet layer's 3x3
# convolution of 64 channels on 32x56x56 (231 MB of windows) wrote them in 23 ms and
# multiplied them in 28 (265 GFLOP/s; a block of them 383 in cache on two threads, 150 a
# core on one).
CONV_BLOCKED_MIN_BYTES = 4 << 20
# A block's windows at most this many bytes (an output row's at least): the machines' L2 is
# 1-2 MiB a core, which holds the block and the BLAS's packed panels beside it.
CONV_BLOCK_BYTES = 512 << 10

# The table a program's builtin gets as ``self`` (an int64 NumPy array): fixed slots, then
# each result's dtype and allocator, then each constant's data.
# T_BLAS_ENTER, T_BLAS_LEAVE: the gemms' one-thread bracket (``blas.product_bracket``; 0: none).
# T_STEPS: the program's fj_steps_v; T_DESC: its descriptor (program_glue.descriptor).
(T_FALLBACK_LIST, T_FALLBACK_ONE, T_EMPTY, T_NDARRAY, T_SCRATCH, T_SGEMM, T_DGEMM, T_CGEMM, T_ZGEMM, T_PROFILE,
 T_BLAS_ENTER, T_BLAS_LEAVE, T_STEPS, T_DESC) = range(14)
T_FIXED = 14


@record
class Buffer:
    """A value of the program: ``kind`` ``arg`` (position ``slot``), ``result`` (distinct
    result number ``slot``), ``const`` (constant number ``slot``) or ``scratch`` (byte
    offset ``slot`` in the scratch block); ``shares`` names the buffer whose memory it
    takes over when a kernel writes it in place; ``donor``, of a result, the position of
    the donated argument whose array the call returns as it when it may (``program_glue``)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    kind: str
    slot: int
    shares: str = ""      # the buffer whose memory this one takes over (written in place)
    donor: int = -1       # a result: the donated argument whose array it may be (glue decides)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * np.dtype(self.dtype).itemsize


@record
class KernelCall:
    """One kernel: ``buffers`` names a buffer per kernel argument (ABI order), ``dims``
    every dimension; ``split`` (trips, parts) runs its chunk entry on the native pool;
    ``temps`` the scratch buffer its temp buffers live in (``kernel_abi.temp_bytes``)."""

    kernel: Kernel
    buffers: tuple[str, ...]
    dims: tuple[int, ...]
    split: tuple[int, int] | None
    temps: str = ""       # the scratch buffer holding the kernel's temps ("": it allocates its own)
    routine: bool = False  # the kernel is flowjit's routine, compiled once per installation (fourier_routine)

    def __repr__(self) -> str:  # the kernel by name: a program's identity lists each kernel's once
        return (f"KernelCall({self.kernel.name!r}, {self.buffers!r}, {self.dims!r}, {self.split!r}"
                f"{f', temps={self.temps!r}' if self.temps else ''}{', routine=True' if self.routine else ''})")


@record
class Gemm:
    """``c[m, n] = a[m, k] @ b[k, n]``, ``a``/``b`` read transposed from their buffers when
    ``trans_a``/``trans_b``. A batch of products when ``batch`` (the result's leading
    dimensions) is not empty: product ``t`` (row-major over ``batch``) reads ``a`` and ``b``
    from element offsets ``sum(i_d * stride_a[d])`` and ``sum(i_d * stride_b[d])`` (a
    stride of 0 broadcasts that operand along ``d``) and writes the ``t``-th ``m x n`` block
    of ``c``: np.matmul's broadcast batch dimensions, no operand copied."""

    a: str
    b: str
    c: str
    trans_a: bool
    trans_b: bool
    m: int
    n: int
    k: int
    dtype: str
    batch: tuple = ()
    stride_a: tuple = ()
    stride_b: tuple = ()


# Roles of the ops a plan runs through the LAPACK beside its BLAS (``lapack.build_wrapper``),
# and the LAPACK letter of each dtype they take.
LAPACK_ROLES = {"cholesky": ("potrf",), "solve": ("gesv",), "inverse": ("getrf", "getri"),
                "log_determinant": ("getrf",), "symmetric_eigen": ("syevd",), "singular_values": ("gesdd",),
                "orthogonal_triangular": ("geqrf", "orgqr"), "general_eigen": ("geev",)}
LAPACK_DTYPES = {"float32": "s", "float64": "d", "complex64": "c", "complex128": "z"}
COMPLEX_GEMMS = {"complex64": "cgemm", "complex128": "zgemm"}   # alpha and beta by address
# Each gemm's table slot (T_SGEMM...): the pool's gemm in a JIT program, the library's
# routine in an ahead-of-time one.
GEMM_SLOTS = {"sgemm": T_SGEMM, "dgemm": T_DGEMM, "cgemm": T_CGEMM, "zgemm": T_ZGEMM}
HERMITIAN_ROUTINES = {"syevd": "heevd", "orgqr": "ungqr"}   # a complex matrix's name of a routine


@record
class Lapack:
    """One op of ``LAPACK_ROLES`` over ``batch`` matrices of ``n x n`` of ``dtype`` (the
    op's leading dimensions flattened; solve's right-hand sides ``n x k``), from the
    buffers ``inputs`` into ``outputs``: a call of its wrapper (``lapack.build_wrapper``);
    ``lower``: the triangle a symmetric matrix is read from; an SVD's matrices are ``m x n``
    and ``full``: its complete u and vh."""

    role: str
    dtype: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    batch: int
    n: int
    k: int
    lower: bool = True
    m: int = 0
    full: bool = False

    def routines(self) -> list[str]:
        """The LAPACK routines it calls (``dpotrf``)."""
        t = LAPACK_DTYPES[self.dtype]
        if self.role == "general_eigen":  # computed in double precision, as NumPy computes it
            t = "z" if t in "cz" else "d"
        return [t + (HERMITIAN_ROUTINES.get(r, r) if t in "cz" else r) for r in LAPACK_ROLES[self.role]]


@record
class Copy:
    """``nbytes`` bytes from buffer ``src`` to buffer ``dst`` (a block result no step of
    the block writes: an argument, a constant, a value written elsewhere)."""

    src: str
    dst: str
    nbytes: int


@record
class Patches:
    """A ``patches`` op (a convolution's windows as rows) that is its kernel's whole block,
    run by flowjit's routine (``patches_routine``) rather than a kernel of its own: ``x``
    [n, h, w, c] into ``out`` [n, oh, ow, kh, kw, c], elements of ``itemsize`` bytes, the
    rows (n, oh) split into ``parts`` on the native pool (1: none)."""

    x: str
    out: str
    itemsize: int
    shape: tuple[int, int, int, int]
    out_hw: tuple[int, int]
    window: tuple[int, int]
    strides: tuple[int, int]
    dilation: tuple[int, int]
    top_left: tuple[int, int]
    parts: int

    def arguments(self) -> list[int]:
        """The routine's int64 arguments after its two pointers (``patches_routine.PARAMS``)."""
        n, h, w, c = self.shape
        return [n, h, w, c * self.itemsize, *self.out_hw, *self.window, *self.strides, *self.dilation,
                *self.top_left, self.parts]


@record
class ConvGemm:
    """A ``Patches`` step whose windows only a ``Gemm`` reads, run a block of ``rows``
    output rows of one image at a time: the windows of a block into a slot of
    ``slot_bytes`` of the scratch buffer ``patches.out`` (one slot a lane), then the block's
    product on one BLAS thread. The blocks (images x output rows / ``rows``) are cut into
    ``lanes`` contiguous runs that the native pool hands out; a lane's slot is its own,
    whichever thread runs it. ``gemm`` describes the whole product (``gemm.a`` is the
    scratch buffer too). The windows' rows by a filter matrix (a convolution): each block
    makes its rows of ``gemm.c``. The windows read transposed (``gemm.trans_a``: a
    filter's gradient, their columns by the matrix of as many rows): each block adds its
    product to its lane's sum, ``sum_bytes`` after its slot (``gemm.c`` itself on one lane),
    and the lanes' sums are added in lane order into ``gemm.c``."""

    patches: Patches
    gemm: Gemm
    rows: int
    lanes: int
    slot_bytes: int
    sum_bytes: int = 0

    @property
    def blocks(self) -> int:
        return self.patches.shape[0] * self.patches.out_hw[0] // self.rows


@record
class BlockPlan:
    """A control op's block (or the top-level program before it becomes a ProgramPlan):
    its buffers (arguments and ``out`` buffers are pointers the caller passes), steps,
    scratch size and elements of work per run."""

    name: str
    buffers: tuple[Buffer, ...]
    args: tuple[str, ...]
    outs: tuple[str, ...]
    steps: tuple[Any, ...]
    scratch_bytes: int
    work: int

    def buffer(self, name: str) -> Buffer:
        return next(b for b in self.buffers if b.name == name)


@record
class ControlCall:
    """A ``branch``, ``while_loop`` or ``scan_loop`` op run natively over its ``blocks``:
    ``temp`` is its scratch buffer holding the two copies of each carry (``carry_offsets``:
    current and next), the condition's flag at ``flag_offset`` and the blocks' own scratch
    from ``block_offset``."""

    role: str
    blocks: tuple[BlockPlan, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    temp: str
    num_carry: int
    num_xs: int
    length: int
    reverse: bool
    maximum_iterations: int
    carry_offsets: tuple[tuple[int, int], ...]
    flag_offset: int
    block_offset: int


@record
class ProgramPlan:
    """A program as buffers and native steps (see the module docstring)."""

    name: str
    buffers: tuple[Buffer, ...]
    args: tuple[str, ...]
    results: tuple[str, ...]          # per returned value (a name may repeat)
    steps: tuple[Any, ...]            # KernelCall, Gemm, Patches, ConvGemm, Copy, Lapack, ControlCall
    scratch_bytes: int
    release_gil: bool
    # The threads the pooled loops of its kernels may run on (kernel_abi.pooled_loops;
    # 1: none): the kernels are rendered for the pool when above 1.
    threads: int = 1

    def buffer(self, name: str) -> Buffer:
        return next(b for b in self.buffers if b.name == name)

    def describe(self) -> str:
        """The plan as text, one line per step, for ``flowjit ir --stage kernels``."""
        head = (f"native driver {self.name}({', '.join(self.args)}) -> ({', '.join(self.results)}); "
                f"scratch {self.scratch_bytes} bytes; GIL {'released' if self.release_gil else 'held'}")
        return "\n".join([head, *_describe_steps(self, self.steps, "  ", self.threads)])


def _describe_steps(plan: Any, steps: Sequence[Any], indent: str, threads: int) -> list[str]:
    def show(n: str) -> str:
        b = plan.buffer(n)
        where = {"arg": "argument", "result": "result", "const": "constant", "out": f"out {b.slot}",
                 "scratch": f"scratch+{b.slot}"}[b.kind] + (f", in {b.shares}'s memory" if b.shares else "") \
            + (f", in donated {plan.args[b.donor]}'s memory" if b.donor >= 0 else "")
        return f"{n}: {b.dtype}{list(b.shape)} ({where})"
    lines = []
    for s in steps:
        if isinstance(s, KernelCall):
            split = (f" on {s.split[1]} threads over {s.split[0]} rows" if s.split else
                     f" (its parallel loops on up to {threads} threads)" if pooled_call(threads, s) else "")
            lines.append(f"{indent}{kernel_abi.symbol(s.kernel)}({', '.join(map(show, s.buffers))}){split}")
        elif isinstance(s, Gemm):
            batch = (f" x batch {list(s.batch)} (strides {list(s.stride_a)}, {list(s.stride_b)})"
                     + (f" on up to {threads} threads" if pooled_batch(threads, s) else "") if s.batch else "")
            lines.append(f"{indent}{s.dtype} gemm {s.c} = {s.a}{'.T' if s.trans_a else ''} @ "
                         f"{s.b}{'.T' if s.trans_b else ''} ({s.m}x{s.k} @ {s.k}x{s.n}){batch}")
        elif isinstance(s, Copy):
            lines.append(f"{indent}copy {s.nbytes} bytes {s.src} -> {s.dst}")
        elif isinstance(s, ConvGemm):
            p, g = s.patches, s.gemm
            lines.append(f"{indent}{g.dtype} conv gemm {show(g.c)} = (windows {p.window[0]}x{p.window[1]} of "
                         f"{show(p.x)}){'.T' if g.trans_a else ''} @ {g.b} ({g.m}x{g.k} @ {g.k}x{g.n}; strides "
                         f"{list(p.strides)}, dilation {list(p.dilation)}, pads top/left {list(p.top_left)}) in "
                         f"{s.blocks} blocks of {s.rows} output rows, {s.lanes} lanes of {show(p.out)}")
        elif isinstance(s, Patches):
            split = f" on {s.parts} threads" if s.parts > 1 else ""
            lines.append(f"{indent}patches routine {show(s.out)} = windows {s.window[0]}x{s.window[1]} of {show(s.x)} "
                         f"(strides {list(s.strides)}, dilation {list(s.dilation)}, pads top/left "
                         f"{list(s.top_left)}){split}")
        elif isinstance(s, Lapack):
            rhs = f", right-hand sides {s.n}x{s.k}" if s.role == "solve" else ""
            shape = f"{s.m or s.n}x{s.n}"
            lines.append(f"{indent}{s.dtype} lapack {s.role} ({'/'.join(s.routines())}) {', '.join(s.outputs)} = "
                         f"{s.role}({', '.join(map(show, s.inputs))}) over {s.batch} matrices of {shape}{rhs}")
        else:
            extra = {"while_loop": f" at most {s.maximum_iterations} times" if s.maximum_iterations >= 0 else "",
                     "scan_loop": f" over {s.length} steps{' backward' if s.reverse else ''}"}.get(s.role, "")
            lines.append(f"{indent}{s.role}{extra} ({', '.join(s.inputs)}) -> ({', '.join(s.outputs)}), "
                         f"temp {show(s.temp)}")
            for k, block in enumerate(s.blocks):
                lines.append(f"{indent}  block {k} ({', '.join(block.args)}) -> ({', '.join(block.outs)}); "
                             f"scratch {block.scratch_bytes} bytes")
                lines += _describe_steps(block, block.steps, indent + "    ", threads)
    return lines


class NotNative(NoProgram):
    """The program has a step with no native form here (the message says which)."""


@record
class Affine:
    """A size that depends on a symbolic dimension ``B``: ``a * B + b`` (a unified plan's
    dimensions, byte counts and offsets; see ``unify_plans``)."""

    a: int
    b: int

    def __repr__(self) -> str:
        return f"({self.a}*B{'+' if self.b >= 0 else '-'}{abs(self.b)})"

    def at(self, batch: int) -> int:
        """The value for ``B = batch``."""
        return self.a * batch + self.b

    def __mul__(self, k: object) -> Affine:
        if type(k) is not int:
            return NotImplemented
        return Affine(self.a * k, self.b * k)

    __rmul__ = __mul__

    def __add__(self, k: object) -> Affine:
        if type(k) is int:
            return Affine(self.a, self.b + k)
        if isinstance(k, Affine):
            return Affine(self.a + k.a, self.b + k.b)
        return NotImplemented

    __radd__ = __add__


compile_records()


def unify_plans(plans: Sequence[ProgramPlan], batches: Sequence[int]) -> ProgramPlan:
    """One plan for every value of a symbolic dimension ``B``, from the plans of the same
    program traced at ``B`` = each of ``batches`` (three or more): what is equal in all
    stays, an integer that changes becomes ``Affine(a, b)`` when one line through the
    samples fits them all. Raises NotNative naming what changes otherwise: a kernel whose
    loop IR changes with ``B`` (a constant made from it, such as the 1/B of a mean over
    the batch), a step that appears at one size only."""
    if len(plans) < 3 or len(set(batches)) != len(batches):
        raise ValueError("unify_plans needs plans at three or more distinct sizes")

    def unify(xs: list, where: str) -> Any:
        x0 = xs[0]
        if all(type(x) is type(x0) for x in xs) and all(x == x0 for x in xs[1:]):
            return x0
        if all(type(x) is int for x in xs):
            db = batches[1] - batches[0]
            a, rem = divmod(xs[1] - xs[0], db)
            line = Affine(a, xs[0] - a * batches[0])
            if rem or any(line.at(bb) != x for bb, x in zip(batches, xs)):
                raise NotNative(f"{where} is {xs} at B = {list(batches)}: not a linear function of B")
            return line
        if all(type(x) is bool for x in xs):
            return any(xs)  # release_gil: the larger sizes decide
        if isinstance(x0, Kernel) and all(isinstance(x, Kernel) and _serial(x) == _serial(x0) for x in xs):
            return xs[-1]  # loops parallel from a size on: the largest sample's marks
        if isinstance(x0, Kernel):
            raise NotNative(f"kernel {x0.name} changes with the batch size B (a constant computed from B in it, "
                            "such as a mean over the batch): make that dimension static")
        if isinstance(x0, tuple) and all(isinstance(x, tuple) and len(x) == len(x0) for x in xs):
            return tuple(unify([x[i] for x in xs], f"{where}[{i}]") for i in range(len(x0)))
        if dataclasses.is_dataclass(x0) and all(type(x) is type(x0) for x in xs):
            return dataclasses.replace(x0, **{f.name: unify([getattr(x, f.name) for x in xs], f"{where}.{f.name}")
                                              for f in dataclasses.fields(x0)})
        raise NotNative(f"{where} changes with the batch size B: {xs}")

    return unify(list(plans), "the plan")


def _serial(k: Kernel) -> Kernel:
    """``k`` with no loop marked parallel (the lowering marks loops parallel by their size)."""
    def strip(body: tuple) -> tuple:
        return tuple(dataclasses.replace(s, body=strip(s.body), parallel=False) if isinstance(s, Loop)
                     else dataclasses.replace(s, then=strip(s.then), orelse=strip(s.orelse)) if isinstance(s, If)
                     else s for s in body)
    return dataclasses.replace(k, body=strip(k.body))


def _sequential_offsets(sizes: list[int], aligns: list[int]) -> tuple[list[int], int]:
    """Offsets of buffers laid one after another (no reuse), the most aligned first: each
    starts at a multiple of its alignment (a power of two) when every size is a multiple of
    its own alignment; a size that is not (a step's scratch, which aligns itself) goes with
    alignment 1, last."""
    offsets = [0] * len(sizes)
    at = 0
    for i in sorted(range(len(sizes)), key=lambda i: -aligns[i]):
        offsets[i] = at
        at += sizes[i]
    return offsets, at


def _assign_offsets(sizes: list[int], lives: list[tuple[int, int]]) -> tuple[list[int], int]:
    """Offsets for buffers of ``sizes`` alive over step ranges ``lives`` (inclusive) so
    that no two alive at once overlap: largest first, each at the lowest aligned offset
    clear of the placed buffers it meets. Returns the offsets and the block's size."""
    order = sorted(range(len(sizes)), key=lambda i: -sizes[i])
    placed: list[tuple[int, int, int]] = []   # (offset, end, index)
    offsets = [0] * len(sizes)
    for i in order:
        clash = sorted((o, e) for o, e, j in placed
                       if not (lives[j][1] < lives[i][0] or lives[i][1] < lives[j][0]))
        at = 0
        for o, e in clash:
            if at + sizes[i] <= o:
                break
            at = max(at, -(-e // SCRATCH_ALIGN) * SCRATCH_ALIGN)
        offsets[i] = at
        placed.append((at, at + sizes[i], i))
    return offsets, max((e for _, e, _ in placed), default=0)


def plan_program(function: Any, kernels: dict[int, Kernel], parallel: bool = True, threads: int = 1,
                 blocks: dict[int, list[LoweredProgram]] | None = None, sequential: bool = False,
                 routines: bool = False) -> tuple[ProgramPlan, list[np.ndarray]]:
    """The native plan of ``function`` (a fused flowjit Function) whose kernel ops are
    lowered in ``kernels`` (op id -> Kernel) and whose control ops' blocks are ``blocks``,
    with the constant arrays it reads; raises NotNative when some op or result has no
    native form. ``threads``: the parts a large parallel loop is split into (1: none).
    ``sequential``: intermediates one after another in scratch (by falling item size, so
    each is aligned to its own), none reusing another's memory: offsets that stay linear
    in a dimension, for ``unify_plans``. ``routines``: a kernel that is one op flowjit has a
    compiled routine for (``Patches``; an FFT kernel, ``fourier_routine``) calls the routine
    instead (the JIT's plans: a process has the routines; a C library keeps the kernels)."""
    planner = _Planner(parallel, threads, sequential, routines)
    top = planner.plan(function, kernels, blocks or {}, top=True, prefix="")
    plan = ProgramPlan(function.name, top.buffers, top.args, top.outs, top.steps, top.scratch_bytes,
                       top.work >= GIL_MIN_ELEMENTS, threads if parallel and threads > 1 else 1)
    return plan, planner.constants


class _Planner:
    def __init__(self, parallel: bool, threads: int, sequential: bool = False, routines: bool = False):
        self.parallel = parallel
        self.routines = routines
        self.threads = threads
        self.sequential = sequential
        self.constants: list[np.ndarray] = []
        self.n_blocks = 0

    def _blocked_windows(self, window_op: Any, product: Any, ins: list[tuple[int, bool]], body: Any) -> bool:
        """Whether the windows kernel op ``window_op`` (a Patches step) and the matrix product
        ``product`` reading them (``ins``: its operands' buffers, transposed) run as one
        ``ConvGemm``: the windows read by that product alone (through reshapes and a swap of
        their two axes), as its first operand (the rows by a filter matrix; transposed: their
        columns by a matrix of as many rows, a filter's gradient), of real floats, 2-D
        operands, none empty, CONV_BLOCKED_MIN_BYTES of windows or more."""
        windows = window_op.results[0]
        if ins[0][0] != windows.id or ins[1][0] == windows.id or ins[1][1]:
            return False
        a, f, out = product.inputs[0].type, product.inputs[1].type, product.results[0].type
        if (a.ndim != 2 and ins[0][1]) or f.ndim != 2 or out.dtype.name not in ("float32", "float64") \
                or a.dtype != out.dtype or f.dtype != out.dtype or _nbytes(windows.type) < CONV_BLOCKED_MIN_BYTES:
            return False
        rows = math.prod(windows.type.shape[:3])
        if (a.shape[-1] if ins[0][1] else math.prod(a.shape[:-1])) != rows or 0 in (*windows.type.shape, *f.shape):
            return False   # an empty product's result is zeros (or nothing), which no block writes
        returned = {v.id for v in body.returns}

        def only_product(v: Any) -> bool:
            if v.id in returned:
                return False
            for user, _ in v.uses:
                if user is product:
                    continue
                if user.primitive.role not in ("row_major_reshape", "unit_axes_reshape", "permute_axes") \
                        or not only_product(user.results[0]):
                    return False
            return True
        return only_product(windows)

    def _conv_blocks(self, window_op: Any, transposed: bool, product: Any) -> tuple[int, int, int, int]:
        """A ConvGemm's output rows a block (the most that divide the image's output rows
        with their windows within CONV_BLOCK_BYTES, one at least), its lanes (one a thread's
        chunk of the native pool, as many as there are blocks at most), a lane's bytes of
        windows and, for windows read transposed on several lanes, of its sum."""
        out = _lone_patches(window_op).results[0].type
        n, oh = out.shape[0], out.shape[1]
        row_bytes = math.prod(out.shape[2:]) * out.dtype.np.itemsize
        rows = max([r for r in range(1, oh + 1) if oh % r == 0 and r * row_bytes <= CONV_BLOCK_BYTES], default=1)
        threads = self.threads if self.parallel and self.threads > 1 else 1
        lanes = min(n * oh // rows, threads * OVERSPLIT) if threads > 1 else 1
        sums = _aligned(_nbytes(product.results[0].type)) if transposed and lanes > 1 else 0
        return rows, lanes, _aligned(rows * row_bytes), sums

    def plan(self, function: Any, kernels: dict[int, Kernel], blocks: dict[int, list[LoweredProgram]], top: bool,
             prefix: str) -> BlockPlan:
        """``function`` as buffers and steps. At the top its results are new arrays (kind
        ``result``, one per distinct value); in a block each result position is an ``out``
        buffer the caller hands in, written by the step that makes it or copied at the end."""
        body = function.body
        names = value_names(body, prefix)
        alias: dict[int, tuple[int, bool]] = {}     # value id -> (value id it views, transposed)
        const_of: dict[int, int] = {}
        steps: list[tuple[str, Any, Any]] = []
        defined_at: dict[int, int] = {}
        last_use: dict[int, int] = {}
        made: set[int] = set()                       # values a step writes
        value_type = {a.id: a.type for a in body.args}
        value_type.update({r.id: r.type for op in body.ops for r in op.results})
        routines: set[int] = set()                   # kernel ops whose kernel is a routine's
        windows: dict[int, tuple[Any, bool]] = {}    # conv_gemm step -> (its windows' op, read transposed)
        windows_made_at: dict[int, int] = {}         # windows value id -> the patches step making them
        def base(v: Any) -> tuple[int, bool]:
            return alias.get(v.id, (v.id, False))

        for op in body.ops:
            role, kind = op.primitive.role, op.primitive.kind
            step = len(steps)
            if op.id in kernels:
                ins = [base(v) for v in op.inputs]
                if any(t for _, t in ins):
                    raise NotNative(f"kernel {op.attrs.get('name', op.name)} reads a transposed view")
                routine = "patches" if self.routines and _lone_patches(op) is not None else "kernel"
                if routine == "patches":
                    windows_made_at[op.results[0].id] = step
                fourier = kernel_for(op, self.threads if self.parallel else 1) if self.routines else None
                if fourier is not None:
                    kernels = {**kernels, op.id: fourier}
                    routines.add(op.id)
                steps.append((routine, op, [i for i, _ in ins]))
            elif role == "matrix_product":
                types = [v.type for v in op.inputs] + [r.type for r in op.results]
                if len({t.dtype.name for t in types}) != 1 or types[0].dtype.name not in LAPACK_DTYPES:
                    raise NotNative(f"{op.name} of {[f'{t.dtype.name}{list(t.shape)}' for t in types]}: "
                                    "BLAS multiplies float32, float64, complex64 and complex128 matrices only")
                ins = [base(v) for v in op.inputs]
                made_by = windows_made_at.get(ins[0][0])
                if made_by is not None and self._blocked_windows(steps[made_by][1], op, ins, body):
                    # The windows are never written whole: this step makes them a block at a
                    # time, where their product runs (their input lives until then).
                    _, window_op, (x_id,) = steps[made_by]
                    steps[made_by] = ("skip", window_op, [])
                    del defined_at[window_op.results[0].id]
                    made.discard(window_op.results[0].id)
                    windows[step] = (window_op, ins[0][1])
                    ins = [(x_id, False), (ins[1][0], False)]
                    steps.append(("conv_gemm", op, [x_id, ins[1][0]]))
                else:
                    steps.append(("gemm", op, ins))
                    ins = [(i, False) for i, _ in ins]
            elif role in LAPACK_ROLES and op.inputs[0].type.dtype.name in LAPACK_DTYPES:
                ins = [base(v) for v in op.inputs]
                if any(t for _, t in ins):
                    raise NotNative(f"{op.name} reads a transposed view")
                steps.append(("lapack", op, [i for i, _ in ins]))
            elif op.id in blocks and role in ("branch", "while_loop", "scan_loop"):
                ins = [base(v) for v in op.inputs]
                if any(t for _, t in ins):
                    raise NotNative(f"{op.name} reads a transposed view")
                steps.append(("control", op, [i for i, _ in ins]))
            elif role == "permute_axes" and swaps_last_two_axes(op.attrs["perm"]) and all(
                    u.primitive.role == "matrix_product" for r in op.results for u, _ in r.uses):
                # A swap of the last two axes that only products read: BLAS reads it in place.
                src, t = base(op.inputs[0])
                alias[op.results[0].id] = (src, not t)
                continue
            elif role in ("row_major_reshape", "unit_axes_reshape") and not base(op.inputs[0])[1]:
                alias[op.results[0].id] = base(op.inputs[0])
                continue
            elif role == "variable_update" and not base(op.inputs[1])[1]:
                # The variable's new value is the value itself: the runtime rebinds the variable.
                alias[op.results[0].id] = base(op.inputs[1])
                continue
            elif kind == "constant":
                value = np.asarray(op.primitive.impl(**op.attrs))
                t = op.results[0].type
                const_of[op.results[0].id] = len(self.constants)
                self.constants.append(np.ascontiguousarray(value.astype(t.dtype.np, copy=False).reshape(t.shape)))
                continue
            else:
                raise NotNative(f"{op.name} has no native form here")
            for vid, _ in ins:
                last_use[vid] = step
            for r in op.results:
                defined_at[r.id] = step
                made.add(r.id)
        if top and not steps:
            raise NotNative("no kernel or matmul to run")

        # Results: at the top each must be a value a step made (a new array); in a block a
        # result a step made is written straight into its out buffer (once), any other copied.
        n_steps = len(steps)
        bound: dict[int, int] = {}                   # value id -> the out/result it is written into
        copies: list[tuple[int, int]] = []           # (value id, out position)
        results: list[int] = []
        for j, v in enumerate(body.returns):
            b, t = base(v)
            if t:
                raise NotNative("a result that is a transposed view")
            if top:
                if b not in made or tuple(value_type[b].shape) != tuple(v.type.shape):
                    raise NotNative("a result that no kernel or matmul makes (an argument, a constant or a view)")
                results.append(b)  # a variable's new value is the value a step made
            elif b in made and b not in bound:
                bound[b] = j
            else:
                copies.append((b, j))
                last_use[b] = n_steps
        external = set(results) if top else set(bound)

        # A kernel's one output may take the memory of an input it overwrites element for
        # element (the kernel declares which), when that input dies there, is made by a step
        # and is not written to the caller: chains of such outputs share one buffer (``group``).
        group: dict[int, int] = {}

        def root(vid: int) -> int:
            while vid in group:
                vid = group[vid]
            return vid

        # A donated argument (``Function.donated``) may likewise become a result: the result
        # is then the argument's array, when the call finds it free to overwrite (glue).
        donor: dict[int, int] = {}                   # result value id -> argument position
        donated = {a.id: i for i, (a, d) in enumerate(zip(body.args, function.donated)) if d and top}
        for n, (what, op, ins) in enumerate(steps):
            k = kernels.get(op.id) if what == "kernel" else None
            if k is None or not k.in_place:
                continue
            position = {b.name: j for j, b in enumerate(k.inputs)}
            taken: set[int] = set()
            for out, names_ in zip(op.results, k.in_place):
                # A donated argument first: taking it saves the result a new array each call.
                for vid in sorted((ins[position[name]] for name in names_), key=lambda v: v not in donated):
                    if (vid in taken or last_use.get(vid) != n or ins.count(vid) != 1
                            or not _same_layout(value_type[vid], out.type)):
                        continue
                    if vid in made and vid not in external:
                        group[out.id] = vid
                    elif (vid in donated and out.id in external and donated[vid] not in donor.values()
                          and value_type[vid].dtype == out.type.dtype):
                        donor[out.id] = donated[vid]
                    else:
                        continue
                    taken.add(vid)
                    break
        # (A result takes an intermediate's memory or a donated argument's, never both, and
        # nothing takes a result's: a donated array holds no chain written before it is read.)
        members: dict[int, list[int]] = {}
        for vid in defined_at:
            members.setdefault(root(vid), []).append(vid)
        owner = {r: next((m for m in ms if m in external), r) for r, ms in members.items()}

        buffers: dict[int, Buffer] = {}
        for i, a in enumerate(body.args):
            buffers[a.id] = Buffer(names[a.id], a.type.dtype.np.name, tuple(a.type.shape), "arg", i)
        outs: list[str] = []
        out_buffers: list[Buffer] = []
        if top:
            for vid in dict.fromkeys(results):
                t = value_type[vid]
                buffers[vid] = Buffer(names[vid], t.dtype.np.name, tuple(t.shape), "result",
                                      len(buffers) - len(body.args), donor=donor.get(vid, -1))
            outs = [names[v] for v in results]
        else:
            for j, v in enumerate(body.returns):
                t = v.type
                vid = next((b for b, pos in bound.items() if pos == j), None)
                name = names[vid] if vid is not None else f"{prefix}o{j}"
                out_buffers.append(Buffer(name, t.dtype.np.name, tuple(t.shape), "out", j))
                if vid is not None:
                    buffers[vid] = out_buffers[-1]
            outs = [b.name for b in out_buffers]
        for vid, k in const_of.items():
            t = value_type[vid]
            buffers[vid] = Buffer(names[vid], t.dtype.np.name, tuple(t.shape), "const", k)

        # Steps with scratch of their own: control steps (carries, the condition, their blocks'),
        # kernels with temp buffers.
        step_scratch: dict[int, tuple[int, list[BlockPlan]]] = {}
        for n, (what, op, ins) in enumerate(steps):
            if what == "control":
                plans = []
                for k, src in enumerate(blocks[op.id]):
                    self.n_blocks += 1
                    plans.append(self.plan(src.function, src.kernels, src.blocks, top=False,
                                           prefix=f"b{self.n_blocks}_"))
                carry = op.primitive.loop.num_carry(op.attrs) if op.primitive.loop else 0
                carry_bytes = sum(_aligned(_nbytes(v.type)) for v in op.inputs[:carry])
                # The flag's SCRATCH_ALIGN bytes, and as many again: the step starts its scratch
                # at the next multiple of SCRATCH_ALIGN itself (program_emit.control).
                size = 2 * carry_bytes + 2 * SCRATCH_ALIGN + max((p.scratch_bytes for p in plans), default=0)
                step_scratch[n] = (size, plans)

        # A kernel's large temp buffers (a reduction's accumulators) live in the scratch block
        # too, for its step only: a kernel allocating them itself maps fresh pages each call
        # once glibc gives the freed top of its heap back (a transformer's training step:
        # 2,900 page faults). Smaller ones it callocs from malloc's heap, and calloc's memory
        # is an object of its own to LLVM, whose alias queries cost less to compile (the zoo
        # MLP's training step, whose bias gradients sum into temps, 236 -> 221 ms cold). A
        # plan symbolic in a batch dimension (sequential) keeps them all in scratch, whatever
        # the size: its samples must agree, and a C caller's scratch then is all it needs.
        for n, (what, op, ins) in enumerate(steps):
            if what == "kernel" and kernels[op.id].temps:
                k = kernels[op.id]
                # The kernel's own operand shapes (an input may be a reshape's buffer); a complex
                # buffer is its parts to the kernel: one more dimension, of 2.
                shapes = [tuple(v.type.shape) + ((2,) if v.type.dtype.is_complex else ())
                          for v in (*op.inputs, *op.results)]
                of = dict(zip((b.name for b in k.buffers if b.role != "temp"), shapes))
                nbytes = kernel_abi.temp_bytes(k, {s.name: of[s.buffer][s.dim] for s in k.sizes})
                if nbytes and (self.sequential or nbytes >= TEMP_SCRATCH_MIN_BYTES):
                    step_scratch[n] = (nbytes, [])
        for n, (what, op, ins) in enumerate(steps):
            if what == "conv_gemm":
                _, lanes, slot_bytes, sum_bytes = self._conv_blocks(*windows[n], op)
                step_scratch[n] = (lanes * (slot_bytes + sum_bytes), [])
        inter = [r for r in members if owner[r] not in external]
        sizes = [_nbytes(value_type[v]) for v in inter]
        lives = [(min(defined_at[m] for m in members[r]), max(last_use.get(m, defined_at[m]) for m in members[r]))
                 for r in inter]
        temps = sorted(step_scratch)
        if self.sequential:
            # Steps' scratch last, as alignment 1: a kernel starts each of its temps at the next
            # multiple of TEMP_ALIGN itself (temp_bytes holds the room), a loop its scratch at
            # the next multiple of SCRATCH_ALIGN; their sizes, not multiples of 8, put the
            # float64 intermediates after them 2 or 6 bytes past one.
            offsets, scratch = _sequential_offsets(sizes + [step_scratch[n][0] for n in temps],
                                                   [value_type[v].dtype.np.itemsize for v in inter]
                                                   + [1] * len(temps))
        else:
            offsets, scratch = _assign_offsets(sizes + [step_scratch[n][0] for n in temps],
                                               lives + [(n, n) for n in temps])
        for vid, off in zip(inter, offsets):
            t = value_type[vid]
            buffers[vid] = Buffer(names[vid], t.dtype.np.name, tuple(t.shape), "scratch", off)
        temp_buffers = {}
        for n, off in zip(temps, offsets[len(inter):]):
            temp_buffers[n] = Buffer(f"{prefix}temp{n}", "uint8", (step_scratch[n][0],), "scratch", off)
        kernel_temps = {n: b.name for n, b in temp_buffers.items() if steps[n][0] == "kernel"}
        for r, ms in members.items():
            home = buffers[owner[r]]
            for m in ms:
                if m not in buffers:
                    t = value_type[m]
                    buffers[m] = Buffer(names[m], t.dtype.np.name, tuple(t.shape), home.kind, home.slot, home.name)

        calls: list[Any] = []
        work = 0
        for n, (what, op, ins) in enumerate(steps):
            if what == "kernel":
                k = kernels[op.id]
                if prefix and op.id not in routines:  # kernel symbols stay unique in the one module
                    k = dataclasses.replace(k, name=f"{prefix}{k.name}")
                vals = [*ins, *(r.id for r in op.results)]
                # The kernel's own operand shapes: an input may be a reshape's buffer (a view).
                shapes = [tuple(v.type.shape) for v in (*op.inputs, *op.results)]
                # A complex buffer is its parts to the kernel: one more dimension, of 2.
                dims = tuple(d for v, s in zip(vals, shapes) for d in (*s, *((2,) if value_type[v].dtype.is_complex
                                                                            else ())))
                elements = max((math.prod(s) for s in shapes), default=1)
                work += elements
                split = None
                found = kernel_abi.chunk_loop(k)
                if (self.parallel and self.threads > 1 and found is not None
                        and elements >= NATIVE_PARALLEL_MIN_ELEMENTS):
                    trips = _trips(k, found[1], shapes)
                    if trips >= 2:
                        split = (trips, self.threads)
                calls.append(KernelCall(k, tuple(buffers[v].name for v in vals), dims, split,
                                        kernel_temps.get(n, ""), op.id in routines))
            elif what == "patches":
                out = _lone_patches(op).results[0].type
                elements = math.prod(out.shape)
                work += elements
                parts = (self.threads if self.parallel and self.threads > 1 and elements >= NATIVE_PARALLEL_MIN_ELEMENTS
                         and out.shape[0] * out.shape[1] >= 2 else 1)
                calls.append(_patches_step(op, buffers[ins[0]].name, buffers[op.results[0].id].name, parts))
            elif what == "conv_gemm":
                window_op, transposed = windows[n]
                windows_of = _patches_step(window_op, buffers[ins[0]].name, temp_buffers[n].name, 1)
                t = op.results[0].type
                rows, lanes, slot_bytes, sum_bytes = self._conv_blocks(window_op, transposed, op)
                k = op.inputs[0].type.shape[-1]
                gemm = Gemm(temp_buffers[n].name, buffers[ins[1]].name, buffers[op.results[0].id].name, transposed,
                            False, math.prod(t.shape[:-1]), t.shape[-1], k, t.dtype.np.name)
                calls.append(ConvGemm(windows_of, gemm, rows, lanes, slot_bytes, sum_bytes))
                work += math.prod(t.shape) * k
            elif what == "gemm":
                calls.append(_gemm(op, ins, buffers))
                work += math.prod(op.results[0].type.shape) * op.inputs[0].type.shape[-1]
            elif what == "skip":   # windows a conv_gemm step makes
                continue
            elif what == "lapack":
                a = op.inputs[0].type
                batch, m, n = math.prod(a.shape[:-2]), a.shape[-2], a.shape[-1]
                k = op.results[0].type.shape[-1] if op.primitive.role == "solve" else n
                calls.append(Lapack(op.primitive.role, a.dtype.np.name, tuple(buffers[v].name for v in ins),
                                    tuple(buffers[r.id].name for r in op.results), batch, n, k,
                                    bool(op.attrs.get("lower", True)), m, bool(op.attrs.get("full_matrices", False))))
                work += batch * m * n * min(m, n)
            else:
                size, plans = step_scratch[n]
                attrs = op.attrs
                role = op.primitive.role
                carry = op.primitive.loop.num_carry(op.attrs) if op.primitive.loop else 0
                offs, at = [], 0
                for v in op.inputs[:carry]:  # current and next of each carry side by side
                    size_v = _aligned(_nbytes(v.type))
                    offs.append((at, at + size_v))
                    at += 2 * size_v
                flag = at
                trips = (attrs["length"] if role == "scan_loop" else
                         attrs["maximum_iterations"] if role == "while_loop" else 1)
                work += (trips if trips >= 0 else GIL_MIN_ELEMENTS) * max(sum(p.work for p in plans), 1)
                calls.append(ControlCall(role, tuple(plans), tuple(buffers[v].name for v in ins),
                                         tuple(buffers[r.id].name for r in op.results), temp_buffers[n].name,
                                         carry, attrs.get("num_xs", 0), attrs.get("length", 0),
                                         bool(attrs.get("reverse", False)), attrs.get("maximum_iterations", -1),
                                         tuple(offs), flag, flag + SCRATCH_ALIGN))
        for vid, j in copies:
            src = buffers[vid] if vid in buffers else None
            if src is None:
                raise NotNative("a block result with no buffer")
            calls.append(Copy(src.name, outs[j], _nbytes(value_type[vid])))
        all_buffers = [*buffers.values(), *temp_buffers.values()]
        if not top:  # the out buffers only a copy writes
            all_buffers += [b for b in out_buffers if b not in all_buffers]
        return BlockPlan(prefix.rstrip("_") or function.name, tuple(all_buffers),
                         tuple(names[a.id] for a in body.args), tuple(outs), tuple(calls), scratch, work)


def _patches_step(op: Any, x: str, out: str, parts: int) -> Patches:
    """The Patches step of kernel op ``op`` (``_lone_patches``) from buffer ``x`` into ``out``."""
    inner = _lone_patches(op)
    xt, out_t, a = inner.inputs[0].type, inner.results[0].type, inner.attrs
    return Patches(x, out, xt.dtype.np.itemsize, tuple(xt.shape), tuple(out_t.shape[1:3]), tuple(a["kernel"]),
                   tuple(a["strides"]), tuple(a["dilation"]), (a["pads"][0], a["pads"][2]), parts)


def value_names(body: Any, prefix: str = "") -> dict[int, str]:
    """The name of each value of ``body`` (a Block) in its plan, by value id: ``a<k>`` an
    argument, ``v<k>`` an op's result, ``k`` counting the values before it, after
    ``prefix`` (a control op's block's). By position, because value ids differ between
    processes and a plan is part of its program's identity in the disk cache; so a
    plan's buffer is found again in the Function it was planned from (``fj.explain``)."""
    names: dict[int, str] = {}
    for a in body.args:
        names[a.id] = f"{prefix}a{len(names)}"
    for op in body.ops:
        for r in op.results:
            names[r.id] = f"{prefix}v{len(names)}"
    return names


def _lone_patches(op: Any) -> Any:
    """The ``patches`` op that is kernel op ``op``'s whole block, reading the block's one
    argument and making its one result (``Patches``); else None."""
    if len(op.blocks) != 1:
        return None
    block = op.blocks[0]
    if len(block.ops) != 1 or len(block.args) != 1:
        return None
    (inner,) = block.ops
    if (inner.primitive.role != "patches" or inner.inputs[0] is not block.args[0]
            or list(block.returns) != [inner.results[0]]):
        return None
    return inner


def _gemm(op: Any, ins: list[tuple[int, bool]], buffers: dict[int, Buffer]) -> Gemm:
    """The Gemm step of matmul ``op`` whose operands are the buffers of ``ins`` (value id,
    read transposed). Batch dimensions the second operand lacks fold into the rows of one
    product ([..., m, k] @ [k, n] is one [... * m, k] @ [k, n]); others become the batch."""
    (a, ta), (b, tb) = ins
    at, bt, ct = (v.type for v in (*op.inputs, op.results[0]))
    m, n, k = ct.shape[-2], ct.shape[-1], at.shape[-1]
    batch = tuple(ct.shape[:-2])
    dtype = ct.dtype.np.name
    if bt.ndim == 2 and not ta and math.prod(at.shape[:-2]) == math.prod(batch):
        return Gemm(buffers[a].name, buffers[b].name, buffers[op.results[0].id].name, False, tb,
                    math.prod(batch) * m, n, k, dtype)

    def strides(t: Any) -> tuple[int, ...]:
        own = t.shape[:-2]
        lead = len(batch) - len(own)
        block = t.shape[-2] * t.shape[-1]
        out = []
        for d in range(len(batch)):
            if d < lead or own[d - lead] == 1:
                out.append(0)
            else:
                out.append(block * math.prod(own[d - lead + 1:]))
        return tuple(out)

    return Gemm(buffers[a].name, buffers[b].name, buffers[op.results[0].id].name, ta, tb, m, n, k, dtype,
                batch, strides(at), strides(bt))


def pooled_batch(threads: int, g: Gemm) -> bool:
    """Whether a plan of ``threads`` runs the batch of products ``g`` over the native pool,
    whole products a chunk, each on one BLAS thread: constant sizes, two products or more,
    each below BLAS_PARALLEL_MIN_WORK (a larger one is cut into pieces over the pool by the
    gemm itself) and together at least that much. One thread took the zoo transformer's
    attention products (32 of 128x128x64, 32 of 128x64x128) at a third of the rate of its
    large products."""
    sizes = (g.m, g.n, g.k, *g.batch, *g.stride_a, *g.stride_b)
    if threads <= 1 or not g.batch or not all(isinstance(x, int) for x in sizes):
        return False
    count, work = math.prod(g.batch), g.m * g.n * g.k
    return count >= 2 and work < BLAS_PARALLEL_MIN_WORK and count * work >= BLAS_PARALLEL_MIN_WORK


def pooled_call(threads: int, step: KernelCall) -> bool:
    """Whether a plan of ``threads`` (``ProgramPlan.threads``) runs ``step``'s kernel rendered
    at the step's dims with its pooled loops (``kernel_abi.pooled_loops``) on the native
    pool: a kernel the plan does not split as chunks, at constant dims, ``threads`` above 1."""
    return (step.split is None and threads > 1 and all(isinstance(d, int) for d in step.dims)
            and bool(kernel_abi.pooled_loops(step.kernel)))


def links_pool(plan: ProgramPlan) -> bool:
    """Whether ``plan``'s code calls the native pool (a split kernel or a pooled call): a C
    library of it links the pool in."""
    return any(isinstance(s, KernelCall) and (s.split is not None or pooled_call(plan.threads, s))
               for s in walk_steps(plan.steps))


def walk_steps(steps: Sequence[Any]) -> list[Any]:
    """Every step of ``steps`` and of the blocks of its control steps, depth first."""
    out = []
    for s in steps:
        out.append(s)
        if isinstance(s, ControlCall):
            for block in s.blocks:
                out += walk_steps(block.steps)
    return out


def _nbytes(t: Any) -> int:
    return math.prod(t.shape) * t.dtype.np.itemsize


def _aligned(n: int) -> int:
    return -(-n // SCRATCH_ALIGN) * SCRATCH_ALIGN


def _same_layout(a: Any, b: Any) -> bool:
    return tuple(a.shape) == tuple(b.shape) and a.dtype.np.itemsize == b.dtype.np.itemsize


def _trips(k: Kernel, loop: Any, shapes: list[tuple[int, ...]]) -> int:
    """The trip count of the chunked loop at these shapes."""
    args = [b for b in k.buffers if b.role != "temp"]
    return kernel_abi.size_value(k, loop.stop, {b.name: s for b, s in zip(args, shapes)})
