"""``tf.train.ClusterSpec``, ``tf.train.Server`` and ``tf.train.replica_device_setter``: the
TensorFlow 1 spelling of a distributed program, over ``fj.distributed``'s cluster on Ray.

The launch model. In TensorFlow 1 every task is a process started by hand (``python
prog.py --job_name=ps --task_index=0`` ...), each running a ``tf.train.Server``. In
flowjit ONE process runs the program: the chief (``job_name="worker", task_index=0``).
Its ``Server`` starts an ``fj.distributed.Cluster`` with as many ps and worker tasks as
the ``ClusterSpec`` lists, each a Ray actor named ``/job:ps/task:0``,
``/job:worker/task:1`` ... (on a local Ray runtime bound to loopback, or on the Ray
cluster at ``FLOWJIT_RAY_ADDRESS`` / ``config={"address": ...}``); the host:port
addresses of the spec are names only. While the server runs, ``tf.device("/job:ps/task:0")``
places graph ops and variables on those tasks (a variable's value then lives in its
task's process), and ``tf.Session(server.target)`` runs the graph from the chief: each
``Session.run`` compiles the program once, cut into one partition per task, and the
values cross processes through Ray. A process started for another task (a ps, or a
worker other than 0) starts nothing: its ``server.join()`` explains this and returns, so
the usual ``if job_name == "ps": server.join()`` ends that process.

Between-graph replication (one copy of the graph per worker process) therefore runs as
the chief's copy alone; in-graph replication (one tower per worker task, under
``tf.device("/job:worker/task:K")``) runs as written, its towers in the worker tasks.
``SyncReplicasOptimizer`` runs the replicas of a between-graph program in turn in the
chief (see its docstring).
"""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from flowjit.v1.device_spec import DeviceSpec
from flowjit.v1.graph import Operation
from flowjit.v1.session import register_target, unregister_target

# ---- ClusterSpec ------------------------------------------------------------------------------------------------


class ClusterSpec:
    """The jobs of a cluster and their tasks' addresses: ``tf.train.ClusterSpec({"ps":
    ["ps0:2222"], "worker": ["w0:2222", "w1:2222"]})`` (a job's tasks as a list, or as a dict
    ``{task index: address}`` for a sparse job)."""

    def __init__(self, cluster: Any):
        if isinstance(cluster, ClusterSpec):
            cluster = cluster.as_dict()
        if not isinstance(cluster, Mapping):
            raise TypeError(f"tf.train.ClusterSpec takes a dict of job name -> list of task addresses (or another "
                            f"ClusterSpec), got {type(cluster).__name__}")
        self._jobs: dict[str, dict[int, str]] = {}
        for job, tasks in cluster.items():
            if not isinstance(job, str) or not job:
                raise TypeError(f"tf.train.ClusterSpec: a job name is a non-empty string, got {job!r}")
            if isinstance(tasks, str):
                raise TypeError(f"tf.train.ClusterSpec: job {job!r} lists its tasks as a list of 'host:port' "
                                f"strings, got the string {tasks!r}")
            if isinstance(tasks, Mapping):
                items = {int(i): str(a) for i, a in tasks.items()}
            else:
                items = {i: str(a) for i, a in enumerate(tasks)}
            if any(i < 0 for i in items):
                raise ValueError(f"tf.train.ClusterSpec: job {job!r} has a negative task index: {sorted(items)}")
            self._jobs[job] = dict(sorted(items.items()))

    @property
    def jobs(self) -> list[str]:
        """The job names, sorted."""
        return sorted(self._jobs)

    def as_dict(self) -> dict[str, list[str] | dict[int, str]]:
        """Job -> list of addresses (a dict of index -> address for a job with gaps)."""
        out: dict[str, list[str] | dict[int, str]] = {}
        for job, tasks in self._jobs.items():
            dense = list(tasks) == list(range(len(tasks)))
            out[job] = list(tasks.values()) if dense else dict(tasks)
        return out

    def _job(self, job_name: str) -> dict[int, str]:
        if job_name not in self._jobs:
            raise ValueError(f"No such job in cluster: {job_name!r} (the jobs are {self.jobs})")
        return self._jobs[job_name]

    def num_tasks(self, job_name: str) -> int:
        """How many tasks ``job_name`` has."""
        return len(self._job(job_name))

    def task_indices(self, job_name: str) -> list[int]:
        """The task indices of ``job_name``, sorted."""
        return list(self._job(job_name))

    def task_address(self, job_name: str, task_index: int) -> str:
        """The address of task ``task_index`` of ``job_name``."""
        tasks = self._job(job_name)
        if task_index not in tasks:
            raise ValueError(f"No task with index {task_index} in job {job_name!r} (it has {list(tasks)})")
        return tasks[task_index]

    def job_tasks(self, job_name: str) -> list[str | None]:
        """The addresses of ``job_name``'s tasks by index (None where an index is missing)."""
        tasks = self._job(job_name)
        return [tasks.get(i) for i in range(max(tasks, default=-1) + 1)]

    def __bool__(self) -> bool:
        return bool(self._jobs)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, ClusterSpec) and self._jobs == other._jobs

    def __hash__(self) -> int:
        return hash(tuple((j, tuple(t.items())) for j, t in sorted(self._jobs.items())))

    def __repr__(self) -> str:
        return f"ClusterSpec({self.as_dict()!r})"


