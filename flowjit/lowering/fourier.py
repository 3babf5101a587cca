"""The discrete Fourier transform of an array's last axis as one kernel of its own: a
Stockham FFT (a stage of radix 3, 5 or 7 for each such factor of the length, then radix 4,
and one radix-2 stage where the length's power of two is odd) run on blocks of a vector
register's worth of rows at once.

Why a kernel and not products by DFT matrices (``flowjit.ir.primitives.fft``'s
decomposition): a DFT matrix of r rows costs r multiply-adds an element per factor where a
butterfly costs about log2(r), and moving the transformed axis first and back is two
transposes of the whole array (an rfft of f32[256, 1024] spent 0.33 of its 0.6 ms in them).
Here each block of rows is copied into scratch as [2n, lanes] (row 2j the real parts of
element j, 2j + 1 its imaginary parts; a block's rows the lanes), so every butterfly of every
stage is one operation on whole vectors, without shuffles (``Loop.lanes``); the stages run
in the block's scratch, which stays in cache. The copies in and out are transposes in
square tiles of the lanes (``Loop.block``: the renderer transposes a full tile in
registers). A block whose rows run out (the batch not a multiple of the lanes) computes its
unused lanes from whatever the scratch held and never stores them. The blocks are dealt to
``PARTS`` parts that the native pool's threads take like a parallel loop's iterations.

Stockham's form (the autosort FFT: no bit reversal), decimation in frequency, the stage of
a sub-transform length L and stride s (L * s = n) reading ``src`` and writing ``dst``::

    for p in 0..L/4, q in 0..s:   a, b, c, d = src[q + s * (p + k * L/4)], k = 0..3
        dst[q + s * 4p]       = (a + c) + (b + d)
        dst[q + s * (4p + 1)] = w^p  * ((a - c) - j (b - d))
        dst[q + s * (4p + 2)] = w^2p * ((a + c) - (b + d))
        dst[q + s * (4p + 3)] = w^3p * ((a - c) + j (b - d))

with w = exp(sign 2 pi i / L) and j = -sign i; the next stage has L/4 and 4s. A stage of an
odd radix r reads r terms src[q + s * (p + k * L/r)] and writes w^(mp) times their r-point DFT
to dst[q + s * (r p + m)], the DFT by (r - 1) / 2 pairs of terms (``odd_butterfly``). The
stages' count of each radix is read from the length at run time (its divisibility by r, r^2,
...), so one kernel still serves every length. Twiddles are
read from a table of exp(sign 2 pi i t / n), t < n, computed in float64 at each call (w^p
at stride s is entry p * s), so no twiddle is a product of rounded ones.

An rfft of n real samples is the complex FFT of its h = n/2 pairs (x[2j] + i x[2j + 1]: the
row's own memory, read as complex), untangled into the h + 1 terms of the half spectrum in
the scratch before the copy out: X_k = Z_k A_k + conj(Z_(h-k)) B_k with A_k = (1 - i w^k) / 2,
B_k = (1 + i w^k) / 2, w = exp(-2 pi i / n), Z's index mod h (the decomposition's formula).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

from flowjit.ir.dtypes import DType, float64
from flowjit.lowering.loops import (
    INDEX,
    Accumulator,
    AccValue,
    Buffer,
    Const,
    Expr,
    If,
    Kernel,
    Let,
    Load,
    Loop,
    Store,
    Update,
    Var,
)
from flowjit.lowering.scalar import apply, cadd, cmul, csub

# A block is one vector register of lanes per part (64 bytes: 16 float32, 8 float64).
LANES_BYTES = 64
# The blocks are dealt to PARTS parts (part k takes blocks k, k + PARTS, ...), which threads
# take like a parallel loop's iterations, each part with scratch of its own.
PARTS = 8
# Radix-4 stages the stage loop runs at most: lengths up to 4^8 * 2 (the decomposition's
# KERNEL_MAX_LENGTH is below).
MAX_RADIX4_STAGES = 8
# ... and so the longest transform the stages take (it bounds the odd radices' counts too).
MAX_LENGTH = 2 * 4 ** MAX_RADIX4_STAGES
# The odd radices of the stages before the radix-4 ones (a length 2^a 3^b 5^c 7^d), each a
# butterfly of (r - 1) / 2 pairs (``odd_butterfly``).
ODD_RADICES = (3, 5, 7)


def _i(n: int) -> Const:
    return Const(int(n), INDEX)


def _max_factors(r: int) -> int:
    """How many factors ``r`` a length of at most MAX_LENGTH can have."""
    count, q = 0, r
    while q <= MAX_LENGTH:
        count, q = count + 1, q * r
    return count


def _total(terms: list[Expr]) -> Expr:
    """The sum of ``terms`` (index expressions)."""
    return functools.reduce(lambda a, b: apply("add", a, b), terms)


Pair = tuple[Expr, Expr]


def _scaled(x: Pair, c: float, real: DType) -> Pair:
    """Complex ``x`` times the real constant ``c`` (in the parts' dtype)."""
    k = Const(c, real)
    return apply("mul", x[0], k), apply("mul", x[1], k)


def fourier_kernel(name: str, source: str, dims: list[Expr], out_last: Expr, d: DType, fft_type: str,
                   sizes: tuple, fresh: Callable[[str], str]) -> Kernel:
    """The kernel of one ``fft`` op over the last axis of ``source`` (``dims``, element dtype
    ``d``) into ``out0`` (its last dim ``out_last``): ``fft_type`` "fft" (complex,
    unnormalized, exp(-2 pi i jk / n)), "ifft" (exp(+2 pi i jk / n), times 1/n), both of a
    power-of-two n, "rfft" (real, n twice a power of two, the n/2 + 1 terms of the half
    spectrum) or "irfft" (its inverse, times 1/n: n real samples from n/2 + 1 terms, the
    first and last terms' imaginary parts ignored). Every size is read at run time (the
    stages are a loop), so one kernel serves every length and batch of its type and dtype.
    ``sizes`` and ``fresh`` are the lowering's size variables and fresh-name source."""
    real = d.real_dtype
    rank = len(dims)
    real_input, real_output = fft_type == "rfft", fft_type == "irfft"
    # the complex transform's length
    n = (apply("shr", dims[-1], _i(1)) if real_input else apply("sub", dims[-1], _i(1)) if real_output
         else dims[-1])
    # a row's real numbers in: the input's complex terms, or the samples of an rfft, parts apart
    width = apply("shl", dims[-1], _i(1)) if real_output else apply("shl", n, _i(1))
    # complex elements of the scratch's rows: the output's, or the input's for an irfft
    terms = dims[-1] if real_output else out_last
    lanes = LANES_BYTES // real.itemsize
    sign = 1 if fft_type in ("ifft", "irfft") else -1
    rows = _i(1)
    for m in dims[:-1]:
        rows = apply("mul", rows, m)
    blocks = apply("idiv", apply("add", rows, _i(lanes - 1)), _i(lanes))
    table, half, blocks_buf = fresh("twiddle"), fresh("untangle"), fresh("block")
    temps = [Buffer(table, "temp", real, 2, (dims[-1], _i(2))),
             *([Buffer(half, "temp", real, 2, (terms, _i(4)))] if real_input or real_output else []),
             # [ping/pong, part, element, real/imaginary, lane]
             Buffer(blocks_buf, "temp", real, 5, (_i(2), _i(PARTS), terms, _i(2), _i(lanes)))]

    def var(prefix: str) -> tuple[str, Var]:
        v = fresh(prefix)
        return v, Var(v, INDEX)

    def let(prefix: str, value: Expr, into: list) -> Var:
        name = fresh(prefix)
        into.append(Let(name, value))
        return Var(name, value.dtype)

    def rounded(e: Expr) -> Expr:
        return apply("cast", e, to=real)

    def radians(t: Expr, scale: Expr, into: list) -> Var:
        # t * scale in float64 (t an index)
        return let("angle", apply("mul", apply("cast", t, to=float64), scale), into)

    # exp(sign 2 pi i t / n) for t < n, in float64, rounded once to the parts' dtype
    t_name, t = var("t")
    inner: list = []
    step = apply("div", Const(sign * 2 * math.pi, float64), apply("cast", n, to=float64))
    angle = radians(t, step, inner)
    inner += [Store(table, (t, _i(0)), rounded(apply("cos", angle))),
              Store(table, (t, _i(1)), rounded(apply("sin", angle)))]
    body: list = [Loop(t_name, _i(0), n, 1, tuple(inner))]
    if real_input or real_output:
        # A_k = (1 - i w^k) / 2 and B_k = (1 + i w^k) / 2, w^k = cos(theta) - i sin(theta)
        # with theta = 2 pi k / 2n: A_k = ((1 - sin) / 2, -cos / 2), B_k = ((1 + sin) / 2, cos / 2)
        k_name, k = var("k")
        inner = []
        theta = radians(k, apply("div", Const(math.pi, float64), apply("cast", n, to=float64)), inner)
        sin, cos = apply("sin", theta), apply("cos", theta)
        one, halved = Const(1.0, float64), Const(0.5, float64)
        inner += [Store(half, (k, _i(0)), rounded(apply("mul", apply("sub", one, sin), halved))),
                  Store(half, (k, _i(1)), rounded(apply("neg", apply("mul", cos, halved)))),
                  Store(half, (k, _i(2)), rounded(apply("mul", apply("add", one, sin), halved))),
                  Store(half, (k, _i(3)), rounded(apply("mul", cos, halved)))]
        body.append(Loop(k_name, _i(0), terms, 1, tuple(inner)))

    part_name, part = var("part")
    blk_name, blk = var("blk")
    first, count = fresh("first"), fresh("count")
    first_v, count_v = Var(first, INDEX), Var(count, INDEX)

    def flat(buffer_rank: int, row_width: Expr, v: Expr, c: Expr) -> tuple:
        # element c of the row first + v of a buffer of ``buffer_rank`` dims whose rows hold
        # ``row_width`` elements: every leading index 0, the last the row-major offset (the
        # rows are contiguous)
        return (*(_i(0) for _ in range(buffer_rank - 1)),
                apply("add", apply("mul", apply("add", first_v, v), row_width), c))

    def scratch_index(which: Expr, c: Expr, v: Expr) -> tuple:
        # real number c of the block (element c // 2, part c % 2) at its row-major offset:
        # one index that moves by one as c steps, so a tile addresses it from its first
        return (which, part, _i(0), c, v)

    def tiles(row_width: Expr, rows_are_scratch: bool, make: Callable[[Expr, Expr], Store]) -> list:
        # A transpose between the rows of the block and ``row_width`` real numbers of the
        # scratch: full square tiles of the lanes as ``Loop.block`` tiles (the renderer
        # moves a full tile as vectors transposed in registers), the numbers past the last
        # full tile as loops. The inner loops are scalar: they run only in an edge tile
        # (the last block's rows), where vectors would be gathers and scatters.
        out: list = []
        t_name, tile = var("ct")
        c_name, c = var("c")
        v_name, v = var("v")
        low = fresh("c0")
        low_v = Var(low, INDEX)
        across = Loop(c_name, low_v, apply("add", low_v, _i(lanes)), 1, (make(v, c),), scalar=True)
        along = Loop(v_name, _i(0), count_v, 1, (make(v, c),), scalar=True)
        if rows_are_scratch:   # the tile's rows: scratch numbers; its columns: the lanes
            rows_loop = Loop(c_name, low_v, apply("add", low_v, _i(lanes)), 1, (along,), block=lanes)
        else:                  # the tile's rows: the lanes; its columns: the row's numbers
            rows_loop = Loop(v_name, _i(0), count_v, 1, (across,), block=lanes)
        full = apply("idiv", row_width, _i(lanes))
        out.append(Loop(t_name, _i(0), full, 1, (Let(low, apply("mul", tile, _i(lanes))), rows_loop)))
        c_name, c = var("c")
        v_name, v = var("v")
        out.append(Loop(v_name, _i(0), count_v, 1, (
            Loop(c_name, apply("mul", full, _i(lanes)), row_width, 1, (make(v, c),), scalar=True),)))
        return out

    in_rank = rank if real_input else rank + 1
    copy_in = tiles(width, True, lambda v, c: Store(blocks_buf, scratch_index(_i(0), c, v),
                                                     Load(source, flat(in_rank, width, v, c), real)))

    def vector_loop(make: Callable[[Var, Callable[[str, Expr], Var]], list]) -> Loop:
        # A loop over the lanes (``Loop.lanes``), its values bound by ``bound``.
        v_name, v = var("v")
        lets: list = []

        def bound(prefix: str, value: Expr) -> Var:
            return let(prefix, value, lets)
        stores = make(v, bound)
        return Loop(v_name, _i(0), _i(lanes), 1, (*lets, *stores), lanes=lanes)

    def load_table(buffer: str, entry: Expr, columns: tuple[int, ...], lets: list) -> list[Var]:
        return [let("w", Load(buffer, (entry, _i(col)), real), lets) for col in columns]

    def element(which: Expr, row: Expr, v: Var, bound) -> Pair:
        return tuple(bound("x", Load(blocks_buf, (which, part, row, _i(k), v), real)) for k in (0, 1))

    def put(which: Expr, row: Expr, v: Var, value: Pair) -> list:
        return [Store(blocks_buf, (which, part, row, _i(k), v), value[k]) for k in (0, 1)]

    def stage(src: Expr, radix: int, length: Expr, stride: Expr, into: list) -> None:
        # one stage of ``radix`` on sub-transforms of ``length`` at ``stride``, from scratch
        # ``src`` (0 or 1) into the other
        dst = apply("sub", _i(1), src)
        quarter = (apply("shr", length, _i(2 if radix == 4 else 1)) if radix in (2, 4)
                   else apply("idiv", length, _i(radix)))
        p_name, p = var("p")
        q_name, q = var("q")
        tw_lets: list = []
        w = [tuple(load_table(table, apply("mul", p, apply("mul", stride, _i(k))), (0, 1), tw_lets))
             for k in range(1, radix)]

        def at(k: int) -> Expr:        # q + s * (p + k * quarter)
            return apply("add", q, apply("mul", stride, apply("add", p, apply("mul", quarter, _i(k)))))

        def out_row(k: int) -> Expr:   # q + s * (radix * p + k)
            return apply("add", q, apply("mul", stride, apply("add", apply("mul", p, _i(radix)), _i(k))))

        def butterfly(v: Var, bound) -> list:
            def named(x: Pair) -> Pair:
                return bound("s", x[0]), bound("s", x[1])
            if radix == 2:
                a, b = element(src, at(0), v, bound), element(src, at(1), v, bound)
                return put(dst, out_row(0), v, cadd(a, b)) + put(dst, out_row(1), v, cmul(csub(a, b), w[0]))
            if radix % 2:
                return odd_butterfly(v, bound, named)
            a, b, c, e = (element(src, at(k), v, bound) for k in range(4))
            apc, amc, bpd = named(cadd(a, c)), named(csub(a, c)), named(cadd(b, e))
            bme = csub(b, e)
            # j (b - d) with j = -sign i: i (x + iy) = -y + ix, -i (x + iy) = y - ix
            jbme = named((apply("neg", bme[1]), bme[0]) if sign < 0 else (bme[1], apply("neg", bme[0])))
            return (put(dst, out_row(0), v, cadd(apc, bpd)) + put(dst, out_row(1), v, cmul(csub(amc, jbme), w[0]))
                    + put(dst, out_row(2), v, cmul(csub(apc, bpd), w[1]))
                    + put(dst, out_row(3), v, cmul(cadd(amc, jbme), w[2])))

        def odd_butterfly(v: Var, bound, named) -> list:
            # The r-point DFT by pairs: with s_k = x_k + x_(r-k) and d_k = x_k - x_(r-k),
            # y_m = x_0 + sum_k cos(2 pi km / r) s_k + sign i sum_k sin(2 pi km / r) d_k, and
            # y_(r-m) the same with the sine sum's sign flipped (k, m = 1 .. (r - 1) / 2).
            x = [element(src, at(k), v, bound) for k in range(radix)]
            half = radix // 2
            sums = [named(cadd(x[k], x[radix - k])) for k in range(1, half + 1)]
            diffs = [named(csub(x[k], x[radix - k])) for k in range(1, half + 1)]
            out = put(dst, out_row(0), v, functools.reduce(cadd, sums, x[0]))
            for m in range(1, half + 1):
                a, b = x[0], None
                for k, (t, u) in enumerate(zip(sums, diffs), 1):
                    angle = 2 * math.pi * ((k * m) % radix) / radix
                    a = cadd(a, _scaled(t, math.cos(angle), real))
                    term = _scaled(u, math.sin(angle), real)
                    b = term if b is None else cadd(b, term)
                a, b = named(a), named(b)
                ib = (apply("neg", b[1]), b[0]) if sign > 0 else (b[1], apply("neg", b[0]))
                out += put(dst, out_row(m), v, cmul(cadd(a, ib), w[m - 1]))
                out += put(dst, out_row(radix - m), v, cmul(csub(a, ib), w[radix - m - 1]))
            return out
        per_p = Loop(q_name, _i(0), stride, 1, (vector_loop(butterfly),))
        into.append(Loop(p_name, _i(0), quarter, 1, (*tw_lets, per_p)))

    block: list = [Let(first, apply("mul", blk, _i(lanes))),
                   Let(count, apply("min", _i(lanes), apply("sub", rows, first_v))),
                   *copy_in]
    start = _i(0)       # the scratch the stages start from
    if real_output:
        # The first and last terms' imaginary parts are ignored (pocketfft's c2r), then the
        # terms are tangled into the half-length spectrum Z_k = X_k conj(A_k) +
        # conj(X_(h-k)) conj(B_k), k < h (rfft's untangling inverted), whose inverse FFT
        # holds the even samples in its real parts and the odd ones in its imaginary parts.
        zero = Const(0.0, real)
        block.append(vector_loop(lambda v, bound: [Store(blocks_buf, (_i(0), part, _i(0), _i(1), v), zero),
                                                   Store(blocks_buf, (_i(0), part, n, _i(1), v), zero)]))
        k_name, k = var("k")
        lets = []
        a_re, a_im, b_re, b_im = load_table(half, k, (0, 1, 2, 3), lets)
        mirror = let("mirror", apply("sub", n, k), lets)

        def tangled(v: Var, bound) -> list:
            x, m = element(_i(0), k, v, bound), element(_i(0), mirror, v, bound)
            return put(_i(1), k, v, cadd(cmul(x, (a_re, apply("neg", a_im))),
                                         cmul((m[0], apply("neg", m[1])), (b_re, apply("neg", b_im)))))
        block.append(Loop(k_name, _i(0), n, 1, (*lets, vector_loop(tangled))))
        start = _i(1)
    # The odd radices' stages first: for each radix r of ODD_RADICES, as many stages as n has
    # factors r (counted by divisibility by r, r^2, ...), stage st on sub-transforms of
    # n / (before * r^st) at stride before * r^st, ``before`` the product of the radices done.
    # A power-of-two n runs none of them.
    before: Expr = _i(1)
    done = start
    for r in ODD_RADICES:
        powers = [r ** i for i in range(1, _max_factors(r) + 1)]
        divides = [apply("eq", apply("irem", n, _i(q)), _i(0)) for q in powers]
        factors = let(f"factors{r}", _total([apply("select", c, _i(1), _i(0)) for c in divides]), block)
        st_name, st = var("st")
        inner: list = []
        power: Expr = _i(1)            # r^st
        for i, q in enumerate(powers, 1):
            power = apply("select", apply("eq", st, _i(i)), _i(q), power)
        at_stride = let("stride", apply("mul", before, power), inner)
        stage(apply("and", apply("add", done, st), _i(1)), r, apply("idiv", n, at_stride), at_stride, inner)
        block.append(Loop(st_name, _i(0), factors, 1, tuple(inner)))
        product: Expr = _i(1)
        for c in divides:
            product = apply("mul", product, apply("select", c, _i(r), _i(1)))
        before = let("before", apply("mul", before, product), block)
        done = let("done", apply("add", done, factors), block)
    # n's power of two: the radix-4 stages, stage st on sub-transforms of n2 / 4^st at stride
    # before * 4^st, from scratch (done + st) % 2, while the length is at least 4; a radix-2
    # stage if 2 is left.
    n2 = let("n2", apply("idiv", n, before), block)
    st_name, st = var("st")
    fours = fresh("fours")
    radix4: list = []
    length = let("length", apply("shr", n2, apply("shl", st, _i(1))), radix4)
    then: list = []
    stage(apply("and", apply("add", st, done), _i(1)), 4, length, apply("shl", before, apply("shl", st, _i(1))),
          then)
    then.append(Update(fours, _i(1)))
    radix4.append(If(apply("ge", length, _i(4)), tuple(then)))
    block += [Accumulator(fours, "sum", INDEX, _i(0)),
              Loop(st_name, _i(0), _i(MAX_RADIX4_STAGES), 1, tuple(radix4))]
    done4 = let("done4", AccValue(fours, INDEX), block)
    last_stride = let("stride", apply("shl", before, apply("shl", done4, _i(1))), block)
    odd = let("odd", apply("eq", apply("shr", n2, apply("shl", done4, _i(1))), _i(2)), block)
    then = []
    stage(apply("and", apply("add", done4, done), _i(1)), 2, _i(2), last_stride, then)
    block.append(If(odd, tuple(then)))
    src = let("src", apply("and", apply("add", apply("add", done4, done), apply("select", odd, _i(1), _i(0))),
                           _i(1)), block)
    if real_input:
        # X_k = Z_k A_k + conj(Z_(h-k)) B_k, k = 0..h
        k_name, k = var("k")
        lets: list = []
        a_re, a_im, b_re, b_im = load_table(half, k, (0, 1, 2, 3), lets)
        at_k = let("at", apply("irem", k, n), lets)
        mirror = let("mirror", apply("irem", apply("sub", n, k), n), lets)
        dst = apply("sub", _i(1), src)

        def untangled(v: Var, bound) -> list:
            z, m = element(src, at_k, v, bound), element(src, mirror, v, bound)
            return put(dst, k, v, cadd(cmul(z, (a_re, a_im)), cmul((m[0], apply("neg", m[1])), (b_re, b_im))))
        block.append(Loop(k_name, _i(0), terms, 1, (*lets, vector_loop(untangled))))
        src = let("src", dst, block)

    if fft_type in ("ifft", "irfft"):
        # times 1/n in the scratch (a block tile moves, adds and multiplies only its own values)
        inv = let("inv", apply("div", Const(1.0, real), apply("cast", n, to=real)), block)
        r_name, r = var("r")

        def scaled(v: Var, bound) -> list:
            z = element(src, r, v, bound)
            return put(src, r, v, (apply("mul", z[0], inv), apply("mul", z[1], inv)))
        block.append(Loop(r_name, _i(0), n, 1, (vector_loop(scaled),)))

    # the output row's real numbers: its samples (irfft), or its complex terms' parts
    out_rank, out_width = (rank, out_last) if real_output else (rank + 1, apply("shl", terms, _i(1)))

    def move(v: Expr, c: Expr) -> Store:
        value = Load(blocks_buf, scratch_index(src, c, v), real)
        return Store("out0", flat(out_rank, out_width, v, c), value)
    block += tiles(out_width, False, move)
    body.append(Loop(part_name, _i(0), _i(PARTS), 1, (Loop(blk_name, part, blocks, PARTS, tuple(block)),),
                     parallel=True))
    buffers = (Buffer(source, "in", real, in_rank), Buffer("out0", "out", real, out_rank), *temps)
    return Kernel(name, buffers, sizes, tuple(body), ((),))
