"""``flowjit validate stats|schema|data|model``: the command line of ``flowjit.validate``.

Exit status: 0 when all is well, 1 when the data is anomalous or the model is not blessed,
2 when an input is unusable (one message naming the file and the problem; nothing written).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from .anomalies import validate_data
from .errors import ValidateError
from .model import validate_model
from .schema import infer_schema, load_schema
from .stats import load_statistics, statistics


def _write_json(path: str, value: Any) -> None:
    out = Path(path)
    if out.parent and not out.parent.is_dir():
        raise ValidateError(f"cannot write {out}: its folder {out.parent} does not exist")
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(value, indent=2) + "\n")
    os.replace(tmp, out)


def cmd_stats(ns: argparse.Namespace) -> int:
    stats = statistics(ns.data, chunk_bytes=ns.chunk_mb << 20)
    _write_json(ns.output, stats)
    print(f"wrote {ns.output}: {stats['examples']} examples, {len(stats['features'])} features")
    return 0


def cmd_schema(ns: argparse.Namespace) -> int:
    stats = load_statistics(ns.stats)
    manifest = None
    if ns.manifest:
        try:
            manifest = json.loads(Path(ns.manifest).read_text())
        except (OSError, ValueError) as e:
            raise ValidateError(f"cannot read the manifest {ns.manifest}: {e}") from None
        if not isinstance(manifest, dict) or not isinstance(manifest.get("args"), list):
            raise ValidateError(f"{ns.manifest} is not a flowjit library manifest (NAME.json of `flowjit compile`)")
    schema = infer_schema(stats, manifest)
    _write_json(ns.output, schema)
    print(f"wrote {ns.output}: {len(schema['features'])} features; edit it to loosen or tighten what is accepted")
    return 0


def cmd_data(ns: argparse.Namespace) -> int:
    schema = load_schema(ns.schema)
    baseline = load_statistics(ns.baseline) if ns.baseline else None
    report = validate_data(ns.data, schema, baseline, chunk_bytes=ns.chunk_mb << 20,
                           schema_name=f"the schema {ns.schema}")
    if ns.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        sys.stdout.write(report.table())
    return 0 if report.ok else 1


def cmd_model(ns: argparse.Namespace) -> int:
    report = validate_model(ns.candidate, ns.data, baseline=ns.baseline, metric=ns.metric, minimum=ns.min,
                            maximum=ns.max, max_drop=ns.max_drop, slice_feature=ns.slice, label=ns.label,
                            higher_is_better=not ns.lower_is_better, rtol=ns.rtol, atol=ns.atol,
                            max_latency_ratio=ns.max_latency_ratio, timeout=ns.timeout)
    if ns.json:
        print(json.dumps(report.blessing(), indent=2))
    else:
        sys.stdout.write(report.table())
        print(f"wrote {report.candidate.directory / 'BLESSING.json'}")
    return 0 if report.blessed else 1


def _run(ns: argparse.Namespace) -> int:
    try:
        return ns.validate_func(ns)
    except ValidateError as e:
        print(f"flowjit validate: {e}", file=sys.stderr)
        return 2


def add_commands(subparsers: Any) -> None:
    """Add ``validate`` and its subcommands to the ``flowjit`` command's subparsers."""
    p = subparsers.add_parser("validate", help="data statistics, schema, anomalies and drift; model validation "
                                               "and blessing",
                              description="Validate data against a schema and baseline statistics, and compiled "
                                          "models against a threshold, a baseline and flowjit's interpreter. Exit "
                                          "status 0: fine; 1: anomalous data or a model not blessed; 2: bad input.")
    sub = p.add_subparsers(dest="validate_command", required=True)
    chunk_help = "read the data in chunks of about this many MiB (the memory bound; default 32)"
    s = sub.add_parser("stats", help="statistics of a dataset (.npz, folder of .npy, .parquet, .csv)")
    s.add_argument("data", help="an .npz file, a folder of .npy files, a .parquet or a .csv file")
    s.add_argument("-o", "--output", default="stats.json", help="the statistics file to write (default stats.json)")
    s.add_argument("--chunk-mb", type=int, default=32, help=chunk_help)
    s.set_defaults(func=_run, validate_func=cmd_stats)
    c = sub.add_parser("schema", help="a schema inferred from statistics")
    c.add_argument("stats", help="statistics written by `flowjit validate stats`")
    c.add_argument("-o", "--output", default="schema.json", help="the schema file to write (default schema.json)")
    c.add_argument("--manifest",
                   help="a compiled model's NAME.json whose arguments seed the features' types and shapes")
    c.set_defaults(func=_run, validate_func=cmd_schema)
    d = sub.add_parser("data", help="anomalies of a dataset against a schema, drift against baseline statistics")
    d.add_argument("data", help="the dataset to check")
    d.add_argument("--schema", required=True, help="the schema (flowjit validate schema)")
    d.add_argument("--baseline", help="statistics of the baseline data (training data, or the previous span)")
    d.add_argument("--json", action="store_true", help="print the report as JSON")
    d.add_argument("--chunk-mb", type=int, default=32, help=chunk_help)
    d.set_defaults(func=_run, validate_func=cmd_data)
    m = sub.add_parser("model", help="validate a compiled model (canary, quality, equivalence) and write its blessing",
                       description="Run CANDIDATE (a `flowjit compile` directory or MODELS/NAME/VERSION) on HELDOUT "
                                   "in a separate process, check its metric against --min/--max and the baseline, "
                                   "its outputs against flowjit's interpreter running its IR, and write "
                                   "CANDIDATE/BLESSING.json (BLESSED or NOT_BLESSED with every failed check).")
    m.add_argument("candidate", help="the compiled model to validate")
    m.add_argument("--data", required=True, help="held-out data: features named after the model's arguments, "
                                                 "and the label")
    m.add_argument("--baseline", help="the model being served (a compiled model, MODELS/NAME/VERSION or MODELS/NAME)")
    m.add_argument("--metric", default="accuracy",
                   help="accuracy (default), log_loss, auc, mse, mae, or FILE.py:FUNC (func(outputs, labels) -> float)")
    m.add_argument("--min", type=float, help="the lowest value accepted (metrics where higher is better)")
    m.add_argument("--max", type=float, help="the highest value accepted (metrics where lower is better)")
    m.add_argument("--max-drop", type=float, help="how much worse than the baseline is accepted (default 0)")
    m.add_argument("--slice", help="also check the metric for each value of this feature")
    m.add_argument("--label", default="label", help="the feature holding the labels (default: label)")
    m.add_argument("--lower-is-better", action="store_true", help="for a FILE.py:FUNC metric: lower values are better")
    m.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance against the interpreter (1e-4)")
    m.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance against the interpreter (1e-5)")
    m.add_argument("--max-latency-ratio", type=float, default=3.0,
                   help="the candidate's p99 latency may be at most this times the baseline's, plus 5 ms (3)")
    m.add_argument("--timeout", type=float, default=300.0, help="seconds the canary process may run (300)")
    m.add_argument("--json", action="store_true", help="print the blessing as JSON")
    m.set_defaults(func=_run, validate_func=cmd_model)
