"""Dropping the lets no statement reads.

A scalar definition may name values that a select with a constant condition then leaves
unread: complex ``pow`` of a constant integer exponent binds its exp-and-log branch and its
binary powering both, and keeps one. A renderer without an optimizing pipeline (the CPU's
quick first compile) would compute every such value, calls to ``exp`` and ``sin`` included.
Guarantee: the result's statements are the input's, in order, less each ``Let`` whose name
no kept statement reads (names are bound once: a use follows its definition).
"""

from __future__ import annotations

from dataclasses import replace

from flowjit.lowering.loops import If, Let, Loop, free_names, own_expressions


def drop_dead_lets(body: tuple) -> tuple:
    """``body`` without the lets nothing reads (the module docstring)."""
    kept, _ = _backward(body, set())
    return kept


def _backward(body: tuple, used: set) -> tuple[tuple, set]:
    """The statements of ``body`` kept, walking it from its end with ``used`` the names read
    after it; and the names read by what is kept and what follows."""
    kept = []
    for s in reversed(body):
        if isinstance(s, Let) and s.name not in used:
            continue
        # A loop's body may read a name bound before the loop in any iteration: the names
        # its body reads join ``used`` before the statements ahead of the loop.
        if isinstance(s, Loop):
            inner, used = _backward(s.body, used)
            s = replace(s, body=inner)
        elif isinstance(s, If):
            then, used = _backward(s.then, used)
            orelse, used = _backward(s.orelse, used)
            s = replace(s, then=then, orelse=orelse)
        for e in own_expressions(s):
            free_names(e, used)
        kept.append(s)
    return tuple(reversed(kept)), used
