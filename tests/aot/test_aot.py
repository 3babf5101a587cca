"""flowjit compile / fj.export / fj.load_compiled: the library matches the JIT from C and
from Python, exports no Python symbol, loads without numba or a compiler, runs on two
threads at once, and refuses bad input with errors that say what to do."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import flowjit as fj
from flowjit.aot import AOTError
from flowjit.aot import manifest as mf
from flowjit.cli import main

needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")

MODULE = '''
import numpy as np
import flowjit as fj

def small(x, y):
    return fj.tanh(x) * 2 + fj.sum(y), fj.max(x, axis=1)

rng = np.random.default_rng(0)
W1 = fj.Variable((rng.standard_normal((64, 32)) * 0.2).astype(np.float32), name="W1")
b1 = fj.Variable((rng.standard_normal(32) * 0.1).astype(np.float32), name="b1")
W2 = fj.Variable((rng.standard_normal((32, 10)) * 0.2).astype(np.float32), name="W2")
b2 = fj.Variable(np.zeros(10, np.float32), name="b2")

def predict(x):
    return fj.nn.softmax(fj.nn.relu(x @ W1 + b1) @ W2 + b2)
'''


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The model file, and both functions built with the CLI into one directory each."""
    root = tmp_path_factory.mktemp("aot")
    (root / "model.py").write_text(MODULE)
    assert main(["compile", f"{root / 'model.py'}:small", "--arg", "f32[4,3]", "--arg", "f32[5]",
                 "-o", str(root / "small")]) == 0
    assert main(["compile", f"{root / 'model.py'}:predict", "--arg", "f32[16,64]", "-o", str(root / "mlp"),
                 "--name", "mlp"]) == 0
    import importlib.util
    spec = importlib.util.spec_from_file_location("_aot_test_model", root / "model.py")
    model = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(model)
    return root, model


