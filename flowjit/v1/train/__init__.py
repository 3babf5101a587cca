"""``tf.train``: optimizers, the global step and learning-rate schedules, Saver and
checkpoint state, Coordinator, QueueRunner and the queue-based input pipelines,
checkpoint readers (NewCheckpointReader, list_variables, load_variable, init_from_checkpoint),
MonitoredTrainingSession and its hooks, ExponentialMovingAverage, and the distributed
spelling (ClusterSpec, Server, replica_device_setter, SyncReplicasOptimizer)."""

from flowjit.v1.train import queue_runner
from flowjit.v1.train.checkpoint_utils import (
    CheckpointReader,
    NewCheckpointReader,
    init_from_checkpoint,
    list_variables,
    load_checkpoint,
    load_variable,
)
from flowjit.v1.train.coordinator import Coordinator
from flowjit.v1.train.distributed import (
    ClusterSpec,
    GreedyLoadBalancingStrategy,
    Server,
    byte_size_load_fn,
    replica_device_setter,
)
from flowjit.v1.train.input import (
    batch,
    batch_join,
    input_producer,
    limit_epochs,
    range_input_producer,
    shuffle_batch,
    shuffle_batch_join,
    slice_input_producer,
)
from flowjit.v1.train.learning_rate_decay import (
    cosine_decay,
    exponential_decay,
    inverse_time_decay,
    natural_exp_decay,
    piecewise_constant,
    polynomial_decay,
)
from flowjit.v1.train.monitored_session import (
    CheckpointSaverHook,
    LoggingTensorHook,
    MonitoredSession,
    MonitoredTrainingSession,
    NanLossDuringTrainingError,
    NanTensorHook,
    Scaffold,
    SecondOrStepTimer,
    SessionRunArgs,
    SessionRunContext,
    SessionRunHook,
    SessionRunValues,
    StepCounterHook,
    StopAtStepHook,
    SummarySaverHook,
)
from flowjit.v1.train.moving_averages import ExponentialMovingAverage
from flowjit.v1.train.optimizers import (
    AdadeltaOptimizer,
    AdagradOptimizer,
    AdamOptimizer,
    FtrlOptimizer,
    GradientDescentOptimizer,
    MomentumOptimizer,
    Optimizer,
    ProximalAdagradOptimizer,
    ProximalGradientDescentOptimizer,
    RMSPropOptimizer,
    create_global_step,
    get_global_step,
    get_or_create_global_step,
)
from flowjit.v1.train.queue_runner import QueueRunner, add_queue_runner, start_queue_runners
from flowjit.v1.train.saver import CheckpointState, Saver, checkpoint_exists, get_checkpoint_state, latest_checkpoint
from flowjit.v1.train.sync_replicas import SyncReplicasOptimizer
