"""The primitive registry: every primitive is declared once, here or in ``primitives/``.

A declaration says everything the rest of the system needs: the attribute schema with
defaults, the shape/dtype rule, the NumPy reference, the fusion kind, the scalar
template (elementwise ops), which dtypes it accepts, its input domain, its algebraic facts
(identity, idempotence, involution, ...), its role for passes that build or see through it,
and a VJP slot the autodiff pass fills. Passes and backends ask these properties; none of them looks a
primitive up by name to special-case it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from flowjit.ir.dtypes import ALL_DTYPES, DType, from_short
from flowjit.ir.dtypes import dtype as as_dtype
from flowjit.ir.errors import AxisError, ShapeError
from flowjit.ir.types import TensorType

KINDS = ("elementwise", "reduction", "layout", "opaque", "random", "stateful", "control", "constant",
         "transfer")

# What a primitive does, for passes that must build, compose or see through its ops
# (``Primitive.role``). A role fixes the meaning of the inputs and of the attributes named.
ROLES = {
    "choose": "inputs (pred, on_true, on_false): on_true where pred is true, else on_false",
    "convert": "one input, converted to the result dtype as ndarray.astype does",
    "permute_axes": "attr perm: np.transpose(x, perm)",
    "row_major_reshape": "attr shape: row-major reshape to any shape with the same element count",
    "unit_axes_reshape": "only size-1 axes added or removed: a row-major reshape to the result shape",
    "broadcast": "attr shape: np.broadcast_to(x, shape)",
    "strided_window": "attrs start/size/step: result[i] along d is x[start[d] + i*step[d]]",
    "constant_pad": "attrs low/high/value: x surrounded by value, low[d] before and high[d] after",
    "join": "attr axis: the inputs one after another along axis",
    "axis_index": "attrs shape/dimension: each element is its own index along dimension",
    "element_count": "attrs axes/dtype: the number of elements of x along axes, a 0-d value of dtype; reads no "
                     "element of x (a mean's divisor, which a program compiled for any batch size reads at run "
                     "time)",
    "gather": "inputs (x, indices), attr axis: x read along axis at each index clamped to [0, n-1]; "
              "indices.shape takes the axis's place",
    "scatter": "inputs (operand, indices, updates), attr axis: operand with each update combined into its "
               "element at its index clamped to [0, n-1] along axis, repeated indices in the updates' order, by the "
               "combine of the primitive's reducer (np.add.at, np.multiply.at, np.maximum.at, np.minimum.at)",
    "first_occurrence": "attr size: i64[size], at each v the first row-major position of v among the indices "
                        "clamped to [0, size-1], -1 where v does not occur",
    "cumulative_sum": "attrs axis/reverse: the running sum along axis (from the end when reverse), in the input "
                      "dtype",
    "sort": "attrs axis/descending: x sorted along axis (NaN last ascending, first descending)",
    "scalar_function": "an opaque op whose template names a function a library computes per element (SciPy's "
                       "special functions: lowering.scalar.LIBRARY_FUNCTIONS); it runs as a kernel of its own, one "
                       "call an element",
    "fourier_transform": "attrs fft_type/fft_lengths: the DFT of the trailing axes as XLA's Fft (fft "
                         "unnormalized, ifft times 1/N, rfft and irfft over half spectra)",
    "argsort": "attrs axis/descending: the i64 positions that sort x along axis, equal elements in their order "
               "(a stable sort; NaN last ascending, first descending)",
    "cholesky": "the lower-triangular L of each matrix [..., n, n] with L @ L^H == a (a's lower triangle read); "
                "NaN for a matrix that is not positive-definite",
    "solve": "inputs (a, b): x with a @ x == b for each matrix a [..., n, n] and b [..., n, k]; NaN where a is "
             "singular",
    "inverse": "the inverse of each matrix [..., n, n]; NaN where it is singular",
    "log_determinant": "(sign, log|det|) of each matrix [..., n, n]: (0, -inf) where it is singular",
    "orthogonal_triangular": "attr full_matrices: (q, r) with a == q @ r for each matrix [..., m, n], q's columns "
                             "orthonormal, r upper-triangular",
    "general_eigen": "(eigenvalues, right eigenvectors as columns), both complex, of each matrix [..., n, n]; "
                     "NaN where they do not converge",
    "singular_values": "attr full_matrices: (u, s, vh) of each matrix [..., m, n], s descending; NaN where they "
                       "do not converge",
    "symmetric_eigen": "attr lower: (eigenvalues ascending, eigenvectors as columns) of each symmetric (Hermitian) "
                       "matrix [..., n, n] read from its lower (upper) triangle; NaN where they do not converge",
    "kernel": "owns one block that runs as one compiled kernel (a fusion)",
    "variable_update": "inputs (var, value): the variable holds value once the call finishes; the result is value",
    "send": "attrs key/dst: hands its input to the recv of the same key (device dst); it escapes",
    "recv": "attrs key/src/shape/dtype: the value the send of the same key handed over",
    "matrix_product": "inputs (a, b): np.matmul(a, b), batch dimensions broadcast",
    "patches": "attrs kernel/strides/dilation/pads: x [N, H, W, C] -> [N, OH, OW, KH, KW, C], each window's "
               "taps (x[n, i*sh + p*dh - top, j*sw + q*dw - left, c], 0 in the padding)",
    "convolution": "inputs (x, filters): a sliding-window product (a contraction per output element, like a "
                   "matrix product's)",
    "branch": "inputs (index, operands...): runs block `index` (an i32[], clamped to the blocks) on the operands",
    "while_loop": "blocks (cond, body), attrs num_carry/maximum_iterations: carry = body(carry, consts) while "
                  "cond(carry, consts) holds, at most maximum_iterations times (-1: no bound)",
    "scan_loop": "one block, attrs num_carry/num_xs/length/reverse: carry, y = body(carry, xs[t], consts) for t "
                 "in 0..length-1 (or back); each y stacked along a new leading axis",
    "custom_vjp": "one block (bwd), attrs num_out/num_res: the results are the first num_out inputs; the VJP "
                  "inlines bwd(residuals, output cotangents, captures) for the arguments that follow the residuals",
    "call": "one block, attrs num_out/prevent_cse/recompute: the results are the block run on the inputs (the "
            "outputs, then the values the remat policy saved); inlined by the pipeline (fj.remat)",
    "name_tag": "one input, attr name: the input itself, named for the remat policies (fj.checkpoint_name)",
}
# Roles whose every result element is a copy of one element of their one input.
COPYING_ROLES = frozenset({"permute_axes", "row_major_reshape", "unit_axes_reshape", "broadcast",
                           "strided_window"})


class Literal:
    """An array-valued attribute (a constant's value): hashable, compared by contents."""

    __slots__ = ("array", "_hash")

    def __init__(self, array: np.ndarray):
        self.array = np.array(array, order="C")  # a private copy; 0-d stays 0-d
        self.array.setflags(write=False)
        self._hash = hash((self.array.dtype.str, self.array.shape, self.array.tobytes()))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Literal) and self.array.dtype == other.array.dtype
                and self.array.shape == other.array.shape
                and self.array.tobytes() == other.array.tobytes())

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"Literal({self.array!r})"


