"""TensorFlow 1.x's op functions (``tf.matmul``, ``tf.reduce_sum``, ``tf.nn.relu``...) as graph ops.

Each function adds one Operation whose ``compute`` calls the matching ``fj.*`` function
on traced values, so every op lowers to the registry's primitives: there is no second
set of kernels. Signatures, argument names and defaults follow TensorFlow 1.x (e.g.
``reduce_sum(input_tensor, axis=None, keepdims=None, name=None, reduction_indices=None,
keep_dims=None)``, ``argmax`` over axis 0 by default, ``tf.constant(1.0)`` is float32).
Python numbers and NumPy arrays given to an op become ``Const`` ops, taking the dtype of
the tensor they meet where it is compatible, as ``tf.convert_to_tensor`` does.
"""

from __future__ import annotations

import builtins
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

import flowjit.nn as fjnn
from flowjit.ir.dtypes import DType
from flowjit.ir.dtypes import dtype as as_dtype
from flowjit.ir.errors import FlowjitTypeError
from flowjit.tracer import random as fjrandom
from flowjit.tracer.control_flow import while_loop
from flowjit.tracer.custom_gradients import stop_gradient as fj_stop_gradient
from flowjit.tracer.numpy import namespace as fnp
from flowjit.v1 import errors
from flowjit.v1.graph import Graph, Operation, Tensor, get_default_graph, shape_from, shape_str

# ---- conversion ------------------------------------------------------------------------------------------


def _graph_of(tensors: Sequence[Tensor]) -> Graph:
    return tensors[0].graph if tensors else get_default_graph()


def _default_dtype(value: Any, arr: np.ndarray) -> np.dtype:
    # TensorFlow's defaults: Python floats (and lists of them) are float32, Python ints
    # int32; NumPy arrays and scalars keep their dtype.
    if isinstance(value, (np.ndarray, np.generic)):
        return arr.dtype
    if arr.dtype == np.float64:
        return np.dtype(np.float32)
    if arr.dtype == np.int64 and (arr.size == 0 or (np.abs(arr) < 2 ** 31).all()):
        return np.dtype(np.int32)
    return arr.dtype


def convert_to_tensor(value: Any, dtype: Any = None, name: str | None = None, dtype_hint: Any = None) -> Tensor:
    """``value`` as a Tensor: a Tensor as is, a Variable as its value, anything else a Const."""
    if isinstance(value, Tensor):
        if dtype is not None and as_dtype(dtype) != value.dtype:
            raise FlowjitTypeError(f"Tensor conversion requested dtype {as_dtype(dtype)} for Tensor {value.name} "
                                   f"of dtype {value.dtype}; use tf.cast")
        return value
    if hasattr(value, "_read_here"):  # a Variable
        return convert_to_tensor(value._read_here(), dtype, name)
    if hasattr(value, "_as_graph_element"):
        return convert_to_tensor(value._as_graph_element(), dtype, name)
    if isinstance(value, (list, tuple)) and any(isinstance(v, (Tensor,)) or hasattr(v, "_as_graph_element")
                                                for v in value):
        return stack(list(value), name=name or "packed")
    return constant(value, dtype=dtype if dtype is not None else None, name=name or "Const", _hint=dtype_hint)


def _graph_tensor(v: Any) -> Tensor | None:
    if isinstance(v, Tensor):
        return v
    return v._as_graph_element() if hasattr(v, "_as_graph_element") else None


def _tensors(*values: Any) -> list[Tensor]:
    """Convert operands of one op: plain values take the dtype of a Tensor operand when compatible."""
    hint = next((t.dtype for t in map(_graph_tensor, values) if t is not None), None)
    return [convert_to_tensor(v, dtype_hint=hint) for v in values]


def constant(value: Any, dtype: Any = None, shape: Any = None, name: str = "Const", verify_shape: bool = False,
             _hint: Any = None) -> Tensor:
    """A constant tensor (``tf.constant``); with ``shape``, a scalar fills it or a value is reshaped."""
    arr = np.asarray(value)
    if arr.dtype == object or arr.dtype.kind not in "biuf":
        raise FlowjitTypeError(f"tf.constant: cannot make a tensor of {type(value).__name__} ({arr.dtype})")
    if dtype is not None:
        want = as_dtype(dtype).np
    elif _hint is not None and arr.dtype.kind in "biuf" and (
            as_dtype(_hint).is_float or (arr.dtype.kind in "biu" and as_dtype(_hint).is_int)):
        want = as_dtype(_hint).np
    else:
        want = _default_dtype(value, arr)
    arr = arr.astype(want)
    if shape is not None:
        shape = tuple(int(s) for s in shape_from(shape))
        arr = np.broadcast_to(arr, shape).copy() if arr.size == 1 else arr.reshape(shape)
    arr = np.array(arr, order="C")  # (ascontiguousarray would make a 0-d value 1-d)
    arr.setflags(write=False)
    g = get_default_graph()
    op = g.create_op("Const", [], lambda ev, op, xs: [op.attrs["value"]], name=name, attrs={"value": arr},
                     outputs=[(arr.shape, arr.dtype)])
    return op.outputs[0]


def placeholder(dtype: Any, shape: Any = None, name: str | None = None) -> Tensor:
    """A tensor the caller feeds in ``Session.run(..., feed_dict={x: value})``; ``None``
    dimensions take any size (each fed shape is compiled once and cached)."""

    def unfed(ev: Any, op: Operation, xs: list[Any]) -> list[Any]:
        raise AssertionError("a placeholder is always fed or pruned")  # make_plan checks this first

    g = get_default_graph()
    op = g.create_op("Placeholder", [], unfed, name=name or "Placeholder",
                     outputs=[(shape_from(shape), as_dtype(dtype))])
    return op.outputs[0]


def placeholder_with_default(input: Any, shape: Any, name: str | None = None) -> Tensor:
    """``input`` unless fed (with a value of ``shape``)."""
    x = convert_to_tensor(input)
    op = x.graph.create_op("PlaceholderWithDefault", [x], lambda ev, op, xs: [xs[0]], name=name,
                           outputs=[(shape_from(shape), x.dtype)])
    return op.outputs[0]