def inputs(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_load_compiled_matches_the_jit(built):
    root, model = built
    x, y = inputs((4, 3), 1), inputs(5, 2)
    got = fj.load_compiled(root / "small")(x, y)
    want = fj.function(model.small)(x, y)
    assert isinstance(got, tuple) and len(got) == 2
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
    xs = inputs((16, 64), 3)
    f = fj.load_compiled(root / "mlp")
    assert sorted(f.variables) == ["W1", "W2", "b1", "b2"]
    np.testing.assert_allclose(f(xs), fj.function(model.predict)(xs), rtol=1e-5, atol=1e-6)


def test_the_files_and_the_manifest(built):
    root, _ = built
    names = sorted(p.name for p in (root / "mlp").iterdir())
    # libs/: NumPy's OpenBLAS and its runtime, which the library finds beside itself.
    assert names == ["libmlp.so", "libs", "mlp.h", "mlp.ir", "mlp.json", "mlp.o", "mlp.safetensors"]
    m = json.loads((root / "mlp" / "mlp.json").read_text())
    assert m["flowjit_version"] == fj.__version__ and m["cpu"]["name"] == "x86-64-v3"
    assert [(a["name"], a["dtype"], a["shape"], a["kind"]) for a in m["args"]] == [
        ("x", "float32", [16, 64], "argument"), ("W1", "float32", [64, 32], "variable"),
        ("b1", "float32", [32], "variable"), ("W2", "float32", [32, 10], "variable"),
        ("b2", "float32", [10], "variable")]
    assert [(r["name"], r["shape"]) for r in m["results"]] == [("output", [16, 10])]
    assert m["digest"] == mf.digest(m) and len(m["ir_hash"]) == 64
    header = (root / "mlp" / "mlp.h").read_text()
    for text in ("int32_t mlp(const mlp_args *in, mlp_results *out, void *scratch);", "#define MLP_SCRATCH_BYTES",
                 "#define MLP_ERR_NOMEM 1", f'#define MLP_FLOWJIT_VERSION "{fj.__version__}"',
                 "static const int64_t mlp_x_shape[2] = {16, 64};", "const float *W1;"):
        assert text in header


@needs_cc
def test_no_python_symbols(built):
    root, _ = built
    for lib in (root / "small" / "libsmall.so", root / "mlp" / "libmlp.so"):
        out = subprocess.run(["nm", "-D", str(lib)], capture_output=True, text=True, check=True).stdout
        symbols = [line.split()[-1] for line in out.splitlines()]
        assert not [s for s in symbols if s.startswith(("Py", "_Py", "numba", "NRT", "flowjit", "fj_"))], out
        defined = {line.split()[-1] for line in out.splitlines() if line.split()[-2] in ("T", "R", "D")}
        assert defined == {lib.stem[3:], f"{lib.stem[3:]}_digest"}, out


C_SMALL = r'''
#include <stdio.h>
#include <stdlib.h>
#include "small.h"
int main(int argc, char **argv) {
    float x[SMALL_X_SIZE], y[SMALL_Y_SIZE], r0[SMALL_OUTPUT_0_SIZE], r1[SMALL_OUTPUT_1_SIZE];
    FILE *f = fopen(argv[1], "rb");
    if (fread(x, sizeof x, 1, f) != 1 || fread(y, sizeof y, 1, f) != 1) return 9;
    fclose(f);
    small_args in = {x, y};
    small_results out = {r0, r1};
    int rc = small(&in, &out, NULL);
    if (rc != SMALL_OK) return 10 + rc;
    static _Alignas(SMALL_SCRATCH_ALIGN) unsigned char scratch[SMALL_SCRATCH_BYTES + 1];
    if (small(&in, &out, scratch) != SMALL_OK) return 20;   /* the caller's scratch */
    if (small(NULL, &out, NULL) != SMALL_ERR_NULL) return 21;
    for (int i = 0; i < SMALL_OUTPUT_0_SIZE; i++) printf("%.9g\n", r0[i]);
    for (int i = 0; i < SMALL_OUTPUT_1_SIZE; i++) printf("%.9g\n", r1[i]);
    return 0;
}
'''

C_MLP = r'''
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mlp.h"
static void *read_all(const char *path, size_t n) {
    void *p = malloc(n);
    FILE *f = fopen(path, "rb");
    if (!f || fread(p, n, 1, f) != 1) { fprintf(stderr, "cannot read %s\n", path); exit(9); }
    fclose(f);
    return p;
}
int main(int argc, char **argv) {
    if (strcmp(mlp_digest, MLP_DIGEST) != 0) return 8;
    mlp_args in = {
        read_all(argv[1], sizeof(float) * MLP_X_SIZE), read_all(argv[2], sizeof(float) * MLP_W1_SIZE),
        read_all(argv[3], sizeof(float) * MLP_B1_SIZE), read_all(argv[4], sizeof(float) * MLP_W2_SIZE),
        read_all(argv[5], sizeof(float) * MLP_B2_SIZE)};
    float probs[MLP_OUTPUT_SIZE];
    mlp_results out = {probs};
    int rc = mlp(&in, &out, NULL);
    if (rc != MLP_OK) return 10 + rc;
    for (int i = 0; i < MLP_OUTPUT_SIZE; i++) printf("%.9g\n", probs[i]);
    return 0;
}
'''


def build_c(directory, name, source):
    (directory / "main.c").write_text(source)
    exe = directory / "main"
    subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", "-O1", "-o", str(exe), str(directory / "main.c"),
                    f"-I{directory}", f"-L{directory}", f"-l{name}", f"-Wl,-rpath,{directory}"],
                   check=True, capture_output=True, text=True)
    return exe


def run_c(exe, *args):
    out = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True)
    assert out.returncode == 0, (out.returncode, out.stderr)
    return np.array(out.stdout.split(), np.float64)


@needs_cc
def test_a_c_program_gets_what_the_jit_gets(built, tmp_path):
    root, model = built
    d = root / "small"
    exe = build_c(d, "small", C_SMALL)
    x, y = inputs((4, 3), 4), inputs(5, 5)
    (tmp_path / "in.bin").write_bytes(x.tobytes() + y.tobytes())
    want = fj.function(model.small)(x, y)
    np.testing.assert_allclose(run_c(exe, tmp_path / "in.bin"), np.concatenate([w.ravel() for w in want]),
                               rtol=1e-6, atol=1e-6)

    d = root / "mlp"
    exe = build_c(d, "mlp", C_MLP)
    xs = inputs((16, 64), 6)
    files = [tmp_path / "x.bin"]
    files[0].write_bytes(xs.tobytes())
    for v in (model.W1, model.b1, model.W2, model.b2):   # the trained values, as a C program gets them
        files.append(tmp_path / f"{v.name}.bin")
        files[-1].write_bytes(v.numpy().tobytes())
    got = run_c(exe, *files).reshape(16, 10)
    np.testing.assert_allclose(got, fj.function(model.predict)(xs), rtol=1e-5, atol=1e-6)


