"""``fj.nn.conv2d``: the 2-D convolution as TensorFlow's ``tf.nn.conv2d`` spells it.

``fj.conv2d(x, w, strides=(sh, sw), padding, dilation=(dh, dw))`` is the primitive's own
form; ``fj.nn.conv2d(input, filters, strides, padding, data_format="NHWC",
dilations=None)`` takes TensorFlow's arguments (strides and dilations as an int, one or
two values, or the 4-list ``[1, sh, sw, 1]``; explicit padding as four (low, high) pairs
in NHWC order), turns them into ``fj.conv2d``'s and calls it, so both trace the same op.
What flowjit's conv2d does not do (NCHW, strides, dilations or pads in the batch or
channel dimensions) is an error naming the argument, the shapes and the user's line.
"""

from __future__ import annotations

from typing import Any

from flowjit.ir.errors import ShapeError
from flowjit.tracer.autodiff import vjp
from flowjit.tracer.core import user_location
from flowjit.tracer.numpy import namespace as fnp

Pads = tuple[tuple[int, int], tuple[int, int]]


def _error(message: str, shapes: str, op: str = "conv2d") -> ShapeError:
    return ShapeError(f"{op}{shapes}: {message}", loc=user_location())


def _spatial(value: Any, what: str, shapes: str) -> tuple[int, int]:
    """TensorFlow's per-dimension argument (``strides``, ``dilations``) as an (h, w) pair."""
    try:
        vals = (value,) if isinstance(value, int) else tuple(value)
    except TypeError:
        raise _error(f"{what}={value!r} must be an int, 1, 2 or 4 values ([1, h, w, 1])", shapes) from None
    if not all(isinstance(v, int) or hasattr(v, "__index__") for v in vals):
        raise _error(f"{what}={value!r} must be integers", shapes)
    vals = tuple(int(v) for v in vals)
    if len(vals) == 1:
        return (vals[0], vals[0])
    if len(vals) == 2:
        return (vals[0], vals[1])
    if len(vals) == 4:
        if vals[0] != 1 or vals[3] != 1:
            raise _error(f"{what}={list(vals)} moves along the batch or channel dimension, which conv2d does "
                         f"not support: give [1, h, w, 1] (or just (h, w))", shapes)
        return (vals[1], vals[2])
    raise _error(f"{what}={list(vals)} must be an int, 1, 2 or 4 values ([1, h, w, 1])", shapes)


def _padding(padding: Any, shapes: str) -> str | Pads:
    """'SAME'/'VALID', or TensorFlow's explicit NHWC pads [[0, 0], [t, b], [l, r], [0, 0]]
    as the primitive's ((t, b), (l, r))."""
    if isinstance(padding, str):
        if padding.upper() not in ("SAME", "VALID"):
            raise _error(f"padding={padding!r} must be 'SAME', 'VALID' or explicit pads "
                         "[[0, 0], [top, bottom], [left, right], [0, 0]]", shapes)
        return padding.upper()
    try:
        pairs = tuple((int(lo), int(hi)) for lo, hi in padding)
    except (TypeError, ValueError):
        pairs = ()
    if len(pairs) != 4:
        raise _error(f"padding={padding!r} must be 'SAME', 'VALID' or four (low, high) pairs, one per NHWC "
                     "dimension: [[0, 0], [top, bottom], [left, right], [0, 0]]", shapes)
    if pairs[0] != (0, 0) or pairs[3] != (0, 0):
        raise _error(f"padding={[list(p) for p in pairs]} pads the batch or channel dimension, which conv2d does "
                     "not support: pad those with fj.pad first", shapes)
    return (pairs[1], pairs[2])


def conv2d_arguments(strides: Any, padding: Any, data_format: str = "NHWC", dilations: Any = None,
                     shapes: str = "") -> tuple[tuple[int, int], str | Pads, tuple[int, int]]:
    """TensorFlow's ``strides``, ``padding``, ``data_format`` and ``dilations`` as the
    ``(strides, padding, dilation)`` of ``fj.conv2d``; ShapeError (naming the operands'
    ``shapes``, e.g. " of input [1, 5, 5, 2] and filters [3, 3, 2, 4]", and the user's
    line) for what it does not support."""
    if data_format != "NHWC":
        raise _error(f"data_format={data_format!r} is not supported: flowjit's conv2d takes NHWC input and "
                     "HWIO filters; transpose NCHW input with fj.transpose(x, (0, 2, 3, 1)) and the result "
                     "back with (0, 3, 1, 2)", shapes)
    return (_spatial(strides, "strides", shapes), _padding(padding, shapes),
            _spatial(1 if dilations is None else dilations, "dilations", shapes))