# ---- Server --------------------------------------------------------------------------------------------------

# Jobs the chief's server starts tasks for, and jobs that name this process.
_TASK_JOBS = ("ps", "worker")
_LOCAL_JOBS = ("localhost",)


def _option(config: Any, name: str) -> Any:
    if isinstance(config, Mapping):
        return config.get(name)
    return getattr(config, name, None)


class Server:
    """A task of the cluster ``server_or_cluster_def`` (a ClusterSpec or its dict):
    ``tf.train.Server(cluster, job_name="worker", task_index=0)``. The chief's server
    (worker task 0) starts the cluster's tasks as an ``fj.distributed.Cluster`` (see the
    module doc); any other task's server starts nothing and its ``join()`` explains why.
    ``config`` may give ``address`` (a Ray cluster's ``host:port`` to join, else
    ``FLOWJIT_RAY_ADDRESS``, else a local runtime) and ``timeout`` (seconds any wait on
    the tasks may take). ``stop()`` (or the end of the process) closes the cluster."""

    def __init__(self, server_or_cluster_def: Any, job_name: str | None = None, task_index: int | None = None,
                 protocol: str | None = None, config: Any = None, start: bool = True):
        spec = ClusterSpec(server_or_cluster_def)
        if job_name is None:
            if len(spec.jobs) != 1:
                raise ValueError(f"tf.train.Server: give job_name, one of {spec.jobs}")
            job_name = spec.jobs[0]
        if task_index is None:
            if spec.num_tasks(job_name) != 1:
                raise ValueError(f"tf.train.Server: give task_index, one of {spec.task_indices(job_name)} of job "
                                 f"{job_name!r}")
            task_index = spec.task_indices(job_name)[0]
        address = spec.task_address(job_name, task_index)  # raises naming the jobs and tasks there are
        unknown = [j for j in spec.jobs if j not in _TASK_JOBS + _LOCAL_JOBS]
        if unknown:
            raise ValueError(f"tf.train.Server: flowjit starts the tasks of the jobs 'ps' and 'worker' (the chief is "
                             f"worker task 0); the cluster also lists {unknown}: name them ps or worker tasks")
        self.cluster_spec = spec
        self.job_name, self.task_index = job_name, int(task_index)
        self.protocol = protocol or "grpc"
        self.config = config
        self.target = f"{self.protocol}://{address}"
        self.cluster: Any = None  # the fj.distributed.Cluster, while the chief's server runs
        self._running = False
        if start:
            self.start()

    @property
    def is_chief(self) -> bool:
        """Whether this server is the one that runs the program (worker task 0, or a local server)."""
        return (self.job_name, self.task_index) == ("worker", 0) or self.job_name in _LOCAL_JOBS

    @property
    def server_def(self) -> dict[str, Any]:
        """The cluster, job, task and protocol of this server."""
        return {"cluster": self.cluster_spec.as_dict(), "job_name": self.job_name, "task_index": self.task_index,
                "protocol": self.protocol}

    def start(self) -> None:
        """Start the cluster's tasks (the chief's server; a no-op when running or for another task)."""
        if self._running or not self.is_chief:
            return
        if self.job_name not in _LOCAL_JOBS:
            self.cluster = self._start_cluster()
        self._running = True
        register_target(self.target, self)
        atexit.register(self.stop)

    def _start_cluster(self) -> Any:
        spec = self.cluster_spec
        counts = {job: spec.num_tasks(job) if job in spec.jobs else 0 for job in _TASK_JOBS}
        for job in _TASK_JOBS:
            if counts[job] and spec.task_indices(job) != list(range(counts[job])):
                raise ValueError(f"tf.train.Server: job {job!r} has the task indices {spec.task_indices(job)}; "
                                 f"flowjit starts tasks 0..N-1: number them so")
        if not counts["ps"] or not counts["worker"]:
            raise ValueError(f"tf.train.Server: the cluster {spec.as_dict()} needs at least one 'ps' and one 'worker' "
                             "task (flowjit's clusters have parameter servers and workers)")
        import flowjit.distributed as fjd  # Ray is imported only once a cluster starts

        address = _option(self.config, "address") or os.environ.get("FLOWJIT_RAY_ADDRESS") or None
        timeout = _option(self.config, "timeout")
        kwargs = {"timeout": float(timeout)} if timeout is not None else {}
        return fjd.Cluster(ps=counts["ps"], workers=counts["worker"], address=address, **kwargs)

    def join(self) -> None:
        """TensorFlow blocks here serving the task. In flowjit only the chief's process runs:
        the tasks of the other jobs are started for it. Say so and return (so the usual
        ``if job_name == "ps": server.join()`` ends a process started for a ps task)."""
        role = "the chief" if self.is_chief else f"/job:{self.job_name}/task:{self.task_index}"
        print(f"flowjit: tf.train.Server.join() for {role} returns at once: flowjit runs a distributed TF1 program "
              "in one process, the chief (job_name='worker', task_index=0), whose tf.train.Server starts every ps "
              "and worker task of the ClusterSpec as a Ray actor; start only the chief's process.", file=sys.stderr)

    def stop(self) -> None:
        """Close the cluster's tasks (and the Ray runtime when the cluster started it)."""
        if not self._running:
            return
        self._running = False
        unregister_target(self.target)
        atexit.unregister(self.stop)
        if self.cluster is not None:
            self.cluster.close()
            self.cluster = None

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @staticmethod
    def create_local_server(config: Any = None, start: bool = True) -> Server:
        """A server of this process alone (``/job:localhost``): its target runs sessions locally."""
        return Server({"localhost": ["localhost:0"]}, job_name="localhost", task_index=0, config=config, start=start)

    def __repr__(self) -> str:
        return f"<tf.train.Server /job:{self.job_name}/task:{self.task_index} target={self.target!r}>"


