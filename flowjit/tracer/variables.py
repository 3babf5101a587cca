"""``fj.Variable``: mutable state that traced functions read and update.

A Variable holds a NumPy array of fixed shape and dtype. Outside a trace it behaves as
that array (arithmetic, ``np.asarray``) and ``assign``/``assign_add``/``assign_sub``
update it at once. Inside a trace, the first read makes it an argument of the traced
Function marked ``var`` (its current value is passed on every call); an assignment
records the new value, which later reads in the same trace see, and the tracer ends
the program with one explicit ``assign`` op per updated variable. When the call
finishes, the variable is rebound to the result's buffer: no copy of the parameter.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from flowjit.ir.dtypes import dtype as as_dtype
from flowjit.ir.errors import FlowjitTypeError
from flowjit.ir.types import TensorType
from flowjit.tracer.core import Tracer, bind, current_trace, operand, to_array, user_location, variable_device
from flowjit.tracer.numpy.methods import METHODS

_names = itertools.count()


class Variable:
    """A named, mutable array: ``fj.Variable(np.zeros(3), name="b")``."""

    __array_priority__ = 100  # NumPy defers to our operators

    def __init__(self, value: Any, name: str | None = None, trainable: bool = True, dtype: Any = None):
        arr, _ = to_array(value, "the initial value of a Variable")
        if dtype is not None:
            arr = arr.astype(as_dtype(dtype).np)
        self._value = np.array(arr, order="C", copy=True)
        self.name = name or f"variable_{next(_names)}"
        self.trainable = trainable
        self.type = TensorType(self._value.shape, as_dtype(self._value.dtype))
        # The device it lives on: the enclosing fj.device block's, like TF's variables;
        # None: the default device of the program using it. Readers placed elsewhere get
        # a copy and its updates run here (see passes.placement).
        self.device = variable_device(self.name, self.type.shape, self.type.dtype)

    # ---- reading -----------------------------------------------------------------------
    @property
    def value(self) -> Any:
        """The current value: a Tracer inside a trace, else the array itself."""
        trace = current_trace()
        return trace.read_variable(self) if trace is not None else self._value

    def numpy(self) -> np.ndarray:
        """A copy of the current value (outside a trace)."""
        if current_trace() is not None:
            raise FlowjitTypeError(f"Variable {self.name}.numpy() inside a traced function: use the "
                                   "variable itself (or .value), which the trace records")
        return np.array(self._value)  # a copy; a value another process holds is fetched

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> Any:
        return self.type.dtype

    @property
    def ndim(self) -> int:
        return len(self.type.shape)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        v = self.value
        if isinstance(v, Tracer):
            return v.__array__()  # raises the tracer's concrete-value error
        return np.asarray(v, dtype)  # a value another process holds is fetched

    def __flowjit_value__(self) -> Any:
        # How fj functions read a Variable passed as an operand (see tracer.core.operand).
        return self.value

    def __repr__(self) -> str:
        return f"<fj.Variable {self.name} {self.type}{'' if self.trainable else ' (not trainable)'}>"

    # ---- writing -----------------------------------------------------------------------
    def assign(self, value: Any) -> Variable:
        """Set the value (same shape and dtype); inside a trace, when the call finishes."""
        trace = current_trace()
        if trace is not None:
            given = operand(value, f"the value assigned to {self.name}")
            if not _assignable(tuple(given.shape), self.shape):
                raise FlowjitTypeError(
                    f"Variable {self.name} ({self.type}) assigned a {TensorType(tuple(given.shape), given.dtype)} at "
                    f"{user_location()}: a value assigned to a Variable has its shape {list(self.shape)} (or "
                    "broadcasts to it); reshape the value, or make a new Variable of the new shape")
            new = bind("cast", [given], {"dtype": self.type.dtype})
            if new.shape != self.shape:
                new = bind("broadcast_to", [new], {"shape": self.shape})
            trace.write_variable(self, new)
            return self
        arr, _ = to_array(value, f"the value assigned to {self.name}")
        if not _assignable(arr.shape, self.shape):
            shown = TensorType(arr.shape, as_dtype(arr.dtype))
            raise FlowjitTypeError(f"Variable {self.name} ({self.type}) assigned a {shown} at "
                                   f"{user_location()}: a value assigned to a Variable has its shape "
                                   f"{list(self.shape)} (or broadcasts to it); reshape the value, or make a new "
                                   "Variable of the new shape")
        arr = np.broadcast_to(arr, self.shape).astype(self.type.dtype.np)
        if isinstance(self._value, np.ndarray):
            np.copyto(self._value, arr)
        else:  # held by another process: the new value is sent with the next program's call
            self._value = np.array(arr, order="C")
        return self

    def assign_add(self, delta: Any) -> Variable:
        """``assign(self + delta)``."""
        return self.assign(self.value + delta)

    def assign_sub(self, delta: Any) -> Variable:
        """``assign(self - delta)``."""
        return self.assign(self.value - delta)

    def _rebind(self, array: np.ndarray) -> None:
        # The runtime's result becomes the variable's storage (no copy); for a variable on
        # a cluster's task, a handle of the array that task keeps (its updates stay there).
        self._value = array


def _assignable(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether a value of ``shape`` broadcasts to a Variable's ``target`` shape."""
    if len(shape) > len(target):
        return False
    return all(n in (1, t) for n, t in zip(shape[::-1], target[::-1]))


def _install_array_methods() -> None:
    # The fj surface's operators and methods, applied to the current value, so a Variable
    # reads the same in traced and eager code.
    for name, fn in METHODS.items():
        setattr(Variable, name, lambda self, *args, _fn=fn, **kwargs: _fn(self.value, *args, **kwargs))
    Variable.T = property(lambda self: self.value.T)  # type: ignore[attr-defined]
    # NumPy's functions see the current value too: an ndarray outside a trace, a Tracer
    # (which traces them as fj functions) inside.
    Variable.__array_ufunc__ = _array_ufunc
    Variable.__array_function__ = _array_function


def _array_ufunc(self: Variable, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
    out = kwargs.get("out")
    if out is not None and any(isinstance(o, Variable) for o in (out if type(out) is tuple else (out,))):
        # Writing the storage behind assign's back would skip what assign does in a trace.
        raise FlowjitTypeError(f"np.{ufunc.__name__}(..., out=<Variable>): a Variable is written with "
                               f"v.assign(np.{ufunc.__name__}(...)), not through out=")
    return getattr(ufunc, method)(*_values(inputs), **{k: _values(v) for k, v in kwargs.items()})


def _array_function(self: Variable, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
    if isinstance(kwargs.get("out"), Variable):
        raise FlowjitTypeError(f"np.{func.__name__}(..., out=<Variable>): a Variable is written with "
                               f"v.assign(np.{func.__name__}(...)), not through out=")
    return func(*_values(args), **{k: _values(v) for k, v in kwargs.items()})


def _values(x: Any) -> Any:
    """x with every Variable in it (also inside lists and tuples) replaced by its value."""
    if isinstance(x, Variable):
        return x.value
    if type(x) in (list, tuple):
        return type(x)(_values(e) for e in x)
    return x
    Variable.__hash__ = object.__hash__  # identity, as for any mutable object


_install_array_methods()