def _groups(input: Any, filters: Any, shapes: str, op: str = "conv2d") -> int:
    """The groups a filter implies, as TensorFlow 2 infers them: the input's channels over
    the filter's input channels (its next-to-last axis)."""
    xs, ws = fnp.shape(input), fnp.shape(filters)
    if len(xs) != len(ws) or len(xs) < 3 or ws[-2] == xs[-1]:
        return 1  # (the primitive's rule names wrong ranks)
    if ws[-2] == 0 or xs[-1] % ws[-2]:
        raise _error(f"the input's {xs[-1]} channels are not a multiple of the filters' {ws[-2]} input channels "
                     f"(a grouped convolution takes filters of [..., channels / groups, out])", shapes, op)
    return xs[-1] // ws[-2]


def conv2d(input: Any, filters: Any, strides: Any, padding: Any, data_format: str = "NHWC",
           dilations: Any = None, name: str | None = None) -> Any:
    """2-D convolution of NHWC ``input`` with HWIO ``filters``, with TensorFlow's
    arguments (``tf.nn.conv2d``): ``strides`` and ``dilations`` an int, an (h, w) pair or
    ``[1, h, w, 1]``; ``padding`` ``'SAME'``, ``'VALID'`` or ``[[0, 0], [t, b], [l, r],
    [0, 0]]``. It is ``fj.conv2d`` with those arguments converted; ``name`` is accepted
    for TensorFlow's signature. Filters with fewer input channels than the input has make a
    grouped convolution, as in TensorFlow 2: channels / filter channels groups."""
    shapes = f" of input {list(fnp.shape(input))} and filters {list(fnp.shape(filters))}"
    st, pad, dil = conv2d_arguments(strides, padding, data_format, dilations, shapes)
    return fnp.conv2d(input, filters, strides=st, padding=pad, dilation=dil, groups=_groups(input, filters, shapes))


def depthwise_conv2d(input: Any, filter: Any, strides: Any, padding: Any, data_format: str = "NHWC",
                     dilations: Any = None, name: str | None = None) -> Any:
    """Each input channel convolved with its own ``channel_multiplier`` filters
    (``tf.nn.depthwise_conv2d``): ``filter`` [KH, KW, C, M] gives [N, OH, OW, C*M], output
    channel c*M + m from channel c's filter m; the other arguments as ``conv2d``'s. It is
    ``fj.conv2d`` with C groups, the filter read as [KH, KW, 1, C*M]."""
    shapes = f" of input {list(fnp.shape(input))} and filter {list(fnp.shape(filter))}"
    st, pad, dil = conv2d_arguments(strides, padding, data_format, dilations, shapes)
    if len(fnp.shape(filter)) != 4:
        raise _error("the filter must be [kh, kw, in_channels, channel_multiplier]", shapes)
    kh, kw, c, m = fnp.shape(filter)
    if len(fnp.shape(input)) != 4 or fnp.shape(input)[-1] != c:
        raise _error(f"the filter is for {c} input channels: the input must be NHWC with {c} channels", shapes)
    return fnp.conv2d(input, fnp.reshape(filter, (kh, kw, 1, c * m)), strides=st, padding=pad, dilation=dil,
                      groups=c)


def separable_conv2d(input: Any, depthwise_filter: Any, pointwise_filter: Any, strides: Any, padding: Any,
                     data_format: str = "NHWC", dilations: Any = None, name: str | None = None) -> Any:
    """A depthwise convolution then a 1x1 one mixing its channels
    (``tf.nn.separable_conv2d``): ``depthwise_filter`` [KH, KW, C, M], ``pointwise_filter``
    [1, 1, C*M, O]; ``strides`` and ``dilations`` apply to the depthwise step."""
    y = depthwise_conv2d(input, depthwise_filter, strides, padding, data_format, dilations)
    shapes = f" of the depthwise result {list(fnp.shape(y))} and pointwise filter {list(fnp.shape(pointwise_filter))}"
    if len(fnp.shape(pointwise_filter)) != 4 or tuple(fnp.shape(pointwise_filter)[:2]) != (1, 1):
        raise _error("the pointwise filter must be [1, 1, in_channels * channel_multiplier, out_channels]", shapes)
    return fnp.conv2d(y, pointwise_filter)