# ---- replica_device_setter -------------------------------------------------------------------------------------

# The op types that hold state and go to the parameter servers (TensorFlow's STANDARD_PS_OPS).
STANDARD_PS_OPS = ("Variable", "VariableV2", "AutoReloadVariable", "MutableHashTable", "MutableHashTableV2",
                   "MutableHashTableOfTensors", "MutableHashTableOfTensorsV2", "MutableDenseHashTable",
                   "MutableDenseHashTableV2", "VarHandleOp")


class _RoundRobinStrategy:
    """Task 0, 1, ..., num_tasks-1, 0, ... in order of the ops placed."""

    def __init__(self, num_tasks: int):
        self._num_tasks = num_tasks
        self._next_task = 0

    def __call__(self, op: Operation) -> int:
        task = self._next_task
        self._next_task = (self._next_task + 1) % self._num_tasks
        return task


class GreedyLoadBalancingStrategy:
    """Each ps op goes to the task with the least load so far, ``load_fn(op)`` adding to it
    (``byte_size_load_fn``: the bytes of its output), as
    ``tf.contrib.training.GreedyLoadBalancingStrategy``."""

    def __init__(self, num_tasks: int, load_fn: Callable[[Operation], float]):
        self._num_tasks = num_tasks
        self._load_fn = load_fn
        self._ps_loads = np.zeros(num_tasks)

    def __call__(self, op: Operation) -> int:
        task = int(np.argmin(self._ps_loads))
        self._ps_loads[task] += self._load_fn(op)
        return task