# ---- op definition -----------------------------------------------------------------------------------------


def apply(type: str, fn: Callable[..., Any], inputs: Sequence[Any], name: str | None = None,
          num_outputs: int = 1, **attrs: Any) -> Any:
    """Add an op computing ``fn(*input values, **attrs)`` with fj functions; its output
    Tensor (a list when ``num_outputs != 1``)."""
    tensors = _tensors(*inputs)
    graph = _graph_of(tensors)

    def compute(ev: Any, op: Operation, xs: list[Any]) -> list[Any]:
        out = fn(*xs, **op.attrs)
        return list(out) if num_outputs != 1 else [out]

    with graph.as_default():
        op = graph.create_op(type, tensors, compute, name=name, attrs=attrs)
    return op.outputs if num_outputs != 1 else op.outputs[0]


# Op types of one fj function of their inputs alone, with it and its arity: TensorFlow's
# built-in gradient names, which ``gradient_override_map`` may give another op ({"Sign": "Identity"}).
builtin_gradients: dict[str, tuple[Callable[..., Any], int]] = {}


def _unary(type: str, fn: Callable[[Any], Any], doc: str) -> Callable[..., Tensor]:
    builtin_gradients.setdefault(type, (fn, 1))

    def op(x: Any, name: str | None = None) -> Tensor:
        return apply(type, fn, [x], name=name)
    op.__name__ = type
    op.__doc__ = doc
    return op


def _binary(type: str, fn: Callable[[Any, Any], Any], doc: str) -> Callable[..., Tensor]:
    builtin_gradients.setdefault(type, (fn, 2))

    def op(x: Any, y: Any, name: str | None = None) -> Tensor:
        return apply(type, fn, [x, y], name=name)
    op.__name__ = type
    op.__doc__ = doc
    return op


def _divide(a: Any, b: Any) -> Any:
    # tf.divide of two ints is float64 (Python 3 semantics), as true_divide.
    return fnp.true_divide(a, b)


def _tf_div(a: Any, b: Any) -> Any:
    # tf.div: integer operands floor-divide, as Python 2's `/`.
    if as_dtype(a.dtype).is_int:
        return fnp.floor_divide(a, b)
    return fnp.true_divide(a, b)


add = _binary("Add", fnp.add, "x + y elementwise, broadcasting.")
subtract = _binary("Sub", fnp.subtract, "x - y elementwise, broadcasting.")
sub = subtract
multiply = _binary("Mul", fnp.multiply, "x * y elementwise, broadcasting.")
mul = multiply
divide = _binary("RealDiv", _divide, "x / y elementwise (true division).")
truediv = _binary("RealDiv", _divide, "x / y elementwise (true division).")
realdiv = truediv
div = _binary("Div", _tf_div, "x / y elementwise; integers floor-divide (tf.div).")
floordiv = _binary("FloorDiv", fnp.floor_divide, "x // y elementwise.")
floor_div = floordiv
mod = _binary("FloorMod", fnp.mod, "x % y elementwise (sign of y).")
floormod = mod
pow = _binary("Pow", fnp.power, "x ** y elementwise.")  # noqa: A001 - TensorFlow's name
maximum = _binary("Maximum", fnp.maximum, "max(x, y) elementwise.")
minimum = _binary("Minimum", fnp.minimum, "min(x, y) elementwise.")
squared_difference = _binary("SquaredDifference", lambda a, b: fnp.square(fnp.subtract(a, b)), "(x - y)**2.")
atan2 = _binary("Atan2", fnp.arctan2, "atan2(y, x) elementwise.")
equal = _binary("Equal", fnp.equal, "x == y elementwise (bool).")
not_equal = _binary("NotEqual", fnp.not_equal, "x != y elementwise (bool).")
less = _binary("Less", fnp.less, "x < y elementwise (bool).")
less_equal = _binary("LessEqual", fnp.less_equal, "x <= y elementwise (bool).")
greater = _binary("Greater", fnp.greater, "x > y elementwise (bool).")
greater_equal = _binary("GreaterEqual", fnp.greater_equal, "x >= y elementwise (bool).")
logical_and = _binary("LogicalAnd", fnp.logical_and, "x and y elementwise.")
logical_or = _binary("LogicalOr", fnp.logical_or, "x or y elementwise.")
logical_xor = _binary("LogicalXor", fnp.logical_xor, "x xor y elementwise.")

negative = _unary("Neg", fnp.negative, "-x.")
neg = negative
abs = _unary("Abs", fnp.abs, "|x|.")  # noqa: A001
sign = _unary("Sign", fnp.sign, "The sign of x (-1, 0, 1).")
square = _unary("Square", fnp.square, "x * x.")
sqrt = _unary("Sqrt", fnp.sqrt, "The square root of x.")
rsqrt = _unary("Rsqrt", fnp.rsqrt, "1 / sqrt(x).")
exp = _unary("Exp", fnp.exp, "e ** x.")
expm1 = _unary("Expm1", fnp.expm1, "e ** x - 1.")
log = _unary("Log", fnp.log, "The natural logarithm of x.")
log1p = _unary("Log1p", fnp.log1p, "log(1 + x).")
sin = _unary("Sin", fnp.sin, "sin(x).")
cos = _unary("Cos", fnp.cos, "cos(x).")
tan = _unary("Tan", fnp.tan, "tan(x).")
tanh = _unary("Tanh", fnp.tanh, "tanh(x).")
sigmoid = _unary("Sigmoid", fnp.logistic, "1 / (1 + exp(-x)).")
erf = _unary("Erf", fnp.erf, "The error function.")
floor = _unary("Floor", fnp.floor, "Round down.")
ceil = _unary("Ceil", fnp.ceil, "Round up.")
round = _unary("Round", fnp.rint, "Round half to even.")  # noqa: A001
rint = round
reciprocal = _unary("Reciprocal", fnp.reciprocal, "1 / x.")
logical_not = _unary("LogicalNot", fnp.logical_not, "not x.")
is_nan = _unary("IsNan", fnp.isnan, "x is nan.")
is_finite = _unary("IsFinite", fnp.isfinite, "x is finite.")
is_inf = _unary("IsInf", fnp.isinf, "x is +-inf.")
identity = _unary("Identity", lambda x: x, "x itself (a new name; after its control dependencies).")
# fj's stop_gradient, not an identity: tf.gradients leaves the op out of what it
# differentiates, but a cond branch or loop body holding it is differentiated by fj.
stop_gradient = _unary("StopGradient", fj_stop_gradient, "x, through which tf.gradients passes nothing.")


