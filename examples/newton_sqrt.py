"""Square roots by Newton's method in a ``fj.while_loop``, run until the step is tiny.

The loop is one ``while`` op in the IR: its condition and body are nested blocks, and
the number of iterations depends on the data. Prints the traced IR, then each input with
its square root, the iterations it took, and the error against NumPy.

    python examples/newton_sqrt.py [--tol 1e-12]
"""

from __future__ import annotations

import argparse

import numpy as np

import flowjit as fj


def newton_sqrt(a, tol):
    """(sqrt(a), iterations): x <- (x + a / x) / 2 from x = max(a, 1) until |step| <= tol * x."""
    def body(c):
        x, _, n = c
        nxt = 0.5 * (x + a / x)
        return nxt, fj.abs(nxt - x), n + 1

    x, _, n = fj.while_loop(lambda c: c[1] > tol * c[0], body,
                            (fj.maximum(a, 1.0), fj.asarray(np.inf), fj.asarray(np.int32(0))))
    return x, n


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tol", type=float, default=1e-12)
    args = parser.parse_args(argv)
    f = fj.function(newton_sqrt)
    print(f.ir(np.float64(2.0), args.tol))
    worst = 0.0
    for a in (2.0, 10.0, 12345.678, 1e-6, 1e10):
        root, n = f(np.float64(a), args.tol)
        err = abs(float(root) - np.sqrt(a)) / np.sqrt(a)
        worst = max(worst, err)
        print(f"sqrt({a:g}) = {float(root):.15g} after {int(n)} iterations (relative error {err:.1e})")
    return {"worst_relative_error": worst}


if __name__ == "__main__":
    main()
