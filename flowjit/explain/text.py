"""An ``Explanation`` as the table ``flowjit explain`` prints.

It reads the fields of ``flowjit.explain.report``'s dataclasses and imports none of
explain's modules: ``str()`` of an ``Explanation`` is ``render_text`` of it, so the report
types import this module, not the other way round.
"""

from __future__ import annotations

from typing import Any

NAME_WIDTH = 34
MAX_OPS_SHOWN = 8


def size(n: float) -> str:
    """Bytes as B, KiB, MiB or GiB."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def count(n: float) -> str:
    """A count with k, M or G."""
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.1f}{unit}"
    return f"{n:.0f}"


def duration(s: float | None) -> str:
    """Seconds as ns, us or ms; '-' for none."""
    if s is None:
        return "-"
    if s < 1e-7:
        return f"{s * 1e9:.0f} ns"
    return f"{s * 1e6:.1f} us" if s < 1e-3 else f"{s * 1e3:.2f} ms"


def _row(k: Any) -> str:
    """One ``KernelReport`` as a row of the table."""
    name = (k.block + k.name) if len(k.block + k.name) <= NAME_WIDTH else (k.block + k.name)[:NAME_WIDTH - 1] + "~"
    fraction = f"{k.fraction_of_bound:.0%}" if k.fraction_of_bound is not None else "-"
    return (f"{k.index:>3} {name:<{NAME_WIDTH}} {k.kind:<8} {size(k.bytes_read):>10} {size(k.bytes_written):>10} "
            f"{count(k.flops):>8} {k.bound:<7} {duration(k.predicted_s):>10} {duration(k.measured_s):>10} "
            f"{fraction:>6}  {k.lines}")


def render_text(e: Any) -> str:
    """An ``Explanation`` as a readable table: the kernels, then the fusion boundaries."""
    m = e.machine
    plain = [a for a in e.arguments if not a.endswith(" var")]
    variables = len(e.arguments) - len(plain)
    args = ", ".join(plain) + (f"; {variables} Variable(s)" if variables else "")
    out = [f"{e.function}({args}): {len(e.kernels)} step(s), stage {e.stage}, run by {e.driver}",
           f"machine: memory {m['bandwidth'] / 1e9:.1f} GB/s, float32 BLAS {m['gemm_flops'] / 1e9:.1f} GFLOP/s "
           f"({m['cpu']}, {m['threads']} CPUs; measured {m['measured_at']}, kept in {m['path']})",
           "",
           f"{'#':>3} {'kernel':<{NAME_WIDTH}} {'kind':<8} {'read':>10} {'written':>10} {'FLOPs':>8} {'bound':<7} "
           f"{'predicted':>10} {'measured':>10} {'of bnd':>6}  lines"]
    for k in e.kernels:
        out.append(_row(k))
        shown = ", ".join(k.ops[:MAX_OPS_SHOWN]) + (f", ... ({len(k.ops)} ops)" if len(k.ops) > MAX_OPS_SHOWN else "")
        if k.kind == "kernel":
            out.append(f"{'':>4}ops: {shown} -> {', '.join(k.outputs)}")
        if k.note:
            out.append(f"{'':>4}{k.note}")
    total = (f"total: {size(e.bytes_moved)} moved, {count(e.flops)} FLOPs, the bounds predict "
             f"{duration(e.predicted_s)}")
    if e.measured_s is not None:
        total += f"; the program runs in {duration(e.measured_s)} (median)"
    out += ["", total]
    out += [f"note: {n}" for n in e.notes]
    out += ["", f"fusion boundaries ({len(e.boundaries)}): why two kernels stayed apart"]
    if not e.boundaries:
        out.append("  none: every fusible op joined a kernel with its neighbours")
    for b in e.boundaries:
        where = f" ({b.producer_line} -> {b.consumer_line})" if b.producer_line or b.consumer_line else ""
        out.append(f"  {b.block}{b.producer} -> {b.consumer} [{b.code}]{where}")
        out.append(f"      {b.producer_op} -> {b.consumer_op}: {b.reason}")
    return "\n".join(out) + "\n"