def test_load_compiled_in_a_fresh_process_without_numba(built, tmp_path):
    root, model = built
    xs = inputs((16, 64), 7)
    np.save(tmp_path / "x.npy", xs)
    prog = textwrap.dedent(f"""
        import sys
        sys.modules["numba"] = None          # import numba raises ImportError
        import numpy as np, flowjit as fj
        f = fj.load_compiled({str(root / 'mlp')!r})
        np.save({str(tmp_path / 'y.npy')!r}, f(np.load({str(tmp_path / 'x.npy')!r})))
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("llvmlite", "numba", "scipy") and sys.modules[m]),
              fj.cache_stats())
    """)
    out = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[] {'compiled': 0, 'loaded': 0, 'reused': 0}"
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), fj.function(model.predict)(xs), rtol=1e-5, atol=1e-6)


def test_a_library_runs_from_a_copy_elsewhere(built, tmp_path):
    # The BLAS of NumPy's wheel was found through an rpath into the build machine's
    # environment; it now travels in the output folder (libs/, found through $ORIGIN/libs).
    root, model = built
    copy = tmp_path / "elsewhere" / "mlp"
    shutil.copytree(root / "mlp", copy)
    library = copy / "libmlp.so"
    if shutil.which("readelf"):
        dynamic = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True).stdout
        assert "$ORIGIN/libs" in dynamic and str(root) not in dynamic
    if shutil.which("ldd"):  # every library the copy needs resolves inside the copy or the system's
        resolved = subprocess.run(["ldd", str(library)], capture_output=True, text=True).stdout
        assert "not found" not in resolved and str(root) not in resolved, resolved
        assert "openblas" not in resolved or str(copy / "libs") in resolved, resolved
    xs = inputs((16, 64), 7)
    np.save(tmp_path / "x.npy", xs)
    prog = (f"import numpy as np, flowjit as fj\nf = fj.load_compiled({str(copy)!r})\n"
            f"np.save({str(tmp_path / 'y.npy')!r}, f(np.load({str(tmp_path / 'x.npy')!r})))\n")
    out = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), fj.function(model.predict)(xs), rtol=1e-5, atol=1e-6)


def big(x):
    return fj.tanh(x) * 2 + fj.exp(-x * x)


def heavy(x, w):
    h = fj.tanh(x @ w)
    return fj.sum(h * h, axis=1) + fj.mean(h)