def softplus(features: Any, name: str | None = None) -> Tensor:
    """log(1 + exp(x)), without overflow."""
    return apply("Softplus", lambda x: fnp.add(fnp.maximum(x, 0), fnp.log1p(fnp.exp(fnp.negative(fnp.abs(x))))),
                 [features], name=name)


def matmul(a: Any, b: Any, transpose_a: bool = False, transpose_b: bool = False, adjoint_a: bool = False,
           adjoint_b: bool = False, a_is_sparse: bool = False, b_is_sparse: bool = False,
           name: str | None = None) -> Tensor:
    """The matrix product of a and b (batched over leading dimensions), optionally transposed."""
    def mm(x: Any, y: Any, transpose_a: bool, transpose_b: bool) -> Any:
        return fnp.matmul(fnp.swapaxes(x, -1, -2) if transpose_a else x,
                          fnp.swapaxes(y, -1, -2) if transpose_b else y)
    return apply("MatMul", mm, [a, b], name=name, transpose_a=transpose_a or adjoint_a,
                 transpose_b=transpose_b or adjoint_b)


def tensordot(a: Any, b: Any, axes: Any, name: str | None = None) -> Tensor:
    return apply("Tensordot", lambda x, y, axes: fnp.tensordot(x, y, axes), [a, b], name=name,
                 axes=axes if isinstance(axes, int) else tuple(tuple(x) for x in axes))


def einsum(equation: str, *inputs: Any, name: str | None = None) -> Tensor:
    return apply("Einsum", lambda *xs, equation: fnp.einsum(equation, *xs), list(inputs), name=name,
                 equation=equation)


def add_n(inputs: Sequence[Any], name: str | None = None) -> Tensor:
    """The elementwise sum of a list of tensors of one shape."""
    return apply("AddN", lambda *xs: functools.reduce(fnp.add, xs), list(inputs), name=name)


def cast(x: Any, dtype: Any, name: str | None = None) -> Tensor:
    """``x`` converted to ``dtype`` (float to int truncates toward zero)."""
    return apply("Cast", lambda v, dtype: fnp.astype(v, dtype), [x], name=name, dtype=as_dtype(dtype))


def to_float(x: Any, name: str = "ToFloat") -> Tensor:
    return cast(x, "float32", name)


def to_int32(x: Any, name: str = "ToInt32") -> Tensor:
    return cast(x, "int32", name)


def to_int64(x: Any, name: str = "ToInt64") -> Tensor:
    return cast(x, "int64", name)


def to_double(x: Any, name: str = "ToDouble") -> Tensor:
    return cast(x, "float64", name)


# ---- reductions ----------------------------------------------------------------------------------------------------


def _axis(axis: Any, reduction_indices: Any) -> Any:
    if axis is None:
        axis = reduction_indices
    if axis is None:
        return None
    return int(axis) if isinstance(axis, (int, np.integer)) else tuple(int(a) for a in axis)


def _reduction(type: str, fn: Callable[..., Any], doc: str) -> Callable[..., Tensor]:
    def op(input_tensor: Any, axis: Any = None, keepdims: bool | None = None, name: str | None = None,
           reduction_indices: Any = None, keep_dims: bool | None = None) -> Tensor:
        keep = bool(keepdims if keepdims is not None else keep_dims)
        return apply(type, fn, [input_tensor], name=name, axis=_axis(axis, reduction_indices), keepdims=keep)
    op.__name__ = type
    op.__doc__ = doc + " Over ``axis`` (all axes by default); ``keepdims`` keeps them as size 1."
    return op


def _mean(x: Any, axis: Any, keepdims: bool) -> Any:
    # tf.reduce_mean of integers is an integer (truncated), unlike NumPy.
    m = fnp.mean(x, axis=axis, keepdims=keepdims)
    return fnp.astype(m, x.dtype) if not as_dtype(x.dtype).is_float else m


reduce_sum = _reduction("Sum", lambda x, axis, keepdims: fnp.astype(fnp.sum(x, axis=axis, keepdims=keepdims),
                                                                    x.dtype), "The sum.")
reduce_mean = _reduction("Mean", _mean, "The mean.")
reduce_max = _reduction("Max", lambda x, axis, keepdims: fnp.max(x, axis=axis, keepdims=keepdims), "The maximum.")
reduce_min = _reduction("Min", lambda x, axis, keepdims: fnp.min(x, axis=axis, keepdims=keepdims), "The minimum.")
reduce_prod = _reduction("Prod", lambda x, axis, keepdims: fnp.astype(fnp.prod(x, axis=axis, keepdims=keepdims),
                                                                      x.dtype), "The product.")
reduce_any = _reduction("Any", lambda x, axis, keepdims: fnp.any(x, axis=axis, keepdims=keepdims), "Logical or.")
reduce_all = _reduction("All", lambda x, axis, keepdims: fnp.all(x, axis=axis, keepdims=keepdims), "Logical and.")
reduce_logsumexp = _reduction("ReduceLogSumExp",
                              lambda x, axis, keepdims: fjnn.logsumexp(x, axis=axis, keepdims=keepdims),
                              "log(sum(exp(x))), computed stably.")


def _arg(type: str, fn: Callable[..., Any]) -> Callable[..., Tensor]:
    def op(input: Any, axis: Any = None, name: str | None = None, dimension: Any = None,
           output_type: Any = "int64") -> Tensor:
        ax = axis if axis is not None else dimension
        return apply(type, lambda x, axis, output_type: fnp.astype(fn(x, axis=axis), output_type), [input],
                     name=name, axis=0 if ax is None else int(ax), output_type=as_dtype(output_type))
    op.__name__ = type
    op.__doc__ = f"The index of the {type[3:].lower()} along ``axis`` (0 by default), as int64."
    return op


