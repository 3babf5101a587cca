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
    report = validate_data(ns.data, schema, baseline, chunk_bytes=ns.chunk_mb << 20)
    if ns.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        sys.stdout.write(report.table())
    return 0 if report.ok else 1


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
