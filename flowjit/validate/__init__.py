"""Validation before a push (``flowjit validate``): statistics of a dataset, a schema
inferred from them, anomalies and drift of new data against them; and (``validate_model``)
a compiled model checked in a separate process, against a metric threshold, the served
baseline and flowjit's interpreter, with a blessing written into the artifact.

Loaded on first use (``fj.validate``); pyarrow (Parquet, CSV) and SciPy load inside the
functions that need them.
"""

from __future__ import annotations

from .anomalies import Anomaly, DataReport, js_divergence, linf_distance, validate_data
from .data import Dataset, open_dataset
from .errors import ValidateError
from .schema import check_schema, infer_schema, load_schema
from .stats import load_statistics, statistics

__all__ = ["Anomaly", "DataReport", "Dataset", "ValidateError", "check_schema", "infer_schema", "js_divergence",
           "linf_distance", "load_schema", "load_statistics", "open_dataset", "statistics", "validate_data"]
