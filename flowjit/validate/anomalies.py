"""Anomalies of a dataset against a schema, and drift or skew against baseline statistics.

Each anomaly names the feature, its kind, what the schema expected, what the data shows,
and the schema change that would accept it. Kinds: ``missing_feature``, ``type``,
``shape``, ``nan``, ``inf``, ``out_of_range``, ``new_value``, ``empty``, ``drift``. A
feature the schema lacks is not an anomaly but unusable input (ValidateError): the schema
does not say what to expect of it. Drift (between two spans of data) and skew (between
training and serving data) are the same comparison of this dataset's statistics with the
baseline's: the L-infinity distance between the two categorical distributions, or the
Jensen-Shannon divergence (SciPy, base 2: 0 for the same distribution, 1 for disjoint ones)
between the two histograms of a numeric feature on the baseline's bins (values beyond them
in bins of their own).

The checks of one feature are ``FeatureRule``'s, which ``flowjit serve`` also runs on each
live request (``flowjit.validate.live``).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .data import DEFAULT_CHUNK_BYTES, open_dataset
from .errors import ValidateError
from .schema import check_schema, type_of
from .stats import statistics


@dataclass(frozen=True)
class Anomaly:
    """One way the data departs from the schema or the baseline."""

    feature: str
    kind: str
    expected: str
    seen: str
    fix: str


@dataclass
class DataReport:
    """The anomalies of one dataset, and the statistics they were found in."""

    source: str
    anomalies: list[Anomaly]
    stats: dict[str, Any]
    drift: dict[str, float]

    @property
    def ok(self) -> bool:
        return not self.anomalies

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "anomalous": not self.ok, "anomalies": [asdict(a) for a in self.anomalies],
                "drift": self.drift}

    def table(self) -> str:
        """The anomalies as a table for people."""
        if self.ok:
            return f"{self.source}: no anomalies ({self.stats['examples']} examples, {len(self.stats['features'])} " \
                   "features)\n"
        rows = [("feature", "kind", "expected", "seen", "schema change that accepts it")]
        rows += [(a.feature, a.kind, a.expected, a.seen, a.fix) for a in self.anomalies]
        widths = [min(max(len(r[i]) for r in rows), 40) for i in range(4)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r[:4], widths)) + "  " + r[4] for r in rows]
        return f"{self.source}: {len(self.anomalies)} anomalies\n" + "\n".join(lines) + "\n"


def js_divergence(p: np.ndarray, q: np.ndarray) -> float:
    """The Jensen-Shannon divergence (base 2) of two histograms' counts (SciPy's distance squared)."""
    from scipy.spatial.distance import jensenshannon
    p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
    if p.sum() == 0 or q.sum() == 0:
        return 0.0
    return float(jensenshannon(p, q, base=2) ** 2)


def linf_distance(p: dict[Any, int], q: dict[Any, int]) -> float:
    """The L-infinity distance between two categorical distributions given as value counts."""
    tp, tq = sum(p.values()) or 1, sum(q.values()) or 1
    return max((abs(p.get(k, 0) / tp - q.get(k, 0) / tq) for k in set(p) | set(q)), default=0.0)


def _f(x: float) -> str:
    return f"{x:.4g}"


class FeatureRule:
    """What a schema's entry ``feature`` expects of that feature, prepared once to check
    summaries of its values against: ``check`` for one batch's values (the statistics of a
    dataset, or of one served request's array: see ``flowjit.validate.live``), ``drift``
    against baseline statistics. One set of checks for the data validator and the server."""

    # An anomaly of these kinds leaves nothing else to check in the values.
    BLOCKING = frozenset({"type", "shape", "empty"})

    def __init__(self, feature: dict[str, Any]):
        self.feature = feature
        self.name: str = feature["name"]
        self.type: str = feature["type"]
        self.shape: list[int] = list(feature["shape"])
        self.nan = bool(feature.get("nan", False))
        self.inf = bool(feature.get("inf", False))
        domain = feature.get("domain") or {}
        self.values: list[Any] | None = domain["values"] if "values" in domain else None
        self.allowed = frozenset(json.dumps(v) for v in self.values) if self.values is not None else frozenset()
        self.range: tuple[float, float] | None = (domain["min"], domain["max"]) if "min" in domain else None
        self.limits: dict[str, float] = feature.get("drift") or {}

    def kinds(self) -> list[str]:
        """The kinds of anomaly values of the schema's type and shape can show: the checks
        this rule makes of every batch (``nan`` and ``inf`` for floats, ``new_value`` or
        ``out_of_range``)."""
        kinds = [] if self.type != "float" else [k for k, allowed in (("nan", self.nan), ("inf", self.inf))
                                                 if not allowed]
        if self.values is not None:
            kinds.append("new_value")
        elif self.range is not None:
            kinds.append("out_of_range")
        return kinds

    def check(self, s: dict[str, Any]) -> list[Anomaly]:
        """The anomalies of values summarized by ``s`` (``kind``, ``shape``, ``examples``,
        ``values``, ``missing``, ``inf``, and when there are finite values ``min`` and
        ``max``; ``value_counts`` for a categorical feature), as ``statistics`` writes them."""
        name = self.name
        if s["kind"] != self.type:
            return [Anomaly(name, "type", self.type, s["kind"], f'set "type": "{s["kind"]}"')]
        if s["shape"] != self.shape:
            return [Anomaly(name, "shape", f"per-example shape {self.shape}", f"{s['shape']}",
                            f'set "shape": {s["shape"]}')]
        if s["examples"] == 0:
            return [Anomaly(name, "empty", "values", "no examples", 'set "required": false')]
        found = []
        if s["kind"] != "string":
            if s["missing"] and not self.nan:
                found.append(Anomaly(name, "nan", "no NaN", f"{s['missing']} NaN ({s['missing'] / s['values']:.1%})",
                                     'set "nan": true'))
            if s.get("inf") and not self.inf:
                found.append(Anomaly(name, "inf", "no Inf", f"{s['inf']} Inf", 'set "inf": true'))
        if self.values is not None:
            if "value_counts" in s:
                new = [v for v, _ in s["value_counts"] if json.dumps(v) not in self.allowed]
                if new:
                    shown = ", ".join(map(json.dumps, new[:5])) + (f" and {len(new) - 5} more" if len(new) > 5 else "")
                    found.append(Anomaly(name, "new_value", f"one of {len(self.values)} values", shown,
                                         f"add {shown} to domain.values"))
        elif self.range is not None and "min" in s and (s["min"] < self.range[0] or s["max"] > self.range[1]):
            lo, hi = self.range
            found.append(Anomaly(name, "out_of_range", f"[{_f(lo)}, {_f(hi)}]", f"[{_f(s['min'])}, {_f(s['max'])}]",
                                 f'set domain to {{"min": {_f(min(s["min"], lo))}, "max": {_f(max(s["max"], hi))}}}'))
        return found

    def drift(self, s: dict[str, Any], base: dict[str, Any] | None) -> tuple[float | None, Anomaly | None]:
        """The distance of the statistics ``s`` from the baseline's ``base`` (None when the
        schema sets no threshold or either lacks what it needs) and the drift anomaly when it
        is past the feature's threshold."""
        limits, name = self.limits, self.name
        if base is None or not limits:
            return None, None
        if "linf" in limits and "value_counts" in s and "value_counts" in base:
            d = linf_distance({json.dumps(v): c for v, c in base["value_counts"]},
                              {json.dumps(v): c for v, c in s["value_counts"]})
            if d <= limits["linf"]:
                return d, None
            return d, Anomaly(name, "drift", f"L-infinity distance <= {_f(limits['linf'])}", _f(d),
                              f'set "drift": {{"linf": {_f(d * 1.1)}}}')
        if "js_divergence" in limits and "histogram" in s and "histogram" in base:
            b, h = base["histogram"], s["histogram"]
            d = js_divergence([0, *b["counts"], 0], [h["below"], *h["counts"], h["above"]])
            if d <= limits["js_divergence"]:
                return d, None
            return d, Anomaly(name, "drift", f"Jensen-Shannon divergence <= {_f(limits['js_divergence'])}",
                              f"{_f(d)} (mean {_f(base['mean'])} -> {_f(s['mean'])})",
                              f'set "drift": {{"js_divergence": {_f(d * 1.1)}}}')
        return None, None


