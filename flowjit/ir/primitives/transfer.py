"""Transfers between devices: ``send`` and ``recv``, the partition pass's cross-device edges.

``send %x {key, dst}`` on the producing device hands ``%x`` to ``%y = recv {key, src, shape,
dtype}`` on the consuming one; the pair shares its key, unique in the program. Both are
kind ``transfer``: never merged, pruned, fused or hoisted, and the memory plan never
reuses a sent buffer (it escapes to another device). Their references go through the
current step's rendezvous, so a partitioned program also runs in order on the
interpreter, each send before its recv. The rendezvous belongs to the runtime, a layer
above this one: ``flowjit.runtime.rendezvous`` registers it here (``set_channel``) when it
is imported, as it is with ``import flowjit``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from flowjit.ir.dtypes import DType
from flowjit.ir.errors import FlowjitError
from flowjit.ir.registry import attr, declare
from flowjit.ir.types import TensorType

# The channel the references hand values through: (send(key, value), recv(key) -> a NumPy
# array in host memory). None until the runtime registers its rendezvous.
_channel: tuple[Callable[[str, Any], None], Callable[[str], np.ndarray]] | None = None


def set_channel(send: Callable[[str, Any], None], recv: Callable[[str], np.ndarray]) -> None:
    """Make ``send(key, value)`` and ``recv(key)`` (which returns the value sent under
    ``key`` as a host NumPy array, waiting for it) the channel of the ``send`` and ``recv``
    references. The runtime registers the current step's rendezvous at import."""
    global _channel
    _channel = (send, recv)


def _the_channel(op: str, key: str) -> tuple[Callable[[str, Any], None], Callable[[str], np.ndarray]]:
    if _channel is None:
        raise FlowjitError(f"{op} {key!r}: no transfer channel is registered; import flowjit.runtime (as "
                           "`import flowjit` does), which registers the step's rendezvous")
    return _channel


def _send_rule(in_types: Sequence[TensorType], *, key: str, dst: str) -> list[TensorType]:
    return []


def _send_impl(x: np.ndarray, *, key: str, dst: str) -> list:
    _the_channel("send", key)[0](key, x)
    return []


def _recv_rule(in_types: Sequence[TensorType], *, key: str, src: str, shape: tuple[int, ...],
               dtype: DType) -> TensorType:
    return TensorType(shape, dtype)


def _recv_impl(*, key: str, src: str, shape: tuple[int, ...], dtype: DType) -> np.ndarray:
    # The reference runs on the host: the channel copies a value sent from a GPU to host memory.
    return _the_channel("recv", key)[1](key)


declare("send", kind="transfer", role="send", rule=_send_rule, impl=_send_impl, arity=1, differentiable=False,
        attrs={"key": attr("str"), "dst": attr("str")},
        doc="send(x) {key, dst}: hand x to the recv of the same key on device dst")
declare("recv", kind="transfer", role="recv", rule=_recv_rule, impl=_recv_impl, arity=0, differentiable=False,
        attrs={"key": attr("str"), "src": attr("str"), "shape": attr("shape"), "dtype": attr("dtype")},
        doc="recv() {key, src, shape, dtype}: the value the send of the same key handed over")
