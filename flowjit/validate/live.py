"""The schema's checks on live requests: what ``flowjit serve`` runs on each request's
inputs when the served version carries a schema (``schema.json`` in its directory).

The checks are the data validator's own (``FeatureRule.check``), applied to a summary of
one request's array instead of a dataset's statistics. The summary is a few vectorized
NumPy reductions over the request's rows: min and max (NaN and Inf show in them, so a clean
float array costs two reductions), NaN and Inf counts only when they are there, and the
distinct values of a categorical feature (not even those when its domain is every integer
from its min to its max, labels 0 ... K-1 say, and the values lie between). Drift is not
checked per request (a request is too few examples for a distribution): log requests and
run ``flowjit validate data --baseline`` on them for that.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from .anomalies import Anomaly, FeatureRule
from .errors import ValidateError
from .schema import check_schema, load_schema, type_of

# (name, dtype name, per-example shape) of a model's input.
Input = tuple[str, str, Sequence[int]]


def summarize(a: np.ndarray, kind: str, distinct: bool, dense: tuple[int, int] | None = None) -> dict[str, Any]:
    """The summary ``FeatureRule.check`` reads, of one batch ``a`` (its first axis the
    examples) whose values are of ``kind`` (float, int, bool); with ``distinct`` also its
    ``value_counts``, unless every value lies within ``dense``, the (min, max) of a domain
    holding every integer between them (none of them can be new)."""
    if a.ndim == 0:
        a = a.reshape(1)
    s: dict[str, Any] = {"kind": kind, "shape": list(a.shape[1:]), "examples": a.shape[0], "values": a.size,
                         "missing": 0, "inf": 0}
    if a.size == 0:
        return s
    lo, hi = a.min(), a.max()
    if kind == "float" and not (math.isfinite(lo) and math.isfinite(hi)):   # a NaN or an Inf is there
        finite = np.isfinite(a)
        s["missing"] = nan = int(np.count_nonzero(np.isnan(a)))
        s["inf"] = a.size - int(np.count_nonzero(finite)) - nan
        x = a[finite]
        if x.size == 0:
            return s
        lo, hi = x.min(), x.max()
    s["min"], s["max"] = float(lo), float(hi)
    if distinct and not (dense is not None and dense[0] <= lo and hi <= dense[1]):
        values, counts = np.unique(a, return_counts=True)
        s["value_counts"] = list(zip(values.tolist(), counts.tolist()))
    return s


class LiveCheck:
    """A schema's checks of a model's inputs, prepared once per served version: ``check``
    gives the anomalies of one request's arrays (one per input, in the model's order).

    ``inputs`` are the model's inputs as (name, dtype name, per-example shape). Each must be
    a feature of ``schema`` of the same type and per-example shape (every request's arrays
    have the manifest's dtype and shape: the server refuses others), else ValidateError
    naming ``where``, the input and the fix. The schema's other features (a label, say) are
    not inputs of the model and are not checked."""

    def __init__(self, schema: dict[str, Any], inputs: Sequence[Input], where: str):
        check_schema(schema, where)
        by_name = {f["name"]: f for f in schema["features"]}
        self.where = where
        self._rules: list[tuple[int, FeatureRule, str, bool, tuple[int, int] | None]] = []
        for i, (name, dtype, shape) in enumerate(inputs):
            kind, shape = type_of(dtype), list(shape)
            f = by_name.get(name)
            if f is None:
                entry = json.dumps({"name": name, "type": kind, "shape": shape})
                raise ValidateError(f"{where} has no feature {name!r}, an input of the model: add {entry} to its "
                                    "features, or infer the schema with `flowjit validate schema --manifest "
                                    "NAME.json`")
            if (f["type"], f["shape"]) != (kind, shape):
                raise ValidateError(f"{where}: feature {name!r} is {f['type']}{f['shape']} but the model takes "
                                    f"{dtype}{shape} per example: set \"type\": \"{kind}\", \"shape\": {shape}, or "
                                    "infer the schema with `flowjit validate schema --manifest NAME.json`")
            rule = FeatureRule(f)
            if rule.kinds():
                self._rules.append((i, rule, kind, rule.values is not None, _dense(rule.values)))

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], inputs: Sequence[Input]) -> LiveCheck:
        """The checks of the schema file ``path`` (``flowjit validate schema``'s JSON) on
        ``inputs``; ValidateError naming the file when it does not parse or does not fit."""
        return cls(load_schema(path), inputs, f"the schema {path}")

    def series(self) -> list[tuple[str, str]]:
        """Every (feature, kind) a request can show: what ``check`` looks for."""
        return [(rule.name, k) for _, rule, _, _, _ in self._rules for k in rule.kinds()]

    def check(self, arrays: Sequence[np.ndarray]) -> list[Anomaly]:
        """The anomalies of one request's inputs (one array per input, first axis the rows)."""
        found: list[Anomaly] = []
        for i, rule, kind, distinct, dense in self._rules:
            found += rule.check(summarize(arrays[i], kind, distinct, dense))
        return found


def _dense(values: list[Any] | None) -> tuple[int, int] | None:
    """(min, max) of a domain of integers (or booleans) holding every integer between them
    (labels 0 ... K-1, say), else None."""
    if not values or not all(type(v) in (int, bool) for v in values):
        return None
    lo, hi = min(values), max(values)
    return (int(lo), int(hi)) if len(set(values)) == hi - lo + 1 else None