def validate_data(data: str | os.PathLike[str], schema: dict[str, Any], baseline: dict[str, Any] | None = None,
                  chunk_bytes: int = DEFAULT_CHUNK_BYTES, *, schema_name: str = "the schema") -> DataReport:
    """The anomalies of the dataset ``data`` against ``schema`` (a dict, see
    ``flowjit.validate.schema``) and, with ``baseline`` statistics, its drift from them.
    ValidateError (naming ``data``, the feature and ``schema_name``, before any data is read)
    when the data holds a feature the schema lacks: nothing says what to expect of it."""
    check_schema(schema, schema_name)
    ds = open_dataset(data, chunk_bytes)
    known = {f["name"] for f in schema["features"]}
    unknown = [name for name in ds.features if name not in known]
    if unknown:
        name = unknown[0]
        f = ds.features[name]
        entry = json.dumps({"name": name, "type": type_of(f.dtype), "shape": list(f.shape)})
        more = f" (and {len(unknown) - 1} more: {', '.join(map(repr, unknown[1:]))})" if len(unknown) > 1 else ""
        raise ValidateError(f"{data}: feature {name!r} ({type_of(f.dtype)}{list(f.shape)}) is not in {schema_name}"
                            f"{more}: add {entry} to its features (or infer it again from statistics that have it), "
                            "or leave the feature out of the data")
    stats = statistics(ds, reference=baseline, chunk_bytes=chunk_bytes)
    found: list[Anomaly] = []
    drift: dict[str, float] = {}
    features = stats["features"]
    for f in schema["features"]:
        s = features.get(f["name"])
        if s is None:
            if f.get("required", True):
                found.append(Anomaly(f["name"], "missing_feature", "present", "absent", 'set "required": false'))
            continue
        rule = FeatureRule(f)
        anomalies = rule.check(s)
        found += anomalies
        if any(a.kind in FeatureRule.BLOCKING for a in anomalies):
            continue
        d, anomaly = rule.drift(s, (baseline or {}).get("features", {}).get(f["name"]))
        if d is not None:
            drift[f["name"]] = d
        if anomaly is not None:
            found.append(anomaly)
    return DataReport(str(data), found, stats, drift)
