"""Model validation of compiled artifacts, and the blessing ``flowjit push`` requires.

``validate_model(candidate, data, ...)`` checks a ``flowjit compile`` directory (or a model
repository version, ``MODELS/NAME/VERSION``) on held-out data:

- the canary: the candidate is loaded and run on every example in a separate process
  (``flowjit.validate.runner``), so a library that crashes or hangs is a failed check, not
  the validator's end; its outputs must be finite, and its p99 call latency within
  ``max_latency_ratio`` of the baseline's (plus ``latency_slack_s`` for timer noise);
- quality: the metric against an absolute bound (``minimum`` for a metric where higher is
  better, ``maximum`` otherwise) and against the baseline's value on the same data
  (``max_drop``: how much worse it may be, 0 by default), overall and per value of
  ``slice_feature``;
- equivalence: the library's outputs on a sample batch against flowjit's reference
  interpreter running the program's IR kept in the artifact (``NAME.ir``), within
  ``rtol``/``atol``.

The blessing is ``BLESSING.json`` in the candidate's directory: ``{"verdict": "BLESSED" |
"NOT_BLESSED", "digest": the manifest's digest, "checks": [{"name", "passed", "detail"}],
"metric": {...}, "created": ISO time, ...}``. It is written whatever the verdict; an
unusable input (ValidateError) writes nothing.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import safetensors.numpy

from flowjit.aot import manifest as mf
from flowjit.ir.interpreter import interpret
from flowjit.ir.parser import parse
from flowjit.version import __version__

from .data import open_dataset
from .errors import ValidateError
from .metrics import Metric, get_metric

BLESSING = "BLESSING.json"
# The readiness marker of a model repository version (the serving issue's contract).
READY = "READY"
# Examples a call of a library with a symbolic batch dimension gets.
BATCH = 256


@dataclass(frozen=True)
class Check:
    """One check of a candidate: its name, whether it passed, and what was found."""

    name: str
    passed: bool
    detail: str


@dataclass(frozen=True)
class Artifact:
    """A compiled model: its directory and manifest."""

    directory: Path
    manifest: dict[str, Any]

    @property
    def name(self) -> str:
        return self.manifest["name"]

    @property
    def inputs(self) -> list[dict[str, Any]]:
        return [a for a in self.manifest["args"] if a["kind"] == "argument"]


def find_artifact(path: str | os.PathLike[str], role: str = "candidate") -> Artifact:
    """The compiled model at ``path``: a ``flowjit compile`` directory, a model repository
    version ``MODELS/NAME/VERSION``, or ``MODELS/NAME`` (its highest complete version: the
    one ``flowjit serve`` would serve)."""
    p = Path(path)
    if not p.is_dir():
        raise ValidateError(f"the {role} {p} is not a directory: give a `flowjit compile` directory or a model "
                            "repository version MODELS/NAME/VERSION")
    found = [m for m in sorted(p.glob("*.json")) if _manifest(m) is not None]
    if not found:
        versions = sorted((int(d.name), d) for d in p.iterdir() if d.is_dir() and d.name.isdigit()
                          and any(_manifest(m) is not None for m in d.glob("*.json")))
        # A repository's complete versions are those whose readiness marker names their
        # manifest's digest (what `flowjit push` writes last); a folder of versions copied by
        # hand, with no marker anywhere, counts every version.
        ready = [(v, d) for v, d in versions if _ready(d)]
        if ready or versions:
            return find_artifact((ready or versions)[-1][1], role)
        raise ValidateError(f"the {role} {p} is not a compiled model: it holds no flowjit manifest (NAME.json of "
                            "`flowjit compile`) and no model versions (MODELS/NAME/VERSION)")
    if len(found) > 1:
        raise ValidateError(f"the {role} {p} holds {len(found)} compiled models ({', '.join(m.stem for m in found)}): "
                            "keep one per directory")
    manifest = _manifest(found[0])
    assert manifest is not None
    if manifest.get("digest") != mf.digest(manifest):
        raise ValidateError(f"{found[0]} was modified after it was built (its digest does not match): rebuild it")
    if not manifest["args"] or not any(a["kind"] == "argument" for a in manifest["args"]):
        raise ValidateError(f"the {role} {p} takes no arguments: a model takes a batch of examples")
    return Artifact(p, manifest)


def _ready(version: Path) -> bool:
    """Whether a version directory's readiness marker (``READY``) names its manifest's digest."""
    try:
        marker = (version / READY).read_text().strip()
    except OSError:
        return False
    return any((m := _manifest(p)) is not None and m.get("digest") == marker for p in version.glob("*.json"))


def _manifest(path: Path) -> dict[str, Any] | None:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) and found.get("format") == mf.FORMAT else None


@dataclass
class Run:
    """What the canary process gave: its outputs (None when it failed), the outputs of the
    equivalence sample, each call's seconds, and what went wrong."""

    outputs: list[np.ndarray] | None
    sample: list[np.ndarray]
    latency: np.ndarray
    error: str | None

    @property
    def p99_ms(self) -> float:
        return float(np.percentile(self.latency, 99) * 1e3) if self.latency.size else float("nan")


