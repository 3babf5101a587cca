"""The NumPy-like surface, ``fj.exp``, ``fj.where``, ``fj.einsum``..., one module per topic
(as ``jax/_src/numpy/``); ``namespace`` gathers their public names (``fj.*`` takes them from it).

Every function accepts Tracers, NumPy arrays, Python scalars and rectangular lists; inside
a trace it records IR, outside it computes at once (through the same primitives, so the
two agree). Signatures, dtypes and shapes are NumPy 2's: arrays promote with
``np.result_type``, Python scalars are weak, integer true division and transcendental
functions of integers give float64. Shapes, axes, counts and shifts must be static (Python
numbers), as the result's shape depends on them; array arguments may be traced.

The modules, lowest first (each imports only modules listed before it): ``operands`` (what they
share), ``counterparts`` (NumPy's names to fj's), ``conversion``, ``layout``, ``creation``,
``ufuncs``, ``indexing``, ``manipulation``, ``reductions``, ``matrices``, ``products``, ``ranges``,
``sorting_searching``, ``setops``, ``index_update``, ``array_construction``, ``index_tricks``,
``arithmetic``, ``logic``, ``nan_reductions``, ``statistics``, ``sequences``, ``polynomials``
(with the window functions), ``selection``; then ``methods``
(Tracer's operators and methods), ``protocols`` (NumPy's functions on traced arrays) and
``namespace``. This file imports nothing, so importing one topic module loads only what that
module needs.
"""
