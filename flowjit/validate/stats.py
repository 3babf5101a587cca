"""Statistics of a dataset, computed in two streaming passes over its chunks.

Per feature: dtype, per-example shape, examples, values, missing (NaN, or None in a
string column), Inf, and over the finite values min, max, mean, std (merged chunk by chunk
with Chan's parallel formula), quantiles and a histogram; for integer, boolean and string
features the number of distinct values and the most frequent ones.

Memory: one chunk (``chunk_bytes``, 32 MiB by default; a table's chunk also holds the
reader's own buffers) and about 8 MiB of work arrays (``SLICE`` values at a time as
float64), plus per feature ``FINE_BINS`` counters and at most ``MAX_DISTINCT`` tracked
values; never the dataset. The first pass finds each numeric feature's range, the second
counts it into ``FINE_BINS`` equal bins on that range (quantiles are read from them,
exact to within (max - min) / FINE_BINS) and into the ``HIST_BINS`` bins reported (on the
reference statistics' edges when given, so two datasets' histograms compare bin by bin).
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from typing import Any

import numpy as np

from .data import DEFAULT_CHUNK_BYTES, Dataset, open_dataset
from .errors import ValidateError

FORMAT = "flowjit-stats-1"
FINE_BINS = 1000
HIST_BINS = 20
MAX_DISTINCT = 10_000   # distinct values tracked per feature; past it, counts are of the first ones seen
TOP_VALUES = 20
# Values worked on at once (a float64 copy of them and a few masks: about 3 MiB).
SLICE = 1 << 18
QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)


def kind_of(dtype: str) -> str:
    """A dtype name's kind of values: float, int, bool or string."""
    if dtype == "str":
        return "string"
    k = np.dtype(dtype).kind
    return {"f": "float", "i": "int", "u": "int", "b": "bool"}.get(k, "other")


def _py(v: Any) -> Any:
    return v.item() if isinstance(v, np.generic) else v