def _inputs(art: Artifact, data: dict[str, np.ndarray], where: str) -> tuple[dict[str, np.ndarray], int, bool]:
    """The arrays of ``data`` the model takes, cast to its dtypes; the batch size it is
    called with; whether that size is fixed."""
    arrays = {}
    batch, fixed = BATCH, False
    for a in art.inputs:
        name, shape, dtype = a["name"], a["shape"], np.dtype(a["dtype"])
        if name not in data:
            raise ValidateError(f"{where} has no feature {name!r}, which the model {art.name} takes (its arguments: "
                                f"{', '.join(x['name'] for x in art.inputs)}); name the data's features after them")
        x = data[name]
        if not shape:
            raise ValidateError(f"the model {art.name} takes {name!r} as a scalar, not a batch of examples")
        if list(x.shape[1:]) != list(shape[1:]):
            raise ValidateError(f"{where}: feature {name!r} has per-example shape {list(x.shape[1:])}, the model "
                                f"{art.name} takes {mf.spec_text(a['dtype'], shape)}")
        if not (x.dtype.kind == dtype.kind or (x.dtype.kind in "iub" and dtype.kind == "f")):
            raise ValidateError(f"{where}: feature {name!r} is {x.dtype}, the model {art.name} takes {dtype}")
        arrays[name] = np.ascontiguousarray(x.astype(dtype, copy=False))
        if isinstance(shape[0], int):
            batch, fixed = shape[0], True
    return arrays, batch, fixed


def _run(art: Artifact, arrays: dict[str, np.ndarray], sample: dict[str, np.ndarray] | None, batch: int,
         fixed: bool, timeout: float, repeats: int) -> Run:
    """Run ``art`` on ``arrays`` in the canary process."""
    with tempfile.TemporaryDirectory(prefix="flowjit-canary-") as tmp:
        inputs, output = Path(tmp) / "inputs.npz", Path(tmp) / "outputs.npz"
        np.savez(inputs, **arrays, **{f"sample:{k}": v for k, v in (sample or {}).items()})
        command = [sys.executable, "-m", "flowjit.validate.runner", str(art.directory), art.name, str(inputs),
                   str(output), "--batch", str(batch), "--repeats", str(repeats), *(["--fixed"] if fixed else [])]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return Run(None, [], np.zeros(0), f"did not finish within {timeout:g} s")
        if done.returncode != 0:
            tail = done.stderr.strip().splitlines()[-3:]
            if done.returncode < 0:
                sig = signal.Signals(-done.returncode).name
                what = f"crashed (killed by {sig})"
            else:
                what = f"failed (exit status {done.returncode})"
            return Run(None, [], np.zeros(0), f"{what}{': ' + ' | '.join(tail) if tail else ''}")
        with np.load(output) as f:
            outs = [f[f"out_{i}"] for i in range(sum(k.startswith("out_") for k in f.files))]
            samples = [f[f"sample_out_{i}"] for i in range(sum(k.startswith("sample_out_") for k in f.files))]
            return Run(outs, samples, f["latency"], None)


