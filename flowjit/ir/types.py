"""``TensorType``: the static type of every IR value (a shape and a dtype)."""

from __future__ import annotations

from dataclasses import dataclass

from flowjit.ir.dtypes import DType
from flowjit.ir.dtypes import dtype as as_dtype


@dataclass(frozen=True)
class TensorType:
    """A dense array type with a static shape: ``f32[256,784]``, ``i32[]``."""

    shape: tuple[int, ...]
    dtype: DType

    def __init__(self, shape, dtype):
        object.__setattr__(self, "shape", tuple(int(d) for d in shape))
        object.__setattr__(self, "dtype", as_dtype(dtype))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def with_shape(self, shape) -> TensorType:
        return TensorType(shape, self.dtype)

    def with_dtype(self, dtype) -> TensorType:
        return TensorType(self.shape, dtype)

    def __str__(self) -> str:
        return f"{self.dtype.short}[{','.join(str(d) for d in self.shape)}]"

    __repr__ = __str__
