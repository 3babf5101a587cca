"""drop_dead_lets: a let nothing reads goes, with the lets only it read; every other
statement stays, in order."""

from __future__ import annotations

from flowjit.ir.dtypes import float64
from flowjit.lowering.dead_lets import drop_dead_lets
from flowjit.lowering.loops import INDEX, Accumulator, AccValue, Const, If, Let, Load, Loop, Store, Update, Var
from flowjit.lowering.scalar import apply

F = float64


def _v(name: str) -> Var:
    return Var(name, F)


def test_a_chain_of_lets_nobody_reads_goes_and_what_is_read_stays():
    i = Var("i", INDEX)
    x = Load("in0", (i,), F)
    body = (
        Let("outer", Const(2.0, F)),           # read inside the loop: kept
        Let("unread_outer", Const(3.0, F)),    # read by nothing: dropped
        Loop("i", Const(0, INDEX), Var("n", INDEX), 1, (
            Let("a", x),
            Let("b", apply("exp", _v("a"))),       # read only by c, which nothing reads
            Let("c", apply("mul", _v("b"), _v("b"))),
            Let("d", apply("mul", _v("a"), _v("outer"))),
            Store("out0", (i,), _v("d")),
        )),
    )
    kept = drop_dead_lets(body)
    assert kept == (
        body[0],
        Loop("i", Const(0, INDEX), Var("n", INDEX), 1, (body[2].body[0], body[2].body[3], body[2].body[4])),
    )


def test_lets_read_by_branches_accumulators_and_loop_bounds_stay():
    i = Var("i", INDEX)
    cond = apply("gt", Var("n", INDEX), Const(3, INDEX))
    body = (
        Let("stop", Var("n", INDEX)),
        Let("start", Const(0, INDEX)),
        Let("zero", Const(0.0, F)),
        Let("cond", cond),
        Accumulator("acc", "sum", F, _v("zero")),
        Loop("i", Var("start", INDEX), Var("stop", INDEX), 1, (
            Let("v", Load("in0", (i,), F)),
            Let("w", apply("neg", _v("v"))),
            Update("acc", _v("v")),
        )),
        If(Var("cond", cond.dtype),
           (Store("out0", (), AccValue("acc", F)),), (Let("dead", Const(1.0, F)),)),
    )
    kept = drop_dead_lets(body)
    assert kept[:5] == body[:5]
    assert kept[5].body == (body[5].body[0], body[5].body[2])
    assert kept[6] == If(body[6].cond, body[6].then, ())
