"""Every topic module's public names in one namespace: what ``fj.*`` re-exports, and what code
that uses many of them imports (``from flowjit.tracer.numpy import namespace as fnp``).
Importing it installs Tracer's operators and methods and NumPy's dispatch protocols."""

from flowjit.tracer.numpy import (
    arithmetic,
    array_construction,
    conversion,
    creation,
    index_tricks,
    index_update,
    indexing,
    layout,
    logic,
    manipulation,
    matrices,
    methods,  # noqa: F401  (installs Tracer's operators and methods)
    nan_reductions,
    polynomials,
    products,
    protocols,  # noqa: F401  (installs NumPy's dispatch protocols on Tracer)
    ranges,
    reductions,
    selection,
    sequences,
    setops,
    sorting_searching,
    statistics,
    ufuncs,
)

TOPICS = (conversion, creation, layout, ufuncs, indexing, manipulation, reductions, matrices, products, ranges,
          sorting_searching, setops, index_update, array_construction, index_tricks, arithmetic, logic,
          nan_reductions, statistics, sequences, polynomials, selection)

__all__: list[str] = sorted(name for module in TOPICS for name in module.__all__)
globals().update({name: getattr(module, name) for module in TOPICS for name in module.__all__})