# Attribute kinds: how an attribute is validated, printed and parsed.
ATTR_KINDS = ("int", "ints", "bool", "float", "str", "dtype", "shape", "pairs", "literal", "padding")


@dataclass(frozen=True)
class AttrSpec:
    """One attribute of a primitive: its kind and its default (``REQUIRED`` if none)."""

    kind: str
    default: Any = None
    required: bool = True


def attr(kind: str, default: Any = ...) -> AttrSpec:
    """Declare an attribute of ``kind``; without ``default`` it must always be given."""
    assert kind in ATTR_KINDS, kind
    if default is ...:
        return AttrSpec(kind, None, True)
    return AttrSpec(kind, default, False)


def _is_int(x: object) -> bool:
    # Attribute ints are 64-bit, as in every backend; larger ones are malformed programs.
    return (isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))
            and -2**63 <= int(x) < 2**63)


def coerce_attr(prim: str, name: str, kind: str, value: Any) -> Any:
    """Validate an attribute value against its kind and return its canonical form.

    Raises ShapeError (naming the primitive and attribute) for a value of the wrong kind,
    so a malformed program is rejected here and not deep inside a rule.
    """
    def bad(expected: str) -> ShapeError:
        try:
            shown = repr(value)
        except ValueError:  # an int too long to print
            shown = f"<{type(value).__name__} too large to print>"
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        return ShapeError(f"attribute {name}={shown} must be {expected}", op=prim)

    if kind == "int":
        if not _is_int(value):
            raise bad("an int")
        return int(value)
    if kind in ("ints", "shape"):
        if not isinstance(value, (tuple, list)) or not all(_is_int(v) for v in value):
            raise bad("a tuple of ints")
        out = tuple(int(v) for v in value)
        if kind == "shape" and any(v < 0 for v in out):
            raise bad("a tuple of non-negative ints")
        # NumPy cannot even describe an array whose non-zero dimensions multiply past 2**62.
        if kind == "shape" and math.prod(v for v in out if v) >= 2**62:
            raise bad("a shape NumPy can represent (the product of its non-zero dimensions < 2**62)")
        return out
    if kind == "bool":
        if not isinstance(value, (bool, np.bool_)):
            raise bad("true or false")
        return bool(value)
    if kind == "float":
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise bad("a number")
        try:
            return float(value)
        except OverflowError:
            raise bad("a number within float64 range") from None
    if kind == "str":
        if not isinstance(value, str):
            raise bad("a string")
        return value
    if kind == "dtype":
        if isinstance(value, DType):
            return value
        if isinstance(value, str) and from_short(value) is not None:
            return from_short(value)
        if isinstance(value, str):
            by_name = {d.name: d for d in ALL_DTYPES}
            if value in by_name:
                return by_name[value]
            raise bad(f"a dtype ({', '.join(d.short for d in ALL_DTYPES)})")
        if (isinstance(value, type) and issubclass(value, np.generic)) or isinstance(value, np.dtype):
            try:
                d = as_dtype(value)
                if d.np == np.dtype(value):  # refuses byte-swapped spellings such as '>f4'
                    return d
            except (TypeError, ValueError):
                pass
        raise bad(f"a dtype ({', '.join(d.short for d in ALL_DTYPES)})")
    if kind == "pairs":
        if not isinstance(value, (tuple, list)) or not all(
                isinstance(p, (tuple, list)) and len(p) == 2 and all(_is_int(v) for v in p) for p in value):
            raise bad("a tuple of (int, int) pairs")
        return tuple((int(a), int(b)) for a, b in value)
    if kind == "padding":
        if isinstance(value, str):
            if value.upper() not in ("SAME", "VALID"):
                raise bad('"SAME", "VALID" or a tuple of (low, high) pairs')
            return value.upper()
        return coerce_attr(prim, name, "pairs", value)
    if kind == "literal":
        if isinstance(value, Literal):
            return value
        if isinstance(value, np.ndarray):
            return Literal(value)
        raise bad("an array literal")
    raise AssertionError(kind)