def _one_axis(value: Any, what: str, shapes: str) -> int:
    """TensorFlow's 1-D ``stride`` or ``dilations``: an int, one value or ``[1, s, 1]``."""
    try:
        vals = (value,) if isinstance(value, int) else tuple(value)
    except TypeError:
        vals = ()
    if len(vals) == 3 and vals[0] == 1 and vals[2] == 1:
        vals = vals[1:2]
    if len(vals) != 1 or not (isinstance(vals[0], int) or hasattr(vals[0], "__index__")) or int(vals[0]) < 1:
        raise _error(f"{what}={value!r} must be a positive int, one value or [1, s, 1]", shapes, "conv1d")
    return int(vals[0])


def conv1d(input: Any, filters: Any, stride: Any, padding: Any, data_format: str = "NWC", dilations: Any = None,
           name: str | None = None) -> Any:
    """1-D convolution of ``input`` [N, W, C] with ``filters`` [K, C/groups, O], with
    TensorFlow's arguments (``tf.nn.conv1d``): ``stride`` and ``dilations`` an int or
    ``[1, s, 1]``, ``padding`` ``'SAME'``, ``'VALID'`` or ``[[0, 0], [left, right], [0,
    0]]``; filters with fewer input channels make a grouped convolution. It is
    ``fj.conv2d`` over one row: the same native kernels."""
    xs, ws = fnp.shape(input), fnp.shape(filters)
    shapes = f" of input {list(xs)} and filters {list(ws)}"
    if data_format != "NWC":
        raise _error(f"data_format={data_format!r} is not supported: conv1d takes NWC input; transpose NCW input "
                     "with fj.transpose(x, (0, 2, 1)) and the result back the same way", shapes, "conv1d")
    if len(xs) != 3 or len(ws) != 3:
        raise _error("the input must be [batch, width, channels] and the filters [width, channels, out]", shapes,
                     "conv1d")
    if isinstance(padding, str):
        pad: Any = _padding(padding, shapes)
    else:
        try:
            pairs = tuple((int(lo), int(hi)) for lo, hi in padding)
        except (TypeError, ValueError):
            pairs = ()
        if len(pairs) != 3 or pairs[0] != (0, 0) or pairs[2] != (0, 0):
            raise _error(f"padding={padding!r} must be 'SAME', 'VALID' or [[0, 0], [left, right], [0, 0]]", shapes,
                         "conv1d")
        pad = ((0, 0), pairs[1])
    s = _one_axis(stride, "stride", shapes)
    d = _one_axis(1 if dilations is None else dilations, "dilations", shapes)
    y = fnp.conv2d(fnp.expand_dims(input, 1), fnp.expand_dims(filters, 0), strides=(1, s), padding=pad,
                   dilation=(1, d), groups=_groups(input, filters, shapes, "conv1d"))
    return fnp.squeeze(y, 1)


def conv2d_transpose(input: Any, filters: Any, output_shape: Any, strides: Any, padding: Any = "SAME",
                     data_format: str = "NHWC", dilations: Any = None, name: str | None = None) -> Any:
    """The transpose of ``conv2d`` (its gradient with respect to its input, a
    "deconvolution", ``tf.nn.conv2d_transpose``): ``input`` [N, H, W, O] and ``filters``
    [KH, KW, C, O] (the forward convolution's HWIO filter) give ``output_shape``, the
    forward convolution's input shape [N, OH, OW, C], which ``strides`` and ``padding``
    must map to ``input``'s shape."""
    out = tuple(int(n) for n in output_shape)
    shapes = f" of input {list(fnp.shape(input))}, filters {list(fnp.shape(filters))} and output_shape {list(out)}"
    st, pad, dil = conv2d_arguments(strides, padding, data_format, dilations, shapes)
    if len(out) != 4:
        raise _error("output_shape must be [batch, height, width, channels]", shapes, "conv2d_transpose")
    forward, pullback = vjp(lambda z: fnp.conv2d(z, filters, strides=st, padding=pad, dilation=dil),
                            fnp.zeros(out, fnp.asarray(input).dtype))
    if tuple(fnp.shape(forward)) != tuple(fnp.shape(input)):
        raise _error(f"a convolution of output_shape {list(out)} with these strides and padding gives "
                     f"{list(fnp.shape(forward))}, not the input's shape {list(fnp.shape(input))}", shapes,
                     "conv2d_transpose")
    return pullback(input)[0]
