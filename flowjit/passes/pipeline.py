"""The pass pipeline: an ordered list of named passes run on a clone of the traced IR.

``Pipeline.run`` verifies the Function once, after the last pass it runs; when that fails
or a pass raises, it runs the passes again on the input verifying after each, so a
VerifyError still names the pass that broke the IR (``verify_each=True`` or
``FLOWJIT_VERIFY=each`` verifies after every pass from the start). It records each pass's
time, skips disabled passes (``disable`` or ``FLOWJIT_DISABLE=cse,...``), can stop after a
pass (for ``.ir(stage=...)``) and dumps the IR after the passes named in ``dump`` or
``FLOWJIT_DUMP`` (``all`` for every pass) to stderr.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from flowjit.ir.core import Function
from flowjit.ir.errors import FlowjitError, VerifyError
from flowjit.ir.verifier import verify
from flowjit.passes.constant_fold import constant_fold
from flowjit.passes.cse import cse
from flowjit.passes.decompose import decompose
from flowjit.passes.fold_shapes import fold_shapes
from flowjit.passes.fusion import fusion
from flowjit.passes.hoist import hoist_invariants
from flowjit.passes.hoist_scanned import hoist_scanned
from flowjit.passes.inline import inline_calls, inline_remat
from flowjit.passes.merge_loops import merge_loops
from flowjit.passes.partition import partition
from flowjit.passes.placement import DeviceTarget, placement
from flowjit.passes.prune import prune
from flowjit.passes.simplify import simplify
from flowjit.passes.sink_scanned import sink_scanned
from flowjit.passes.sparse_scatter import sparse_scatter

PassFn = Callable[[Function], Function]


@dataclass
class PipelineResult:
    """The Function after the pipeline, and how long each pass took (seconds)."""

    function: Function
    timings: list[tuple[str, float]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def _env_list(name: str) -> set[str]:
    return {s.strip() for s in os.environ.get(name, "").split(",") if s.strip()}


class Pipeline:
    """An ordered list of ``(name, pass)``; ``str()`` shows the order."""

    def __init__(self, passes: Sequence[tuple[str, PassFn]]):
        self.passes = list(passes)
        names = [n for n, _ in self.passes]
        if len(set(names)) != len(names):
            raise ValueError(f"pass names must be unique: {names}")

    @property
    def names(self) -> list[str]:
        return [n for n, _ in self.passes]

    def __str__(self) -> str:
        return " -> ".join(self.names)

    def run(self, fn: Function, *, disable: Iterable[str] = (), dump: Iterable[str] = (),
            stop_after: str | None = None, target: DeviceTarget | None = None,
            verify_each: bool | None = None) -> PipelineResult:
        """Run the passes on a clone of ``fn`` (``fn`` itself is left as it is). Passes
        that choose devices (``placement``) get ``target``: the devices there are (by
        default ``cpu:0`` only). The result is verified once at the end (the verifier
        costs about as much as the passes); ``verify_each`` (default: ``FLOWJIT_VERIFY=each``)
        verifies after every pass, and a failure at the end is located by a second run
        that does."""
        target = target or DeviceTarget(("cpu:0",))
        disabled = set(disable) | _env_list("FLOWJIT_DISABLE")
        dumps = set(dump) | _env_list("FLOWJIT_DUMP")
        unknown = (disabled | dumps | ({stop_after} if stop_after else set())) - set(self.names) - {"all"}
        if unknown:
            raise ValueError(f"unknown pass(es) {sorted(unknown)}; the pipeline is {self}")
        if verify_each is None:
            verify_each = "each" in _env_list("FLOWJIT_VERIFY")
        if verify_each:
            return self._run(fn, disabled, dumps, stop_after, target, verify_each=True)
        try:
            result = self._run(fn, disabled, dumps, stop_after, target, verify_each=False)
        except FlowjitError:
            raise  # the user's error (placement, ...): a pass said what is wrong
        except Exception:
            self._locate(fn, disabled, stop_after, target)
            raise
        try:
            verify(result.function)
        except VerifyError as e:
            self._locate(fn, disabled, stop_after, target)
            raise VerifyError(f"after the passes: {e}") from None
        return result

    def _locate(self, fn: Function, disabled: set[str], stop_after: str | None, target: DeviceTarget) -> None:
        """Run again verifying after each pass: raise the VerifyError naming the pass that
        broke the IR, or return when this run finds none (the caller's error stands)."""
        try:
            self._run(fn, disabled, set(), stop_after, target, verify_each=True)
        except VerifyError as located:
            raise located from None
        except Exception:
            return

    def _run(self, fn: Function, disabled: set[str], dumps: set[str], stop_after: str | None,
             target: DeviceTarget, verify_each: bool) -> PipelineResult:
        result = PipelineResult(fn.clone())
        for name, pass_fn in self.passes:
            if name in disabled:
                result.skipped.append(name)
            else:
                start = time.perf_counter()
                if name in TARGETED_PASSES:
                    result.function = pass_fn(result.function, target)
                else:
                    result.function = pass_fn(result.function)
                result.timings.append((name, time.perf_counter() - start))
                if verify_each:
                    try:
                        verify(result.function)
                    except VerifyError as e:
                        raise VerifyError(f"after pass {name!r}: {e}") from None
                if name in dumps or "all" in dumps:
                    print(f"// flowjit: IR after {name}\n{result.function}", file=sys.stderr)
            if name == stop_after:
                break
        return result


# Passes called with the DeviceTarget as well as the Function.
TARGETED_PASSES = frozenset({"placement", "decompose"})

DEFAULT_PIPELINE = Pipeline([
    ("inline_calls", inline_calls),
    ("fold_shapes", fold_shapes),
    # Arithmetic on constants before simplify, so that its identities see what folds to a
    # literal (a gradient's exponent 2 - 1, a predicate 2 == 0: x**1 and select(false, ...)
    # reached the kernels). Growing nothing: a scalar broadcast folded here became an array
    # the kernels read, where simplify drops the broadcast and they read the scalar.
    ("constant_fold_early", functools.partial(constant_fold, fold_growing=False)),
    ("simplify", simplify),
    ("cse", cse),
    ("merge_loops", merge_loops),
    # And after them, what they leave on constants (an int x - x is 0 once simplified).
    ("constant_fold", constant_fold),
    ("prune", prune),
    # After the last CSE, so a remat's recomputation is not merged back into its forward.
    ("inline_remat", inline_remat),
    ("hoist_invariants", hoist_invariants),
    ("hoist_scanned", hoist_scanned),
    ("sink_scanned", sink_scanned),
    ("decompose", decompose),
    ("sparse_scatter", sparse_scatter),
    ("placement", placement),
    ("partition", partition),
    ("fusion", fusion),
])
