"""``CudaExecutable`` under numba's CUDA simulator or on a GPU, run by
``test_cuda_executable.py`` in a subprocess with ``NUMBA_ENABLE_CUDASIM=1`` (numba reads it
when first imported), and without it on a machine with a GPU; skipped anywhere else.

The op a failed run names is the op that call failed in, whatever other calls of the
same executable (earlier, later or on other threads) ran since.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from tests.codegen_cuda.target import require_cuda_target  # noqa: E402

require_cuda_target("test_cuda_executable.py")

from flowjit.codegen_cuda import CudaExecutable, to_host  # noqa: E402
from flowjit.ir import new_function  # noqa: E402
from flowjit.ir.dtypes import dtype  # noqa: E402
from flowjit.ir.errors import FlowjitError  # noqa: E402
from flowjit.ir.types import TensorType  # noqa: E402
from flowjit.runtime import rendezvous  # noqa: E402
from tests.codegen_cuda.blocks import cuda_executable  # noqa: E402

F32x4 = TensorType((4,), dtype("float32"))


def _exp_plus_received() -> tuple[CudaExecutable, list]:
    """``exp(x) + recv "k"`` on cuda:0: a run fails in its recv when nothing was sent."""
    fn, b = new_function("exp_plus_received", [F32x4], ["x"])
    (e,) = b.emit("exp", fn.args)
    (r,) = b.emit("recv", [], {"key": "k", "src": "cpu:0", "shape": (4,), "dtype": F32x4.dtype})
    fn.body.set_returns(b.emit("add", [e, r]))
    return cuda_executable(fn, "cuda:0"), fn.body.ops


def _run(exe: CudaExecutable, x: np.ndarray, sent: np.ndarray | None) -> np.ndarray:
    # One step of its own per call, as the multi-device executor gives each call.
    with rendezvous.active(rendezvous.Rendezvous(in_order=True)) as step:
        if sent is not None:
            step.send("k", sent)
        return to_host(exe.run(x)[0])


def test_a_failed_run_names_its_op_after_another_run_succeeded():
    exe, (exp, recv, add) = _exp_plus_received()
    x = np.zeros(4, np.float32)
    with pytest.raises(FlowjitError, match="nothing was sent") as failed:
        _run(exe, x, None)
    np.testing.assert_allclose(_run(exe, x, np.ones(4, np.float32)), [2, 2, 2, 2])
    assert exe.failing_op(failed.value) is recv
    assert exe.failing_op(FlowjitError("raised elsewhere")) is None


def test_concurrent_runs_each_name_the_op_they_failed_in():
    exe, (exp, recv, add) = _exp_plus_received()
    x = np.zeros(4, np.float32)
    named: list = []
    results: list = []
    barrier = threading.Barrier(4)

    def worker(i: int) -> None:
        barrier.wait()
        for _ in range(3):
            if i % 2:
                results.append(_run(exe, x, np.full(4, i, np.float32)))
            else:
                try:
                    _run(exe, x, None)
                except FlowjitError as e:
                    named.append((exe.failing_op(e), str(e)[:300]))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [op for op, _ in named] == [recv] * 6, named
    assert sorted(float(r[0]) for r in results) == [2.0] * 3 + [4.0] * 3
