"""Python's cyclic garbage collector held back while flowjit compiles.

A compile (tracing, the passes, lowering, llvmlite's IR builder rendering the module, and
on a process's first compile the lazy imports of the compiler's own modules) allocates
17,000-85,000 container objects on the zoo's first calls (bench/workloads/models.py), nearly
all of which live until it ends. At CPython's default thresholds (a young collection every
700 net allocations, an older one every tenth of those) that was dozens of collections
tracing the same survivors again as they aged, and in a large program a full collection
over every object of the process (NumPy's, llvmlite's, the user's) in the middle of a
compile (the transformer's first inference call ran one; the MLP's 22 young and 2 older).
Held back, the zoo's cold first calls (Zen 5, a noisy spell, fresh processes of the
bench's child alternated with the collector as CPython sets it, medians): the
transformer's inference 249 -> 213 ms (6 each), the MLP's training step 244 -> 216 (6),
the LSTM's 358 -> 332 (5), the MLP's inference 86 -> 81 (12); the CNN's inference within
its spread (174 -> 168 and 176 -> 182 in two rounds of 4-6).

So while any thread compiles (``collection_deferred``), the youngest generation's
threshold is ``COMPILE_THRESHOLD``, above every zoo compile's allocations: none of them
collects until the outermost compile in flight ends, when one young collection runs over
what the compiles left (a millisecond or two on the zoo). A compile larger than that
still collects every ``COMPILE_THRESHOLD`` allocations, so its memory stays bounded. The
collector stays enabled or disabled as the user has it; a threshold the user set higher
is kept, and one the user sets during a compile is not undone. A child forked while a
compile ran gets the thresholds back (it runs none of the parent's compiles).

A compile that imported modules (a process's first: the code generator, llvmlite) ends by
moving the young generation into the oldest without a collection (``gc.freeze`` and
``gc.unfreeze``): what an import makes (functions, classes, module dicts) lives as long as
the process, and the collection put off would have traced all of it to find the few
hundred objects the compile left in cycles (the IR builder's modules are taken apart as they
become text: ``codegen_cpu.ir_text``), which the next full collection frees. Tracing them
was 3-4 ms of the zoo MLP's 50-80 ms first inference call, 11-44 ms of the larger models'
(Zen 5; a second compile in the process, nothing left to import, 0.5 ms). Not when the
user has frozen objects of their own (``gc.unfreeze`` would thaw them too).
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import threading
from collections.abc import Iterator

COMPILE_THRESHOLD = 100_000

_lock = threading.Lock()
_depth = 0                                 # compiles in flight, all threads
_saved: tuple[int, ...] | None = None      # the thresholds the outermost compile raised
_modules = 0                               # modules imported when the outermost compile began


def _after_fork_in_child() -> None:
    # A child forked while another thread compiled runs none of those compiles: its
    # collector gets the thresholds back, and its own compiles count from none.
    global _depth, _saved, _lock
    _lock = threading.Lock()   # the parent's may have been held at the fork
    if _depth and _saved is not None and gc.get_threshold()[0] == COMPILE_THRESHOLD:
        gc.set_threshold(*_saved)
    _depth, _saved = 0, None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


@contextlib.contextmanager
def collection_deferred() -> Iterator[None]:
    """Run the body with the collector's youngest threshold at ``COMPILE_THRESHOLD``
    (unless it is already higher, or 0: the collector off by threshold); nested and
    concurrent uses share one raise, undone when the last of them ends; when modules were
    imported meanwhile, the young generation then joins the oldest (the module docstring)."""
    global _depth, _saved, _modules
    with _lock:
        if _depth == 0:
            _modules = len(sys.modules)
            now = gc.get_threshold()
            _saved = now if 0 < now[0] < COMPILE_THRESHOLD else None
            if _saved is not None:
                gc.set_threshold(COMPILE_THRESHOLD, *now[1:])
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _saved is not None:
                if gc.get_threshold()[0] == COMPILE_THRESHOLD:   # the user set none of their own since
                    gc.set_threshold(*_saved)
                _saved = None
                if len(sys.modules) > _modules and gc.isenabled() and gc.get_freeze_count() == 0:
                    gc.freeze()     # every tracked object to the permanent generation...
                    gc.unfreeze()   # ...and from there to the oldest: no young collection due