RuleFn = Callable[..., "TensorType | Sequence[TensorType]"]


@dataclass(frozen=True)
class Loop:
    """How a loop primitive's inputs split, named by the attributes that count them: the
    first ``attrs[carry]`` inputs are the carry (every iteration rebinds it), the next
    ``attrs[scanned]`` (when named) are sliced along their leading axis, one slice an
    iteration, and the rest are loop constants: every block of the op receives them
    unchanged, every iteration, as its trailing arguments at the same positions."""

    carry: str
    scanned: str | None = None

    def num_carry(self, attrs: dict[str, Any]) -> int:
        """How many leading inputs are the carry."""
        return attrs[self.carry]

    def first_constant(self, attrs: dict[str, Any]) -> int:
        """The index of the first loop constant, among the op's inputs and its blocks' arguments."""
        return attrs[self.carry] + (attrs[self.scanned] if self.scanned else 0)


class Primitive:
    """A primitive operation, declared once with everything the system needs to know.

    ``rule(in_types, **attrs)`` returns the result type(s) or raises ShapeError;
    ``impl(*arrays, **attrs)`` is the NumPy reference; ``template`` is the scalar
    expression of an elementwise op over inputs ``a, b, c`` shared by every backend
    (a dict keyed by dtype kind when the expression differs for ints and floats);
    ``dtypes`` lists the input dtypes it accepts; ``domain`` names the input range
    where it is defined (``"positive"``, ``"nonneg"``, ``"nonzero_rhs"``, ...);
    ``vjp(e, g, y, *xs, **attrs)`` is the reverse-mode rule of a single-result op: given
    an ``Emitter`` ``e``, the cotangent ``g`` of the result ``y`` and the inputs ``xs``, it
    emits and returns one cotangent per input, with that input's type (None: no
    gradient flows there). For a primitive that owns blocks, or an op with several results
    (``eigh``, ``svd``, ``qr``), the rule is ``vjp(e, gs, ys, *xs, blocks, **attrs)`` with a
    cotangent for every result (zeros where none flows; ``blocks`` empty for an op owning
    none); a block-owning rule differentiates a block with ``e.backward``, which the autodiff pass
    hands down (this layer cannot import it). An op of a primitive with ``num_blocks`` owns
    that many blocks (``-1``: one or more), isolated from above (they see only their own
    arguments); its rule and impl then also receive ``blocks``. ``block_names`` says what
    each block is, for pictures and messages: a name per block (``("cond", "body")``), or
    for a variable number of blocks a function of the count returning them (cond's
    ``branch 0 (false)``, ``branch 1 (true)``); read them with ``block_labels``.

    Algebraic facts, each exact for every input of every accepted dtype (floats compare by
    value, sign of zero and NaN-ness), and each meaning "no such fact" when left out; an
    ``identity`` is promised for the real dtypes only (complex arithmetic turns -0j into
    +0j and an infinite part into NaN where real arithmetic would not):

    ``identity``: a constant ``e`` with ``x op e == x`` (``e`` cast to x's dtype); for a
    ``commutative`` primitive also ``e op x == x``. For floats the sign of zero matters:
    add's identity is ``-0.0`` (``-0.0 + 0.0`` is ``+0.0``), sub's is ``+0.0``.
    ``idempotent``: ``x op x == x``. ``self_value``: ``x op x`` equals this constant for
    int and bool ``x`` (never promised for floats: ``inf - inf`` is NaN, NaN != NaN).
    ``involution``: ``op(op(x)) == x`` (with equal attributes).
    ``no_axes_identity``: the input dtypes for which a reduction over ``axes=()`` returns
    its input unchanged (float sums start from ``+0.0`` and so do not).
    Not algebraic: ``role``, one of ``ROLES`` (or None): what the op does, for passes that
    must build, compose or see through its ops. ``reducer`` (reductions, and scatters: how an
    update combines into its element): ``(init, combine)`` where init is a literal or
    ``lowest``/``highest`` (of the dtype) and combine a scalar template over ``acc`` and
    ``v``; or ``("arg", cmp)`` for an index of the first
    element that wins comparison ``cmp`` (NaN wins, as in NumPy). ``loop`` (a ``Loop``,
    primitives whose blocks run repeatedly): which inputs are carried, scanned and constant,
    for passes that treat every loop alike (hoisting invariants, running a loop natively).
    ``batch(e, xs, batched, **attrs) -> (outs, out_batched)`` (set by ``defbatch``) is the
    vmap rule: ``xs`` are the operands, ``batched[i]`` says whether ``xs[i]`` carries the batch
    at axis 0 (the batch size is that axis's length); it emits the batched op(s) with ``e`` and
    returns every result with a flag saying whether it carries the batch at axis 0. Left None,
    ``flowjit.ir.batching`` derives a rule from the declared kind, role and attrs.
    ``no_derivative``: why the primitive has no derivative though values flow through it (a
    host callback); reverse and forward mode raise with these words where a derivative
    through one of its ops is wanted (a non-differentiable primitive would give zero instead).
    ``maps_leading_dims``: the op maps over its operands' leading dimensions, which must be
    equal (NumPy's linalg over stacks of matrices, an FFT over its trailing axes), so a batch
    is one more leading dimension.
    ``decompose(e, *xs, **attrs) -> outs`` (set by ``defdecompose``): the op written in other
    primitives with emitter ``e``, for code generators with no kernel of its own (a
    convolution as its windows' patches times the filter, one GEMM), or None when the op is
    better left as it is (a float32 matmul, which BLAS computes; checked before emitting
    anything); the ``decompose`` pass replaces each such op before placement. The traced IR,
    the interpreter and autodiff see the op itself.
    ``reads(attrs) -> int`` (layout ops): how many positions of the result each element of
    the input appears at, at most (a convolution's windows: one a tap of a window over it);
    1 when None. Fusion bounds how many times a kernel recomputes a value by it.
    ``jvp(e, ts, ys, *xs, blocks, **attrs) -> (outs, tangents)`` (set by ``defjvp``) is the
    forward-mode rule: ``ts`` holds a tangent or None per input; it returns the tangent (or
    None) of every result and, in ``outs``, either None or values that compute the results
    ``ys`` again alongside their tangents (one loop over primals and tangents): the forward
    pass then replaces the op with them, so its work is done once. Left None, the JVP is
    derived by transposing ``vjp`` (``flowjit.passes.forward``).
    """

    def __init__(self, name: str, *, kind: str, rule: RuleFn, impl: Callable[..., Any],
                 attrs: dict[str, AttrSpec] | None = None, arity: int | None = 1,
                 template: str | dict[str, str] | None = None,
                 dtypes: Sequence[DType] = ALL_DTYPES, domain: str | None = None,
                 commutative: bool = False, differentiable: bool = True,
                 num_blocks: int = 0, identity: Any = None, idempotent: bool = False,
                 self_value: Any = None, involution: bool = False,
                 no_axes_identity: Sequence[DType] = (), role: str | None = None,
                 reducer: tuple[str, str] | None = None, vjp: Callable[..., Any] | None = None,
                 loop: Loop | None = None, batch: Callable[..., Any] | None = None,
                 maps_leading_dims: bool = False, jvp: Callable[..., Any] | None = None, no_derivative: str = "",
                 decompose: Callable[..., Any] | None = None, reads: Callable[[dict[str, Any]], int] | None = None,
                 block_names: Sequence[str] | Callable[[int], Sequence[str]] = (), doc: str = ""):
        assert kind in KINDS, kind
        assert role is None or role in ROLES, role
        assert loop is None or num_blocks != 0, f"{name}: a loop owns blocks"
        assert callable(block_names) or not block_names or len(block_names) == num_blocks, \
            f"{name}: {len(block_names)} block names for {num_blocks} blocks"
        self.name = name
        self.kind = kind
        self.rule = rule
        self.impl = impl
        self.attrs = dict(attrs or {})
        self.arity = arity
        # An unsigned int's scalar meaning is the signed one's unless declared apart: a
        # renderer reads its compares, division and casts as unsigned.
        self.template = {**template, "u": template["i"]} if isinstance(template, dict) and "i" in template \
            and "u" not in template else template
        self.dtypes = tuple(dtypes)
        self.domain = domain
        self.commutative = commutative
        self.differentiable = differentiable
        self.num_blocks = num_blocks
        self.identity = identity
        self.idempotent = idempotent
        self.self_value = self_value
        self.involution = involution
        self.no_axes_identity = tuple(no_axes_identity)
        self.role = role
        self.reducer = reducer
        self.vjp = vjp
        self.loop = loop
        self.batch = batch
        self.jvp = jvp
        self.decompose = decompose
        self.maps_leading_dims = maps_leading_dims
        self.no_derivative = no_derivative
        self.reads = reads
        self.block_names = block_names if callable(block_names) else tuple(block_names)
        self.doc = doc

    def block_labels(self, count: int) -> list[str]:
        """The name of each of the ``count`` blocks an op of this primitive owns, by role
        (``block_names``); ``block k`` where the primitive declares none."""
        names = list(self.block_names(count) if callable(self.block_names) else self.block_names)
        return names if len(names) == count else [f"block {k}" for k in range(count)]

    @property
    def pure(self) -> bool:
        """Whether two ops with equal inputs and attrs may be merged or dropped when unused."""
        return self.kind not in ("random", "stateful", "transfer")

    @property
    def has_side_effects(self) -> bool:
        """Whether its ops change state other than their results, so they must run even
        when nothing uses them (random draws are impure but have none: dropping an unused
        draw changes no result). A transfer between devices is one: its partner waits for it."""
        return self.kind in ("stateful", "transfer")

    @property
    def copies_elements(self) -> bool:
        """Whether each result element is a copy of one element of its one input."""
        return self.role in COPYING_ROLES

    def normalize_attrs(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """Check names and kinds, fill defaults, and return the canonical attribute dict."""
        unknown = set(attrs) - set(self.attrs)
        if unknown:
            raise ShapeError(f"unknown attribute(s) {sorted(unknown)}; "
                             f"{self.name} takes {sorted(self.attrs) or 'none'}", op=self.name)
        out = {}
        for k, spec in self.attrs.items():
            if k in attrs:
                out[k] = coerce_attr(self.name, k, spec.kind, attrs[k])
            elif spec.required:
                raise ShapeError(f"missing attribute {k}", op=self.name)
            else:
                out[k] = spec.default
        return out

    def infer(self, in_types: Sequence[TensorType], attrs: dict[str, Any],
              blocks: Sequence[Any] = ()) -> list[TensorType]:
        """Result types for ``in_types``, canonical ``attrs`` and (for ops that own blocks)
        ``blocks``, or a ShapeError naming the op."""
        if self.arity is not None and len(in_types) != self.arity:
            raise ShapeError(f"takes {self.arity} input(s), got {len(in_types)}", op=self.name)
        if (len(blocks) != self.num_blocks) if self.num_blocks >= 0 else not blocks:
            want = self.num_blocks if self.num_blocks >= 0 else "one or more"
            raise ShapeError(f"owns {want} block(s), got {len(blocks)}", op=self.name)
        for t in in_types:
            if t.dtype not in self.dtypes:
                raise ShapeError(
                    f"does not accept dtype {t.dtype} (inputs: {', '.join(map(str, in_types))}; "
                    f"accepted: {', '.join(d.short for d in self.dtypes)}); cast the input with .astype()",
                    op=self.name)
        try:
            if self.num_blocks:
                out = self.rule(list(in_types), blocks=list(blocks), **attrs)
            else:
                out = self.rule(list(in_types), **attrs)
        except ShapeError as e:
            raise type(e)(e.reason, op=self.name) from None  # an AxisError stays one
        if isinstance(out, TensorType):
            return [out]
        return list(out)

    def __repr__(self) -> str:
        return f"<primitive {self.name}>"


PRIMITIVES: dict[str, Primitive] = {}


def declare(name: str, **kwargs: Any) -> Primitive:
    """Declare and register a primitive; see ``Primitive`` for the fields."""
    if name in PRIMITIVES:
        raise ValueError(f"primitive {name} declared twice")
    p = Primitive(name, **kwargs)
    PRIMITIVES[name] = p
    return p


def get(name: str) -> Primitive:
    """The primitive called ``name``; KeyError if there is none."""
    return PRIMITIVES[name]


def all_primitives() -> list[Primitive]:
    """Every declared primitive, in declaration order (the package ``flowjit.ir`` imports
    ``flowjit.ir.primitives``, whose modules declare them, before anything can ask)."""
    return list(PRIMITIVES.values())


# ---- helpers shared by shape rules ------------------------------------------------

def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy's broadcast of ``shapes``, or ShapeError listing them."""
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(ndim):
        dims = {s[len(s) - ndim + i] for s in shapes if len(s) - ndim + i >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise ShapeError("shapes " + ", ".join(str(list(s)) for s in shapes)
                             + " do not broadcast together")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def normalize_axis(axis: int, ndim: int, what: str = "axis") -> int:
    """``axis`` in ``[0, ndim)`` (negative counts from the end), or AxisError (a ShapeError
    and an IndexError)."""
    if not -ndim <= axis < ndim:
        raise AxisError(f"{what} {axis} is out of range for rank {ndim}")
    return axis % ndim


def normalize_axes(axes: Sequence[int], ndim: int) -> tuple[int, ...]:
    """Sorted, unique, non-negative axes, or ShapeError for out-of-range or repeated ones."""
    out = [normalize_axis(a, ndim) for a in axes]
    if len(set(out)) != len(out):
        raise ShapeError(f"repeated axis in {tuple(axes)}")
    return tuple(sorted(out))


def same_dtype(in_types: Sequence[TensorType]) -> DType:
    """The one dtype all inputs share, or ShapeError listing them."""
    ds = {t.dtype for t in in_types}
    if len(ds) != 1:
        raise ShapeError("inputs must have the same dtype, got "
                         + ", ".join(str(t) for t in in_types) + "; cast one with .astype()")
    return in_types[0].dtype


def defvjp(name: str, rule: Callable[..., Any]) -> None:
    """Give the already declared primitive ``name`` its VJP rule (see ``Primitive``); used
    by the declaration modules right next to the declaration."""
    p = PRIMITIVES[name]
    if not p.differentiable:
        raise ValueError(f"{name} is declared non-differentiable")
    p.vjp = rule


def defdecompose(name: str, rule: Callable[..., Any]) -> None:
    """Give the already declared primitive ``name`` its decomposition into other primitives
    (see ``Primitive.decompose``), next to the declaration."""
    PRIMITIVES[name].decompose = rule


def defjvp(name: str, rule: Callable[..., Any]) -> None:
    """Give the already declared primitive ``name`` its forward-mode (JVP) rule (see
    ``Primitive``), where the one derived from its VJP would do the op's work twice."""
    p = PRIMITIVES[name]
    if not p.differentiable:
        raise ValueError(f"{name} is declared non-differentiable")
    p.jvp = rule


def defbatch(name: str, rule: Callable[..., Any]) -> None:
    """Give the already declared primitive ``name`` its batching (vmap) rule (see ``Primitive``),
    used where no rule can be derived from its declared properties (``flowjit.ir.batching``)."""
    PRIMITIVES[name].batch = rule
