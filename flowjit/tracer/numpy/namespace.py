"""Every topic module's public names in one namespace: what ``fj.*`` re-exports, and what code
that uses many of them imports (``from flowjit.tracer.numpy import namespace as fnp``).
Importing it installs Tracer's operators and methods and NumPy's dispatch protocols."""

from flowjit.tracer.numpy import (
    conversion,
    creation,
    index_update,
    indexing,
    layout,
    manipulation,
    matrices,
    methods,  # noqa: F401  (installs Tracer's operators and methods)
    products,
    protocols,  # noqa: F401  (installs NumPy's dispatch protocols on Tracer)
    ranges,
    reductions,
    setops,
    sorting_searching,
    ufuncs,
)

TOPICS = (conversion, creation, layout, ufuncs, indexing, manipulation, reductions, matrices, products, ranges,
          sorting_searching, setops, index_update)

__all__: list[str] = sorted(name for module in TOPICS for name in module.__all__)
globals().update({name: getattr(module, name) for module in TOPICS for name in module.__all__})
