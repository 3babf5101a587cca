"""Registry cases for state primitives: assign (the variable's new value)."""

from __future__ import annotations

from tests.registry.case import Case

CASES = [
    Case("assign", [((3, 2), "T"), ((3, 2), "T")], {}, lambda var, value: value,
         ("f32", "f64", "i32", "i64", "bool"), "assign"),
    Case("assign", [((), "T"), ((), "T")], {}, lambda var, value: value, ("f32",), "scalar"),
]