def _equivalence_sample(art: Artifact, arrays: dict[str, np.ndarray]) -> tuple[Any, dict[str, np.ndarray], str]:
    """The IR kept in the artifact, parsed, and a batch of examples of its shapes; or None
    and why there is none."""
    entry = art.manifest.get("ir")
    if not entry:
        return None, {}, "the artifact keeps no IR (built before flowjit kept it beside the library): rebuild it"
    path = art.directory / entry["file"]
    try:
        text = path.read_text()
    except OSError as e:
        return None, {}, f"cannot read {path}: {e}"
    if hashlib.sha256(text.encode()).hexdigest() != entry["sha256"]:
        return None, {}, f"{path} is not the IR its manifest records (its SHA-256 differs)"
    fn = parse(text)
    sample = {}
    for a, arg in zip(art.inputs, fn.args):
        n = arg.type.shape[0]
        x = arrays[a["name"]]
        reps = -(-n // len(x))
        sample[a["name"]] = np.ascontiguousarray(np.concatenate([x] * reps)[:n])
    return fn, sample, ""


def _variables(art: Artifact) -> list[np.ndarray]:
    m = art.manifest
    if m.get("variables"):
        saved = safetensors.numpy.load_file(str(art.directory / m["variables"]["file"]))
        return [saved[a["name"]] for a in m["args"] if a["kind"] == "variable"]
    if m.get("frozen"):
        saved = safetensors.numpy.load_file(str(art.directory / m["ir"]["frozen_values"]))
        return [saved[n] for n in m["frozen"]["names"]]
    return []


def _equivalence(art: Artifact, fn: Any, sample: dict[str, np.ndarray], got: list[np.ndarray], rtol: float,
                 atol: float) -> Check:
    n_out = sum(r["kind"] == "output" for r in art.manifest["results"])
    try:
        expected = interpret(fn, [*sample.values(), *_variables(art)])[:n_out]
    except Exception as e:  # the interpreter's own error names the op
        return Check("equivalence", False, f"the interpreter could not run {art.manifest['ir']['file']}: "
                                           f"{type(e).__name__}: {e}")
    worst = []
    for i, (e, g) in enumerate(zip(expected, got)):
        e, g = np.asarray(e), np.asarray(g)
        if e.shape != g.shape:
            return Check("equivalence", False, f"output {i}: the library gave shape {list(g.shape)}, the "
                                               f"interpreter {list(e.shape)}")
        if e.dtype.kind in "fc":
            both_nan = np.isnan(e) & np.isnan(g)
            excess = np.where(both_nan, 0, np.abs(g.astype(np.float64) - e) - rtol * np.abs(e))
            err = float(np.nanmax(excess, initial=-np.inf)) if excess.size else 0.0
            diff = float(np.nanmax(np.abs(g.astype(np.float64) - e), initial=0.0)) if e.size else 0.0
            if not (err <= atol):
                return Check("equivalence", False, f"output {i} differs from the interpreter's by up to {diff:.3g} "
                                                   f"(tolerance: atol {atol:g} + rtol {rtol:g} x |value|) on a "
                                                   f"sample of {len(next(iter(sample.values())))} examples")
            worst.append(diff)
        elif not np.array_equal(e, g):
            return Check("equivalence", False, f"output {i} differs from the interpreter's in "
                                               f"{int((e != g).sum())} of {e.size} values")
    return Check("equivalence", True, f"{len(expected)} output(s) match the interpreter on "
                                      f"{len(next(iter(sample.values())))} examples (largest difference "
                                      f"{max(worst, default=0):.3g}; atol {atol:g}, rtol {rtol:g})")


@dataclass
class ModelReport:
    """The checks of one candidate and the numbers behind them; ``blessing()`` is the
    BLESSING.json content."""

    candidate: Artifact
    baseline: Artifact | None
    data: str
    checks: list[Check]
    metric: dict[str, Any]
    slices: dict[str, Any] = field(default_factory=dict)
    latency: dict[str, float] = field(default_factory=dict)

    @property
    def blessed(self) -> bool:
        return all(c.passed for c in self.checks)

    @property
    def verdict(self) -> str:
        return "BLESSED" if self.blessed else "NOT_BLESSED"

    def blessing(self) -> dict[str, Any]:
        """The blessing file's content."""
        return {"verdict": self.verdict, "digest": self.candidate.manifest["digest"],
                "checks": [asdict(c) for c in self.checks], "metric": self.metric,
                "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                "candidate": str(self.candidate.directory), "name": self.candidate.name,
                "baseline": {"path": str(self.baseline.directory), "digest": self.baseline.manifest["digest"]}
                if self.baseline else None,
                "data": self.data, "slices": self.slices, "latency_p99_ms": self.latency,
                "flowjit_version": __version__}

    def table(self) -> str:
        """The checks for people, and the verdict."""
        lines = [f"{self.candidate.directory}: {self.verdict}"]
        for c in self.checks:
            lines.append(f"  {'PASS' if c.passed else 'FAIL'}  {c.name:<24} {c.detail}")
        return "\n".join(lines) + "\n"


def _quality(metric: Metric, outputs: np.ndarray, labels: np.ndarray) -> float:
    return metric.compute(outputs, labels)


def validate_model(candidate: str | os.PathLike[str], data: str | os.PathLike[str], *,
                   baseline: str | os.PathLike[str] | None = None, metric: str = "accuracy",
                   minimum: float | None = None, maximum: float | None = None, max_drop: float | None = None,
                   slice_feature: str | None = None, label: str = "label", higher_is_better: bool = True,
                   rtol: float = 1e-4, atol: float = 1e-5, max_latency_ratio: float = 3.0,
                   latency_slack_s: float = 0.005, timeout: float = 300.0, repeats: int = 30,
                   write: bool = True) -> ModelReport:
    """Validate the compiled model ``candidate`` on the held-out dataset ``data`` (see the
    module docstring) and, with ``write``, write its blessing. Raises ValidateError, writing
    nothing, when an input is unusable."""
    cand = find_artifact(candidate, "candidate")
    base = find_artifact(baseline, "baseline") if baseline is not None else None
    m = get_metric(metric, higher_is_better)
    if minimum is not None and not m.higher_is_better:
        raise ValidateError(f"{m.name} is better when lower: give --max (an upper bound), not --min")
    if maximum is not None and m.higher_is_better:
        raise ValidateError(f"{m.name} is better when higher: give --min (a lower bound), not --max")
    if max_drop is not None and max_drop < 0:
        raise ValidateError(f"--max-drop {max_drop}: give how much worse than the baseline is accepted, at least 0")
    table = open_dataset(data).load()
    if label not in table:
        raise ValidateError(f"{data} has no label feature {label!r} (its features: {', '.join(table)}); name it "
                            "with --label")
    if slice_feature is not None and slice_feature not in table:
        raise ValidateError(f"{data} has no feature {slice_feature!r} to slice by (its features: {', '.join(table)})")
    labels = table[label]
    if len(labels) == 0:
        raise ValidateError(f"{data} holds no examples")
    arrays, batch, fixed = _inputs(cand, table, str(data))
    fn, sample, no_ir = _equivalence_sample(cand, arrays)
    if base is not None:
        base_arrays, base_batch, base_fixed = _inputs(base, table, str(data))
        base_run = _run(base, base_arrays, None, base_batch, base_fixed, timeout, repeats)
        if base_run.outputs is None:
            raise ValidateError(f"the baseline {base.directory} cannot be evaluated: it {base_run.error}")
    run = _run(cand, arrays, sample if fn is not None else None, batch, fixed, timeout, repeats)
    checks: list[Check] = []
    report = ModelReport(cand, base, str(data), checks, {"name": m.name, "higher_is_better": m.higher_is_better,
                                                         "min": minimum, "max": maximum, "max_drop": max_drop})
    if run.outputs is None:
        checks.append(Check("canary", False, f"the candidate {run.error}; the validator is unharmed"))
        checks.append(Check("quality", False, "not measured: the canary failed"))
        checks.append(Check("equivalence", False, "not checked: the canary failed"))
    else:
        report.latency["candidate"] = run.p99_ms
        checks.append(Check("canary", True, f"loaded and ran {len(labels)} examples in a separate process; p99 "
                                            f"latency {run.p99_ms:.3f} ms per call of {batch}"))
        bad = [i for i, o in enumerate(run.outputs) if o.dtype.kind in "fc" and not np.all(np.isfinite(o))]
        checks.append(Check("finite_outputs", not bad, "no NaN or Inf in the outputs" if not bad else
                            f"output(s) {bad} hold NaN or Inf: "
                            f"{sum(int((~np.isfinite(run.outputs[i])).sum()) for i in bad)} values"))
        if base is not None:
            report.latency["baseline"] = base_run.p99_ms
            limit = max_latency_ratio * base_run.p99_ms + latency_slack_s * 1e3
            checks.append(Check("latency", run.p99_ms <= limit, f"p99 {run.p99_ms:.3f} ms against the baseline's "
                                                                f"{base_run.p99_ms:.3f} ms (limit {limit:.3f} ms)"))
        outputs = run.outputs[0]
        value = _quality(m, outputs, labels)
        report.metric["value"] = value
        base_value = None
        if base is not None:
            assert base_run.outputs is not None
            base_value = _quality(m, base_run.outputs[0], labels)
            report.metric["baseline_value"] = base_value
        checks += _quality_checks(m, value, base_value, minimum, maximum, max_drop, "")
        if slice_feature is not None:
            checks += _slices(report, m, table[slice_feature], slice_feature, outputs, labels,
                              base_run.outputs[0] if base is not None and base_run.outputs else None,
                              minimum, maximum, max_drop)
        if fn is None:
            checks.append(Check("equivalence", False, no_ir))
        else:
            checks.append(_equivalence(cand, fn, sample, run.sample, rtol, atol))
    if write:
        path = cand.directory / BLESSING
        tmp = path.with_name(BLESSING + ".tmp")
        tmp.write_text(json.dumps(report.blessing(), indent=2) + "\n")
        os.replace(tmp, path)
    return report


def _quality_checks(m: Metric, value: float, base_value: float | None, minimum: float | None,
                    maximum: float | None, max_drop: float | None, where: str) -> list[Check]:
    checks = []
    if minimum is not None:
        checks.append(Check(f"threshold{where}", value >= minimum, f"{m.name} {value:.4f} (at least {minimum:g})"))
    if maximum is not None:
        checks.append(Check(f"threshold{where}", value <= maximum, f"{m.name} {value:.4f} (at most {maximum:g})"))
    if base_value is not None:
        drop = (base_value - value) if m.higher_is_better else (value - base_value)
        allowed = max_drop or 0.0
        checks.append(Check(f"baseline{where}", drop <= allowed,
                            f"{m.name} {value:.4f} against the baseline's {base_value:.4f} "
                            f"({'worse' if drop > 0 else 'better' if drop < 0 else 'no different'} by {abs(drop):.4f}; "
                            f"at most {allowed:g} "
                            "worse accepted)"))
    if minimum is None and maximum is None and base_value is None:
        checks.append(Check(f"quality{where}", True, f"{m.name} {value:.4f} (no threshold given)"))
    return checks


def _slices(report: ModelReport, m: Metric, keys: np.ndarray, feature: str, outputs: np.ndarray,
            labels: np.ndarray, base_outputs: np.ndarray | None, minimum: float | None, maximum: float | None,
            max_drop: float | None) -> list[Check]:
    if keys.ndim != 1:
        raise ValidateError(f"cannot slice by {feature!r}: it has {list(keys.shape[1:])} values per example; slice by "
                            "a feature with one value per example")
    checks = []
    for key in np.unique(keys):
        rows = keys == key
        where = f"[{feature}={key.item() if isinstance(key, np.generic) else key}]"
        value = _quality(m, outputs[rows], labels[rows])
        base_value = _quality(m, base_outputs[rows], labels[rows]) if base_outputs is not None else None
        report.slices[where[1:-1]] = {"examples": int(rows.sum()), "value": value, "baseline_value": base_value}
        checks += [c for c in _quality_checks(m, value, base_value, minimum, maximum, max_drop, where)
                   if not c.name.startswith("quality")]
    return checks