@pytest.mark.parametrize("case", ["matmul", "pool"])
def test_two_threads_call_one_entry_at_once(tmp_path, case):
    # "pool": loops split over the library's pool, which one caller holds while the other
    # runs its loops alone.
    fn, shapes = (heavy, [(256, 256), (256, 256)]) if case == "matmul" else (big, [(512, 1024)])
    fj.export(fn, *[inputs(s, 0) for s in shapes], path=tmp_path)
    f = fj.load_compiled(tmp_path)
    assert f.manifest["pool"] == (case == "pool")
    data = [[inputs(s, 10 * t + k) for k, s in enumerate(shapes)] for t in range(2)]
    want = [fj.function(fn)(*d) for d in data]
    errors = []
    barrier = threading.Barrier(2)

    def work(t):
        barrier.wait()
        for _ in range(40):
            got = f(*data[t])
            if not np.allclose(got, want[t], rtol=1e-5, atol=1e-5):
                errors.append(t)
    threads = [threading.Thread(target=work, args=(t,)) for t in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []


def test_a_training_step_updates_its_variables(tmp_path):
    w = fj.Variable(np.ones((3, 2), np.float32), name="w")

    def step(x, y):
        loss, g = fj.value_and_grad(lambda v: fj.mean((x @ v - y) ** 2))(w.value)
        w.assign_sub(0.1 * g)
        return loss
    x, y = inputs((4, 3), 1), inputs((4, 2), 2)
    fj.export(step, x, y, path=tmp_path)
    f = fj.load_compiled(tmp_path)
    jit = fj.function(step)
    for _ in range(3):
        np.testing.assert_allclose(f(x, y), jit(x, y), rtol=1e-5)
        np.testing.assert_allclose(f.variables["w"], w.numpy(), rtol=1e-5)


def test_arrays_of_the_wrong_shape_or_dtype_name_the_argument(built):
    root, _ = built
    f = fj.load_compiled(root / "small")
    x, y = inputs((4, 3), 1), inputs(5, 2)
    with pytest.raises(TypeError, match=r"argument 'x' must be float32\[4,3\], got a float64 array"):
        f(x.astype(np.float64), y)
    with pytest.raises(ValueError, match=r"argument 'y' must have shape \(5,\)"):
        f(x, inputs(6, 2))
    with pytest.raises(TypeError, match=r"takes 2 argument\(s\) \(x, y\), got 1"):
        f(x)
    got = f(np.asfortranarray(x), y)   # strided arrays are made contiguous
    np.testing.assert_allclose(got[0], f(x, y)[0])


def _edit(directory, name, change, redigest):
    path = directory / f"{name}.json"
    m = json.loads(path.read_text())
    change(m)
    if redigest:
        m["digest"] = mf.digest(m)
    path.write_text(json.dumps(m))


@pytest.mark.parametrize("case", ["tampered", "version", "cpu", "library", "unloadable"])
def test_load_compiled_refuses_a_library_it_cannot_trust(built, tmp_path, case):
    root, _ = built
    d = tmp_path / "copy"
    shutil.copytree(root / "small", d)
    if case == "tampered":   # an edited shape without a new digest
        _edit(d, "small", lambda m: m["args"][0].update(shape=[8, 3]), False)
        match = "modified after it was built"
    elif case == "version":
        _edit(d, "small", lambda m: m.update(flowjit_version="0.0.1"), True)
        match = "built by flowjit 0.0.1, this is flowjit"
    elif case == "cpu":
        _edit(d, "small", lambda m: m["cpu"]["required_flags"].append("avx9000"), True)
        match = "which has avx9000; this CPU does not"
    elif case == "library":   # a manifest re-digested after an edit no longer matches the library's own digest
        _edit(d, "small", lambda m: (m["args"][0].update(shape=[8, 3]), m.update(library_sha256=None)), True)
        match = "does not match its manifest"
    else:
        (d / "libsmall.so").write_bytes(b"not an ELF file")
        _edit(d, "small", lambda m: m.update(library_sha256=None), False)
        match = "cannot load .*libsmall.so"
    with pytest.raises(AOTError, match=match):
        fj.load_compiled(d)


def test_a_program_without_a_native_form_writes_nothing(tmp_path):
    def host(x):  # a Python callback is host work: a C program has no Python to call
        return fj.pure_callback(np.sort, fj.ShapeDtype(x.shape, x.dtype), x * 2) + 1
    with pytest.raises(AOTError, match=r"op pure_callback at test_aot.py:\d+ has no native form"):
        fj.export(host, inputs((4, 3), 0), path=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_function_calling_scipys_c_code_is_refused_naming_the_op(tmp_path):
    # The JIT's program calls SciPy's C function per element (codegen_cpu.scipy_functions); a C
    # library cannot link SciPy's extension module.
    def cdf(a, x):
        return fj.scipy.special.gammainc(a, x) * 2

    with pytest.raises(AOTError, match=r"op gammainc at test_aot.py:\d+ calls SciPy's C function"):
        fj.export(cdf, inputs((3,), 0), inputs((3,), 1), path=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_cli_usage_errors_show_the_expected_form(built, capsys):
    root, _ = built
    target = f"{root / 'model.py'}:small"
    for args, says in ((["--arg", "f32[4,3"], "bad --arg 'f32[4,3'"),
                       (["--arg", "f32[4,3]"], "small takes 2 argument(s) (x, y), got 1 --arg")):
        with pytest.raises(SystemExit) as e:
            main(["compile", target, *args, "-o", str(root / "never")])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert says in err and f"expected: flowjit compile {target} --arg TYPE --arg TYPE" in err
    assert not (root / "never").exists()
    assert main(["compile", target, "--arg", "f32[4,3]", "--arg", "f32[5]", "--cpu", "pentium", "-o",
                 str(root / "never")]) == 1
    assert "unknown --cpu 'pentium'" in capsys.readouterr().err
    assert not (root / "never").exists()


def test_no_c_compiler_still_writes_the_object_and_header(tmp_path, monkeypatch):
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv("PATH", "")
    with pytest.raises(AOTError, match="install one"):
        fj.export(lambda x: x * 2, inputs(4, 0), path=tmp_path, name="twice")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["twice.h", "twice.ir", "twice.json", "twice.o"]




def test_the_loader_imports_no_tracer_and_no_compiler():
    # What load_compiled runs (loader, manifest) reads only errors and the version of flowjit.
    from pathlib import Path

    import flowjit.aot
    from tests.test_layering import flowjit_imports
    for name in ("loader.py", "manifest.py"):
        found = {m for _, m in flowjit_imports(Path(flowjit.aot.__file__).parent / name)}
        assert found <= {"flowjit.aot.manifest", "flowjit.ir.errors", "flowjit.version"}, (name, found)


def test_static_parameters_are_compiled_in(tmp_path, capsys):
    (tmp_path / "powers.py").write_text(textwrap.dedent('''
        import flowjit as fj

        def power(x, n, scale):
            y = x
            for _ in range(n - 1):
                y = y * x
            return y * scale
    '''))
    assert main(["compile", f"{tmp_path / 'powers.py'}:power", "--static", "n=3", "--arg", "f32[4]",
                 "--arg", "f32[]", "-o", str(tmp_path / "out")]) == 0
    f = fj.load_compiled(tmp_path / "out")
    x = inputs(4, 0)
    np.testing.assert_allclose(f(x, np.float32(2)), x ** 3 * 2, rtol=1e-6)
    assert [p.get("static") for p in f.manifest["params"]] == [None, "3", None]
    with pytest.raises(SystemExit):
        main(["compile", f"{tmp_path / 'powers.py'}:power", "--static", "m=3", "--arg", "f32[4]", "--arg", "f32[]"])
    assert "power has no such parameter" in capsys.readouterr().err


@needs_cc
def test_large_loops_run_on_the_librarys_own_pool(tmp_path):
    x = inputs((512, 1024), 0)   # past the pool's threshold
    fj.export(big, x, path=tmp_path / "pool")
    fj.export(big, x, path=tmp_path / "one", threads=1)
    want = fj.function(big)(x)
    undefined = {}
    for d in ("pool", "one"):
        f = fj.load_compiled(tmp_path / d)
        assert f.manifest["pool"] == (d == "pool")
        np.testing.assert_allclose(f(x), want, rtol=1e-6, atol=1e-6)
        out = subprocess.run(["nm", "-D", "--undefined-only", str(tmp_path / d / "libbig.so")],
                             capture_output=True, text=True, check=True).stdout
        undefined[d] = {line.split()[-1].split("@")[0] for line in out.splitlines()}
    assert "pthread_create" in undefined["pool"] and "pthread_create" not in undefined["one"]
    assert "Large loops run on every CPU" in (tmp_path / "pool" / "big.h").read_text()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_forked_child_runs_the_pool_library_alone(tmp_path):
    # The pool's workers do not exist in a child: its loops must run on its one thread.
    x = inputs((512, 1024), 1)
    fj.export(big, x, path=tmp_path)
    f = fj.load_compiled(tmp_path)
    want = f(x)
    prog = textwrap.dedent(f"""
        import os, numpy as np, flowjit as fj
        f = fj.load_compiled({str(tmp_path)!r})
        x = np.load({str(tmp_path / 'x.npy')!r})
        f(x)                                   # the pool starts in the parent
        pid = os.fork()
        if pid == 0:
            ok = np.array_equal(f(x), np.load({str(tmp_path / 'want.npy')!r}))
            os._exit(0 if ok else 3)
        print(os.waitpid(pid, 0)[1] >> 8)
    """)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "want.npy", want)
    out = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "0", out.stderr


C_FROZEN = r'''
#include <stdio.h>
#include "frozen.h"
int main(int argc, char **argv) {
    float x[FROZEN_X_SIZE], probs[FROZEN_OUTPUT_SIZE];
    FILE *f = fopen(argv[1], "rb");
    if (fread(x, sizeof x, 1, f) != 1) return 9;
    fclose(f);
    frozen_args in = {x};                 /* the weights are in the library */
    frozen_results out = {probs};
    if (frozen(&in, &out, NULL) != FROZEN_OK) return 10;
    for (int i = 0; i < FROZEN_OUTPUT_SIZE; i++) printf("%.9g\n", probs[i]);
    return 0;
}
'''


@needs_cc
def test_frozen_variables_are_compiled_in(built, tmp_path, capsys):
    root, model = built
    d = tmp_path / "frozen"
    assert main(["compile", f"{root / 'model.py'}:predict", "--arg", "f32[16,64]", "-o", str(d), "--name", "frozen",
                 "--freeze"]) == 0
    m = json.loads((d / "frozen.json").read_text())
    assert [a["name"] for a in m["args"]] == ["x"] and m["variables"] is None
    assert m["frozen"]["names"] == ["W1", "b1", "W2", "b2"] and not (d / "frozen.safetensors").exists()
    xs = inputs((16, 64), 8)
    want = fj.function(model.predict)(xs)
    np.testing.assert_allclose(fj.load_compiled(d)(xs), want, rtol=1e-5, atol=1e-6)
    (tmp_path / "x.bin").write_bytes(xs.tobytes())
    got = run_c(build_c(d, "frozen", C_FROZEN), tmp_path / "x.bin").reshape(16, 10)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_freezing_variables_the_function_updates_is_refused(tmp_path):
    w = fj.Variable(np.ones(3, np.float32), name="w")

    def step(x):
        w.assign_add(x)
        return fj.sum(w * x)
    with pytest.raises(AOTError, match="cannot freeze the Variables of step: it updates w"):
        fj.export(step, inputs(3, 0), path=tmp_path / "out", freeze=True)
    assert not (tmp_path / "out").exists()


@needs_cc
def test_c_keywords_are_not_names_in_the_header(tmp_path):
    def scale(int, default):   # parameters named like C keywords
        return int * default
    fj.export(scale, inputs(4, 0), inputs(4, 1), path=tmp_path)
    header = (tmp_path / "scale.h").read_text()
    assert "const float *int_;" in header and "const float *default_;" in header
    (tmp_path / "check.c").write_text('#include "scale.h"\nint main(void) { return 0; }\n')
    subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", f"-I{tmp_path}", "-o", str(tmp_path / "check"),
                    str(tmp_path / "check.c")], check=True)
    with pytest.raises(AOTError, match="not a C identifier"):
        fj.export(scale, inputs(4, 0), inputs(4, 1), path=tmp_path / "other", name="double")