argmax = _arg("ArgMax", fnp.argmax)
argmin = _arg("ArgMin", fnp.argmin)


def cumsum(x: Any, axis: int = 0, exclusive: bool = False, reverse: bool = False, name: str | None = None) -> Tensor:
    def fn(v: Any, axis: int, exclusive: bool, reverse: bool) -> Any:
        if reverse:
            v = fnp.getitem(v, (slice(None),) * (axis % v.ndim) + (slice(None, None, -1),))
        c = fnp.astype(fnp.cumsum(v, axis=axis), v.dtype)
        if exclusive:
            c = fnp.subtract(c, v)
        if reverse:
            c = fnp.getitem(c, (slice(None),) * (axis % v.ndim) + (slice(None, None, -1),))
        return c
    return apply("Cumsum", fn, [x], name=name, axis=axis, exclusive=exclusive, reverse=reverse)


# ---- shapes and layout -------------------------------------------------------------------------------------------


def _static_ints(value: Any, what: str) -> tuple[int, ...]:
    if isinstance(value, Tensor):
        if value.op.type == "Const":
            return tuple(int(v) for v in np.ravel(value.op.attrs["value"]))
        raise FlowjitTypeError(f"{what} must be known when the graph is built (a list or a constant), got "
                               f"the tensor {value.name}; flowjit compiles one program per shape")
    if isinstance(value, (int, np.integer)):
        return (int(value),)
    return tuple(int(v) for v in value)


def reshape(tensor: Any, shape: Any, name: str | None = None) -> Tensor:
    """``tensor`` with a new shape (one dimension may be -1)."""
    return apply("Reshape", lambda x, shape: fnp.reshape(x, shape), [tensor], name=name,
                 shape=_static_ints(shape, "tf.reshape's shape"))


def transpose(a: Any, perm: Any = None, name: str = "transpose", conjugate: bool = False) -> Tensor:
    """``a`` with its axes permuted (reversed by default)."""
    return apply("Transpose", lambda x, perm: fnp.transpose(x, perm), [a], name=name,
                 perm=None if perm is None else _static_ints(perm, "tf.transpose's perm"))


def reverse(tensor: Any, axis: Any, name: str | None = None) -> Tensor:
    """``tensor`` with the order of its entries along each axis of ``axis`` reversed."""
    return apply("ReverseV2", lambda x, axis: fnp.flip(x, axis), [tensor], name=name,
                 axis=tuple(_static_ints(axis, "tf.reverse's axis")))


def matrix_transpose(a: Any, name: str = "matrix_transpose") -> Tensor:
    return apply("MatrixTranspose", lambda x: fnp.swapaxes(x, -1, -2), [a], name=name)


def expand_dims(input: Any, axis: int | None = None, name: str | None = None, dim: int | None = None) -> Tensor:
    return apply("ExpandDims", lambda x, axis: fnp.expand_dims(x, axis), [input], name=name,
                 axis=int(axis if axis is not None else dim))


def squeeze(input: Any, axis: Any = None, name: str | None = None, squeeze_dims: Any = None) -> Tensor:
    ax = axis if axis is not None else squeeze_dims
    return apply("Squeeze", lambda x, axis: fnp.squeeze(x, axis), [input], name=name,
                 axis=None if ax is None else _static_ints(ax, "tf.squeeze's axis"))


def concat(values: Sequence[Any], axis: int, name: str = "concat") -> Tensor:
    """Join tensors along an existing axis."""
    return apply("ConcatV2", lambda *xs, axis: fnp.concatenate(xs, axis=axis), list(values), name=name,
                 axis=int(axis))


def stack(values: Sequence[Any], axis: int = 0, name: str = "stack") -> Tensor:
    """Join tensors along a new axis."""
    return apply("Pack", lambda *xs, axis: fnp.stack(xs, axis=axis), list(values), name=name, axis=int(axis))


pack = stack


def unstack(value: Any, num: int | None = None, axis: int = 0, name: str = "unstack") -> list[Tensor]:
    """Split a tensor into a list along ``axis`` (its size must be known)."""
    t = convert_to_tensor(value)
    n = num if num is not None else (t._shape[axis] if t._shape is not None else None)
    if n is None:
        raise FlowjitTypeError(f"tf.unstack of {t.name}: the size of axis {axis} is unknown; pass num=")

    def fn(x: Any, axis: int, num: int) -> list[Any]:
        return [fnp.squeeze(p, axis) for p in fnp.split(x, num, axis=axis)]
    return apply("Unpack", fn, [t], name=name, num_outputs=n, axis=int(axis), num=n)


unpack = unstack


def split(value: Any, num_or_size_splits: Any, axis: int = 0, num: int | None = None,
          name: str = "split") -> list[Tensor]:
    """Split along ``axis`` into equal parts (an int) or parts of the given sizes."""
    if isinstance(num_or_size_splits, (int, np.integer)):
        n = int(num_or_size_splits)
        return apply("Split", lambda x, n, axis: fnp.split(x, n, axis=axis), [value], name=name,
                     num_outputs=n, n=n, axis=int(axis))
    sizes = _static_ints(num_or_size_splits, "tf.split's sizes")
    bounds = tuple(int(b) for b in np.cumsum(sizes)[:-1])
    return apply("SplitV", lambda x, bounds, axis: fnp.split(x, list(bounds), axis=axis), [value], name=name,
                 num_outputs=len(sizes), bounds=bounds, axis=int(axis))


def tile(input: Any, multiples: Any, name: str | None = None) -> Tensor:
    """``input`` repeated ``multiples[i]`` times along axis i."""
    def fn(x: Any, multiples: tuple[int, ...]) -> Any:
        for ax, m in enumerate(multiples):
            if m != 1:
                x = fnp.concatenate([x] * m, axis=ax)
        return x
    return apply("Tile", fn, [input], name=name, multiples=_static_ints(multiples, "tf.tile's multiples"))


