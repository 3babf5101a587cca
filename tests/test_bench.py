"""The bench runs: a quick dispatch row with flowjit's column and NumPy, in a new process (the
bench sets thread variables in its environment), fills every cell and the ratio; the other
workloads' quick runs fill their tables; ``bench.compare`` times two trees side by side."""

import importlib.util
import itertools
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _quick_bench(tmp_path, only: str, peers: str) -> subprocess.CompletedProcess:
    """``python -m bench --quick --only ONLY --repeat 1 --peers PEERS`` with its own cache,
    checked to have exited 0."""
    env = dict(os.environ, FLOWJIT_CACHE_DIR=str(tmp_path))
    p = subprocess.run([sys.executable, "-m", "bench", "--quick", "--only", only, "--repeat", "1",
                        "--peers", peers], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return p


def test_quick_dispatch_row_has_flowjit_numpy_and_the_ratio(tmp_path):
    p = _quick_bench(tmp_path, "dispatch", "fj,numpy")
    lines = p.stdout.splitlines()
    head = next(ln for ln in lines if ln.startswith("| workload |"))
    row = next(ln for ln in lines if ln.startswith("| dispatch x+1"))
    cells = dict(zip([c.strip() for c in head.split("|")[1:-1]], [c.strip() for c in row.split("|")[1:-1]]))
    assert list(cells) == ["workload", "flowjit", "NumPy", "flowjit/best peer", "%BW flowjit", "%BW best peer",
                           "copy, same rounds"], cells
    seconds = {}
    for column in ("flowjit", "NumPy"):
        m = re.fullmatch(r"([0-9.]+) µs", cells[column])
        assert m and float(m[1]) > 0, (column, cells[column])
        seconds[column] = float(m[1])
    m = re.fullmatch(r"([0-9.]+)x vs NumPy", cells["flowjit/best peer"])
    assert m, cells
    assert float(m[1]) == pytest.approx(seconds["flowjit"] / seconds["NumPy"], rel=0.05, abs=0.006), cells
    assert "### Errors" not in p.stdout
    assert "numba" not in p.stdout.lower(), "the bench still speaks of numba"


def test_quick_depthwise_row_is_checked_against_numpy_in_every_peer(tmp_path):
    # Each column's result is checked against the float64 taps before it is timed: a peer's
    # filter layout or channel order that differed from fj.nn.depthwise_conv2d's would be an error.
    p = _quick_bench(tmp_path, "depthwise", "fj,numpy,jax,torch")
    row = next(ln for ln in p.stdout.splitlines() if ln.startswith("| depthwise conv 3x3 SAME f32[2,8,8,16]"))
    assert re.search(r"\| [0-9.]+ (µs|ms) ", row), row
    assert "### Errors" not in p.stdout and "WRONG" not in p.stdout, p.stdout[-3000:]


def test_quick_rotary_row_is_checked_against_float64_trigonometry_in_every_peer(tmp_path):
    # Every column's cos|sin table against float64 cosines and sines of the float32 angles: a
    # flowjit sine off by more than the tolerance, or a peer's other concatenation order, fails.
    p = _quick_bench(tmp_path, "rotary", "fj,numpy,jax,torch")
    row = next(ln for ln in p.stdout.splitlines() if ln.startswith("| rotary table cos\\|sin f32[256,32]"))
    assert re.search(r"\| [0-9.]+ (µs|ms) ", row), row
    assert "### Errors" not in p.stdout and "WRONG" not in p.stdout, p.stdout[-3000:]


def test_a_timed_cell_says_how_much_cpu_its_calls_used():
    """run_case's cells carry the process's CPU time over the wall time of the timed calls:
    up to one for a loop that computes on this thread, about none for one that sleeps."""
    from bench.workloads.common import Case, Ctx, run_case

    def spin():
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 0.002:
            pass

    def build(fn):
        return lambda: fn

    case = Case("cpu", "spin and sleep", {"fj": build(spin), "numpy": build(lambda: time.sleep(0.002))})
    time.sleep(0.3)   # numpy's OpenBLAS threads spin for ~0.1 s after its import, in a new process
    row = run_case(case, Ctx(repeat=3, gap_s=0.0), target_s=0.02, columns=(("fj", "spin"), ("numpy", "sleep")))
    # (a shared machine may give the spinning thread well under a core: bounds, not values)
    spin_cpus, sleep_cpus = row.cells["fj"].cpus, row.cells["numpy"].cpus
    assert 0.25 < spin_cpus < 1.5 and sleep_cpus < 0.2 and spin_cpus > 5 * sleep_cpus, (spin_cpus, sleep_cpus)


def test_bench_refuses_the_columns_it_no_longer_has():
    """One flowjit CPU column (``fj``): ``llvm`` and ``numba`` are not columns any more."""
    for column in ("llvm", "numba"):
        p = subprocess.run([sys.executable, "-m", "bench", "--peers", f"fj,{column}"], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and f"unknown column(s) {column}" in p.stderr, p.stderr


def test_first_call_children_write_and_use_bytecode(monkeypatch):
    """A machine with PYTHONDONTWRITEBYTECODE=1 recompiles every edited flowjit module in each
    new process; the bench's children run without it, with flowjit's .pyc files up to date."""
    from bench.workloads import compile as first_calls
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setattr(first_calls, "_compiled", [])
    env = first_calls.child_env()
    assert "PYTHONDONTWRITEBYTECODE" not in env
    p = subprocess.run([sys.executable, "-c", "import sys; print(sys.dont_write_bytecode)"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.stdout.strip() == "False", p.stderr
    source = importlib.util.find_spec("flowjit").origin
    cached = importlib.util.cache_from_source(source)
    assert os.path.getmtime(cached) >= os.path.getmtime(source)
    assert "removed from their environment" in first_calls.bytecode_line()


def test_streaming_copy_and_triad_match_numpy_at_every_alignment():
    """The %BW reference streams whole 64-byte lines (four pages interleaved) between plain
    head and tail stores: every output offset within a line and every length around a line,
    a page and a four-page block is written exactly, nothing outside it, -0.0 and NaN bits kept."""
    import numpy as np

    from bench.streaming import Streamer
    rng = np.random.default_rng(0)
    src = rng.standard_normal(3 * 4096 + 100).astype(np.float32)
    src[5], src[6] = -0.0, np.float32(np.nan)
    c = rng.standard_normal(src.shape).astype(np.float32)
    for threads in (1, 2, 3):
        copy, triad = Streamer("copy", threads), Streamer("triad", threads)
        for offset in (0, 1, 15):
            for n in (0, 1, 16, 17, 1023, 4096, 4111, 3 * 4096 + 100 - offset):
                buf = np.full(src.size + 16, 7, np.float32)
                out = buf[offset:offset + n]
                copy(out, src[:n])
                assert out.tobytes() == src[:n].tobytes(), (threads, offset, n)
                assert (buf[:offset] == 7).all() and (buf[offset + n:] == 7).all(), (threads, offset, n)
                triad(out, src[:n], c[:n], s=3.0)
                np.testing.assert_array_equal(out, src[:n] + np.float32(3.0) * c[:n])
    # its aligned line stores would fault on a float32 array that is not 4-byte aligned
    odd = np.zeros(65, np.uint8)[1:].view(np.float32)
    with pytest.raises(ValueError, match="aligned 1-D float32"):
        Streamer("copy", 2)(odd, src[:16])


def _table(stdout: str, title: str) -> dict[str, dict[str, str]]:
    """The rows (by label) of the markdown table under ``### <title>``, each as {header: cell}."""
    lines = stdout.splitlines()
    start = lines.index(f"### {title}") + 2          # the title, a blank line, then the table
    body = list(itertools.takewhile(lambda ln: ln.startswith("|"), lines[start:]))
    heads = [c.strip() for c in body[0].split("|")[1:-1]]
    rows = [[c.strip() for c in ln.split("|")[1:-1]] for ln in body[2:]]
    return {r[0]: dict(zip(heads, r)) for r in rows}


@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="tensorflow not installed")
def test_quick_bench_has_a_checked_tensorflow_column(tmp_path):
    """TensorFlow (tf.function(jit_compile=True)) is a peer: its cells are timed after its
    first result matched the reference (a wrong one prints ERROR), it can be the best peer,
    and it runs the while loop, the triad, first calls in new processes (cold, then warm
    from its persistent XLA cache) and `import tensorflow` too."""
    env = dict(os.environ, FLOWJIT_CACHE_DIR=str(tmp_path))
    p = subprocess.run([sys.executable, "-m", "bench", "--quick", "--only", "bandwidth,gelu,dispatch,loop,compile",
                        "--repeat", "1", "--peers", "fj,tf"], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "### Errors" not in p.stdout, p.stdout[-3000:]
    main = _table(p.stdout, "flowjit against its peers (median per call)")
    for label in ("gelu f32[65536]", "dispatch x+1 f32[8]", "fori_loop 1,000 trivial iterations, f64"):
        cell = main[label]["TensorFlow (XLA)"]
        assert re.match(r"[0-9.]+ (µs|ms) ", cell + " "), (label, cell)
        assert main[label]["flowjit/best peer"].endswith("x vs TensorFlow (XLA)"), main[label]
    for label in ("first call gelu f32[65536], cold", "first call gelu f32[65536], warm disk cache"):
        assert re.match(r"[0-9.]+ (ms|s) \(2nd [0-9.]+ (µs|ms)\)$", main[label]["TensorFlow (XLA)"]), main[label]
    assert re.match(r"[0-9.]+ (ms|s) \(", main["import, new process"]["TensorFlow (XLA)"]), main
    assert "persistent XLA cache entries on disk after the calls: 1" in p.stdout
    triad = _table(p.stdout, "Memory bandwidth (bytes read + written per second)")["triad f32[1048576]"]
    assert triad["TensorFlow (XLA), new array"].endswith("GB/s"), triad
    assert "tensorflow 2." in p.stdout and "its column not run" not in p.stdout


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc)")
def test_quick_aot_rows_time_a_c_program_load_compiled_and_the_jit(tmp_path):
    """The aot workload exports its functions, builds a C program against each library
    with cc, and fills both tables: start-to-first-result in new processes (each child's
    result checked against a float64 reference; an ERROR cell and the errors section
    otherwise), and steady state, where the library through fj.load_compiled is compared
    with the JIT and with the C program's own loop."""
    env = dict(os.environ, FLOWJIT_CACHE_DIR=str(tmp_path))
    p = subprocess.run([sys.executable, "-m", "bench", "--quick", "--only", "aot", "--repeat", "1",
                        "--peers", "fj,jax"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "### Errors" not in p.stdout, p.stdout[-3000:]
    has_jax = importlib.util.find_spec("jax") is not None
    first = _table(p.stdout, "Ahead of time: process start to first result (new processes)")
    for label in ("first result, MLP predict 784-64-64-10 b64", "first result, gelu f32[64,256]"):
        cells = first[label]
        for column in ("C program", "Python, fj.load_compiled", "JIT cold (llvm)", "JIT warm disk cache"):
            assert re.fullmatch(r"[0-9.]+ (ms|s)", cells[column]), (label, column, cells[column])
        assert re.fullmatch(r"[0-9.]+x", cells["load_compiled / JIT warm"]), cells
        for column in ("JAX jit cold", "JAX jit warm cache"):
            assert re.fullmatch(r"[0-9.]+ (ms|s)" if has_jax else "skipped.*", cells[column]), (column, cells)
    assert re.fullmatch(r"[0-9.]+ ms", first["floor: start a process, print the clock"]["C program"])
    steady = _table(p.stdout, "Ahead of time: steady state (median per call)")
    for label in ("steady, MLP predict 784-64-64-10 b64", "steady, gelu f32[64,256]", "steady, x+1 f32[8]"):
        cells = steady[label]
        for column in ("C, entry point in a loop", "fj.load_compiled", "JIT (llvm)"):
            assert re.match(r"[0-9.]+ (ns|µs|ms)", cells[column]), (label, column, cells[column])
        assert re.fullmatch(r"[0-9.]+x", cells["load_compiled / JIT"]), cells
        assert re.fullmatch(r"-?[0-9.]+ (ns|µs|ms)", cells["load_compiled − C"]), cells
    assert "left in an empty FLOWJIT_CACHE_DIR: 0;" in p.stdout


# The bench's Ray rows start a cluster each (15 s and 13 s); the training and transfers they
# time are the default suite's in tests/distributed.
@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs the distributed extra (Ray)")
def test_quick_distributed_rows_time_sync_async_and_a_straggler(tmp_path):
    """The distributed workload trains on a local Ray runtime and fills its table: steps/s
    and samples/s for 1 and 2 workers, sync and async (a sync step covers one batch of 32
    rows per worker), and a worker slowed 5x, which the sync run waits for with no backup
    worker and leaves behind with one."""
    env = dict(os.environ, FLOWJIT_CACHE_DIR=str(tmp_path))
    p = subprocess.run([sys.executable, "-m", "bench", "--quick", "--only", "distributed", "--repeat", "1"], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "### Errors" not in p.stdout, p.stdout[-3000:]
    rows = _table(p.stdout, "Distributed training on Ray (fj.distributed.train, 2 ps tasks, median per run)")
    value = {label: {k: float(c[k].replace(",", "")) for k in ("steps/s", "samples/s")} for label, c in rows.items()}
    for mode in ("sync", "async"):
        for n in (1, 2):
            assert value[f"{mode}, {n} worker{'s' if n > 1 else ''}"]["steps/s"] > 0
    sync2 = value["sync, 2 workers"]
    assert sync2["samples/s"] == pytest.approx(sync2["steps/s"] * 64, rel=0.02)
    waits, backed = value["sync, 2 workers, one slowed 5x, 0 backup"], value["sync, 2 workers, one slowed 5x, 1 backup"]
    assert backed["steps/s"] > 2 * waits["steps/s"], rows
    assert float(rows["sync, 2 workers, one slowed 5x, 1 backup"]["gradients dropped / step"]) > 0, rows


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs the distributed extra (Ray)")
def test_quick_sendrecv_rows_time_flowjit_placed_against_ray(tmp_path):
    """The sendrecv workload moves a 4 KB and a 4 MB array to a worker task and back: each row
    has flowjit's placed and unplaced calls (their results checked: a wrong one is an ERROR
    cell and the errors section), Ray's put+get and actor round trip, and the differences and
    ratio derived from them. Only structure and sign: a shared machine orders nothing."""
    env = dict(os.environ, FLOWJIT_CACHE_DIR=str(tmp_path))
    p = subprocess.run([sys.executable, "-m", "bench", "--quick", "--only", "sendrecv", "--repeat", "1",
                        "--peers", "fj"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "### Errors" not in p.stdout, p.stdout[-3000:]
    rows = _table(p.stdout, "Cross-process Send/Recv on Ray (x + 1 on a worker task and back, median per call)")
    assert list(rows) == ["4 KB (f32[1024])", "4 MB (f32[1048576])"], rows
    units = {"ns": 1e-9, "µs": 1e-6, "ms": 1e-3, "s": 1.0}
    for label, cells in rows.items():
        seconds = {}
        for column in ("flowjit, placed on the task", "flowjit, not placed", "Ray put+get", "Ray actor round trip"):
            m = re.fullmatch(r"([0-9.]+) (ns|µs|ms|s) ±[0-9]+%", cells[column])
            assert m, (label, column, cells[column])
            seconds[column] = float(m[1]) * units[m[2]]
            assert seconds[column] > 0, (label, column, cells[column])
        m = re.fullmatch(r"(-?[0-9.]+) (ns|µs|ms|s)", cells["flowjit transfers (placed − not placed)"])
        assert m, cells
        assert float(m[1]) * units[m[2]] == pytest.approx(
            seconds["flowjit, placed on the task"] - seconds["flowjit, not placed"], rel=0.01, abs=2e-6), cells
        ratio = re.fullmatch(r"([0-9.]+)x", cells["flowjit / Ray actor"])
        assert ratio and float(ratio[1]) > 0, cells
        assert float(ratio[1]) == pytest.approx(
            seconds["flowjit, placed on the task"] / seconds["Ray actor round trip"], rel=0.02, abs=0.006), cells


def test_quick_remat_memory_rows_measure_less_memory_with_remat(tmp_path):
    """The remat_memory workload runs each row in a new process and measures the peak of one
    deep-MLP training step: the RSS high-water mark around flowjit's native program. Each child
    checks its loss against the plain row's (an ERROR cell and the errors section otherwise),
    and remat with nothing saved measures less than plain."""
    env = dict(os.environ, FLOWJIT_CACHE_DIR=str(tmp_path))
    p = subprocess.run([sys.executable, "-m", "bench", "--quick", "--only", "remat_memory", "--repeat", "1",
                        "--peers", "fj"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "### Errors" not in p.stdout, p.stdout[-3000:]
    rows = _table(p.stdout, "Rematerialization: measured peak memory of one deep-MLP training step "
                            "(each row a new process)")
    assert [label for label in rows if label.startswith("flowjit")] == [
        "flowjit, plain (activations kept)", "flowjit, fj.remat per layer, nothing saved",
        "flowjit, fj.remat per layer, dots_saveable"], rows
    mib = {}
    for label, cells in ((label, c) for label, c in rows.items() if label.startswith("flowjit")):
        m = re.fullmatch(r"([0-9.]+) MiB", cells["measured peak of the step"])
        assert m, cells
        mib[label] = float(m[1])
        assert cells["measured by"].startswith("RSS HWM"), cells
        assert float(cells["steps/s"]) > 0, cells
    assert mib["flowjit, fj.remat per layer, nothing saved"] < mib["flowjit, plain (activations kept)"], mib


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=60).stdout.strip()


needs_git = pytest.mark.skipif(shutil.which("git") is None or not os.path.isdir(os.path.join(ROOT, ".git")),
                               reason="needs git and the repository's checkout")


@needs_git
def test_compare_times_two_trees_side_by_side(tmp_path):
    """``python -m bench.compare . .`` times the working tree against itself (each side a copy
    of its flowjit/, taken at the start; the child says where it imported flowjit from) in
    interleaved blocks: the table has a row per workload with both medians and their ratio
    (near 1: the same code), the import and first-call rows, and the report is recorded."""
    record = tmp_path / "compare.md"
    p = subprocess.run([sys.executable, "-m", "bench.compare", ".", ".", "--quick", "--only",
                        "dispatch,gelu,fori_loop", "--record", str(record)], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    lines = p.stdout.splitlines()
    head = next(ln for ln in lines if ln.startswith("| workload |"))
    heads = [c.strip() for c in head.split("|")[1:-1]]
    commit = _git("rev-parse", "--short", "HEAD") + ("+edits" if _git("status", "--porcelain", "--", "flowjit") else "")
    assert heads == ["workload", f"base {commit}", f"head {commit}", "head/base", "per round",
                     "samples (base/head)", "flag"], heads
    body = [ln for ln in lines[lines.index(head) + 2:] if ln.startswith("|")]
    rows = {r[0]: dict(zip(heads, r)) for r in ([c.strip() for c in ln.split("|")[1:-1]] for ln in body)}
    assert list(rows) == ["gelu f32[65536]", "dispatch x+1 f32[8]", "fori_loop 1,000 trivial iterations, f64",
                          "import flowjit (new process)", "first call, cold cache: gelu f32[65536]"], list(rows)
    units = {"µs": 1e-6, "ms": 1e-3, "s": 1.0}
    for label, cells in rows.items():
        assert not cells["flag"].startswith("ERROR"), cells
        seconds, rounding = [], 0.0
        for column in heads[1:3]:
            m = re.fullmatch(r"([0-9.]+) (µs|ms|s)", cells[column])
            assert m and float(m[1]) > 0, (label, column, cells[column])
            seconds.append(float(m[1]) * units[m[2]])
            # a cell is rounded to its printed digits: half its last digit, relative
            decimals = len(m[1].partition(".")[2])
            rounding += 0.5 * 10.0 ** -decimals / float(m[1])
        ratio = float(cells["head/base"])
        # the same code on both sides: a sensible ratio, equal to the medians' (as printed;
        # 0.47 against 0.49 us is 0.959 printed, 0.940 unrounded)
        assert 0.2 < ratio < 5, cells
        assert ratio == pytest.approx(seconds[1] / seconds[0], rel=rounding + 0.001, abs=0.0005), cells
        lo, hi = (float(x) for x in cells["per round"].split("–"))
        assert 0 < lo <= hi, cells
        if abs(ratio - 1.05) > 0.0005:   # the flag reads the unrounded ratio: 1.0503 prints 1.050
            assert (cells["flag"] == "") == (ratio <= 1.05), cells
        n = 2 if label.startswith(("import", "first")) else 8     # quick: 2 rounds x 4 samples
        assert cells["samples (base/head)"] == f"{n}/{n}", cells
    where = re.search(r"flowjit imported from: base (\S+), head (\S+)", p.stdout)
    assert where and all("bench_compare_" in w and w.endswith("working-tree/flowjit") for w in where.groups()), \
        p.stdout
    assert record.read_text().strip() == p.stdout.strip()


@needs_git
def test_compare_checks_a_revision_out_into_a_worktree_and_removes_it(tmp_path):
    """A revision is timed from its own checkout: ``git worktree add --detach`` of that commit
    (its files as committed, whatever the working tree holds), removed afterwards."""
    from bench.compare import Tree
    tree = Tree("HEAD", str(tmp_path), "base")
    try:
        assert tree.commit == _git("rev-parse", "--short", "HEAD")
        assert tree.path in _git("worktree", "list")
        with open(os.path.join(tree.path, "flowjit", "__init__.py")) as f:
            assert f.read().strip() == _git("show", "HEAD:flowjit/__init__.py")
    finally:
        tree.remove()
    assert not os.path.exists(tree.path)
    assert tree.path not in _git("worktree", "list")


def test_zoo_models_give_the_same_logits_compiled_interpreted_and_in_jax():
    """Each model of the bench's zoo (bench/workloads/zoo.py, written once against a numpy-like
    namespace) gives the same logits compiled by flowjit, on flowjit's interpreter and, where
    JAX is installed, under jax.jit: the same parameters and inputs, quick sizes."""
    import numpy as np

    import flowjit as fj
    from bench.workloads import zoo
    has_jax = importlib.util.find_spec("jax") is not None
    for model in zoo.MODELS:
        params, (x, _) = zoo.init(model, quick=True), zoo.batch(model, quick=True)
        forward = zoo.predict(zoo.lib("flowjit"), model)
        want = np.asarray(fj.function(forward, backend="interpreter")(params, x))
        assert want.shape == (len(x) if model != "lstm" else x.shape[1], zoo.CLASSES), (model, want.shape)
        np.testing.assert_allclose(np.asarray(fj.function(forward)(params, x)), want, rtol=1e-4, atol=1e-5,
                                   err_msg=model)
        if has_jax:
            import jax
            jax.config.update("jax_platforms", "cpu")
            got = np.asarray(jax.jit(zoo.predict(zoo.lib("jax"), model))(params, x))
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"{model} (JAX)")


def test_a_new_process_ratio_pairs_the_processes_of_each_round():
    """The zoo's new-process ratios are the median of each round's own ratio: two slow rounds
    of one library (a slow spell of the machine) against the other's slow and quiet ones do
    not make it look slower, as the ratio of the two medians would (1.60 / 1.25 = 1.28x)."""
    from bench.workloads.models import paired_ratio
    fj = {0: {"s": 1.00}, 1: {"s": 1.60}, 2: {"s": 1.60}}
    jax = {0: {"s": 1.20}, 1: {"s": 1.90}, 2: {"s": 1.25}}
    assert paired_ratio(fj, jax, "s") == "0.84x"        # median of 0.83, 0.84, 1.28
    # only the rounds both ran (a failed child leaves its round out)
    assert paired_ratio({0: {"s": 3.0}, 2: {"s": 4.0}}, {1: {"s": 1.0}, 2: {"s": 2.0}}, "s") == "2.00x"
    assert paired_ratio({0: {"s": 1.0}}, {1: {"s": 1.0}}, "s") == "—"


# The quick models workload compiles ten functions per library and starts four processes (16 s);
# the zoo's results are checked in the default suite by the test above.
@pytest.mark.slow
def test_quick_models_rows_have_flowjit_and_jax_numbers(tmp_path):
    """``python -m bench --quick --only models`` fills its six tables: every model's inference
    and training step timed in flowjit and JAX (each first result checked against flowjit's
    interpreter: a wrong one is an ERROR cell), flowjit/JAX and the native column; the same rows
    beside two busy processes with loaded/idle; the MLP's first call cold and warm in new
    processes, the warm one's steady state alone (with its page faults and CPU time per call), the same in a
    third process beside two busy ones (with loaded/idle) and its peak memory."""
    from bench.workloads.models import TITLES
    env = dict(os.environ, FLOWJIT_CACHE_DIR=str(tmp_path))
    p = subprocess.run([sys.executable, "-m", "bench", "--quick", "--only", "models", "--repeat", "1",
                        "--peers", "fj,jax"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "### Errors" not in p.stdout, p.stdout[-3000:]
    has_jax = importlib.util.find_spec("jax") is not None
    time_re = r"[0-9.]+ (µs|ms|s)( ±[0-9]+%)?( · [0-9.]+ CPU)?"
    steady = _table(p.stdout, TITLES["steady"])
    loaded = _table(p.stdout, TITLES["loaded"])
    assert len(steady) == 10 and list(loaded) == list(steady), (list(steady), list(loaded))
    for label, cells in steady.items():
        for column in ("flowjit", "JAX jit") if has_jax else ("flowjit",):
            assert re.fullmatch(time_re, cells[column]), (label, column, cells[column])
            assert re.fullmatch(time_re, loaded[label][column]), (label, column, loaded[label])
        assert re.fullmatch(r"[0-9.]+x", loaded[label]["loaded/idle"]), loaded[label]
        assert re.fullmatch(r"[0-9.]+x" if has_jax else "—", cells["flowjit/JAX"]), cells
        assert cells["native (flowjit)"] == "yes" or cells["native (flowjit)"].startswith("no: "), cells
    assert steady["MLP 784-64-64-10, b32, inference"]["native (flowjit)"] == "yes"
    first = _table(p.stdout, TITLES["first"])["MLP 784-64-64-10, b32, inference"]
    for column in ("flowjit cold", "flowjit warm") + (("JAX jit cold", "JAX jit warm") if has_jax else ()):
        assert re.fullmatch(r"[0-9.]+ (ms|s) \(2nd [0-9.]+ (µs|ms|s)\)", first[column]), (column, first)
    alone = _table(p.stdout, TITLES["alone"])["MLP 784-64-64-10, b32, inference"]
    for column in ("flowjit", "JAX jit") if has_jax else ("flowjit",):
        assert re.fullmatch(r"[0-9.]+ (µs|ms|s) \([0-9]+\) · [0-9.]+ (µs|ms|s) CPU", alone[column]), (column, alone)
    alone_loaded = _table(p.stdout, TITLES["alone_loaded"])["MLP 784-64-64-10, b32, inference"]
    for column in ("flowjit", "JAX jit") if has_jax else ("flowjit",):
        assert re.fullmatch(r"[0-9.]+ (µs|ms|s) · [0-9.]+ (µs|ms|s) CPU", alone_loaded[column]), (column, alone_loaded)
    assert re.fullmatch(r"[0-9.]+x", alone_loaded["loaded/idle"]), alone_loaded
    memory = _table(p.stdout, TITLES["memory"])["MLP 784-64-64-10, b32, inference"]
    assert re.fullmatch(r"[0-9]+ MiB \(\+[0-9]+ MiB\)", memory["flowjit"]), memory


def test_the_gpu_bench_fills_flowjit_s_column_under_the_cuda_simulator(tmp_path):
    # No GPU here: numba's simulator runs the kernels, so the script's flowjit path (the
    # runtime's CUDA program on device arrays, and fj.function(device="cuda:0") on NumPy
    # arrays) is checked; the peers need a GPU and cupy and give error cells or none.
    pytest.importorskip("numba.cuda")
    env = dict(os.environ, FLOWJIT_CACHE_DIR=str(tmp_path), NUMBA_ENABLE_CUDASIM="1",
               FLOWJIT_CUDA_SIMULATOR_DEVICES="1")
    p = subprocess.run([sys.executable, "-m", "bench.gpu", "--quick", "--repeat", "1", "--peers", "fj",
                        "--only", "gelu,softmax,gelu_host"], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = _table(p.stdout, "bench.gpu")
    assert set(rows) == {"gelu", "softmax", "gelu_host"}, p.stdout
    for name, cells in rows.items():
        assert float(cells["fj ms"]) > 0 and float(cells["fj first s"]) > 0, (name, cells)


def test_the_contention_bench_s_embedding_training_step_carries_its_state():
    """bench.workloads.contention's ``embedding_train`` (the zoo's embedding training step,
    its parameters and Adam state carried from call to call): its first loss is the
    interpreter's, and the loss falls over the next steps (a carry that dropped the state
    would repeat the first)."""
    import numpy as np

    import flowjit as fj
    from bench.workloads import contention, zoo
    call, reference = contention.build(contention.Lib("fj"), "embedding_train")
    assert reference is None
    losses = [float(np.asarray(call())) for _ in range(3)]
    params, (ids, y) = zoo.init("embedding"), zoo.batch("embedding")
    step = fj.function(zoo.train_step(zoo.lib("flowjit"), "embedding"), backend="interpreter")
    want = float(np.asarray(step(params, zoo.adam_state(params), ids, y)[2]))
    np.testing.assert_allclose(losses[0], want, rtol=1e-5)
    assert losses[2] < losses[1] < losses[0], losses


def test_quick_conv_rows_are_checked_against_numpy_in_every_peer(tmp_path):
    # The forward and the filter's gradient of each column against NumPy's float64 windows
    # times the filter: a peer's filter layout that differed from fj.conv2d's HWIO (torch's
    # OIHW view) would be an error, and the note gives the BLAS limit the row is read against.
    p = _quick_bench(tmp_path, "conv", "fj,numpy,jax,torch")
    lines = p.stdout.splitlines()
    for label in ("| conv 3x3 SAME 16->16 f32[2,8,8,16] |", "| conv 3x3 SAME 16->16 f32[2,8,8,16], gradient |"):
        row = next(ln for ln in lines if ln.startswith(label))
        assert re.search(r"\| [0-9.]+ (µs|ms) (±[0-9]+% )?· [0-9]+ GFLOP/s", row), row
    assert re.search(r"blas limit: .* [0-9]+ GFLOP/s", p.stdout), p.stdout[-3000:]
    assert "### Errors" not in p.stdout and "WRONG" not in p.stdout, p.stdout[-3000:]
