"""The command line of serving: ``flowjit serve``, ``flowjit push`` and ``flowjit
loadtest``. ``add_commands`` adds them to ``flowjit``'s parser; the serving machinery
(Starlette, uvicorn, prometheus-client: the ``serving`` extra) loads only when one of
them runs."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from flowjit.serving.loadtest import format_table, loadtest
from flowjit.serving.repository import PushError, push


def cmd_serve(ns: argparse.Namespace) -> int:
    """``flowjit serve MODELS``."""
    from flowjit.serving.server import Server
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    versions = tuple(int(v) for v in ns.versions.split(",")) if ns.versions else ()
    policy = "specific" if versions else ns.version_policy
    options = dict(max_batch_size=ns.max_batch_size, batch_timeout_ms=ns.batch_timeout_ms,
                   latency_slo_ms=ns.latency_slo_ms, batching=not ns.no_batching, adaptive_wait=not ns.fixed_wait,
                   max_queue_rows=ns.max_queue_rows, poll_seconds=ns.poll_seconds, max_body_mb=ns.max_body_mb,
                   version_policy=policy, versions=versions, blas_threads=ns.blas_threads)
    if ns.ray is not None:
        from flowjit.serving.ray_serve import serve_on_ray
        serve_on_ray(os.path.abspath(ns.models), ns.ray or None, ns.replicas, ns.host, ns.port, options)
        return 0
    Server(ns.models, host=ns.host, port=ns.port, **options).serve_forever()
    return 0


def cmd_push(ns: argparse.Namespace) -> int:
    """``flowjit push ARTIFACT MODELS/NAME [--force]``."""
    try:
        push(ns.artifact, ns.model_dir, force=ns.force)
    except PushError as e:
        print(f"flowjit push: {e}", file=sys.stderr)
        return 2
    return 0


def cmd_loadtest(ns: argparse.Namespace) -> int:
    """``flowjit loadtest URL --model NAME``."""
    try:
        levels = [int(c) for c in ns.concurrency.split(",")]
    except ValueError:
        ns.parser.error(f"--concurrency {ns.concurrency!r}: expected numbers separated by commas, such as 1,4,16,64")
    results = loadtest(ns.url, ns.model, levels, ns.seconds, version=ns.version, rows=ns.rows,
                       content_type="application/x-npy" if ns.npy else "application/json")
    print(json.dumps(results, indent=2) if ns.json else format_table(results))
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Add ``serve``, ``push`` and ``loadtest`` to the ``flowjit`` command's subparsers."""
    p = sub.add_parser("serve", help="serve a model repository over HTTP (TensorFlow Serving's REST form)",
                       description="Serve every model of MODELS (MODELS/NAME/VERSION/, as `flowjit push` writes "
                                   "them) on /v1/models/NAME[:predict|/metadata], /healthz, /readyz, /metrics. "
                                   "A version that carries a schema (schema.json, `flowjit validate schema`) has "
                                   "each request's inputs checked against it and its anomalies counted in "
                                   "flowjit_serving_anomalies_total.")
    p.add_argument("models", help="the model repository directory")
    p.add_argument("--host", default="127.0.0.1", help="the address to bind (default: loopback only)")
    p.add_argument("--port", type=int, default=8500, help="the port (default 8500; 0 takes a free one)")
    p.add_argument("--max-batch-size", type=int, default=64, help="the most rows one batch runs (default 64)")
    p.add_argument("--batch-timeout-ms", type=float, default=2.0,
                   help="how long a batch waits for more requests (default 2 ms)")
    p.add_argument("--latency-slo-ms", type=float, default=None,
                   help="a latency objective: the batch size and wait adapt to it, and a request predicted to "
                        "miss it is answered 503 at once")
    p.add_argument("--fixed-wait", action="store_true",
                   help="every batch waits the whole --batch-timeout-ms for more requests (default: at most twice "
                        "a batch's fixed cost, measured at load)")
    p.add_argument("--no-batching", action="store_true", help="run each request alone (the baseline)")
    p.add_argument("--max-queue-rows", type=int, default=None,
                   help="rows a model may queue before answering 429 (default max(8 x max batch, 256))")
    p.add_argument("--blas-threads", type=int, default=1,
                   help="threads the BLAS may use for one product (default 1: served batches are small; 0 leaves "
                        "the BLAS's own setting)")
    p.add_argument("--poll-seconds", type=float, default=1.0, help="how often to look for new versions (default 1)")
    p.add_argument("--max-body-mb", type=float, default=64.0, help="the largest request body (default 64 MiB)")
    p.add_argument("--version-policy", choices=("latest", "all"), default="latest",
                   help="serve the latest complete version (default) or all of them")
    p.add_argument("--versions", default=None, metavar="N,M", help="serve exactly these versions")
    p.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="run as a Ray Serve deployment (a local Ray runtime on loopback, or the cluster at "
                        "ADDRESS); needs ray[serve]")
    p.add_argument("--replicas", type=int, default=1, help="replicas on Ray Serve (default 1)")
    p.set_defaults(func=cmd_serve, parser=p)

    p = sub.add_parser("push", help="publish a compiled, blessed artifact as the next version of a model",
                       description="Copy ARTIFACT (a `flowjit compile` output directory with a BLESSING.json for "
                                   "its manifest) into MODELS/NAME/VERSION atomically: a temporary directory "
                                   "beside it, the READY marker written last, one rename. A schema.json in "
                                   "ARTIFACT travels with it; one that does not fit the model's inputs is refused.")
    p.add_argument("artifact", help="the directory `flowjit compile -o` wrote")
    p.add_argument("model_dir", help="MODELS/NAME")
    p.add_argument("--force", action="store_true", help="push without a blessing (logged)")
    p.set_defaults(func=cmd_push, parser=p)

    p = sub.add_parser("loadtest", help="closed-loop load on a served model: throughput and p50/p90/p99",
                       description="Keep CONCURRENCY requests outstanding for SECONDS at each level and print "
                                   "throughput and latency percentiles (perf_analyzer's method).")
    p.add_argument("url", help="the server, such as http://127.0.0.1:8500")
    p.add_argument("--model", required=True, help="the model's name")
    p.add_argument("--version", type=int, default=None, help="ask for this version (default: the server's)")
    p.add_argument("--concurrency", default="1,4,16,64", help="levels, such as 1,4,16,64")
    p.add_argument("--seconds", type=float, default=10.0, help="seconds per level (default 10)")
    p.add_argument("--rows", type=int, default=1, help="instances per request (default 1)")
    p.add_argument("--npy", action="store_true",
                   help="send each request as one application/x-npy array (a model of one input) instead of JSON")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_loadtest, parser=p)
