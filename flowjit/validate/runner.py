"""The canary's process: ``python -m flowjit.validate.runner DIR NAME INPUTS.npz OUT.npz
--batch N --repeats R`` loads the compiled model in ``DIR`` (``fj.load_compiled``), runs it
on every example of ``INPUTS.npz`` in batches of ``N`` (arrays named after its arguments;
``sample:NAME`` arrays are one batch run as it is) and then ``R`` more times on the first
batch, and writes its outputs (``out_I``, ``sample_out_I``) and each call's seconds
(``latency``) to ``OUT.npz``. It runs apart from the validator so that a library that
crashes or hangs is a verdict, not the validator's end. Exit status 3: the library would
not load (the message on stderr)."""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from flowjit.aot import manifest as mf
from flowjit.aot.loader import load_compiled
from flowjit.aot.manifest import AOTError


def _batches(arrays: dict[str, np.ndarray], batch: int, fixed: bool) -> list[tuple[dict[str, np.ndarray], int]]:
    n = len(next(iter(arrays.values())))
    out = []
    for start in range(0, n, batch):
        part = {k: v[start:start + batch] for k, v in arrays.items()}
        rows = len(next(iter(part.values())))
        if fixed and rows < batch:  # a library compiled for one batch size: pad with the last example
            part = {k: np.concatenate([v, np.repeat(v[-1:], batch - rows, axis=0)]) for k, v in part.items()}
        out.append((part, rows))
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the canary (see the module docstring)."""
    p = argparse.ArgumentParser(prog="python -m flowjit.validate.runner")
    p.add_argument("directory")
    p.add_argument("name")
    p.add_argument("inputs")
    p.add_argument("output")
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--fixed", action="store_true", help="the library takes exactly --batch examples")
    p.add_argument("--repeats", type=int, default=30)
    ns = p.parse_args(argv)
    try:
        model = load_compiled(ns.directory, name=ns.name)
    except AOTError as e:
        print(f"cannot load the candidate: {e}", file=sys.stderr)
        return 3
    names = [a["name"] for a in model.manifest["args"] if a["kind"] == "argument"]
    with np.load(ns.inputs) as f:
        arrays = {k: f[k] for k in names}
        sample = {k: f[f"sample:{k}"] for k in names} if f"sample:{names[0]}" in f.files else None

    def run(batch: dict[str, np.ndarray]) -> list[np.ndarray]:
        out = model(*[batch[k] for k in names])
        return [np.asarray(x) for x in mf.flatten(model.manifest["output_tree"], out, "output")]

    outs: list[list[np.ndarray]] = []
    latency = []
    for part, rows in _batches(arrays, ns.batch, ns.fixed):
        t0 = time.perf_counter()
        got = run(part)
        latency.append(time.perf_counter() - t0)
        outs.append([x[:rows] for x in got])
    first = _batches(arrays, ns.batch, ns.fixed)[0][0]
    for _ in range(ns.repeats):
        t0 = time.perf_counter()
        run(first)
        latency.append(time.perf_counter() - t0)
    result = {f"out_{i}": np.concatenate([o[i] for o in outs]) for i in range(len(outs[0]))}
    if sample is not None:
        result.update({f"sample_out_{i}": x for i, x in enumerate(run(sample))})
    np.savez(ns.output, latency=np.asarray(latency), **result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
