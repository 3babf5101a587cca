"""The primitive registry: every primitive is declared once, here or in ``primitives/``.

A declaration says everything the rest of the system needs: the attribute schema with
defaults, the shape/dtype rule, the NumPy reference, the fusion kind, the scalar
template (elementwise ops), which dtypes it accepts, its input domain, and a VJP slot the
autodiff pass fills. Passes and backends ask these properties; none of them looks a
primitive up by name to special-case it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from flowjit.ir.dtypes import ALL_DTYPES, DType, from_short
from flowjit.ir.dtypes import dtype as as_dtype
from flowjit.ir.errors import ShapeError
from flowjit.ir.types import TensorType

KINDS = ("elementwise", "reduction", "layout", "opaque", "random", "stateful", "control", "constant")


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
            raise bad("a dtype (bool, i32, i64, f16, f32, f64)")
        if (isinstance(value, type) and issubclass(value, np.generic)) or isinstance(value, np.dtype):
            try:
                d = as_dtype(value)
                if d.np == np.dtype(value):  # refuses byte-swapped spellings such as '>f4'
                    return d
            except (TypeError, ValueError):
                pass
        raise bad("a dtype (bool, i32, i64, f16, f32, f64)")
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


class Primitive:
    """A primitive operation, declared once with everything the system needs to know.

    ``rule(in_types, **attrs)`` returns the result type(s) or raises ShapeError;
    ``impl(*arrays, **attrs)`` is the NumPy reference; ``template`` is the scalar
    expression of an elementwise op over inputs ``a, b, c`` shared by every backend
    (a dict keyed by dtype kind when the expression differs for ints and floats);
    ``dtypes`` lists the input dtypes it accepts; ``domain`` names the input range
    where it is defined (``"positive"``, ``"nonneg"``, ``"nonzero_rhs"``, ...);
    ``vjp`` is filled by the autodiff pass.
    """

    def __init__(self, name: str, *, kind: str, rule: RuleFn, impl: Callable[..., Any],
                 attrs: dict[str, AttrSpec] | None = None, arity: int | None = 1,
                 template: str | dict[str, str] | None = None,
                 dtypes: Sequence[DType] = ALL_DTYPES, domain: str | None = None,
                 commutative: bool = False, differentiable: bool = True,
                 doc: str = ""):
        assert kind in KINDS, kind
        self.name = name
        self.kind = kind
        self.rule = rule
        self.impl = impl
        self.attrs = dict(attrs or {})
        self.arity = arity
        self.template = template
        self.dtypes = tuple(dtypes)
        self.domain = domain
        self.commutative = commutative
        self.differentiable = differentiable
        self.vjp: Callable[..., Any] | None = None
        self.doc = doc

    @property
    def pure(self) -> bool:
        """Whether two ops with equal inputs and attrs may be merged or dropped when unused."""
        return self.kind not in ("random", "stateful")

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

    def infer(self, in_types: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        """Result types for ``in_types`` and canonical ``attrs``, or a ShapeError naming the op."""
        if self.arity is not None and len(in_types) != self.arity:
            raise ShapeError(f"takes {self.arity} input(s), got {len(in_types)}", op=self.name)
        for t in in_types:
            if t.dtype not in self.dtypes:
                raise ShapeError(
                    f"does not accept dtype {t.dtype} (inputs: {', '.join(map(str, in_types))}; "
                    f"accepted: {', '.join(d.short for d in self.dtypes)}); cast the input with .astype()",
                    op=self.name)
        try:
            out = self.rule(list(in_types), **attrs)
        except ShapeError as e:
            raise ShapeError(e.reason, op=self.name) from None
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
    _load()
    return PRIMITIVES[name]


def all_primitives() -> list[Primitive]:
    """Every declared primitive, in declaration order."""
    _load()
    return list(PRIMITIVES.values())


def _load() -> None:
    # The declarations live in flowjit.ir.primitives; importing it registers them.
    import flowjit.ir.primitives  # noqa: F401


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
    """``axis`` in ``[0, ndim)`` (negative counts from the end), or ShapeError."""
    if not -ndim <= axis < ndim:
        raise ShapeError(f"{what} {axis} is out of range for rank {ndim}")
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
