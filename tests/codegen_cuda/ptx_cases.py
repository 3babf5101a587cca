"""Generated CUDA kernels through numba's real CUDA compiler to PTX, without a GPU.

The simulator runs kernels as Python and so never types them; ``numba.cuda.compile_ptx``
types and lowers them as a GPU run would, with the NVVM library of a CUDA toolkit and no
driver. Run by ``test_cuda_backend.py`` in a subprocess without the simulator; skipped
where the simulator is on or NVVM cannot be loaded.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba.core import config

if config.ENABLE_CUDASIM:
    pytest.skip("PTX needs numba's CUDA target, not the simulator", allow_module_level=True)
try:
    from numba.cuda.cudadrv.nvvm import NVVM

    NVVM()
except Exception as e:  # no CUDA toolkit: nothing to compile with
    pytest.skip(f"numba.cuda.compile_ptx needs the NVVM library: {type(e).__name__}: "
                f"{str(e).strip().splitlines()[0] if str(e).strip() else ''}", allow_module_level=True)

import flowjit as fj  # noqa: E402
from flowjit.codegen_cuda.compile import load_plan  # noqa: E402
from flowjit.codegen_cuda.matmul_kernel import matmul_kernel  # noqa: E402
from flowjit.codegen_cuda.render import cuda_kernel_plan  # noqa: E402
from flowjit.ir.core import Block, Value, clone_ops_into  # noqa: E402
from flowjit.ir.types import TensorType  # noqa: E402
from tests.codegen_cuda.blocks import compile_block, supported  # noqa: E402
from tests.codegen_cuda.helpers import (  # noqa: E402
    case_block,
    fused,
    fusion_ops,
    hand_built_kernel,
    train_inputs,
    train_step,
)
from tests.registry.test_generic import one_case_per_primitive_and_dtype  # noqa: E402

CC = (7, 5)  # the oldest architecture CUDA 12 and 13 both compile for
RNG = np.random.default_rng(0)


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def ptx_of(f, *args) -> list[str]:
    """The PTX of every kernel function of every fusion of ``f`` at ``args``."""
    out = []
    for op in fusion_ops(fused(f, *args)):
        assert supported(op.blocks[0]) is None
        kernel = compile_block(op.blocks[0], op.attrs["name"], op.attrs["lines"])
        out += kernel.ptx(CC).values()
    return out


PROGRAMS = {
    "gelu": (lambda x: fj.nn.gelu(x), (_f32(6, 40),)),
    "softmax": (lambda x: fj.nn.softmax(x), (_f32(9, 40),)),
    "layernorm": (lambda x, g, b: fj.nn.layer_norm(x, g, b), (_f32(7, 36), _f32(36), _f32(36))),
    "argmax": (lambda x: (fj.argmax(x, axis=1), fj.argmin(x, axis=0)), (_f32(6, 5),)),
    "int_and_bool": (lambda x: (x.sum(axis=1), x.prod(axis=1), x.min(axis=1), (x > 3).any(axis=1),
                                (x > -8).all(axis=1), (x % 3).max()),
                     (RNG.integers(-9, 9, (5, 30)).astype(np.int32),)),
    "layout": (lambda x, y: fj.concatenate([fj.pad(x, ((1, 1), (0, 2))), y.T], axis=0)[::2]
               + fj.iota(np.float32, (3, 10), 1), (_f32(2, 8), _f32(10, 2))),
    "float64": (lambda x: fj.nn.softmax(fj.rint(x) * fj.sign(x)), (RNG.standard_normal((3, 9)),)),
    "train_step": (train_step, train_inputs(RNG)),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_kernels_compile_to_ptx(name):
    f, args = PROGRAMS[name]
    ptx = ptx_of(f, *args)
    assert ptx and all(".entry" in p and f"sm_{CC[0]}{CC[1]}" in p for p in ptx)


def test_every_elementwise_and_layout_primitive_compiles_to_ptx():
    # One case per elementwise or layout primitive and dtype kind (bool, int, float: the
    # templates differ by kind), four to a block: every scalar template and index rule
    # through numba's CUDA typing and NVVM. Numba's SSA pass grows faster than the function
    # it rebuilds: all 191 cases in one block took 43 s, blocks of four 25 s, blocks of one
    # 34 s. (Reducers: PROGRAMS above; every dtype runs in the simulator.)
    cases, seen = [], set()
    for case in one_case_per_primitive_and_dtype():
        body, _, _ = case_block(case)
        key = (case.prim, body.args[0].type.dtype.kind if body.args else "", len(body.args))
        if key not in seen and body.ops[-1].primitive.kind != "reduction" and supported(body) is None:
            seen.add(key)
            cases.append(body)
    assert len(cases) > 80
    for start in range(0, len(cases), 4):
        chunk = cases[start:start + 4]
        block = Block([Value(a.type) for body in chunk for a in body.args])
        args = iter(block.args)
        block.set_returns([r for body in chunk for r in clone_ops_into(body, block, [next(args) for _ in body.args])])
        assert supported(block) is None
        kernel = compile_block(block, f"registry_{start}")
        assert len(kernel.ptx(CC)) == len(kernel.launches) > 0


def test_a_loop_ir_kernel_built_by_hand_compiles_to_ptx():
    # If statements, strided loops and conditional updates through numba's CUDA typing.
    plan = cuda_kernel_plan(hand_built_kernel())
    types = [TensorType((4, 5), np.float32)]
    outs = [TensorType((4, 5), np.float32), TensorType((4,), np.int64), TensorType((), np.float32),
            TensorType((4,), np.float32)]
    ptx = load_plan(plan, "by_hand", "", types, outs).ptx(CC)
    assert len(ptx) == len(plan.launches) == 5


@pytest.mark.parametrize("dtype", ["<f4", "<f8", "<i4", "<i8"])
def test_matmul_kernel_compiles_to_ptx(dtype):
    from numba import cuda, from_dtype, types
    array = types.Array(from_dtype(np.dtype(dtype)), 3, "C")
    ptx, _ = cuda.compile_ptx(matmul_kernel(16, dtype).py_func, (array, array, array), cc=CC)
    assert ".shared" in ptx