class _Acc:
    """One feature's running statistics."""

    def __init__(self, dtype: str, shape: tuple[int, ...]):
        self.dtype, self.shape, self.kind = dtype, shape, kind_of(dtype)
        self.examples = self.values = self.missing = self.inf = self.n = 0
        self.mean = self.m2 = 0.0
        self.lo, self.hi = math.inf, -math.inf
        self.counts: Counter[Any] = Counter()
        self.capped = False
        self.fine: np.ndarray | None = None
        self.coarse: np.ndarray | None = None
        self.edges: np.ndarray | None = None
        self.below = self.above = 0

    def first(self, a: np.ndarray) -> None:
        self.examples += a.shape[0]
        self.values += a.size
        flat = a.reshape(-1)
        if self.kind == "string":
            for i in range(0, flat.size, SLICE):
                part = flat[i:i + SLICE]
                present = part[part != None]  # noqa: E711 (elementwise: None cells of an object array)
                self.missing += part.size - present.size
                values, counts = np.unique(present.astype(str), return_counts=True)
                self._count(dict(zip(values.tolist(), counts.tolist())))
            return
        for i in range(0, flat.size, SLICE):
            self._numbers(flat[i:i + SLICE])

    def _numbers(self, part: np.ndarray) -> None:
        if part.dtype.kind in "iub":
            values, counts = np.unique(part, return_counts=True)
            self._count(dict(zip(values.tolist(), counts.tolist())))
        x = part.astype(np.float64)
        bad = ~np.isfinite(x)
        if bad.any():
            nan = int(np.isnan(x).sum())
            self.missing += nan
            self.inf += int(bad.sum()) - nan
            x = x[~bad]
        if x.size:
            n, mean = x.size, float(x.mean())
            x -= mean
            m2 = float(np.dot(x, x))
            lo, hi = float(x.min()) + mean, float(x.max()) + mean
            total = self.n + n
            delta = mean - self.mean
            self.mean += delta * n / total
            self.m2 += m2 + delta * delta * self.n * n / total
            self.n = total
            self.lo, self.hi = min(self.lo, lo), max(self.hi, hi)

    def _count(self, counts: dict[Any, int]) -> None:
        if self.capped:
            counts = {v: c for v, c in counts.items() if v in self.counts}
        self.counts.update(counts)
        if len(self.counts) > MAX_DISTINCT:
            self.capped = True
            self.counts = Counter(dict(self.counts.most_common(MAX_DISTINCT)))

    def start_second(self, reference: dict[str, Any] | None) -> None:
        if self.kind == "string" or self.n == 0:
            return
        self.fine = np.zeros(FINE_BINS, np.int64)
        ref = (reference or {}).get("histogram")
        self.edges = (np.asarray(ref["edges"], np.float64) if ref else
                      np.linspace(self.lo, self.hi if self.hi > self.lo else self.lo + 1, HIST_BINS + 1))
        self.coarse = np.zeros(len(self.edges) - 1, np.int64)

    def second(self, a: np.ndarray) -> None:
        if self.fine is None or self.edges is None or self.coarse is None:
            return
        flat = a.reshape(-1)
        for i in range(0, flat.size, SLICE):
            x = flat[i:i + SLICE].astype(np.float64)
            self._bin(x[np.isfinite(x)])

    def _bin(self, x: np.ndarray) -> None:
        assert self.fine is not None and self.edges is not None and self.coarse is not None
        width = (self.hi - self.lo) or 1.0
        idx = np.clip(((x - self.lo) / width * FINE_BINS).astype(np.int64), 0, FINE_BINS - 1)
        self.fine += np.bincount(idx, minlength=FINE_BINS)
        e = self.edges
        self.below += int((x < e[0]).sum())
        self.above += int((x > e[-1]).sum())
        inside = x[(x >= e[0]) & (x <= e[-1])]
        self.coarse += np.histogram(inside, bins=e)[0]

    def result(self) -> dict[str, Any]:
        out: dict[str, Any] = {"dtype": self.dtype, "kind": self.kind, "shape": list(self.shape),
                               "examples": self.examples, "values": self.values, "missing": self.missing}
        if self.kind != "string":
            out["inf"] = self.inf
            if self.n:
                out.update(min=self.lo, max=self.hi, mean=self.mean, std=math.sqrt(self.m2 / self.n))
                if self.fine is not None:
                    out["quantiles"] = {str(q): self._quantile(q) for q in QUANTILES}
                    out["histogram"] = {"edges": [float(v) for v in self.edges], "counts": self.coarse.tolist(),
                                        "below": self.below, "above": self.above}
        if self.kind in ("int", "bool", "string"):
            out["distinct"] = len(self.counts)
            out["distinct_capped"] = self.capped
            out["top_values"] = [[_py(v), c] for v, c in self.counts.most_common(TOP_VALUES)]
            if len(self.counts) <= 1000 and not self.capped:
                out["value_counts"] = [[_py(v), c] for v, c in sorted(self.counts.items(), key=lambda kv: str(kv[0]))]
        return out

    def _quantile(self, q: float) -> float:
        assert self.fine is not None
        cum = np.cumsum(self.fine)
        target = q * cum[-1]
        i = int(np.searchsorted(cum, target))
        before = cum[i - 1] if i else 0
        frac = (target - before) / self.fine[i] if self.fine[i] else 0.0
        return float(self.lo + (i + frac) * (self.hi - self.lo) / FINE_BINS)


def statistics(data: str | os.PathLike[str] | Dataset, reference: dict[str, Any] | None = None,
               chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> dict[str, Any]:
    """The statistics of the dataset ``data`` (a path: ``.npz``, a folder of ``.npy``,
    ``.parquet``, ``.csv``; see ``flowjit.validate.data``) as a JSON-ready dict
    (``{"format", "source", "examples", "features": {name: {...}}}``), read in chunks of
    about ``chunk_bytes`` (see the module docstring for the memory bound). ``reference``:
    statistics whose histogram edges this dataset's histograms reuse (drift compares the
    two bin by bin)."""
    ds = data if isinstance(data, Dataset) else open_dataset(data, chunk_bytes)
    accs = {name: _Acc(f.dtype, f.shape) for name, f in ds.features.items()}
    rows = 0
    for chunk in ds.chunks():
        for name, a in chunk.items():
            accs[name].first(a)
        rows += len(next(iter(chunk.values()))) if chunk else 0
    ref_features = (reference or {}).get("features", {})
    for name, acc in accs.items():
        acc.start_second(ref_features.get(name))
    if any(acc.fine is not None for acc in accs.values()):
        for chunk in ds.chunks():
            for name, a in chunk.items():
                accs[name].second(a)
    return {"format": FORMAT, "source": str(ds.path), "examples": rows,
            "features": {name: acc.result() for name, acc in accs.items()}}


def load_statistics(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Statistics written by ``flowjit validate stats``; ValidateError naming the file
    when it is not."""
    try:
        found = json.loads(open(path).read())
    except (OSError, ValueError) as e:
        raise ValidateError(f"cannot read the statistics {path}: {e}") from None
    if not isinstance(found, dict) or found.get("format") != FORMAT or not isinstance(found.get("features"), dict):
        raise ValidateError(f"{path} is not a statistics file ({FORMAT}): write one with `flowjit validate stats`")
    return found
