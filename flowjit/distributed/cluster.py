"""``Cluster``: parameter-server and worker tasks as Ray actors, on a local Ray runtime
started for the purpose or on an existing Ray cluster."""

from __future__ import annotations

import socket
import time
import uuid
import warnings
from typing import Any

from flowjit.distributed._ray import ray
from flowjit.distributed.remote import CONCURRENCY_GROUPS, PartitionHost, TaskHost
from flowjit.distributed.tasks import Task
from flowjit.runtime.devices import register_remote_devices, unregister_remote_devices


class TaskActor(Task, PartitionHost):
    """A task's process: the training roles (``Task``) and the partitions of placed
    programs (``PartitionHost``)."""


class ClusterError(RuntimeError):
    """A cluster that cannot be started or joined, or a task that does not answer."""


def _reachable(address: str, timeout: float = 2.0) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def init_local(num_cpus: int, object_store_mb: int = 200) -> str:
    """Start a Ray runtime in this process bound to loopback, with ``num_cpus`` logical CPUs,
    an object store of ``object_store_mb`` MiB and no dashboard; its address. ``Cluster``
    starts one this way; start one yourself to share it between clusters (``ray.shutdown()``
    ends it)."""
    ray.init(num_cpus=num_cpus, object_store_memory=object_store_mb * 1024**2, include_dashboard=False,
             logging_level="ERROR", log_to_driver=False)
    address = ray.get_runtime_context().gcs_address
    if not address.startswith("127.0.0.1:"):
        warnings.warn(f"the local Ray runtime listens at {address}, not on loopback only: Ray was imported before "
                      "flowjit.distributed, which sets RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 for it; import "
                      "flowjit.distributed first (or set that variable yourself)", stacklevel=2)
    return address


