"""The bench runs: a quick dispatch row with flowjit's numba and llvm columns and NumPy, in a
new process (the bench sets thread variables in its environment), fills every cell and the
ratios that compare the backends."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_quick_dispatch_row_has_numba_llvm_and_their_ratios(tmp_path):
    env = dict(os.environ, FLOWJIT_CACHE_DIR=str(tmp_path))
    p = subprocess.run([sys.executable, "-m", "bench", "--quick", "--only", "dispatch", "--repeat", "1",
                        "--peers", "fj,llvm,numpy"], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    lines = p.stdout.splitlines()
    head = next(ln for ln in lines if ln.startswith("| workload |"))
    row = next(ln for ln in lines if ln.startswith("| dispatch x+1"))
    cells = dict(zip([c.strip() for c in head.split("|")[1:-1]], [c.strip() for c in row.split("|")[1:-1]]))
    for column in ("flowjit (numba)", "flowjit (llvm)", "NumPy"):
        assert cells[column].endswith("µs"), (column, cells[column])
    assert cells["numba/best peer"].endswith("x vs NumPy"), cells
    assert cells["llvm/best peer"].endswith("x vs NumPy"), cells
    assert cells["llvm/numba"].endswith("x") and float(cells["llvm/numba"][:-1]) > 0, cells
    assert "### Errors" not in p.stdout
