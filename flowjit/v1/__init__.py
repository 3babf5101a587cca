"""``flowjit.v1``: TensorFlow 1.x's Graph/Session front end, ``import flowjit.v1 as tf``.

Programs of the TensorFlow paper's generation -- placeholders, Variables, a graph built
first and ``Session.run(fetches, feed_dict)`` later, ``Optimizer.minimize``, queues fed
by threads, ``Saver`` -- run with only the import line changed. It is a second front end
on the same system: each ``Session.run`` evaluates the ops its fetches need inside an
``fj.function`` trace, so the program goes through the same IR, passes, fused kernels
and caches as ``@fj.function``. This module only re-exports the public names.

Distributed programs keep their TF1 spelling (``tf.train.ClusterSpec``, ``tf.train.Server``,
``tf.device("/job:ps/task:0")``, ``tf.train.replica_device_setter``,
``tf.train.SyncReplicasOptimizer``): only the chief's process runs, and its Server starts
the cluster's tasks on Ray (``flowjit.v1.train.distributed`` says how).
"""

from flowjit.ir.dtypes import bool_ as bool  # noqa: A001
from flowjit.ir.dtypes import dtype as as_dtype
from flowjit.ir.dtypes import float16, float32, float64, int32, int64
from flowjit.v1 import errors, layers, losses, metrics, nn, random, summary, train
from flowjit.v1.control_flow import case, cond, foldl, foldr, group, map_fn, no_op, scan, while_loop
from flowjit.v1.control_flow import tuple_ as tuple  # noqa: A001
from flowjit.v1.debugging import (
    Print,
    assert_equal,
    assert_greater,
    assert_greater_equal,
    assert_less,
    assert_less_equal,
    assert_negative,
    assert_non_negative,
    assert_non_positive,
    assert_none_equal,
    assert_positive,
    assert_rank,
)
from flowjit.v1.device_spec import DeviceSpec
from flowjit.v1.gradients import (
    NoGradient,
    NotDifferentiable,
    RegisterGradient,
    custom_gradient,
    gradients,
    hessians,
    no_gradient,
)
from flowjit.v1.graph import (
    Graph,
    GraphKeys,
    Operation,
    Tensor,
    TensorShape,
    get_default_graph,
    reset_default_graph,
)
from flowjit.v1.ops import (
    abs,
    add,
    add_n,
    argmax,
    argmin,
    atan2,
    cast,
    ceil,
    check_numerics,
    clip_by_global_norm,
    clip_by_norm,
    clip_by_value,
    concat,
    constant,
    convert_to_tensor,
    cos,
    cumsum,
    div,
    divide,
    einsum,
    equal,
    erf,
    exp,
    expand_dims,
    expm1,
    eye,
    fill,
    floor,
    floordiv,
    floormod,
    gather,
    gather_nd,
    global_norm,
    greater,
    greater_equal,
    identity,
    is_finite,
    is_inf,
    is_nan,
    less,
    less_equal,
    linspace,
    log,
    log1p,
    logical_and,
    logical_not,
    logical_or,
    logical_xor,
    matmul,
    matrix_transpose,
    maximum,
    minimum,
    mod,
    multinomial,
    multiply,
    negative,
    not_equal,
    one_hot,
    ones,
    ones_like,
    pad,
    placeholder,
    placeholder_with_default,
    pow,
    py_func,
    random_gamma,
    random_normal,
    random_uniform,
    range,
    rank,
    reciprocal,
    reduce_all,
    reduce_any,
    reduce_logsumexp,
    reduce_max,
    reduce_mean,
    reduce_min,
    reduce_prod,
    reduce_sum,
    reshape,
    reverse,
    round,
    rsqrt,
    sequence_mask,
    set_random_seed,
    shape,
    sigmoid,
    sign,
    sin,
    size,
    slice,
    split,
    sqrt,
    square,
    squared_difference,
    squeeze,
    stack,
    stop_gradient,
    subtract,
    tan,
    tanh,
    tensordot,
    tile,
    to_double,
    to_float,
    to_int32,
    to_int64,
    transpose,
    truediv,
    truncated_normal,
    unsorted_segment_sum,
    unstack,
    where,
    zeros,
    zeros_like,
)
from flowjit.v1.queues import FIFOQueue, PaddingFIFOQueue, QueueBase, RandomShuffleQueue
from flowjit.v1.rnn import reverse_sequence
from flowjit.v1.session import ConfigProto, GPUOptions, InteractiveSession, Session, get_default_session
from flowjit.v1.train.input import random_shuffle
from flowjit.v1.train.moving_averages import moving_average_variables
from flowjit.v1.variables import (
    AUTO_REUSE,
    Variable,
    VariableScope,
    all_variables,
    assign,
    assign_add,
    assign_sub,
    constant_initializer,
    get_variable,
    get_variable_scope,
    global_variables,
    global_variables_initializer,
    glorot_normal_initializer,
    glorot_uniform_initializer,
    initialize_all_variables,
    is_variable_initialized,
    local_variables,
    local_variables_initializer,
    ones_initializer,
    random_normal_initializer,
    random_uniform_initializer,
    report_uninitialized_variables,
    trainable_variables,
    truncated_normal_initializer,
    variable_scope,
    variables_initializer,
    variance_scaling_initializer,
    zeros_initializer,
)


def device(device_name_or_function):  # noqa: ANN001, ANN201 - a name or a function; a context manager
    """Place the ops created inside on a device (``"/cpu:0"``, ``"/gpu:0"``, a cluster task's
    ``"/job:ps/task:0"``), merged with the enclosing blocks' names, or where a device
    function of the op says (``tf.train.replica_device_setter``); recorded on each op."""
    return get_default_graph().device(device_name_or_function)


def name_scope(name: str | None, default_name: str | None = None, values: object = None):  # noqa: ANN201
    """Prefix the names of ops created inside with ``name/``."""
    return get_default_graph().name_scope(name if name is not None else default_name)


def control_dependencies(control_inputs: object):  # noqa: ANN201
    """Ops created inside run after ``control_inputs``."""
    return get_default_graph().control_dependencies(control_inputs)


def add_to_collection(name: str, value: object) -> None:
    get_default_graph().add_to_collection(name, value)


def get_collection(key: str, scope: str | None = None) -> list:
    return get_default_graph().get_collection(key, scope)


def get_collection_ref(key: str) -> list:
    return get_default_graph().get_collection_ref(key)


newaxis = None


def __getattr__(name: str) -> object:
    """``tf.Summary``, the Summary proto (for values computed in Python), loaded on first
    use: tensorboardX is imported only where summaries are written."""
    if name == "Summary":
        return summary.summary_class()
    raise AttributeError(f"module 'flowjit.v1' has no attribute {name!r}")