class Cluster:
    """``ps`` parameter-server tasks and ``workers`` worker tasks, each a Ray actor named as in
    TensorFlow (``/job:ps/task:0``, ``/job:worker/task:3``) and asking ``cpus_per_task`` of
    Ray's CPUs. With no ``address``, a local Ray runtime bound to loopback (no dashboard, an
    object store of ``object_store_mb``, ``num_cpus`` logical CPUs: by default one per task,
    the tasks mostly wait on each other) is started and shut down by ``close()`` or at the
    end of a ``with`` block; a runtime this process already runs is used (and left running).
    With an ``address`` (``host:port`` of a Ray cluster's head), the cluster is joined.
    Every wait is bounded by ``timeout`` seconds. A task whose process dies is restarted by
    Ray (up to ``max_restarts`` times; -1: always) with its state reset, and calls to it
    fail with a ``ray.exceptions.RayActorError`` until it is back (never retried: what
    the task held is gone, and its user decides what to redo)."""

    def __init__(self, ps: int = 1, workers: int = 1, address: str | None = None, *, cpus_per_task: float = 1.0,
                 num_cpus: int | None = None, object_store_mb: int = 200, timeout: float = 60.0,
                 max_restarts: int = -1):
        for what, n, least in (("ps", ps, 1), ("workers", workers, 1)):
            if not isinstance(n, int) or n < least:
                raise ValueError(f"Cluster({what}={n!r}): give a whole number of tasks, at least {least}")
        self.timeout = float(timeout)
        self._owns_runtime = False
        self._actors: dict[str, Any] = {}
        self._hosts: dict[str, TaskHost] = {}
        self._connect(address, num_cpus if num_cpus is not None else ps + workers, object_store_mb)
        try:
            total = ray.cluster_resources().get("CPU", 0.0)
            need = (ps + workers) * cpus_per_task
            if need > total:
                raise ClusterError(f"Cluster(ps={ps}, workers={workers}) needs {need:g} CPUs "
                                   f"({cpus_per_task:g} a task) and the Ray cluster at {self.address} has "
                                   f"{total:g}: ask for fewer tasks, a smaller cpus_per_task, or a bigger cluster")
            namespace = f"flowjit-{uuid.uuid4().hex[:8]}"  # two clusters on one Ray cluster keep their own names
            actor = ray.remote(concurrency_groups=CONCURRENCY_GROUPS)(TaskActor)
            for job, n in (("ps", ps), ("worker", workers)):
                for i in range(n):
                    name = f"/job:{job}/task:{i}"
                    self._actors[name] = actor.options(name=name, namespace=namespace, num_cpus=cpus_per_task,
                                                       max_restarts=max_restarts, max_task_retries=0).remote(name)
            self.ps_tasks = [self._actors[f"/job:ps/task:{i}"] for i in range(ps)]
            self.worker_tasks = [self._actors[f"/job:worker/task:{i}"] for i in range(workers)]
            pings = {name: a.ping.remote() for name, a in self._actors.items()}
            ready, _ = ray.wait(list(pings.values()), num_returns=len(pings), timeout=self.timeout)
            if len(ready) < len(pings):
                late = [name for name, ref in pings.items() if ref not in ready]
                raise ClusterError(f"the tasks {late} did not start within {self.timeout:g} s (the Ray cluster has "
                                   f"{ray.available_resources().get('CPU', 0.0):g} of {total:g} CPUs free)")
            self.pids = dict(ray.get(list(pings.values()), timeout=self.timeout))
            peers = {f"{name}/cpu:0": a for name, a in self._actors.items()}
            self._hosts = {d: TaskHost(d, d.rpartition("/")[0], a, peers, self.timeout) for d, a in peers.items()}
            register_remote_devices(self._hosts)
        except BaseException:
            self.close()
            raise

    def _connect(self, address: str | None, num_cpus: int, object_store_mb: int) -> None:
        if address is not None and address != "auto" and not _reachable(address):
            raise ClusterError(f"Cluster(address={address!r}): no Ray cluster answers there; start one "
                               "(ray start --head) or leave address out for a local one")
        if ray.is_initialized():
            here = ray.get_runtime_context().gcs_address
            if address not in (None, "auto", here):
                raise ClusterError(f"Cluster(address={address!r}): this process is already connected to the Ray "
                                   f"cluster at {here}; close that one first (ray.shutdown())")
        elif address is None:
            init_local(num_cpus, object_store_mb)
            self._owns_runtime = True
        else:
            try:
                ray.init(address=address, logging_level="ERROR", log_to_driver=False)
            except (ConnectionError, RuntimeError) as e:
                raise ClusterError(f"Cluster(address={address!r}): could not join the Ray cluster there: {e}") from e
        self.address = ray.get_runtime_context().gcs_address

    def devices(self) -> list[str]:
        """Every task's device, ``/job:worker/task:3/cpu:0``: parameter servers first."""
        return [f"{name}/cpu:0" for name in self._actors]

    def task(self, name: str) -> Any:
        """The actor of the task ``name`` (``/job:worker/task:1``)."""
        if name not in self._actors:
            raise KeyError(f"no task {name!r} in this cluster; it has {list(self._actors)}")
        return self._actors[name]

    def slow_worker(self, index: int, seconds: float) -> None:
        """Make worker ``index`` sleep ``seconds`` before each gradient (a straggler, to try
        backup workers); 0 restores it."""
        ray.get(self.task(f"/job:worker/task:{index}").set_delay.remote(seconds), timeout=self.timeout)

    def kill(self, name: str) -> None:
        """Kill the process of the task ``name`` as a crash would (for tests of faults and the
        example's ``--kill-worker-every``): Ray restarts it, with its state reset, when
        restarts are left. Returns once the old process no longer answers."""
        actor, old = self.task(name), self.pids.get(name)
        ray.kill(actor, no_restart=False)
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:  # ray.kill only asks: a call may still reach the old process
            try:
                # A ping the old process does not answer at once waits in Ray's queue for the
                # restarted one (seconds): not answering within a moment means it is gone.
                if ray.get(actor.ping.remote(), timeout=0.25)[1] != old:
                    return
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                return
            time.sleep(0.02)
        raise ClusterError(f"{name} still answers {self.timeout:g} s after it was killed")

    def wait_ready(self, name: str, timeout: float | None = None) -> int:
        """Wait until the task ``name`` answers (after a restart: its new process); its process id.
        ClusterError when it does not answer within ``timeout`` (the cluster's by default)."""
        limit = self.timeout if timeout is None else float(timeout)
        deadline = time.monotonic() + limit
        while True:
            try:
                _, pid = ray.get(self.task(name).ping.remote(), timeout=max(0.1, deadline - time.monotonic()))
                self.pids[name] = pid
                return pid
            except ray.exceptions.GetTimeoutError:
                pass
            except ray.exceptions.ActorDiedError as e:  # restarts used up: it will not come back
                raise ClusterError(f"{name} died and Ray will not restart it (max_restarts spent): {e}") from e
            except ray.exceptions.RayActorError:  # restarting: ask again
                time.sleep(0.05)
            if time.monotonic() > deadline:
                raise ClusterError(f"{name} did not answer within {limit:g} s (restarting after a crash?)")

    def close(self) -> None:
        """End the tasks, and the local Ray runtime when this cluster started it."""
        unregister_remote_devices(self._hosts)
        for host in self._hosts.values():
            host.closed = True
        self._hosts = {}
        for a in self._actors.values():
            ray.kill(a)
        self._actors = {}
        if self._owns_runtime:
            ray.shutdown()
            self._owns_runtime = False

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Cluster({len(self.ps_tasks)} ps, {len(self.worker_tasks)} workers at {self.address})"