def test_every_integer_dtype_crosses_the_c_interface(tmp_path):
    def mix(a, b, c):
        return (a >> 2) + b.astype(np.uint8), c * 3, a.astype(np.float32)
    args = (np.array([200, 7, 9, 255], np.uint8), np.array([-3, 4, 300, -300], np.int16),
            np.array([2 ** 63 + 1, 5, 0, 9], np.uint64))
    fj.export(mix, *args, path=tmp_path)
    header = (tmp_path / "mix.h").read_text()
    assert "const uint8_t *a;" in header and "const int16_t *b;" in header and "const uint64_t *c;" in header
    (tmp_path / "check.c").write_text('#include "mix.h"\nint main(void) { return 0; }\n')
    subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", f"-I{tmp_path}", "-o", str(tmp_path / "check"),
                    str(tmp_path / "check.c")], check=True)
    got, want = fj.load_compiled(tmp_path / "mix.json")(*args), fj.function(mix)(*args)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def test_the_loader_knows_the_entrys_return_codes():
    from flowjit.aot.loader import _ERRORS
    from flowjit.codegen_cpu import program_emit as pe
    assert sorted(_ERRORS) == sorted([pe.C_ERR_NOMEM, pe.C_ERR_ALIGN, pe.C_ERR_NULL, pe.C_ERR_SIZE]) and pe.C_OK == 0
    assert _ERRORS[pe.C_ERR_NOMEM][0] is MemoryError


