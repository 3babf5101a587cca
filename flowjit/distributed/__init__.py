"""flowjit past one process, on Ray: a cluster of parameter-server and worker tasks, and
data-parallel training over it (the replicated training of the TensorFlow paper, §4.4).

``import flowjit as fj`` does not import Ray; ``fj.distributed`` does, and says which extra
to install when it is missing (``pip install 'flowjit[distributed]'``).

The cluster. ``fj.distributed.Cluster(ps=2, workers=4)`` starts a local Ray runtime bound
to loopback (or joins one: ``address="host:port"``), and one Ray actor per task, named
``/job:ps/task:0`` ... ``/job:worker/task:3``; ``cluster.devices()`` lists
``/job:worker/task:3/cpu:0`` and so on. Use it as a context manager, or call ``close()``.

Training. ``fj.distributed.train(cluster, loss_fn, variables, optimizer, data, steps,
mode="sync"|"async", backup=0, staleness=None)``:

- ``variables`` maps names to initial arrays. They are spread over the parameter servers
  (``placement="round_robin"`` in the order given, or ``"by_size"``); each server keeps its
  variables and a copy of ``optimizer`` (an ``fj.optim`` optimizer, or a function making
  one) and applies the update with the optimizer's own compiled code, so one step is the
  same math as ``optimizer.apply_gradients`` in a single process.
- ``loss_fn(params, *batch)`` returns the scalar loss; ``params`` is a dict like
  ``variables``. It must pickle: every worker gets it and compiles its value and gradient
  with ``fj.value_and_grad`` on its first batch. A module-level function travels by
  reference, so its module must be importable on the workers; otherwise have Ray send the
  module by value (``ray.cloudpickle.register_pickle_by_value(module)``).
- ``data`` yields batches (tuples of arrays); each gradient consumes one batch, handed out
  by the chief (this process) in order, so a run is reproducible. Training stops early
  when ``data`` runs out.
- The chief never holds the gradients: a worker returns one Ray object per parameter server,
  and the chief passes those references on to the servers.
- ``mode="sync"``: each step gives the next batch to every free worker at the current
  parameters and aggregates (averages) the first ``workers - backup`` gradients to land;
  the rest are dropped, and a worker still computing a dropped gradient sits out the next
  steps until it is done. A gradient of older parameters is never applied. With
  ``backup=0`` and equal batches, a step equals one single-process step on the
  concatenation of the workers' batches (a mean loss), up to float rounding.
- ``mode="async"``: every worker computes on the parameters of its last pull; each gradient
  is applied when it lands and the worker goes on with the new parameters. With
  ``staleness=k``, a gradient computed on parameters more than k updates old is dropped.

Checkpoints. With ``checkpoint_dir=``, each parameter server writes its variables and its
optimizer's state (slots, iterations) with ``fj.checkpoint`` (atomically) to
``<dir>/ps-<p>/ckpt-<step>.safetensors`` every ``checkpoint_every_steps`` updates and/or
``checkpoint_every_seconds``, and at the end. The chief decides when, so every server saves
the same version: after that update, before the next (while the workers compute). A step
counts once every server's file of it is written: then the chief replaces the index
``<dir>/checkpoint.json`` (``fj.distributed.checkpoint_index(dir)``) and deletes all but the
newest ``checkpoints_to_keep``. ``restore=True`` resumes from the latest complete step
(``steps`` counts from the start of training; ``data`` is read from where it is given).
The directory must be one every task sees (a shared filesystem past one machine).

Faults. A worker that crashes (its gradient fails with Ray's ``RayActorError``) loses that
gradient, its batch goes to another worker, and sync steps go on with the others while
Ray restarts it, waiting for it only when fewer than ``workers - backup`` are left; the
chief sets the restarted worker up again and it rejoins (async likewise). A parameter
server that crashes is waited for; then every server is set up again from the latest
complete checkpoint (or the initial values when there is none yet), the parameters go back
to that version, and the chief logs a warning and counts the updates lost
(``TrainResult.steps_lost``) and redoes them. ``on_step(step, result)`` is called after
each update (progress, or faults injected with ``cluster.kill``). A task Ray will not
restart (``Cluster(max_restarts=...)`` spent) is a ``ClusterError`` naming it, unless sync
has enough workers without it.

Every wait is bounded by the cluster's ``timeout`` (or ``train``'s) and fails with a
``ClusterError`` saying what it waited for. ``train`` returns a ``TrainResult`` (final
parameters, losses, updates applied, gradients dropped, staleness, samples per second,
worker failures and rejoins, parameter-server failures and steps lost, checkpoints written).

Sparse updates. ``train(..., sparse={"emb": 0})``: the embedding table ``emb`` (read by
``loss_fn`` only as rows indexed by the batch's array 0) moves as (ids, rows): workers pull
the rows their batch names and send back their gradient rows, the server applies them to
those rows only (``flowjit.distributed.sparse``); ``TrainResult.grad_bytes`` shows the bytes.

Placed programs. While a cluster is open its tasks' devices exist for ``fj.device``
(``/job:worker/task:1``): an ``fj.function`` with ops and Variables placed there runs its
partitions in the tasks' processes, with Send/Recv through Ray (``flowjit.distributed.remote``);
``replica_device_setter(cluster)`` spreads Variables over the parameter servers. The
``flowjit.v1`` spelling (``tf.train.ClusterSpec``, ``Server``, ``replica_device_setter``,
``SyncReplicasOptimizer``) runs on the same machinery.

A task that restarts compiles its placed partitions again on the next call; the Variables it
held are gone, and a call using them fails naming the task.

Not yet: a chief that survives its own crash (rerun ``train(restore=True)``).
"""

from flowjit.distributed._ray import ray  # noqa: F401  (first: it says what to install)
from flowjit.distributed.cluster import Cluster, ClusterError, init_local
from flowjit.distributed.device_setter import ReplicaDeviceSetter, replica_device_setter
from flowjit.distributed.train import TrainResult, checkpoint_index, place_variables, train

__all__ = ["Cluster", "ClusterError", "init_local", "ReplicaDeviceSetter", "replica_device_setter", "TrainResult",
           "checkpoint_index", "place_variables", "train"]