def pad(tensor: Any, paddings: Any, mode: str = "CONSTANT", name: str | None = None,
        constant_values: Any = 0) -> Tensor:
    if mode.upper() != "CONSTANT":
        raise FlowjitTypeError(f"tf.pad mode={mode!r}: flowjit supports CONSTANT padding")
    pw = tuple(tuple(int(v) for v in row) for row in (paddings.op.attrs["value"] if isinstance(paddings, Tensor)
                                                      else paddings))
    return apply("Pad", lambda x, pw, value: fnp.pad(x, pw, constant_values=value), [tensor], name=name,
                 pw=pw, value=float(constant_values))


def slice(input_: Any, begin: Any, size: Any, name: str | None = None) -> Tensor:  # noqa: A001
    """``input_[begin[i]:begin[i]+size[i]]`` per axis (size -1: to the end)."""
    b, s = _static_ints(begin, "tf.slice's begin"), _static_ints(size, "tf.slice's size")
    key = tuple(builtins.slice(i, None if n == -1 else i + n) for i, n in zip(b, s))
    return apply("Slice", lambda x, key: fnp.getitem(x, key), [input_], name=name, key=key)


def gather(params: Any, indices: Any, axis: int = 0, name: str | None = None) -> Tensor:
    """``params`` indexed along ``axis`` by an integer tensor."""
    return apply("GatherV2", lambda p, i, axis: fnp.take(p, i, axis=axis), [params, indices], name=name,
                 axis=int(axis))


def one_hot(indices: Any, depth: int, on_value: Any = None, off_value: Any = None, axis: int | None = None,
            dtype: Any = None, name: str | None = None) -> Tensor:
    """A one-hot encoding with ``depth`` classes on a new last axis (indices outside: all off)."""
    d = as_dtype(dtype or "float32")
    on = 1 if on_value is None else on_value
    off = 0 if off_value is None else off_value

    def fn(i: Any, depth: int, on: Any, off: Any, axis: Any, d: DType) -> Any:
        hot = fnp.equal(fnp.expand_dims(i, -1), fnp.arange(depth, dtype="int64" if as_dtype(i.dtype) ==
                                                            as_dtype("int64") else "int32"))
        out = fnp.where(hot, fnp.astype(on, d), fnp.astype(off, d))
        return out if axis in (None, -1) else fnp.moveaxis(out, -1, axis)
    return apply("OneHot", fn, [indices], name=name, depth=int(depth), on=on, off=off, axis=axis, d=d)


def where(condition: Any, x: Any = None, y: Any = None, name: str | None = None) -> Tensor:
    """``x`` where ``condition`` holds, else ``y`` (both are required: flowjit's shapes are static)."""
    if x is None or y is None:
        raise FlowjitTypeError("tf.where(condition) returns coordinates of a data-dependent count; flowjit "
                               "compiles static shapes: pass x and y")
    cond_t, x_t, y_t = convert_to_tensor(condition), *_tensors(x, y)
    return apply("Select", fnp.where, [cond_t, x_t, y_t], name=name)


where_v2 = where


def clip_by_value(t: Any, clip_value_min: Any, clip_value_max: Any, name: str | None = None) -> Tensor:
    return apply("ClipByValue", lambda x, lo, hi: fnp.minimum(fnp.maximum(x, lo), hi),
                 [t, clip_value_min, clip_value_max], name=name)


def clip_by_norm(t: Any, clip_norm: Any, axes: Any = None, name: str | None = None) -> Tensor:
    def fn(x: Any, c: Any, axes: Any) -> Any:
        norm = fnp.sqrt(fnp.sum(fnp.square(x), axis=axes, keepdims=True))
        return fnp.where(fnp.greater(norm, c), fnp.multiply(x, fnp.divide(c, norm)), x)
    return apply("ClipByNorm", fn, [t, clip_norm], name=name, axes=_axis(axes, None))


def global_norm(t_list: Sequence[Any], name: str | None = None) -> Tensor:
    return apply("GlobalNorm", lambda *xs: fnp.sqrt(functools.reduce(fnp.add, [fnp.sum(fnp.square(x)) for x in xs])),
                 list(t_list), name=name)


def clip_by_global_norm(t_list: Sequence[Any], clip_norm: Any, use_norm: Any = None,
                        name: str | None = None) -> tuple[list[Tensor], Tensor]:
    """Scale every tensor by ``clip_norm / max(global_norm, clip_norm)``; returns (tensors, norm)."""
    norm = global_norm(t_list) if use_norm is None else convert_to_tensor(use_norm)
    scale = apply("ClipScale", lambda n, c: fnp.divide(c, fnp.maximum(n, c)), [norm, clip_norm])
    return [None if t is None else multiply(t, scale) for t in t_list], norm


def shape(input: Any, name: str | None = None, out_type: Any = "int32") -> Tensor:
    """The shape of ``input`` as a 1-D integer tensor (its traced, concrete shape)."""
    return apply("Shape", lambda x, out_type: fnp.asarray(np.array(fnp.shape(x), as_dtype(out_type).np)),
                 [input], name=name, out_type=as_dtype(out_type))


def size(input: Any, name: str | None = None, out_type: Any = "int32") -> Tensor:
    return apply("Size", lambda x, out_type: np.array(int(np.prod(fnp.shape(x))), as_dtype(out_type).np),
                 [input], name=name, out_type=as_dtype(out_type))


def rank(input: Any, name: str | None = None) -> Tensor:
    return apply("Rank", lambda x: np.array(fnp.ndim(x), np.int32), [input], name=name)


def zeros(shape: Any, dtype: Any = "float32", name: str | None = None) -> Tensor:
    """A tensor of zeros."""
    return constant(0, dtype=dtype, shape=_static_ints(shape, "tf.zeros's shape"), name=name or "zeros")


def ones(shape: Any, dtype: Any = "float32", name: str | None = None) -> Tensor:
    """A tensor of ones."""
    return constant(1, dtype=dtype, shape=_static_ints(shape, "tf.ones's shape"), name=name or "ones")


def fill(dims: Any, value: Any, name: str | None = None) -> Tensor:
    """A tensor of shape ``dims`` filled with ``value``."""
    v = convert_to_tensor(value)
    return apply("Fill", lambda x, dims: fnp.broadcast_to(x, dims), [v], name=name,
                 dims=_static_ints(dims, "tf.fill's dims"))


