"""fj.checkpoint: safetensors round trips, optimizer state, mismatch and corruption errors,
the manager, interoperability with the ``safetensors`` package, and saves killed with
SIGKILL at random moments that must never cost the latest complete checkpoint."""

from __future__ import annotations

import json
import os
import random
import re
import select
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy as st

import flowjit as fj
from flowjit import checkpoint, optim
from flowjit.checkpoint import CheckpointError, CheckpointManager
from flowjit.checkpoint import safetensors_format as fmt
from flowjit.ir.errors import FlowjitError

REPO_ROOT = Path(__file__).resolve().parents[2]

DTYPES = [np.float32, np.float64, np.float16, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
          np.uint32, np.uint64, np.bool_, np.complex64]
SHAPES = [(), (0,), (5,), (2, 3, 4)]


def sample(dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    if np.issubdtype(dtype, np.complexfloating):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return (rng.standard_normal(shape) * 100).astype(dtype)


def zeros_like_vars(variables):
    return [fj.Variable(np.zeros(v.shape, v.dtype.np), name=v.name) for v in variables]


# ---- round trips --------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_round_trip_every_dtype_and_shape(tmp_path, dtype):
    src = [fj.Variable(sample(dtype, shape, seed=i), name=f"v{i}") for i, shape in enumerate(SHAPES)]
    path = checkpoint.save(tmp_path / "a.safetensors", src, step=7, metadata={"note": "hi", "lr": [0.1, 2]})
    assert path == tmp_path / "a.safetensors"

    dst = zeros_like_vars(src)
    meta = checkpoint.restore(path, dst)
    assert meta == {"step": 7, "flowjit_version": fj.__version__, "metadata": {"note": "hi", "lr": [0.1, 2]}}
    for a, b in zip(src, dst, strict=True):
        assert b.numpy().dtype == a.numpy().dtype and b.shape == a.shape
        np.testing.assert_array_equal(b.numpy(), a.numpy())

    arrays, meta2 = checkpoint.load(path)
    assert meta2 == meta and list(arrays) == sorted(v.name for v in src)
    for v in src:
        assert arrays[v.name].dtype == v.dtype.np and arrays[v.name].shape == v.shape
        np.testing.assert_array_equal(arrays[v.name], v.numpy())


def test_contents_reads_the_header_alone_and_load_reads_only_the_names_asked(tmp_path):
    w = fj.Variable(np.arange(6, dtype=np.float32).reshape(2, 3), name="w")
    b = fj.Variable(np.ones(4, np.float64), name="b")
    path = checkpoint.save(tmp_path / "c.safetensors", [w, b])
    assert checkpoint.contents(path) == {"b": ((4,), np.dtype(np.float64)), "w": ((2, 3), np.dtype(np.float32))}
    arrays, _ = checkpoint.load(path, names=["w"])
    assert list(arrays) == ["w"]
    np.testing.assert_array_equal(arrays["w"], w.numpy())
    with pytest.raises(KeyError, match="has no tensor named 'x'"):
        checkpoint.load(path, names=["w", "x"])


def test_complex128_state_is_refused_saying_what_to_do(tmp_path):
    with pytest.raises(CheckpointError, match=r"complex128 cannot be checkpointed.*no complex128 code: keep"):
        checkpoint.save(tmp_path / "c.safetensors", [fj.Variable(np.ones(2, np.complex128), name="z")])
    assert not (tmp_path / "c.safetensors").exists()


def test_file_layout_follows_the_spec(tmp_path):
    vs = [fj.Variable(np.arange(3, dtype=np.float16), name="b"), fj.Variable(np.ones((2, 2)), name="a"),
          fj.Variable(np.array(True), name="c")]
    path = checkpoint.save(tmp_path / "x.safetensors", vs, step=3)
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    assert (8 + n) % 8 == 0  # the data starts aligned
    text = raw[8:8 + n].decode()
    assert text.startswith("{") and text.rstrip(" ") == text.rstrip()
    header = json.loads(text)
    assert json.loads(header["__metadata__"]["flowjit"]) == {"version": fj.__version__, "step": 3, "metadata": {}}
    names = [k for k in header if k != "__metadata__"]
    assert names == ["a", "b", "c"]
    assert header["a"] == {"dtype": "F64", "shape": [2, 2], "data_offsets": [0, 32]}
    assert header["b"] == {"dtype": "F16", "shape": [3], "data_offsets": [32, 38]}
    assert header["c"] == {"dtype": "BOOL", "shape": [], "data_offsets": [38, 39]}
    assert len(raw) == 8 + n + 39
    assert raw[8 + n:8 + n + 32] == np.ones((2, 2), "<f8").tobytes()


def test_interoperates_with_the_safetensors_package(tmp_path):
    src = [fj.Variable(sample(d, (3, 2), seed=i), name=f"t{i}") for i, d in enumerate(DTYPES)]
    src.append(fj.Variable(np.float32(2.5), name="scalar"))
    ours = checkpoint.save(tmp_path / "ours.safetensors", src, step=1)
    theirs_read = st.load_file(str(ours))
    assert sorted(theirs_read) == sorted(v.name for v in src)
    for v in src:
        assert theirs_read[v.name].dtype == v.dtype.np
        np.testing.assert_array_equal(theirs_read[v.name], v.numpy())

    theirs = tmp_path / "theirs.safetensors"
    st.save_file({v.name: v.numpy() for v in src}, str(theirs), metadata={"origin": "safetensors"})
    with pytest.warns(checkpoint.CheckpointWarning, match="no checksums"):
        arrays, meta = checkpoint.load(theirs)
    assert meta == {"step": None, "flowjit_version": None, "metadata": {"origin": "safetensors"}}
    dst = zeros_like_vars(src)
    with pytest.warns(checkpoint.CheckpointWarning, match="no checksums"):
        checkpoint.restore(theirs, dst)
    for a, b in zip(src, dst, strict=True):
        np.testing.assert_array_equal(b.numpy(), a.numpy())
        np.testing.assert_array_equal(arrays[a.name], a.numpy())


def strided_views():
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    return {"transposed": base.T, "every_other": base[:, ::2], "reversed": base[::-1],
            "column": base[:, 3], "transposed_f16": base.astype(np.float16).T,
            "scalar_of_view": base.T[2, 1, ...], "bool_t": (base % 3 == 0).T}


def test_non_contiguous_arrays_round_trip(tmp_path):
    # The library copies nbytes from the data pointer: a transposed view written as is
    # comes back in its memory order, not its element order.
    views = strided_views()
    assert not views["transposed"].flags.c_contiguous and views["scalar_of_view"].ndim == 0
    path = tmp_path / "views.safetensors"
    fmt.write_file(path, views)
    for name, got in st.load_file(str(path)).items():
        assert got.shape == views[name].shape and got.dtype == views[name].dtype
        np.testing.assert_array_equal(got, views[name], err_msg=name)
    arrays, _ = checkpoint.load(path)
    for name, view in views.items():
        np.testing.assert_array_equal(arrays[name], view, err_msg=name)

    # The same through Variables holding views, save and restore.
    src = [fj.Variable(v, name=k) for k, v in views.items()]
    dst = zeros_like_vars(src)
    checkpoint.restore(checkpoint.save(tmp_path / "vars.safetensors", src), dst)
    for v in dst:
        np.testing.assert_array_equal(v.numpy(), views[v.name], err_msg=v.name)


@pytest.mark.parametrize("step", [1, 2], ids=["same metadata, other shape", "other metadata"])
def test_a_file_replaced_between_header_and_data_is_an_error(tmp_path, step):
    path = good_file(tmp_path)
    with open(path, "rb") as f:
        header = fmt.read_header(f, os.fstat(f.fileno()).st_size, str(path))
    checkpoint.save(path, [fj.Variable(np.arange(6, dtype=np.float32), name="a"),
                           fj.Variable(np.int64(5), name="b")], step=step)
    with pytest.raises(CheckpointError, match="changed while it was being read"):
        fmt.read_tensors(path, header, ["a", "b"], str(path))


# ---- names and optimizer state ------------------------------------------------------------

def adam_state():
    W = fj.Variable(np.arange(6, dtype=np.float32).reshape(2, 3), name="W")
    b = fj.Variable(np.zeros(3, np.float32), name="b")
    opt = optim.Adam(0.01)
    return W, b, opt


def test_optimizer_slots_and_step_counter_round_trip(tmp_path):
    W, b, opt = adam_state()
    for k in range(2):
        opt.apply_gradients([(np.full((2, 3), k + 1.0, np.float32), W), (np.ones(3, np.float32), b)])
    assert int(opt.iterations.numpy()) == 2 and sorted(opt.slots()) == ["W/m", "W/v", "b/m", "b/v"]
    path = checkpoint.save(tmp_path / "opt.safetensors", {"model": [W, b], "opt": opt}, step=2)
    arrays, _ = checkpoint.load(path)
    assert list(arrays) == ["model/W", "model/b", "opt/W/m", "opt/W/v", "opt/b/m", "opt/b/v", "opt/iterations"]

    # A fresh optimizer has no slots until its first step; restore creates them.
    W2, b2, opt2 = adam_state()
    W2.assign(np.zeros((2, 3), np.float32))
    meta = checkpoint.restore(path, {"model": [W2, b2], "opt": opt2})
    assert meta["step"] == 2 and int(opt2.iterations.numpy()) == 2
    for name, slot in opt.slots().items():
        np.testing.assert_array_equal(opt2.slots()[name].numpy(), slot.numpy())
    np.testing.assert_array_equal(W2.numpy(), W.numpy())

    # Training goes on exactly as if it had never stopped (the bias correction uses the step).
    g = [(np.full((2, 3), 0.5, np.float32), 0), (np.full(3, -2.0, np.float32), 1)]
    opt.apply_gradients([(x, [W, b][i]) for x, i in g])
    opt2.apply_gradients([(x, [W2, b2][i]) for x, i in g])
    np.testing.assert_array_equal(W2.numpy(), W.numpy())
    np.testing.assert_array_equal(b2.numpy(), b.numpy())

    # Restoring into an optimizer that already has its slots assigns them in place.
    slots_before = dict(opt2.slots())
    checkpoint.restore(path, {"model": [W2, b2], "opt": opt2})
    assert all(opt2.slots()[k] is v for k, v in slots_before.items())
    assert int(opt2.iterations.numpy()) == 2


def test_names_come_from_variable_names_and_dict_keys(tmp_path):
    W, b, opt = adam_state()
    opt.apply_gradients([(np.ones((2, 3), np.float32), W)])
    state = {"enc": {"layer": (W,)}, "dec": [b], "train": {"adam": opt}}
    arrays, _ = checkpoint.load(checkpoint.save(tmp_path / "n.safetensors", state))
    assert list(arrays) == ["dec/b", "enc/layer/W", "train/adam/W/m", "train/adam/W/v", "train/adam/iterations"]
    # A Variable reached twice under the same name is saved once.
    arrays, _ = checkpoint.load(checkpoint.save(tmp_path / "m.safetensors", [W, W, b]))
    assert list(arrays) == ["W", "b"]


def test_duplicate_names_are_an_error_naming_them(tmp_path):
    a, a2 = fj.Variable(np.zeros(2), name="w"), fj.Variable(np.ones(2), name="w")
    with pytest.raises(CheckpointError, match=r"'w'") as err:
        checkpoint.save(tmp_path / "d.safetensors", [a, a2, fj.Variable(1.0, name="ok")])
    assert "'ok'" not in str(err.value)
    with pytest.raises(CheckpointError, match=r"'iterations'"):
        checkpoint.save(tmp_path / "d.safetensors", [optim.SGD(0.1), optim.Adam(0.1)])
    assert not any(tmp_path.iterdir())  # nothing written, not even a temporary


def test_what_cannot_be_saved_is_a_clear_error(tmp_path):
    v = fj.Variable(np.zeros(2), name="v")
    with pytest.raises(CheckpointError, match="ndarray under 'x/'"):
        checkpoint.save(tmp_path / "e.safetensors", {"x": [v, np.zeros(3)]})
    with pytest.raises(CheckpointError, match="non-empty strings"):
        checkpoint.save(tmp_path / "e.safetensors", {1: v})
    with pytest.raises(CheckpointError, match="JSON-serializable"):
        checkpoint.save(tmp_path / "e.safetensors", v, metadata={"f": object()})
    with pytest.raises(CheckpointError, match="reserves"):
        checkpoint.save(tmp_path / "e.safetensors", fj.Variable(1.0, name="__metadata__"))
    assert not any(tmp_path.iterdir())
    assert issubclass(CheckpointError, FlowjitError)


def test_inside_a_trace_is_an_error(tmp_path):
    v = fj.Variable(np.zeros(2, np.float32), name="v")
    path = checkpoint.save(tmp_path / "t.safetensors", v)

    @fj.function
    def saves(x):
        checkpoint.save(tmp_path / "u.safetensors", v)
        return x

    @fj.function
    def restores(x):
        checkpoint.restore(path, v)
        return x

    for f in (saves, restores):
        with pytest.raises(CheckpointError, match="inside a traced function"):
            f(np.ones(2, np.float32))


# ---- mismatches and damaged files --------------------------------------------------------

def test_mismatch_lists_every_problem_and_restores_nothing(tmp_path):
    saved = [fj.Variable(np.full(3, 9.0, np.float32), name="same"), fj.Variable(np.ones((2, 2)), name="shape"),
             fj.Variable(np.int32(4), name="dtype"), fj.Variable(np.zeros(1), name="extra1"),
             fj.Variable(np.zeros(1), name="extra2")]
    path = checkpoint.save(tmp_path / "m.safetensors", saved)
    state = [fj.Variable(np.zeros(3, np.float32), name="same"), fj.Variable(np.zeros(4), name="shape"),
             fj.Variable(np.int64(0), name="dtype"), fj.Variable(np.zeros(2), name="missing")]
    before = [v.numpy() for v in state]
    with pytest.raises(CheckpointError) as err:
        checkpoint.restore(path, state)
    msg = str(err.value)
    assert "5 problems" in msg and "nothing was restored" in msg and str(path) in msg
    for line in ["missing in file: missing", "extra in file: extra1", "extra in file: extra2",
                 "shape of shape: file (2, 2) vs state (4,)", "dtype of dtype: file int32 vs state int64"]:
        assert line in msg
    assert "same" not in msg.replace("shape of shape", "")
    for v, b in zip(state, before, strict=True):  # "same" matched, yet it was not assigned either
        np.testing.assert_array_equal(v.numpy(), b)


def test_a_partial_restore_leaves_the_files_other_tensors_unread(tmp_path):
    saved = [fj.Variable(np.full(3, 9.0, np.float32), name="w"), fj.Variable(np.ones(2), name="w/Adam"),
             fj.Variable(np.zeros(1), name="other")]
    path = checkpoint.save(tmp_path / "p.safetensors", saved, step=7)
    w = fj.Variable(np.zeros(3, np.float32), name="w")
    assert checkpoint.restore(path, [w], partial=True)["step"] == 7
    np.testing.assert_array_equal(w.numpy(), [9.0, 9.0, 9.0])
    # What the state names must still be in the file, at its shape and dtype.
    state = [fj.Variable(np.zeros(3, np.float32), name="w"), fj.Variable(np.zeros(4), name="missing"),
             fj.Variable(np.zeros(5), name="other")]
    with pytest.raises(CheckpointError) as err:
        checkpoint.restore(path, state, partial=True)
    assert "2 problems" in str(err.value) and "missing in file: missing" in str(err.value)
    assert "shape of other: file (1,) vs state (5,)" in str(err.value) and "extra in file" not in str(err.value)
    np.testing.assert_array_equal(state[0].numpy(), np.zeros(3))


def test_slot_for_a_variable_not_in_the_state_is_extra(tmp_path):
    W, b, opt = adam_state()
    opt.apply_gradients([(np.ones((2, 3), np.float32), W)])
    path = checkpoint.save(tmp_path / "s.safetensors", {"m": [W, b], "o": opt})
    _, b2, opt2 = adam_state()
    with pytest.raises(CheckpointError) as err:
        checkpoint.restore(path, {"m": [b2], "o": opt2})
    assert "missing in file" not in str(err.value)
    for name in ["m/W", "o/W/m", "o/W/v"]:
        assert f"extra in file: {name}\n" in str(err.value) + "\n"
    assert opt2.slots() == {} and int(opt2.iterations.numpy()) == 0


def test_slots_of_another_optimizer_are_extra(tmp_path):
    W = fj.Variable(np.ones(3, np.float32), name="W")
    momentum = optim.Momentum(0.1)
    momentum.apply_gradients([(np.ones(3, np.float32), W)])
    path = checkpoint.save(tmp_path / "m.safetensors", {"m": [W], "o": momentum})
    adam = optim.Adam(0.1)
    with pytest.raises(CheckpointError, match="extra in file: o/W/velocity"):
        checkpoint.restore(path, {"m": [W], "o": adam})
    assert adam.slots() == {}


def good_file(tmp_path):
    return checkpoint.save(tmp_path / "good.safetensors",
                           [fj.Variable(np.arange(4, dtype=np.float32), name="a"),
                            fj.Variable(np.int64(5), name="b")], step=1)


def header_of(raw):
    n = int.from_bytes(raw[:8], "little")
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def with_header(header, data):
    text = json.dumps(header).encode()
    return len(text).to_bytes(8, "little") + text + data


def edit_header(edit):
    def damage(raw):
        header, data = header_of(raw)
        edit(header)
        return with_header(header, data)
    return damage


CORRUPTIONS = {
    "empty": (lambda raw: b"", "fewer than the 8"),
    "five bytes": (lambda raw: raw[:5], "fewer than the 8"),
    "header length past the end": (lambda raw: raw[:40], "runs past the end"),
    "huge header length": (lambda raw: (2 ** 62).to_bytes(8, "little") + raw[8:], "out of range"),
    "bad json": (lambda raw: raw[:8] + b"{not json" + raw[17:], "not valid JSON"),
    "not an object": (lambda raw: with_header([1, 2], b""), "not a JSON object"),
    "truncated data": (lambda raw: raw[:-3], "truncated"),
    "trailing bytes": (lambda raw: raw + b"xx", "unexpected bytes"),
    "bad dtype": (edit_header(lambda h: h["a"].update(dtype="F8")), "unsupported dtype"),
    "bad shape": (edit_header(lambda h: h["a"].update(shape=[-4])), "invalid shape"),
    "offsets disagree with shape": (edit_header(lambda h: h["a"].update(shape=[5])), "needs 20 bytes"),
    "overlapping offsets": (edit_header(lambda h: h["b"].update(data_offsets=[8, 16])), "overlapping"),
    "bad metadata": (edit_header(lambda h: h.update(__metadata__={"flowjit": 3})), "map of strings"),
    "bad flowjit metadata": (edit_header(lambda h: h.update(__metadata__={"flowjit": "{"})), "metadata"),
}


@pytest.mark.parametrize("damage,expect", CORRUPTIONS.values(), ids=CORRUPTIONS.keys())
def test_damaged_files_are_checkpoint_errors(tmp_path, damage, expect):
    path = good_file(tmp_path)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(checkpoint.CorruptCheckpointError, match=expect):
        checkpoint.load(path)
    state = [fj.Variable(np.full(4, -1.0, np.float32), name="a"), fj.Variable(np.int64(-1), name="b")]
    with pytest.raises(checkpoint.CorruptCheckpointError, match=expect):
        checkpoint.restore(path, state)
    np.testing.assert_array_equal(state[0].numpy(), np.full(4, -1.0, np.float32))
    assert int(state[1].numpy()) == -1


# ---- checksums ----------------------------------------------------------------------------

def checksummed_state(seed=0):
    """Variables of several dtypes and shapes (a scalar, a bool, an empty one among them)."""
    return [fj.Variable(sample(np.float32, (2, 3), seed), name="model/W"),
            fj.Variable(sample(np.int64, (), seed), name="step"),
            fj.Variable(sample(np.bool_, (5,), seed), name="mask"),
            fj.Variable(np.zeros(0, np.float16), name="empty"),
            fj.Variable(sample(np.complex64, (2,), seed), name="z")]


def test_each_tensor_has_a_crc32_of_its_bytes_in_the_metadata(tmp_path):
    import zlib
    src = checksummed_state()
    path = checkpoint.save(tmp_path / "c.safetensors", src, step=1)
    header, _ = header_of(path.read_bytes())
    sums = json.loads(header["__metadata__"]["flowjit.checksums"])
    assert sums == {"algorithm": "crc32", "tensors": {
        v.name: f"{zlib.crc32(np.asarray(v.numpy(), order='C').tobytes()):08x}" for v in src}}
    assert sorted(st.load_file(str(path))) == sorted(v.name for v in src)  # other readers still read it


def test_a_flipped_byte_anywhere_in_the_data_is_caught_naming_the_tensor(tmp_path):
    src = checksummed_state()
    path = checkpoint.save(tmp_path / "c.safetensors", src, step=1)
    raw = path.read_bytes()
    header, data = header_of(raw)
    start = len(raw) - len(data)
    owner = {}  # byte of the data -> the tensor it belongs to
    for name, info in header.items():
        if name != "__metadata__":
            owner.update((i, name) for i in range(*info["data_offsets"]))
    assert sorted(owner) == list(range(len(data)))
    for i, name in owner.items():
        damaged = bytearray(raw)
        damaged[start + i] ^= 0xFF
        path.write_bytes(bytes(damaged))
        state = zeros_like_vars(src)
        expect = rf"{re.escape(str(path))}: tensor '{name}' is corrupt: its data's CRC-32 is [0-9a-f]{{8}}, "
        with pytest.raises(checkpoint.CorruptCheckpointError, match=expect + "the header records [0-9a-f]{8}"):
            checkpoint.restore(path, state)
        assert all(not v.numpy().any() for v in state), f"byte {i}: assigned before the check"
        with pytest.raises(checkpoint.CorruptCheckpointError, match=f"tensor '{name}'"):
            checkpoint.load(path)
    path.write_bytes(raw)
    state = zeros_like_vars(src)
    checkpoint.restore(path, state)
    for a, b in zip(src, state, strict=True):
        np.testing.assert_array_equal(b.numpy(), a.numpy())


def test_a_file_written_before_checksums_restores_with_a_warning(tmp_path):
    src = checksummed_state()
    old = tmp_path / "old.safetensors"
    # What save wrote before checksums: the same library call, only the flowjit key.
    st.save_file({v.name: v.numpy() for v in src}, str(old),
                 metadata={"flowjit": json.dumps({"version": "0.1.0", "step": 4, "metadata": {}})})
    state = zeros_like_vars(src)
    expect = rf"{re.escape(str(old))} has no checksums .*cannot be checked"
    with pytest.warns(checkpoint.CheckpointWarning, match=expect):
        assert checkpoint.restore(old, state)["step"] == 4
    for a, b in zip(src, state, strict=True):
        np.testing.assert_array_equal(b.numpy(), a.numpy())
    with pytest.warns(checkpoint.CheckpointWarning, match="no checksums"):
        arrays, _ = checkpoint.load(old)
    assert sorted(arrays) == sorted(v.name for v in src)


CHECKSUM_DAMAGE = {
    "not JSON": ("{", "checksums .* not valid JSON"),
    "another algorithm": (json.dumps({"algorithm": "sha1", "tensors": {}}), "algorithm 'sha1'"),
    "a tensor without one": (json.dumps({"algorithm": "crc32", "tensors": {"a": "00000000"}}),
                             "no checksum for tensor 'b'"),
    "one for no tensor": (json.dumps({"algorithm": "crc32", "tensors": {"a": "0", "b": "0", "c": "0"}}),
                          "checksum for 'c', which is not a tensor"),
    "not hex": (json.dumps({"algorithm": "crc32", "tensors": {"a": "xyz", "b": "0"}}), "checksum of 'a'"),
}


@pytest.mark.parametrize("value,expect", CHECKSUM_DAMAGE.values(), ids=CHECKSUM_DAMAGE.keys())
def test_damaged_checksums_are_corrupt_files(tmp_path, value, expect):
    path = good_file(tmp_path)
    path.write_bytes(edit_header(lambda h: h["__metadata__"].update({"flowjit.checksums": value}))(
        path.read_bytes()))
    for read in (checkpoint.load, lambda p: checkpoint.restore(p, [fj.Variable(np.zeros(4, np.float32), name="a"),
                                                                   fj.Variable(np.int64(0), name="b")])):
        with pytest.raises(checkpoint.CorruptCheckpointError, match=expect):
            read(path)


def test_a_failed_save_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    path = good_file(tmp_path)
    old = path.read_bytes()

    def broken_write(path, tensors, metadata=None):
        Path(path).write_bytes(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(fmt, "write_file", broken_write)
    with pytest.raises(OSError, match="disk full"):
        checkpoint.save(path, fj.Variable(np.zeros(4, np.float32), name="a"))
    assert path.read_bytes() == old
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_save_syncs_the_file_before_the_rename_and_the_directory_after(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append("fsync dir" if os.path.isdir(f"/proc/self/fd/{fd}") else "fsync file")
        real_fsync(fd)

    def replace(src, dst):
        assert Path(src).parent.name.startswith(".x.safetensors.tmp-")
        events.append("replace")
        real_replace(src, dst)

    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc to tell files from directories")
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    checkpoint.save(tmp_path / "x.safetensors", fj.Variable(np.zeros(3), name="a"))
    assert events == ["fsync file", "replace", "fsync dir"]


def test_a_checkpoint_has_a_plain_files_mode(tmp_path):
    # The library creates its file 0600; a checkpoint is readable as any file the user writes.
    plain = tmp_path / "plain"
    plain.write_bytes(b"")
    path = checkpoint.save(tmp_path / "m.safetensors", fj.Variable(np.zeros(2), name="a"))
    assert stat.S_IMODE(path.stat().st_mode) == stat.S_IMODE(plain.stat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.safetensors", "plain"]


# ---- the manager -------------------------------------------------------------------------

def test_manager_keeps_the_last_n_by_step_and_restores_the_latest(tmp_path):
    v = fj.Variable(np.zeros(4, np.float32), name="v")
    manager = CheckpointManager(tmp_path / "run", max_to_keep=3)
    assert manager.checkpoints == [] and manager.latest is None
    assert manager.restore(v) is None and not (tmp_path / "run").exists()
    for step in [1, 2, 3, 9, 10, 11]:
        v.assign(np.full(4, step, np.float32))
        assert manager.save(v, step, metadata={"loss": 1.0 / step}) == tmp_path / "run" / f"ckpt-{step}.safetensors"
    # 10 and 11 sort after 9 as numbers, not as text.
    assert [p.name for p in manager.checkpoints] == ["ckpt-9.safetensors", "ckpt-10.safetensors",
                                                     "ckpt-11.safetensors"]
    assert manager.latest.name == "ckpt-11.safetensors"

    # The step number decides, not the modification time.
    os.utime(manager.path_for(9), (time.time() + 100, time.time() + 100))
    assert manager.latest.name == "ckpt-11.safetensors"

    v.assign(np.zeros(4, np.float32))
    meta = CheckpointManager(tmp_path / "run", max_to_keep=3).restore(v)
    assert meta == {"step": 11, "flowjit_version": fj.__version__, "metadata": {"loss": 1.0 / 11},
                    "path": manager.path_for(11)}
    np.testing.assert_array_equal(v.numpy(), np.full(4, 11, np.float32))
    assert manager.restore(v, manager.checkpoints[0])["step"] == 9
    np.testing.assert_array_equal(v.numpy(), np.full(4, 9, np.float32))


def test_manager_ignores_other_files_and_cleans_stale_temporaries(tmp_path):
    v = fj.Variable(np.zeros(2), name="v")
    manager = CheckpointManager(tmp_path, max_to_keep=2, prefix="model")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    host = socket.gethostname()
    stale = tmp_path / f".model-5.safetensors.tmp-{host}-{dead_pid}-0123abcd"
    live = tmp_path / f".model-6.safetensors.tmp-{host}-{os.getpid()}-0123abcd"
    other_host = tmp_path / f".model-7.safetensors.tmp-elsewhere-{dead_pid}-0123abcd"
    unrelated = [tmp_path / n for n in ["model-x.safetensors", "ckpt-3.safetensors", "model-3.safetensors.bak",
                                        "notes.txt"]]
    # A save stages in a directory; the library leaves its own temporary inside it.
    stale_dir = tmp_path / f".model-8.safetensors.tmp-{host}-{dead_pid}-4567cdef"
    stale_dir.mkdir()
    (stale_dir / ".tmpAbC123").write_bytes(b"partial")
    for p in [stale, live, other_host, *unrelated]:
        p.write_bytes(b"junk")
    assert manager.checkpoints == [] and manager.restore(v) is None

    manager.save(v, 4)
    assert manager.checkpoints == [tmp_path / "model-4.safetensors"]
    assert not stale.exists() and not stale_dir.exists() and live.exists() and other_host.exists()
    assert all(p.exists() for p in unrelated)


def test_manager_with_optimizer_resumes_before_the_first_step(tmp_path):
    W, b, opt = adam_state()
    opt.apply_gradients([(np.ones(3, np.float32), b)])
    manager = CheckpointManager(tmp_path, max_to_keep=1)
    manager.save({"model": [W, b], "opt": opt}, step=int(opt.iterations.numpy()))
    W2, b2, opt2 = adam_state()
    b2.assign(np.full(3, 7.0, np.float32))
    assert manager.restore({"model": [W2, b2], "opt": opt2})["step"] == 1
    np.testing.assert_array_equal(b2.numpy(), b.numpy())
    assert sorted(opt2.slots()) == ["b/m", "b/v"]  # W never had a gradient, so no slots


def damaged_run(tmp_path):
    """A manager with the checkpoints of steps 1, 2 and 3 of one Variable (value: the step)."""
    v = fj.Variable(np.zeros(4, np.float32), name="v")
    manager = CheckpointManager(tmp_path, max_to_keep=5)
    for step in (1, 2, 3):
        v.assign(np.full(4, step, np.float32))
        manager.save(v, step)
    v.assign(np.zeros(4, np.float32))
    return manager, v


def truncate(path):
    path.write_bytes(path.read_bytes()[:-5])


def flip_last_byte(path):
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0xFF
    path.write_bytes(bytes(raw))


def test_manager_restores_the_newest_checkpoint_that_verifies_warning_for_each_skipped(tmp_path):
    manager, v = damaged_run(tmp_path)
    truncate(manager.path_for(3))
    with pytest.warns(checkpoint.CheckpointWarning) as warned:
        meta = manager.restore(v)
    assert meta["step"] == 2 and meta["path"] == manager.path_for(2)
    np.testing.assert_array_equal(v.numpy(), np.full(4, 2, np.float32))
    assert len(warned) == 1
    assert re.search(rf"skipped {re.escape(str(manager.path_for(3)))}: .*truncated.*; restoring "
                     rf"{re.escape(str(manager.path_for(2)))}", str(warned[0].message))

    flip_last_byte(manager.path_for(2))
    with pytest.warns(checkpoint.CheckpointWarning) as warned:
        assert manager.restore(v)["step"] == 1
    assert [str(w.message).split(":")[0] for w in warned] == [
        f"skipped {manager.path_for(3)}", f"skipped {manager.path_for(2)}"]
    assert "tensor 'v' is corrupt" in str(warned[1].message)
    np.testing.assert_array_equal(v.numpy(), np.full(4, 1, np.float32))


def test_manager_raises_only_when_no_checkpoint_verifies_listing_them(tmp_path):
    manager, v = damaged_run(tmp_path)
    truncate(manager.path_for(3))
    flip_last_byte(manager.path_for(2))
    manager.path_for(1).write_bytes(b"")
    with pytest.raises(checkpoint.CorruptCheckpointError) as err:
        manager.restore(v)
    msg = str(err.value)
    assert msg.startswith(f"none of the 3 checkpoints in {tmp_path} verifies; nothing was restored:")
    lines = msg.splitlines()[1:-1]
    assert "start from scratch" in msg.splitlines()[-1]
    assert [line.split(": ")[0].strip() for line in lines] == [str(manager.path_for(s)) for s in (3, 2, 1)]
    assert "truncated" in lines[0] and "tensor 'v' is corrupt" in lines[1] and "fewer than the 8" in lines[2]
    np.testing.assert_array_equal(v.numpy(), np.zeros(4, np.float32))


def test_manager_does_not_fall_back_past_a_state_mismatch_or_an_explicit_path(tmp_path):
    manager, v = damaged_run(tmp_path)
    # The newest file is sound but does not match the state: the program's problem, not damage.
    with pytest.raises(CheckpointError, match="does not match the state") as err:
        manager.restore(fj.Variable(np.zeros(3, np.float32), name="v"))
    assert not isinstance(err.value, checkpoint.CorruptCheckpointError)
    truncate(manager.path_for(3))
    with pytest.raises(checkpoint.CorruptCheckpointError, match="truncated"):
        manager.restore(v, manager.path_for(3))  # the file asked for, or an error


def test_mnist_example_resumes_from_the_previous_checkpoint_when_the_newest_is_truncated(tmp_path, capsys):
    pytest.importorskip("sklearn")
    examples = str(REPO_ROOT / "examples")
    if examples not in sys.path:
        sys.path.insert(0, examples)  # as when run as a script: digits.py sits beside it
    import mnist_mlp
    ckpt = tmp_path / "ckpt"
    mnist_mlp.main(["--epochs", "2", "--checkpoint-dir", str(ckpt), "--quiet"])
    truncate(ckpt / "ckpt-2.safetensors")
    capsys.readouterr()
    with pytest.warns(checkpoint.CheckpointWarning, match=r"skipped .*ckpt-2.safetensors: .*truncated"):
        mnist_mlp.main(["--epochs", "2", "--checkpoint-dir", str(ckpt), "--quiet", "--resume"])
    out = capsys.readouterr().out
    assert f"resumed from {ckpt / 'ckpt-1.safetensors'} (epoch 1, step 22)" in out
    assert "epoch   2" in out and "epoch   1 " not in out


# ---- killed saves ------------------------------------------------------------------------

CHILD = """
import sys
import numpy as np
import flowjit as fj
from flowjit import checkpoint

big = fj.Variable(np.zeros(10_000_000, np.float32), name="big")  # 40 MB
counter = fj.Variable(np.int64(0), name="counter")
state = {"model": [big, counter]}
manager = checkpoint.CheckpointManager(sys.argv[1], max_to_keep=2)
meta = manager.restore(state)
i = 0 if meta is None else meta["step"] + 1
while True:
    big.assign(np.full(big.shape, i, np.float32))
    counter.assign(i)
    manager.save(state, i, metadata={"i": i})
    print(i, flush=True)
    i += 1
"""


def read_line(proc, timeout):
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        return None
    return proc.stdout.readline()


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_saves_killed_at_random_moments_never_lose_the_latest_checkpoint(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    rng = random.Random()
    manager = CheckpointManager(tmp_path, max_to_keep=2)
    big = fj.Variable(np.zeros(10_000_000, np.float32), name="big")
    counter = fj.Variable(np.int64(-1), name="counter")
    last_step = -1
    for round_ in range(5):
        proc = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env, text=True)
        try:
            first = read_line(proc, timeout=60)
            if not first:
                proc.kill()
                pytest.fail(f"round {round_}: the saving process reported no save:\n{proc.communicate()[1]}")
            delay = rng.uniform(0.05, 0.4)
            time.sleep(delay)
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            proc.stdout.close()
            proc.stderr.close()
        context = f"round {round_}, killed {delay:.3f}s after its first save, files {os.listdir(tmp_path)}"
        meta = manager.restore({"model": [big, counter]})
        assert meta is not None, context
        step = meta["step"]
        # The child resumes from the latest checkpoint, so steps only grow across rounds.
        assert step >= int(first) > last_step, context
        assert meta["metadata"] == {"i": step}, context
        assert int(counter.numpy()) == step, context
        values = big.numpy()
        assert values.min() == values.max() == step, context
        last_step = step

    # Temporaries of the killed saves never count as checkpoints and go with the next save.
    assert all(p.name.endswith(".safetensors") and not p.name.startswith(".") for p in manager.checkpoints)
    manager.save({"model": [big, counter]}, last_step + 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in manager.checkpoints)
    assert len(manager.checkpoints) == 2
