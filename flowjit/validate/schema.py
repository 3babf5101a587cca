"""A schema: what each feature of a dataset should be, inferred from statistics and edited
by people.

``{"format": "flowjit-schema-1", "features": [{"name", "type" (float, int, bool, string),
"shape" (per example), "required", "kind" (numeric or categorical), "domain" ({"min",
"max"} or {"values": [...]}), "nan", "inf" (may they appear), "drift" ({"js_divergence":
t} for numeric, {"linf": t} for categorical: the largest distance from the baseline's
distribution accepted)}...]}``. A feature's entry may leave out ``domain`` and ``drift``
(nothing is checked then).
"""

from __future__ import annotations

import json
import os
from typing import Any

from .errors import ValidateError
from .stats import kind_of

FORMAT = "flowjit-schema-1"
# An integer feature with at most this many distinct values is categorical.
CATEGORICAL_MAX_DISTINCT = 50
DEFAULT_JS = 0.1
# A numeric feature's inferred range: the observed one widened by this fraction of its width
# on each side (a held-out split of the training data reaches a little past it).
RANGE_SLACK = 0.5
DEFAULT_LINF = 0.1
TYPES = ("float", "int", "bool", "string")


def type_of(dtype: str) -> str:
    """A dtype name's schema type (float64 and float32 are both ``float``)."""
    return kind_of(dtype)


def infer_schema(stats: dict[str, Any], manifest: dict[str, Any] | None = None) -> dict[str, Any]:
    """The schema ``stats`` (``statistics``'s result) suggests: each feature required, of
    its type and shape, its observed range (widened by ``RANGE_SLACK`` of its width on each
    side) or set of values as its domain, NaN and Inf allowed only when they were seen, and
    default drift thresholds. ``manifest``: an AOT
    manifest (``NAME.json``) whose arguments seed the features' type and per-example
    shape (its first dimension is the batch); an argument the statistics lack is added
    with type and shape alone."""
    features = []
    for name, s in stats["features"].items():
        f: dict[str, Any] = {"name": name, "type": s["kind"], "shape": s["shape"], "required": True}
        few = not s.get("distinct_capped") and s.get("distinct", 1 << 30) <= CATEGORICAL_MAX_DISTINCT
        categorical = s["kind"] in ("string", "bool") or (s["kind"] == "int" and few)
        f["kind"] = "categorical" if categorical else "numeric"
        if categorical and "value_counts" in s:
            f["domain"] = {"values": sorted((v for v, _ in s["value_counts"]), key=lambda v: (str(type(v)), v))}
            f["drift"] = {"linf": DEFAULT_LINF}
        elif not categorical and "min" in s:
            slack = RANGE_SLACK * (s["max"] - s["min"])
            f["domain"] = {"min": s["min"] - slack, "max": s["max"] + slack}
            f["drift"] = {"js_divergence": DEFAULT_JS}
        if s["kind"] != "string":
            f["nan"] = s["missing"] > 0
            f["inf"] = s.get("inf", 0) > 0
        features.append(f)
    if manifest is not None:
        by_name = {f["name"]: f for f in features}
        for a in manifest.get("args", []):
            if a.get("kind") != "argument":
                continue
            shape = list(a["shape"][1:])
            if a["name"] in by_name:
                by_name[a["name"]]["shape"] = shape
                by_name[a["name"]]["type"] = type_of(a["dtype"])
            else:
                features.append({"name": a["name"], "type": type_of(a["dtype"]), "shape": shape, "required": True,
                                 "kind": "numeric", "nan": False, "inf": False})
    return {"format": FORMAT, "features": features}


def check_schema(schema: Any, where: str) -> dict[str, Any]:
    """``schema`` if it is a valid schema, else ValidateError naming ``where`` and what is wrong."""
    if not isinstance(schema, dict) or schema.get("format") != FORMAT or not isinstance(schema.get("features"), list):
        raise ValidateError(f"{where} is not a schema ({FORMAT} with a list of features): infer one with "
                            "`flowjit validate schema stats.json -o schema.json`")
    seen: set[str] = set()
    for i, f in enumerate(schema["features"]):
        if not isinstance(f, dict) or not isinstance(f.get("name"), str):
            raise ValidateError(f"{where}: feature #{i} has no name")
        name = f["name"]
        if name in seen:
            raise ValidateError(f"{where} names feature {name!r} twice: keep one entry per feature")
        seen.add(name)
        if f.get("type") not in TYPES:
            raise ValidateError(f"{where}: feature {name!r} has type {f.get('type')!r}; use one of {', '.join(TYPES)}")
        if not isinstance(f.get("shape"), list) or not all(isinstance(d, int) and d >= 0 for d in f["shape"]):
            raise ValidateError(f"{where}: feature {name!r} has shape {f.get('shape')!r}; give a list of sizes "
                                "([] for one value per example)")
        if f.get("kind", "numeric") not in ("numeric", "categorical"):
            raise ValidateError(f"{where}: feature {name!r} has kind {f.get('kind')!r}; numeric or categorical")
        domain = f.get("domain")
        if domain is not None and not (isinstance(domain, dict) and (
                isinstance(domain.get("values"), list) or {"min", "max"} <= set(domain))):
            raise ValidateError(f"{where}: feature {name!r} has domain {domain!r}; give {{\"min\": a, \"max\": b}} "
                                "or {\"values\": [...]}")
        drift = f.get("drift")
        if drift is not None and not (isinstance(drift, dict) and set(drift) <= {"js_divergence", "linf"}
                                      and all(isinstance(v, (int, float)) for v in drift.values())):
            raise ValidateError(f"{where}: feature {name!r} has drift {drift!r}; give {{\"js_divergence\": t}} or "
                                "{\"linf\": t}")
    return schema


def load_schema(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The schema in the JSON file ``path``, checked (``check_schema``)."""
    try:
        text = open(path).read()
    except OSError as e:
        raise ValidateError(f"cannot read the schema {path}: {e}") from None
    try:
        found = json.loads(text)
    except ValueError as e:
        raise ValidateError(f"the schema {path} is not valid JSON: {e}") from None
    return check_schema(found, str(path))