def test_a_library_for_this_cpu(tmp_path):
    x = inputs((8, 8), 0)
    fj.export(big, x, path=tmp_path, cpu="native")
    f = fj.load_compiled(tmp_path)
    assert f.manifest["cpu"]["name"].startswith("native (") and f.manifest["cpu"]["required_flags"]
    np.testing.assert_allclose(f(x), fj.function(big)(x), rtol=1e-6, atol=1e-6)


def test_a_function_with_sorts_compiles_for_any_batch_size(tmp_path):
    # A classifier's top-5 labels and a sorted row: the sorts are native kernels in the library.
    def ranked(w, x):
        logits = x @ w
        return fj.top_k(logits, 5), fj.sort(x, axis=-1, descending=True)
    rng = np.random.default_rng(0)
    w = rng.standard_normal((12, 30)).astype(np.float32)
    fj.export(ranked, w, fj.ShapeDtype(("B", 12), np.float32), path=tmp_path, name="ranked")
    compiled = fj.load_compiled(tmp_path / "ranked.json")
    for b in (1, 7, 33):
        x = rng.integers(-2, 3, size=(b, 12)).astype(np.float32)   # ties in the sorted rows
        got, want = compiled(w, x), fj.function(ranked)(w, x)
        for g, v in zip(jax_leaves(got), jax_leaves(want), strict=True):
            np.testing.assert_array_equal(g, v)


