"""``replica_device_setter``: spread a model's Variables over the parameter-server tasks
(TensorFlow's ``tf.train.replica_device_setter``), for ``with fj.device(...)``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


class ReplicaDeviceSetter:
    """A device policy (``fj.device(policy)``): each Variable created in the block goes to
    one of ``ps_devices``, chosen by ``strategy``: ``round_robin`` (in order of creation,
    TensorFlow's default) or ``by_size`` (the device holding the fewest bytes so far,
    TensorFlow's greedy load balancing); the ops go to ``worker_device`` (None: left to
    placement, so they run in the calling process unless they read a variable)."""

    def __init__(self, ps_devices: Sequence[str], worker_device: str | None = None, strategy: str = "round_robin"):
        if not ps_devices:
            raise ValueError("replica_device_setter: no parameter-server device to place variables on "
                             "(a cluster with ps >= 1, or ps_tasks >= 1)")
        if strategy not in ("round_robin", "by_size"):
            raise ValueError(f"replica_device_setter(strategy={strategy!r}): use 'round_robin' or 'by_size'")
        self.ps_devices = list(ps_devices)
        self.op_device = worker_device
        self.strategy = strategy
        self.load = [0] * len(self.ps_devices)  # bytes placed on each
        self.count = 0

    def variable_device(self, name: str, shape: tuple[int, ...], dtype: Any) -> str:
        """The parameter server of the next Variable (``name``, ``shape``, ``dtype``)."""
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(getattr(dtype, "np", dtype)).itemsize
        if self.strategy == "round_robin":
            i = self.count % len(self.ps_devices)
        else:
            i = self.load.index(min(self.load))
        self.count += 1
        self.load[i] += nbytes
        return self.ps_devices[i]

    def __repr__(self) -> str:
        return f"ReplicaDeviceSetter({self.strategy} over {self.ps_devices}, ops on {self.op_device})"


def replica_device_setter(cluster: Any = None, ps_tasks: int | None = None, worker_device: str | None = None,
                          strategy: str = "round_robin", ps_job: str = "ps") -> ReplicaDeviceSetter:
    """A policy for ``with fj.device(...)`` placing each Variable created inside on a
    parameter-server task (``/job:ps/task:K``), round robin or by size, and the ops on
    ``worker_device``. The tasks are ``cluster``'s (an ``fj.distributed.Cluster``) or the
    first ``ps_tasks`` of job ``ps_job``."""
    if cluster is not None:
        count = len(cluster.ps_tasks)
    elif ps_tasks is not None:
        count = int(ps_tasks)
    else:
        raise ValueError("replica_device_setter: give the cluster (or ps_tasks=N)")
    return ReplicaDeviceSetter([f"/job:{ps_job}/task:{k}/cpu:0" for k in range(count)], worker_device, strategy)