def byte_size_load_fn(op: Operation) -> float:
    """The bytes of ``op``'s first output (0 when its shape is not fully known)."""
    if not op.outputs:
        return 0.0
    t = op.outputs[0]
    n = t.shape.num_elements()
    return 0.0 if n is None else float(n * t.dtype.np.itemsize)


class _ReplicaDeviceChooser:
    def __init__(self, ps_tasks: int, ps_device: str, worker_device: str | None, merge_devices: bool,
                 ps_ops: Sequence[str], ps_strategy: Callable[[Operation], int]):
        self._ps_tasks, self._ps_device, self._worker_device = ps_tasks, ps_device, worker_device
        self._merge_devices, self._ps_ops, self._ps_strategy = merge_devices, set(ps_ops), ps_strategy

    def device_function(self, op: Operation) -> str:
        if not self._merge_devices and op.device:
            return op.device
        current = DeviceSpec.from_string(op.device)
        if self._ps_tasks and self._ps_device and op.type in self._ps_ops:
            ps_device = DeviceSpec.from_string(self._ps_device)
            if ps_device.job and (not current.job or current.job == ps_device.job):
                ps_device = ps_device.replace(task=int(self._ps_strategy(op)))
            return ps_device.make_merged_spec(current).to_string()
        return DeviceSpec.from_string(self._worker_device or "").make_merged_spec(current).to_string()


def replica_device_setter(ps_tasks: int = 0, ps_device: str = "/job:ps", worker_device: str | None = "/job:worker",
                          merge_devices: bool = True, cluster: Any = None, ps_ops: Sequence[str] | None = None,
                          ps_strategy: Callable[[Operation], int] | None = None
                          ) -> Callable[[Operation], str] | None:
    """A device function for ``with tf.device(...)``, as TensorFlow's: each Variable op goes
    to a task of ``ps_device``'s job, chosen by ``ps_strategy`` (round robin by default, or
    ``GreedyLoadBalancingStrategy(n, byte_size_load_fn)``), every other op to
    ``worker_device`` (``"/job:worker"`` by default, as TensorFlow's, so ``v1 + v2`` has
    device ``"/job:worker"``; ``""`` or None: no worker job); a device set by an inner
    ``tf.device`` wins field by field. The ps tasks are ``cluster``'s (a ClusterSpec or
    dict) or ``ps_tasks``; with none, None (no placement)."""
    if cluster is not None:
        spec = cluster.as_dict() if isinstance(cluster, ClusterSpec) else ClusterSpec(cluster).as_dict()
        ps_job = DeviceSpec.from_string(ps_device).job
        if ps_job not in spec or not spec[ps_job]:
            return None
        ps_tasks = len(spec[ps_job])
    if not ps_tasks:
        return None
    if ps_strategy is None:
        ps_strategy = _RoundRobinStrategy(ps_tasks)
    if not callable(ps_strategy):
        raise TypeError(f"replica_device_setter: ps_strategy must be callable (op -> task index), got {ps_strategy!r}")
    chooser = _ReplicaDeviceChooser(ps_tasks, ps_device, worker_device, merge_devices,
                                    list(ps_ops) if ps_ops is not None else list(STANDARD_PS_OPS), ps_strategy)
    return chooser.device_function