def zeros_like(tensor: Any, dtype: Any = None, name: str | None = None, optimize: bool = True) -> Tensor:
    return apply("ZerosLike", lambda x, dtype: fnp.zeros_like(x, dtype=dtype), [tensor], name=name,
                 dtype=None if dtype is None else as_dtype(dtype))


def ones_like(tensor: Any, dtype: Any = None, name: str | None = None, optimize: bool = True) -> Tensor:
    return apply("OnesLike", lambda x, dtype: fnp.ones_like(x, dtype=dtype), [tensor], name=name,
                 dtype=None if dtype is None else as_dtype(dtype))


# tf.range's inferred dtype: the widest of its arguments' in this order, as TensorFlow's.
_RANGE_DTYPES = (np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.float32), np.dtype(np.float64))


def _range_operand(value: Any, what: str) -> np.ndarray:
    """A tf.range argument as a 0-d array of TensorFlow's dtype for it (Python ints int32,
    floats float32; NumPy scalars and constant Tensors keep theirs)."""
    if isinstance(value, Tensor):
        if value.op.type != "Const" or value.shape.as_list() != []:
            raise FlowjitTypeError(f"tf.range: {what} is the Tensor {value.name!r} ({value.dtype}"
                                   f"{value.shape.as_list()}), not a constant scalar: flowjit compiles static shapes, "
                                   "so a range's length must be known when the graph is built; pass a Python "
                                   "number, or take a slice of a long enough range")
        value = value.op.attrs["value"]
    arr = np.asarray(value)
    if arr.ndim != 0 or arr.dtype.kind not in "biuf":
        raise FlowjitTypeError(f"tf.range: {what}={value!r} must be a real scalar")
    return arr.astype(_default_dtype(value, arr))


def range(start: Any, limit: Any = None, delta: Any = 1, dtype: Any = None, name: str = "range") -> Tensor:  # noqa: A00
    """``[start, start + delta, ...)`` up to ``limit`` (``tf.range(limit)`` starts at 0).
    Its dtype is ``dtype``, else the widest of its arguments' among int32, int64,
    float32, float64: ``tf.range(5)`` is int32 and ``tf.range(5.0)`` float32, as in
    TensorFlow; the arguments are cast to it before the length is counted."""
    if limit is None:
        start, limit = 0, start
    args = [_range_operand(v, what) for v, what in ((start, "start"), (limit, "limit"), (delta, "delta"))]
    if dtype is not None:
        want = as_dtype(dtype).np
    else:
        unknown = [str(a.dtype) for a in args if a.dtype not in _RANGE_DTYPES]
        if unknown:
            raise FlowjitTypeError(f"tf.range: arguments of dtype {', '.join(unknown)}; tf.range infers int32, "
                                   "int64, float32 or float64: pass dtype=")
        want = builtins.max((a.dtype for a in args), key=_RANGE_DTYPES.index)
    lo, hi, step = (a.astype(want)[()] for a in args)
    if step == 0:
        raise ValueError(f"tf.range: delta must not be 0 (start={lo}, limit={hi})")
    return constant(np.arange(lo, hi, step, dtype=want), dtype=want, name=name)


def linspace(start: float, stop: float, num: int, name: str | None = None) -> Tensor:
    return constant(np.linspace(start, stop, num), dtype="float32", name=name or "LinSpace")


def eye(num_rows: int, num_columns: int | None = None, dtype: Any = "float32", name: str | None = None) -> Tensor:
    return constant(np.eye(num_rows, num_columns), dtype=dtype, name=name or "eye")


def boolean_mask(tensor: Any, mask: Any, name: str = "boolean_mask") -> Tensor:
    raise FlowjitTypeError("tf.boolean_mask has a data-dependent shape, which flowjit does not compile; "
                           "use tf.where(mask, x, 0) and reduce, or a fixed-size gather")


# ---- random ---------------------------------------------------------------------------------------------------------


def _random(type: str, draw: Callable[..., Any], shape: Any, dtype: Any, seed: Any, name: str | None,
            **params: Any) -> Tensor:
    shp = _static_ints(shape, f"the shape of {type}")
    g = get_default_graph()
    d = as_dtype(dtype)

    def compute(ev: Any, op: Operation, xs: list[Any]) -> list[Any]:
        return [draw(ev.random_key(op), shp, d, *xs)]

    tensors = _tensors(*params.values())
    op = g.create_op(type, tensors, compute, name=name, attrs={"seed": seed},
                     outputs=[(shp, d)])
    return op.outputs[0]


def random_uniform(shape: Any, minval: Any = 0, maxval: Any = None, dtype: Any = "float32", seed: Any = None,
                   name: str | None = None) -> Tensor:
    """Uniform values in [minval, maxval) (maxval 1 for floats), new on every run."""
    d = as_dtype(dtype)
    if maxval is None:
        if not d.is_float:
            raise ValueError("tf.random_uniform of an integer dtype needs maxval")
        maxval = 1

    def draw(k: Any, shp: tuple, d: DType, lo: Any, hi: Any) -> Any:
        if d.is_float:
            return fnp.astype(fjrandom.uniform(k, shp, d, lo, hi), d)
        return fnp.astype(fnp.add(fnp.floor(fnp.multiply(fjrandom.uniform(k, shp, "float64"),
                                                         fnp.subtract(hi, lo))), lo), d)
    return _random("RandomUniform", draw, shape, d, seed, name, minval=constant(minval, dtype=d),
                   maxval=constant(maxval, dtype=d))


