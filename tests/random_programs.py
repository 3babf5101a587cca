"""Random array programs as Python source, for the differential tests.

``random_program(seed)`` draws a program of elementwise, reduction, layout (gathers and
running sums among them), matmul and model steps (convolutions with strides, dilation and
padding, max and average pooling, products with broadcast batch dimensions) over a pool of
values (inputs first) and writes
it as the source of a function of
a module ``m`` and the inputs. Run with ``m = flowjit`` inside ``fj.function`` it is a
traced program; with ``m = NUMPY`` (NumPy plus the few names flowjit spells otherwise) it
is the same program in NumPy. The source is what a failing test prints: it runs as is.

Two kinds, by seed: a general program (float32, float64, int32 or int64; comparisons,
selects, extrema, integer division, 0-d values, reductions over no axes) and a smooth
float64 program with bounded values, whose gradient central differences can check.
"""

from __future__ import annotations

import functools
import math
import types
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tests.registry.cases_reduction import _conv

# NumPy under flowjit's names, for the NumPy run of a program.
NUMPY = types.SimpleNamespace(**{n: getattr(np, n) for n in dir(np) if not n.startswith("_")})
NUMPY.logistic = lambda x: 1 / (1 + np.exp(-x))


class _NumpyUpdate:
    """``x.at[ids]`` of a NumPy array: each update combined in turn, as ``np.<ufunc>.at``
    (a negative id from the end), what flowjit's ``x.at`` computes for repeated ids."""

    def __init__(self, x: np.ndarray, ids: list) -> None:
        self.x, self.ids = x, np.asarray(ids)

    def _combined(self, ufunc: np.ufunc, v: np.ndarray) -> np.ndarray:
        out = np.array(self.x, copy=True)
        ufunc.at(out, self.ids, v)
        return out

    def add(self, v: np.ndarray) -> np.ndarray:
        return self._combined(np.add, v)

    def multiply(self, v: np.ndarray) -> np.ndarray:
        return self._combined(np.multiply, v)

    def max(self, v: np.ndarray) -> np.ndarray:
        return self._combined(np.maximum, v)

    def min(self, v: np.ndarray) -> np.ndarray:
        return self._combined(np.minimum, v)


class _NumpyAt:
    def __init__(self, x: np.ndarray) -> None:
        self.x = x

    def __getitem__(self, ids: list) -> _NumpyUpdate:
        return _NumpyUpdate(self.x, ids)


NUMPY.at = _NumpyAt


