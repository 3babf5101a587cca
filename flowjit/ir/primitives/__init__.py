"""Importing this package declares every primitive in the registry, one module per family."""

from flowjit.ir.primitives import (  # noqa: F401
    callback,
    control,
    creation,
    custom,
    decompositions,
    elementwise,
    fft,
    fusion,
    indexing,
    layout,
    linalg,
    random,
    reduction,
    special,
    state,
    transfer,
)
