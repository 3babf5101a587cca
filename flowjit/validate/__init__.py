"""Validation before a push (``flowjit validate``): statistics of a dataset, a schema
inferred from them, anomalies and drift of new data against them; and (``validate_model``)
a compiled model checked in a separate process, against a metric threshold, the served
baseline and flowjit's interpreter, with a blessing written into the artifact; and
(``LiveCheck``) the schema's checks that ``flowjit serve`` runs on live requests.

Loaded on first use (``fj.validate``); pyarrow (Parquet, CSV) and SciPy load inside the
functions that need them.
"""

from __future__ import annotations

from .anomalies import Anomaly, DataReport, FeatureRule, js_divergence, linf_distance, validate_data
from .data import Dataset, open_dataset
from .errors import ValidateError
from .live import LiveCheck
from .metrics import Metric, get_metric
from .model import BLESSING, Artifact, Check, ModelReport, find_artifact, validate_model
from .schema import check_schema, infer_schema, load_schema
from .stats import load_statistics, statistics

__all__ = ["BLESSING", "Anomaly", "Artifact", "Check", "DataReport", "Dataset", "FeatureRule", "LiveCheck", "Metric",
           "ModelReport", "ValidateError", "check_schema", "find_artifact", "get_metric", "infer_schema",
           "js_divergence", "linf_distance", "load_schema", "load_statistics", "open_dataset", "statistics",
           "validate_data", "validate_model"]
