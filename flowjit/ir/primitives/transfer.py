"""Transfers between devices: ``send`` and ``recv``, the partition pass's cross-device edges.

``send %x {key, dst}`` on the producing device hands ``%x`` to ``%y = recv {key, src, shape,
dtype}`` on the consuming one; the pair shares its key, unique in the program. Both are
kind ``transfer``: never merged, pruned, fused or hoisted, and the memory plan never
reuses a sent buffer (it escapes to another device). Their references go through the
current step's rendezvous (``flowjit.runtime.rendezvous``), so a partitioned program also
runs in order on the interpreter, each send before its recv.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flowjit.ir.dtypes import DType
from flowjit.ir.registry import attr, declare
from flowjit.ir.types import TensorType


def _send_rule(in_types: Sequence[TensorType], *, key: str, dst: str) -> list[TensorType]:
    return []


def _send_impl(x: np.ndarray, *, key: str, dst: str) -> list:
    from flowjit.runtime.rendezvous import current
    current().send(key, x)
    return []


def _recv_rule(in_types: Sequence[TensorType], *, key: str, src: str, shape: tuple[int, ...],
               dtype: DType) -> TensorType:
    return TensorType(shape, dtype)


def _recv_impl(*, key: str, src: str, shape: tuple[int, ...], dtype: DType) -> np.ndarray:
    # The reference runs on the host: a value sent from a GPU is copied to host memory.
    from flowjit.runtime.rendezvous import current, to_host
    return to_host(current().recv(key))


declare("send", kind="transfer", role="send", rule=_send_rule, impl=_send_impl, arity=1, differentiable=False,
        attrs={"key": attr("str"), "dst": attr("str")},
        doc="send(x) {key, dst}: hand x to the recv of the same key on device dst")
declare("recv", kind="transfer", role="recv", rule=_recv_rule, impl=_recv_impl, arity=0, differentiable=False,
        attrs={"key": attr("str"), "src": attr("str"), "shape": attr("shape"), "dtype": attr("dtype")},
        doc="recv() {key, src, shape, dtype}: the value the send of the same key handed over")