def _pads(sizes: tuple, spans: tuple, strides: tuple, padding: object) -> list[tuple[int, int]]:
    """TensorFlow's (low, high) pads of each spatial axis: none for VALID, SAME's (an odd
    total's extra one high), or the explicit pairs."""
    if padding == "VALID":
        return [(0, 0), (0, 0)]
    if padding == "SAME":
        pads = []
        for size, span, st in zip(sizes, spans, strides):
            total = max((-(-size // st) - 1) * st + span - size, 0)
            pads.append((total // 2, total - total // 2))
        return pads
    return [tuple(p) for p in padding]


def _numpy_pool(x: np.ndarray, window: tuple, strides: tuple, padding: str, kind: str) -> np.ndarray:
    """TensorFlow's max or average pooling of NHWC ``x``: SAME pads a max with -inf and
    divides an average by the window's unpadded elements."""
    pads = _pads(x.shape[1:3], window, strides, padding)
    out = [(x.shape[1 + a] + sum(pads[a]) - window[a]) // strides[a] + 1 for a in range(2)]

    def taps(v: np.ndarray) -> list[np.ndarray]:
        return [v[:, i:i + (out[0] - 1) * strides[0] + 1:strides[0], j:j + (out[1] - 1) * strides[1] + 1:strides[1]]
                for i in range(window[0]) for j in range(window[1])]
    widths = ((0, 0), pads[0], pads[1], (0, 0))
    if kind == "max":
        return functools.reduce(np.maximum, taps(np.pad(x, widths, constant_values=-np.inf)))
    total = sum(taps(np.pad(x.astype(np.float64), widths)))
    count = sum(taps(np.pad(np.ones(x.shape), widths)))
    return (total / count).astype(x.dtype)


NUMPY.conv2d = lambda x, w, strides, padding, dilation: _conv(strides, padding, dilation)(x, w)
NUMPY.nn = types.SimpleNamespace(
    max_pool=lambda x, window, strides, padding: _numpy_pool(x, window, strides, padding, "max"),
    avg_pool=lambda x, window, strides, padding: _numpy_pool(x, window, strides, padding, "avg"))

DTYPES = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64}
# Small shapes, 0-d, unit axes, zero-size axes, and rows past a float32 sum's block of 128
# elements.
SHAPES = [(), (4,), (3, 4), (2, 3), (2, 3, 4), (4, 4), (1, 4), (3, 1), (1, 2), (2, 150), (300,), (0,), (2, 0),
          (0, 3)]
# Outputs past flowjit.codegen_cpu.parallel.PARALLEL_MIN_ELEMENTS.
LARGE_SHAPES = [(512, 520), (270_000,)]


@dataclass
class Program:
    """A random program: its source, the dtype of its inputs and their shapes."""

    seed: int
    source: str
    dtype: str
    in_shapes: list[tuple[int, ...]]
    smooth: bool

    def function(self, m: object) -> Callable[..., tuple]:
        """The program as a Python function of its inputs, over module ``m``."""
        env: dict = {"m": m, "np": np}
        exec(compile(self.source, f"<random program {self.seed}>", "exec"), env)
        return env["program"]

    def loss(self, m: object) -> Callable[..., object]:
        """A scalar of every output (``sum(sin(out) * k)``), whose gradient has varied
        cotangents; for smooth programs."""
        program = self.function(m)

        def loss(*xs):
            return sum(m.sum(m.sin(o) * float(k + 1)) for k, o in enumerate(program(*xs)))
        return loss

    def inputs(self) -> list[np.ndarray]:
        """The inputs: fixed random values of the program's seed."""
        rng = np.random.default_rng(self.seed)
        d = DTYPES[self.dtype]
        if self.dtype.startswith("i"):
            return [rng.integers(-6, 7, size=s).astype(d) for s in self.in_shapes]
        return [(rng.standard_normal(s) * (1 if self.smooth else 2)).astype(d) for s in self.in_shapes]

    def __str__(self) -> str:
        shapes = ", ".join(f"{self.dtype}{list(s)}" for s in self.in_shapes)
        return f"# random program {self.seed}: inputs {shapes}\n{self.source}"


def _reduced(shape: tuple, axes: tuple | None, keep: bool) -> tuple:
    axes = tuple(range(len(shape))) if axes is None else tuple(a % len(shape) for a in axes)
    if keep:
        return tuple(1 if k in axes else n for k, n in enumerate(shape))
    return tuple(n for k, n in enumerate(shape) if k not in axes)


class _Writer:
    """Draws steps; each appends a line ``vK = ...`` and the value's shape."""

    def __init__(self, rng: np.random.Generator, dtype: str, smooth: bool):
        self.rng = rng
        self.dtype = dtype
        self.smooth = smooth
        self.is_int = dtype.startswith("i")
        self.shapes: list[tuple] = []
        self.names: list[str] = []
        self.lines: list[str] = []

    def pick(self, items: list):
        return items[int(self.rng.integers(len(items)))]

    def add(self, expr: str, shape: tuple) -> None:
        name = f"v{len(self.names)}"
        self.lines.append(f"    {name} = {expr}")
        self.names.append(name)
        self.shapes.append(tuple(shape))

    def value(self, pred: Callable[[tuple], bool] = lambda s: True) -> int | None:
        found = [k for k, s in enumerate(self.shapes) if pred(s)]
        # Later values more often: programs grow into chains instead of fanning out.
        if not found:
            return None
        weights = np.array(found, np.float64) + 1
        return int(self.rng.choice(found, p=weights / weights.sum()))

    # ---- steps --------------------------------------------------------------------------
    def unary(self) -> None:
        k = self.value()
        a = self.names[k]
        if self.smooth:
            ops = ["-{a}", "m.tanh({a})", "m.sin({a})", "m.cos({a})", "m.logistic({a})", "{a} * 0.5",
                   "m.exp(m.tanh({a}))"]
        elif self.is_int:
            ops = ["-{a}", "m.abs({a})", "{a} * 3", "{a} // 2", "{a} % 3", "m.sign({a})", "{a} + 1"]
        else:
            ops = ["-{a}", "m.abs({a})", "m.tanh({a})", "m.exp({a})", "m.log(m.abs({a}) + 1.0)",
                   "m.sqrt(m.abs({a}))", "m.floor({a})", "m.sign({a})", "m.sin({a})", "m.logistic({a})",
                   "{a} * {a}", "{a} / 3.0", "m.cos({a})", "m.log1p(m.abs({a}))", "m.abs({a}) ** 1.5"]
        self.add(self.pick(ops).format(a=a), self.shapes[k])

    def binary(self) -> None:
        i = self.value()
        j = self.value(lambda s: broadcastable(s, self.shapes[i]))
        a, b = self.names[i], self.names[j]
        if self.smooth:
            # Bounded growth: central differences of a high power lose every digit.
            ops = ["{a} + {b}", "{a} - {b}", "{a} * m.tanh({b})", "{a} / (1.5 + {b} * {b})"]
        elif self.is_int:
            ops = ["{a} + {b}", "{a} - {b}", "{a} * {b}", "m.maximum({a}, {b})", "m.minimum({a}, {b})",
                   "m.where({a} > {b}, {a}, {b})", "{a} // (m.abs({b}) + 1)", "{a} % (m.abs({b}) + 1)",
                   "m.where({a} == {b}, {a}, -{b})"]
        else:
            ops = ["{a} + {b}", "{a} - {b}", "{a} * {b}", "{a} / (m.abs({b}) + 0.5)", "m.maximum({a}, {b})",
                   "m.minimum({a}, {b})", "m.where({a} > {b}, {a}, {b} * 2.0)",
                   "m.where({a} <= {b}, {a} - {b}, {b})", "(m.abs({a}) + 0.5) ** m.tanh({b})"]
        self.add(self.pick(ops).format(a=a, b=b), np.broadcast_shapes(self.shapes[i], self.shapes[j]))

    def reduce(self) -> None:
        k = self.value()
        s = self.shapes[k]
        a = self.names[k]
        nd = len(s)
        choices: list = [None, ()]
        if nd:
            choices += [int(self.rng.integers(-nd, nd))]
        if nd >= 2:
            two = sorted(int(x) for x in self.rng.choice(nd, 2, replace=False))
            choices.append(tuple(two))
        axes = self.pick(choices)
        keep = bool(self.rng.integers(2))
        names = ["sum", "mean"] if self.smooth else ["sum", "max", "min"] + ([] if self.is_int else ["mean"])
        if math.prod(s) == 0:  # NumPy's max and min of nothing raise (no identity); a mean is NaN
            names = ["sum"]
        op = self.pick(names)
        reduced = math.prod(s) // max(1, math.prod(_reduced(s, axes if axes is None or isinstance(axes, tuple)
                                                           else (axes,), False)))
        if op == "sum" and self.dtype == "f32" and reduced > 4096:
            # A float32 sum of that many terms keeps their rounding, far past the tolerance of
            # its (perhaps cancelling) result; their mean keeps it divided by their number.
            op = "mean"
        extra = ", dtype={a}.dtype" if op == "sum" and self.is_int else ""
        shape = _reduced(s, axes if axes is None or isinstance(axes, tuple) else (axes,), keep)
        self.add(f"m.{op}({a}, axis={axes!r}, keepdims={keep}{extra.format(a=a)})", shape)

    def normalize(self) -> None:
        """A row statistic broadcast back over its row (softmax, layer norm): the reduction
        and the elementwise work of one row in one kernel, where the CPU writer stores a
        row's elements in the output and divides them in place."""
        k = self.value(lambda s: len(s) >= 1 and math.prod(s) > 0)
        if k is None or self.is_int:
            return self.reduce()
        s, a = self.shapes[k], self.names[k]
        ax = self.pick([-1, 0]) if len(s) > 1 else -1
        if self.smooth:
            forms = ["m.exp(m.tanh({a})) / m.sum(m.exp(m.tanh({a})), axis={ax}, keepdims=True)",
                     "{a} - m.mean({a}, axis={ax}, keepdims=True)"]
        else:
            forms = ["m.exp({a} - m.max({a}, axis={ax}, keepdims=True)) / "
                     "m.sum(m.exp({a} - m.max({a}, axis={ax}, keepdims=True)), axis={ax}, keepdims=True)",
                     "({a} - m.mean({a}, axis={ax}, keepdims=True)) / "
                     "m.sqrt(m.mean({a} * {a}, axis={ax}, keepdims=True) + 1.0)"]
        self.add(self.pick(forms).format(a=a, ax=ax), s)

    def convert(self) -> None:
        """A cast away and back, a comparison as a number, or an argmax as one."""
        k = self.value()
        s, a = self.shapes[k], self.names[k]
        d = {"f32": "np.float32", "f64": "np.float64", "i32": "np.int32", "i64": "np.int64"}[self.dtype]
        other = {"f32": "np.float64", "f64": "np.float32", "i32": "np.int64", "i64": "np.int32"}[self.dtype]
        if self.smooth:  # a float32 rounding in the middle leaves central differences noise
            return self.unary()
        forms = [f"({a} > 0).astype({d})", f"{a}.astype({other}).astype({d})"]
        # An argmax of an input, whose random values have no ties: of a computed value, two
        # entries an ulp apart (a transcendental saturating) may swap places between libms.
        inputs = [j for j, n in enumerate(self.names) if n.startswith("x") and self.shapes[j]
                  and math.prod(self.shapes[j])]
        if inputs and self.rng.integers(2):  # an argmax of nothing raises
            k = self.pick(inputs)
            s, a = self.shapes[k], self.names[k]
            ax = int(self.rng.integers(len(s)))
            arg = self.pick(["argmax", "argmin"])
            self.add(f"m.{arg}({a}, axis={ax}).astype({d})", s[:ax] + s[ax + 1:])
            return
        self.add(self.pick(forms), s)

    def layout(self) -> None:
        k = self.value()
        s = self.shapes[k]
        a = self.names[k]
        nd = len(s)
        options = ["expand"]
        if nd >= 2:
            options += ["transpose", "swap", "reshape"]
        if nd >= 1:
            options += ["slice", "pad", "index", "flip", "broadcast", "concat", "flatten"]
        if nd >= 1 and math.prod(s) > 0:
            options += ["take", "cumsum", "scatter"]
        kind = self.pick(options)
        if kind == "expand":
            self.add(f"{a}[None]", (1, *s))
        elif kind == "transpose":
            self.add(f"m.transpose({a})", s[::-1])
        elif kind == "swap":
            self.add(f"m.swapaxes({a}, 0, -1)", (s[-1], *s[1:-1], s[0]))
        elif kind in ("reshape", "flatten"):
            n = math.prod(s)
            if kind == "reshape" and n % 2 == 0:
                self.add(f"{a}.reshape(2, -1)", (2, n // 2))
            else:
                self.add(f"{a}.reshape(-1)", (n,))
        elif kind == "slice":  # any bounds, past either end too, any step but 0: maybe empty
            ax = int(self.rng.integers(nd))
            n = s[ax]
            bound = [None, *range(-n - 1, n + 2)]
            start, stop = self.pick(bound), self.pick(bound)
            step = self.pick([1, 1, 2, -1, -2, 3])
            part = f"{'' if start is None else start}:{'' if stop is None else stop}:{step}"
            index = ", ".join([":"] * ax + [part])
            self.add(f"{a}[{index}]", s[:ax] + (len(range(n)[start:stop:step]),) + s[ax + 1:])
        elif kind == "take":  # ids in range, negative ones and repeats among them (a gather)
            ax = int(self.rng.integers(nd))
            n = s[ax]
            ids = [int(i) for i in self.rng.integers(-n, n, int(self.rng.integers(1, 6)))]
            self.add(f"m.take({a}, {ids!r}, axis={ax})", s[:ax] + (len(ids),) + s[ax + 1:])
        elif kind == "scatter":  # rows combined at ids with repeats and negative ones (a scatter)
            n = s[0]
            ids = [int(i) for i in self.rng.integers(-n, n, int(self.rng.integers(1, 6)))]
            rows = [int(i) for i in self.rng.integers(0, n, len(ids))]
            op = self.pick(["add", "multiply"] if self.smooth else ["add", "multiply", "max", "min"])
            rows = f"m.take({a}, {rows!r}, axis=0)"
            if self.smooth and op == "multiply":
                # Factors of at most 1: a row multiplied by itself at a repeated id grows as a
                # power, and the sine of the loss then turns its rounding into the gradient.
                rows = f"m.tanh({rows})"
            self.add(f"m.at({a})[{ids!r}].{op}({rows})", s)
        elif kind == "cumsum":
            ax = int(self.rng.integers(nd))
            extra = f", dtype={a}.dtype" if self.is_int else ""
            self.add(f"m.cumsum({a}, axis={ax}{extra})", s)
        elif kind == "flip":
            ax = int(self.rng.integers(nd))
            self.add(f"{a}[{', '.join([':'] * ax + ['::-1'])}]", s)
        elif kind == "index":
            if s[0] == 0:  # nothing to index: an empty slice of it instead
                self.add(f"{a}[1:]", s)
            else:
                self.add(f"{a}[{int(self.rng.integers(s[0]))}]", s[1:])
        elif kind == "pad":
            widths = [(int(self.rng.integers(2)), int(self.rng.integers(2))) for _ in s]
            self.add(f"m.pad({a}, {tuple(widths)!r})", tuple(n + lo + hi for n, (lo, hi) in zip(s, widths)))
        elif kind == "broadcast":
            target = (2, *s)
            self.add(f"m.broadcast_to({a}, {target!r})", target)
        else:  # concat with another value of the same shape off one axis, or itself
            ax = int(self.rng.integers(nd))
            j = self.value(lambda t: len(t) == nd and all(t[d] == s[d] for d in range(nd) if d != ax))
            self.add(f"m.concatenate([{a}, {self.names[j]}], axis={ax})",
                     s[:ax] + (s[ax] + self.shapes[j][ax],) + s[ax + 1:])

    def matmul(self) -> None:
        k = self.value(lambda s: len(s) >= 2)
        if k is None:
            return self.unary()
        s, a = self.shapes[k], self.names[k]
        j = self.value(lambda t: len(t) == 2 and t[0] == s[-1])
        squash = "m.tanh({})" if self.smooth else "{}"
        if j is not None and self.rng.integers(2):
            b = squash.format(self.names[j])
            self.add(f"m.matmul({squash.format(a)}, {b})", s[:-1] + self.shapes[j][1:])
        else:
            self.add(f"m.matmul({squash.format(a)}, m.swapaxes({squash.format(a)}, -1, -2))", s[:-1] + (s[-2],))

    def model(self) -> None:
        """A native form of a model's layers on a float value: a convolution (strides,
        dilation, VALID, SAME or explicit padding; its filter a literal scaled by a function
        of another value, so both operands' gradients are checked), a max or average pooling, or a
        product with broadcast batch dimensions; an integer program gets the product."""
        kind = "product" if self.is_int else self.pick(["conv", "conv", "pool", "product"])
        if kind == "product":
            return self.batched_matmul()
        k = self.value(lambda s: 2 <= len(s) <= 4 and math.prod(s) > 0)
        if k is None:
            return self.batched_matmul()
        s, a = self.shapes[k], self.names[k]
        # As NHWC: (h, w) one image of one channel, (n, h, w) n images of one channel.
        x, s4 = {2: (f"{a}[None, :, :, None]", (1, *s, 1)), 3: (f"{a}[:, :, :, None]", (*s, 1)), 4: (a, s)}[len(s)]
        rng = self.rng
        strides = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
        if kind == "pool":
            window = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
            valid = all(n >= w for n, w in zip(s4[1:3], window))
            padding = self.pick(["VALID", "SAME"]) if valid else "SAME"
            pads = _pads(s4[1:3], window, strides, padding)
            out = [(s4[1 + a] + sum(pads[a]) - window[a]) // strides[a] + 1 for a in range(2)]
            op = self.pick(["max_pool", "avg_pool"])
            self.add(f"m.nn.{op}({x}, {window!r}, {strides!r}, {padding!r})", (s4[0], *out, s4[3]))
            return
        taps = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
        dilation = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
        spans = tuple((t - 1) * d + 1 for t, d in zip(taps, dilation))
        padding = self.pick(["VALID", "SAME", "explicit"])
        if padding == "explicit":
            padding = tuple((int(rng.integers(3)), int(rng.integers(3))) for _ in range(2))
        pads = _pads(s4[1:3], spans, strides, padding)
        if any(n + sum(p) < span for n, p, span in zip(s4[1:3], pads, spans)):
            padding, pads = "SAME", _pads(s4[1:3], spans, strides, "SAME")
        out = [(s4[1 + a] + sum(pads[a]) - spans[a]) // strides[a] + 1 for a in range(2)]
        cout = int(rng.integers(1, 4))
        w = np.round(rng.standard_normal((*taps, s4[3], cout)) * 0.5, 2).tolist()
        d = {"f32": "np.float32", "f64": "np.float64"}[self.dtype]
        filters = f"m.asarray({w!r}, dtype={d})"
        # The scale's sum of a few elements: a float32 sum of many keeps their rounding.
        j = self.value(lambda t: math.prod(t) <= 4096)
        if j is not None:
            filters += f" * (1.0 + 0.25 * m.tanh(m.sum({self.names[j]})))"
        self.add(f"m.conv2d({x}, {filters}, strides={strides!r}, padding={padding!r}, dilation={dilation!r})",
                 (s4[0], *out, cout))

    def batched_matmul(self) -> None:
        """A product whose batch dimensions broadcast: a batch of one against a batch of
        two, a stack against a batch of one (its first matrix's transpose), or one matrix
        against a stack."""
        k = self.value(lambda s: len(s) >= 2)
        if k is None:
            return self.matmul()
        s, a = self.shapes[k], self.names[k]
        a = f"m.tanh({a})" if self.smooth else a
        t = f"m.swapaxes({a}, -1, -2)"
        forms = [(f"m.matmul({a}[None], m.stack([{t}, {t} * 2]))", (2, *s[:-2], s[-2], s[-2]))]
        if len(s) >= 3:
            forms.append((f"m.matmul({a}, {t}[:1])", (*s[:-2], s[-2], s[-2])))
            if all(n > 0 for n in s[:-2]):
                first = ", ".join(["0"] * (len(s) - 2))
                forms.append((f"m.matmul({a}[{first}], {t})", (*s[:-2], s[-2], s[-2])))
        self.add(*self.pick(forms))


def broadcastable(a: tuple, b: tuple) -> bool:
    """Whether shapes ``a`` and ``b`` broadcast together."""
    try:
        np.broadcast_shapes(a, b)
        return True
    except ValueError:
        return False


def random_program(seed: int) -> Program:
    """The program of ``seed``: odd seeds are smooth float64 programs (gradients checked),
    even ones general programs of a random dtype."""
    rng = np.random.default_rng([seed, 19])
    smooth = seed % 2 == 1
    dtype = "f64" if smooth else ["f32", "f64", "i32", "i64"][int(rng.integers(4))]
    n_in = int(rng.integers(1, 4))
    base = SHAPES[int(rng.integers(len(SHAPES)))]
    if not smooth and rng.integers(12) == 0:  # a kernel's outer loop parallel (a prange)
        base = LARGE_SHAPES[int(rng.integers(len(LARGE_SHAPES)))]
    in_shapes = [base if rng.integers(3) else SHAPES[int(rng.integers(len(SHAPES)))] for _ in range(n_in)]
    w = _Writer(rng, dtype, smooth)
    w.names = [f"x{k}" for k in range(n_in)]
    w.shapes = list(in_shapes)
    steps = {"unary": w.unary, "binary": w.binary, "reduce": w.reduce, "layout": w.layout, "matmul": w.matmul,
             "normalize": w.normalize, "convert": w.convert, "model": w.model}
    kinds = ["unary", "binary", "binary", "reduce", "reduce", "layout", "layout", "matmul", "normalize", "convert",
             "model"]
    for _ in range(int(rng.integers(1, 11))):
        steps[w.pick(kinds)]()
    made = list(range(n_in, len(w.names)))
    outs = [len(w.names) - 1] if made else [0]
    if len(made) > 1:  # another value of the program: outputs of different shapes share kernels
        outs += [int(k) for k in rng.choice(made[:-1], int(rng.integers(0, min(2, len(made) - 1) + 1)),
                                            replace=False)]
    source = "\n".join([f"def program({', '.join(f'x{k}' for k in range(n_in))}):", *w.lines,
                        f"    return ({', '.join(w.names[k] for k in outs)},)"]) + "\n"
    return Program(seed, source, dtype, in_shapes, smooth)