def multinomial(logits: Any, num_samples: int, seed: Any = None, name: str | None = None,
                output_dtype: Any = "int64") -> Tensor:
    """``num_samples`` class indices for each row of ``logits`` [batch, classes] (unnormalized
    log probabilities), drawn independently with probabilities ``softmax(logits)``, new on
    every run: [batch, num_samples] (``tf.multinomial``, ``tf.random.categorical``)."""
    (lg,) = _tensors(logits)
    if lg.shape.ndims != 2:
        raise ValueError(f"tf.multinomial: logits must be [batch_size, num_classes], got {lg.shape}")
    n, d = int(num_samples), as_dtype(output_dtype)

    def compute(ev: Any, op: Operation, xs: list[Any]) -> list[Any]:
        rows = fnp.shape(xs[0])[0]
        draws = fjrandom.categorical(ev.random_key(op), fnp.expand_dims(xs[0], 1), shape=(rows, n))
        return [fnp.astype(draws, d)]
    op = lg.graph.create_op("Multinomial", [lg], compute, name=name, attrs={"seed": seed},
                            outputs=[((lg.shape.as_list()[0], n), d)])
    return op.outputs[0]


def random_normal(shape: Any, mean: Any = 0.0, stddev: Any = 1.0, dtype: Any = "float32", seed: Any = None,
                  name: str | None = None) -> Tensor:
    """Normal values with ``mean`` and ``stddev``, new on every run."""
    d = as_dtype(dtype)
    return _random("RandomStandardNormal",
                   lambda k, shp, d, m, s: fnp.add(fnp.multiply(fjrandom.normal(k, shp, d), s), m),
                   shape, d, seed, name, mean=constant(mean, dtype=d), stddev=constant(stddev, dtype=d))


def _truncated_standard_normal(k: Any, shp: tuple, d: DType) -> Any:
    # Redraw the values outside two standard deviations until none is left: exactly
    # the normal distribution conditioned on |z| < 2, as TensorFlow's TruncatedNormal.
    k0, k1 = fjrandom.split(k)
    z = fjrandom.normal(k0, shp, d)

    def cond(c: Any) -> Any:
        return fnp.any(fnp.greater_equal(fnp.abs(c[1]), 2.0))

    def body(c: Any) -> Any:
        key, zz = c
        nk, draw = fjrandom.split(key)
        fresh = fjrandom.normal(draw, shp, d)
        return nk, fnp.where(fnp.greater_equal(fnp.abs(zz), 2.0), fresh, zz)
    return while_loop(cond, body, (k1, z))[1]


def truncated_normal(shape: Any, mean: Any = 0.0, stddev: Any = 1.0, dtype: Any = "float32", seed: Any = None,
                     name: str | None = None) -> Tensor:
    """Normal values conditioned on lying within two standard deviations of ``mean``."""
    d = as_dtype(dtype)
    return _random("TruncatedNormal",
                   lambda k, shp, d, m, s: fnp.add(fnp.multiply(_truncated_standard_normal(k, shp, d), s), m),
                   shape, d, seed, name, mean=constant(mean, dtype=d), stddev=constant(stddev, dtype=d))


def random_gamma(shape: Any, alpha: Any, beta: Any = None, dtype: Any = "float32", seed: Any = None,
                 name: str | None = None) -> Tensor:
    """Gamma values of shape ``alpha`` and rate ``beta`` (1 when None), ``shape`` samples of
    each: a result of ``shape + broadcast(alpha, beta).shape``, new on every run
    (``tf.random_gamma``, ``tf.random.gamma``; ``fj.random.gamma``'s rejection, compiled)."""
    d = as_dtype(dtype)
    if not d.is_float:
        raise ValueError(f"tf.random_gamma: dtype must be a float dtype, got {d}")
    shp = _static_ints(shape, "the shape of RandomGamma")
    a = alpha if isinstance(alpha, Tensor) else constant(alpha, dtype=d)
    b = constant(1.0, dtype=d) if beta is None else (beta if isinstance(beta, Tensor) else constant(beta, dtype=d))
    if a._shape is None or b._shape is None or None in (*a._shape, *b._shape):
        raise FlowjitTypeError(f"tf.random_gamma: alpha ({a.name}) and beta ({b.name}) need static shapes, "
                               "which the result's shape ends in")
    out = (*shp, *np.broadcast_shapes(tuple(a._shape), tuple(b._shape)))

    def compute(ev: Any, op: Operation, xs: list[Any]) -> list[Any]:
        alpha_v, beta_v = (fnp.astype(x, d) for x in xs)
        draws = fjrandom.gamma(ev.random_key(op), fnp.broadcast_to(alpha_v, out), dtype=d)
        return [fnp.divide(draws, beta_v)]
    op = get_default_graph().create_op("RandomGamma", [a, b], compute, name=name, attrs={"seed": seed},
                                       outputs=[(out, d)])
    return op.outputs[0]


def set_random_seed(seed: int) -> None:
    """The graph-level seed: with it, every session draws the same sequence of random values."""
    get_default_graph().seed = int(seed)


# ---- operators on Tensor


def _getitem(x: Any, key: Any) -> Tensor:
    def norm(k: Any) -> Any:
        if isinstance(k, Tensor):
            raise FlowjitTypeError(f"indexing with a tensor ({k.name}) is not supported: use tf.gather")
        return k
    key = tuple(norm(k) for k in key) if isinstance(key, tuple) else norm(key)
    return apply("StridedSlice", lambda v, key: fnp.getitem(v, key), [x], name="strided_slice", key=key)


def _iter(x: Tensor) -> Iterator[Tensor]:
    if x._shape is None or not x._shape or x._shape[0] is None:
        raise FlowjitTypeError(f"cannot iterate over {x.name} of shape {shape_str(x._shape)}")
    return iter(unstack(x))


def _install_operators() -> None:
    def r(fn: Callable[[Any, Any], Tensor]) -> Callable[[Any, Any], Tensor]:
        return lambda self, other: fn(other, self)

    table = {
        "__add__": add, "__sub__": subtract, "__mul__": multiply, "__truediv__": truediv,
        "__floordiv__": floordiv, "__mod__": mod, "__pow__": pow, "__matmul__": matmul,
        "__lt__": less, "__le__": less_equal, "__gt__": greater, "__ge__": greater_equal,
        "__and__": logical_and, "__or__": logical_or, "__xor__": logical_xor,
    }
    for name, fn in table.items():
        setattr(Tensor, name, lambda self, other, _fn=fn: _fn(self, other))
        if name not in ("__lt__", "__le__", "__gt__", "__ge__"):
            setattr(Tensor, "__r" + name[2:], r(fn))
    Tensor.__neg__ = lambda self: negative(self)  # type: ignore[attr-defined]
    Tensor.__abs__ = lambda self: abs(self)  # type: ignore[attr-defined]
    Tensor.__invert__ = lambda self: logical_not(self)  # type: ignore[attr-defined]
    Tensor.__getitem__ = _getitem  # type: ignore[attr-defined]
    Tensor.__iter__ = _iter  # type: ignore[attr-defined]


