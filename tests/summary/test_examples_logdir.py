"""The training examples with --logdir write what TensorBoard shows: the loss and step
time of every step, the test accuracy, and (mnist_mlp) the training step's graph."""

from __future__ import annotations

import importlib
import os
import sys

import pytest

pytest.importorskip("tensorboardX")
event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples")


def _example(name: str):
    if EXAMPLES not in sys.path:
        sys.path.insert(0, EXAMPLES)
    return importlib.import_module(name)


def _read(logdir):
    acc = event_accumulator.EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    acc.Reload()
    return acc


def test_mnist_mlp_logs_loss_accuracy_step_time_and_graph(tmp_path):
    pytest.importorskip("sklearn")
    result = _example("mnist_mlp").main(["--epochs", "2", "--checkpoint-dir", str(tmp_path / "ckpt"), "--quiet",
                                         "--logdir", str(tmp_path / "run")])
    acc = _read(tmp_path / "run")
    steps = 1437 // 64  # the training split's full batches per epoch
    assert [e.step for e in acc.Scalars("train/loss")] == list(range(2 * steps))
    assert len(acc.Scalars("train/step_time_ms")) == 2 * steps
    assert acc.Scalars("train/loss")[-1].value < acc.Scalars("train/loss")[0].value
    assert [(e.step, e.value) for e in acc.Scalars("test/accuracy")][-1] == (2 * steps, pytest.approx(
        result["test_accuracy"]))
    ops = {n.op for n in acc.Graph().node}
    assert {"matmul", "Variable", "Argument"} <= ops


def test_rnn_sequence_logs_and_prints_as_before(tmp_path, capsys):
    rnn = _example("rnn_sequence")
    rnn.main(["--steps", "12", "--logdir", str(tmp_path)])
    with_log = capsys.readouterr().out
    acc = _read(tmp_path)
    assert [e.step for e in acc.Scalars("train/loss")] == list(range(1, 13))
    assert [e.step for e in acc.Scalars("test/accuracy")] == [1, 2, 4, 6, 8, 10, 12]
    rnn.main(["--steps", "12"])
    assert capsys.readouterr().out == with_log  # --logdir changes nothing on the terminal


def test_cnn_digits_logs(tmp_path):
    pytest.importorskip("sklearn")
    _example("cnn_digits").main(["--epochs", "1", "--quiet", "--logdir", str(tmp_path)])
    acc = _read(tmp_path)
    assert sorted(acc.Tags()["scalars"]) == ["test/accuracy", "train/loss", "train/step_time_ms"]
    assert len(acc.Scalars("train/loss")) == 1437 // 64