def test_a_mobilenet_block_compiles_for_any_batch_size(tmp_path):
    # Depthwise 3x3 (stride 2), pointwise 1x1, a grouped 3x3: the convolutions' groups are
    # native in the library, the batch symbolic.
    def block(dw, pw, gw, x):
        y = fj.nn.relu(fj.conv2d(x, dw, strides=(2, 2), padding="SAME", groups=8))
        y = fj.nn.relu(fj.conv2d(y, pw))
        return fj.conv2d(y, gw, padding="SAME", groups=4)
    rng = np.random.default_rng(5)
    dw = rng.standard_normal((3, 3, 1, 8)).astype(np.float32)
    pw = rng.standard_normal((1, 1, 8, 16)).astype(np.float32)
    gw = rng.standard_normal((3, 3, 4, 16)).astype(np.float32)
    fj.export(block, dw, pw, gw, fj.ShapeDtype(("B", 9, 10, 8), np.float32), path=tmp_path, name="block")
    compiled = fj.load_compiled(tmp_path / "block.json")
    for b in (1, 3):
        x = rng.standard_normal((b, 9, 10, 8)).astype(np.float32)
        np.testing.assert_allclose(compiled(dw, pw, gw, x), fj.function(block)(dw, pw, gw, x), rtol=1e-5, atol=1e-5)


def jax_leaves(tree):
    """The arrays of nested tuples and lists, in order."""
    if isinstance(tree, (tuple, list)):
        return [leaf for t in tree for leaf in jax_leaves(t)]
    return [tree]


def test_a_spectrum_compiles_ahead_of_time_with_its_complex_products(tmp_path):
    # The FFT's complex products are the library's cgemm, through the program's table as the
    # real ones are (the JIT's go through the pool's gemm).
    def spectrum(x):
        return fj.abs(fj.fft.rfft(x)) ** 2
    x = np.random.default_rng(0).standard_normal((64, 1024)).astype(np.float32)
    fj.export(spectrum, fj.ShapeDtype(("B", 1024), np.float32), path=tmp_path, name="spectrum")
    compiled = fj.load_compiled(tmp_path / "spectrum.json")
    for b in (1, 64):
        np.testing.assert_allclose(compiled(x[:b]), fj.function(spectrum)(x[:b]), rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(compiled(x), np.abs(np.fft.rfft(x.astype(np.float64))) ** 2, rtol=1e-3, atol=1e-2)


def test_a_kernel_run_at_two_shapes_is_defined_at_each(tmp_path):
    # The regression: a kernel rendered at its dims for its pooled loops is renamed once per
    # shape (fft_at0, fft_at1: the FFT's four steps run one kernel over [.., 8, 16] and
    # [.., 16, 8]); the C library linked the kernels by their plan names, so the second
    # shape's was an undefined symbol at load.
    z = (np.cos(np.arange(10 * 128)) + 1j * np.sin(np.arange(10 * 128) * 0.3)).astype(np.complex64).reshape(10, 128)
    fj.export(lambda a: fj.fft.fft(a), z, path=tmp_path)
    want = np.fft.fft(z.astype(np.complex128))
    np.testing.assert_allclose(fj.load_compiled(tmp_path)(z), want, rtol=0, atol=1e-4 * np.abs(want).max())