_install_operators()


# ---- Python functions on the host -----------------------------------------------------------------------------


def _index_tensor(ids: Any) -> Tensor:
    """Indices as a tensor: Python ints int32, as TensorFlow makes them (not the data's dtype)."""
    return convert_to_tensor(np.asarray(ids, dtype=np.int32) if isinstance(ids, (list, tuple)) else ids)


def gather_nd(params: Any, indices: Any, name: str | None = None, batch_dims: int = 0) -> Tensor:
    """``params[indices[..., 0], ..., indices[..., K-1]]`` for each index row of ``indices``
    (its last axis K at most params' rank): the entries (or slices) of params there."""
    if batch_dims:
        raise FlowjitTypeError("tf.gather_nd(batch_dims=...) is not supported; fold the batch into the indices")

    def fn(p: Any, i: Any) -> Any:
        k = fnp.shape(i)[-1]
        lead, rest = fnp.shape(p)[:k], fnp.shape(p)[k:]
        # (builtins': this module's range and abs are TensorFlow's ops)
        strides = [int(np.prod(lead[j + 1:])) for j in builtins.range(k)]
        flat = builtins.sum(fnp.multiply(fnp.astype(i[..., j], "int64"), strides[j]) for j in builtins.range(k))
        table = fnp.reshape(p, (int(np.prod(lead)), *rest))
        return fnp.take(table, flat, axis=0)
    return apply("GatherNd", fn, [params, _index_tensor(indices)], name=name)


def unsorted_segment_sum(data: Any, segment_ids: Any, num_segments: int, name: str | None = None) -> Tensor:
    """``out[s] = sum of data[i] over the i with segment_ids[i] == s`` for ``s`` in
    ``[0, num_segments)`` (``segment_ids`` the leading axes of ``data``; a segment no id names
    is zeros)."""
    def fn(d: Any, ids: Any, n: int) -> Any:
        lead = fnp.ndim(ids)
        flat_ids = fnp.reshape(ids, (-1,))
        rows = fnp.reshape(d, (-1, *fnp.shape(d)[lead:]))
        return fnp.scatter_add(fnp.zeros((n, *fnp.shape(d)[lead:]), d.dtype), flat_ids, rows)
    return apply("UnsortedSegmentSum", fn, [data, _index_tensor(segment_ids)], name=name,
                 n=int(_static_ints([num_segments], "tf.unsorted_segment_sum's num_segments")[0]))


def sequence_mask(lengths: Any, maxlen: Any = None, dtype: Any = "bool", name: str | None = None) -> Tensor:
    """``mask[..., j] = j < lengths[...]`` over ``maxlen`` columns (static; by default the
    largest of constant ``lengths``), as ``dtype``."""
    if maxlen is None:
        t = convert_to_tensor(lengths)
        if t.op.type != "Const":
            raise FlowjitTypeError("tf.sequence_mask: give maxlen (the mask's width): flowjit compiles static "
                                   "shapes, and the largest of lengths is known only when it runs")
        maxlen = int(np.max(t.op.attrs["value"]))
    width = int(_static_ints([maxlen], "tf.sequence_mask's maxlen")[0])
    return apply("SequenceMask", lambda n, width, dtype: fnp.astype(
        fnp.less(fnp.arange(width), fnp.expand_dims(n, -1)), dtype), [lengths], name=name, width=width,
        dtype=as_dtype(dtype))


def check_numerics(tensor: Any, message: str, name: str | None = None) -> Tensor:
    """``tensor`` itself, after checking it has no NaN or infinity: else
    ``tf.errors.InvalidArgumentError`` with ``message`` (a host op, between compiled segments)."""
    t = convert_to_tensor(tensor)

    def compute(session: Any, op: Operation, xs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(xs[0])
        for bad, what in ((np.isnan, "NaN"), (np.isinf, "Inf")):
            if bad(x).any():
                raise errors.InvalidArgumentError(None, op, f"{message} : Tensor had {what} values "
                                                  f"(tf.check_numerics {op.name!r} created at {op.location})")
        return [x]
    graph = _graph_of([t])
    return graph.create_op("CheckNumerics", [t], compute, name=name, host=True,
                           outputs=[(t._shape, t.dtype)]).outputs[0]


def py_func(func: Callable[..., Any], inp: Sequence[Any], Tout: Any, stateful: bool = True,
            name: str | None = None) -> Any:
    """Run ``func`` on the NumPy values of ``inp`` between compiled segments; its results
    are converted to ``Tout`` (a dtype, or a list of them). Their shapes are unknown to
    the graph until it runs. An exception in ``func`` becomes ``tf.errors.UnknownError``."""
    tensors = [convert_to_tensor(x) for x in inp]
    single = not isinstance(Tout, (list, tuple))
    touts = [as_dtype(Tout)] if single else [as_dtype(t) for t in Tout]

    def compute(session: Any, op: Operation, xs: list[np.ndarray]) -> list[np.ndarray]:
        try:
            out = func(*xs)
        except Exception as e:  # the user's function: report it as TensorFlow does
            raise errors.UnknownError(None, op, f"{type(e).__name__}: {e} (in the py_func {op.name!r} created at "
                                      f"{op.location})") from e
        outs = [out] if single else list(out)
        if len(outs) != len(touts):
            raise errors.InvalidArgumentError(None, op, f"py_func {op.name!r} returned {len(outs)} values, "
                                              f"Tout declares {len(touts)}")
        return [np.asarray(o, dtype=d.np) for o, d in zip(outs, touts)]

    graph = _graph_of(tensors)
    op = graph.create_op("PyFunc", tensors, compute, name=name, host=True,
                         outputs=[(None, d) for d in touts])
    return op.outputs[0] if single else op.outputs
