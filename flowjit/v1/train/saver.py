"""``tf.train.Saver``: save and restore a session's variables in flowjit's checkpoint format.

A checkpoint is one safetensors file written by ``flowjit.checkpoint`` (atomic: a killed
save leaves the previous file intact), holding each variable under its graph name
(``W``, ``layer1/kernel``, ``W/Adam``) or under the keys of a ``var_list`` dict.
``save(sess, "dir/model.ckpt", global_step=100)`` writes ``dir/model.ckpt-100`` and
records it in ``dir/checkpoint`` (TensorFlow's text format, so ``latest_checkpoint`` and
``get_checkpoint_state`` find it); with ``max_to_keep`` the oldest files are deleted.
``restore`` checks the name, shape and dtype of every variable it loads before loading
anything; the file's other tensors (an optimizer's slots, when the var_list is the model's
weights) are left unread, as TensorFlow leaves them.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from flowjit import checkpoint
from flowjit.tracer.variables import Variable as FjVariable
from flowjit.v1 import errors
from flowjit.v1.variables import Variable, global_variables

_STATE_FILE = "checkpoint"


class Saver:
    """Saves and restores variables: ``saver.save(sess, path, global_step=step)``,
    ``saver.restore(sess, tf.train.latest_checkpoint(directory))``."""

    def __init__(self, var_list: Sequence[Variable] | dict[str, Variable] | None = None, reshape: bool = False,
                 sharded: bool = False, max_to_keep: int | None = 5, keep_checkpoint_every_n_hours: float = 10000.0,
                 name: str | None = None, restore_sequentially: bool = False, saver_def: Any = None,
                 builder: Any = None, defer_build: bool = False, allow_empty: bool = False,
                 write_version: Any = None, pad_step_number: bool = False, save_relative_paths: bool = False,
                 filename: str | None = None):
        if var_list is None:
            var_list = global_variables()
        if isinstance(var_list, dict):
            self._vars = dict(var_list)
        else:
            self._vars = {}
            for v in var_list:
                key = v.op.name
                if key in self._vars and self._vars[key] is not v:
                    raise ValueError(f"two variables are both named {key!r}; pass var_list as a dict to name them")
                self._vars[key] = v
        if not self._vars and not allow_empty:
            raise ValueError("No variables to save")
        self._max_to_keep = max_to_keep
        self._pad = pad_step_number
        self._last: list[str] = []

    @property
    def last_checkpoints(self) -> list[str]:
        return list(self._last)

    def save(self, sess: Any, save_path: str, global_step: Any = None, latest_filename: str | None = None,
             meta_graph_suffix: str = "meta", write_meta_graph: bool = True, write_state: bool = True,
             strip_default_attrs: bool = False) -> str:
        """Write the variables' values in ``sess`` to ``save_path`` (``-<global_step>`` appended);
        returns the path written."""
        path = str(save_path)
        if global_step is not None:
            step = int(sess.run(global_step) if not isinstance(global_step, (int, np.integer)) else global_step)
            path = f"{path}-{step:08d}" if self._pad else f"{path}-{step}"
        else:
            step = None
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        state = [FjVariable(sess.variable_value(v), name=key) for key, v in self._vars.items()]
        checkpoint.save(path, state, step=step)
        if path in self._last:
            self._last.remove(path)
        self._last.append(path)
        if self._max_to_keep and len(self._last) > self._max_to_keep:
            for old in self._last[:-self._max_to_keep]:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(old)
            self._last = self._last[-self._max_to_keep:]
        if write_state:
            update_checkpoint_state(os.path.dirname(path) or ".", path, self._last, latest_filename)
        return path

    def restore(self, sess: Any, save_path: str | None) -> None:
        """Load the variables' values from ``save_path`` into ``sess`` (all or nothing); the
        file's other tensors are ignored."""
        if save_path is None:
            raise ValueError("Can't load save_path when it is None (no checkpoint was found?)")
        if not os.path.exists(save_path):
            raise errors.NotFoundError(None, None, f"Restoring from checkpoint failed: {save_path!r} does not exist "
                                       "(tf.train.latest_checkpoint(directory) gives the newest one)")
        staged = {key: FjVariable(np.zeros(v.shape.as_list(), v.dtype.np), name=key) for key, v in self._vars.items()}
        try:
            # TensorFlow restores the var_list's variables and ignores the file's others.
            checkpoint.restore(save_path, list(staged.values()), partial=True)
        except checkpoint.CheckpointError as e:
            raise errors.NotFoundError(None, None, f"Restoring from checkpoint failed: {e}") from None
        for key, v in self._vars.items():
            sess.load_variable(v, staged[key].numpy())

    def recover_last_checkpoints(self, checkpoint_paths: Sequence[str]) -> None:
        self._last = [p for p in checkpoint_paths if os.path.exists(p)]


class CheckpointState:
    """What the ``checkpoint`` file of a directory records."""

    def __init__(self, model_checkpoint_path: str, all_model_checkpoint_paths: list[str]):
        self.model_checkpoint_path = model_checkpoint_path
        self.all_model_checkpoint_paths = all_model_checkpoint_paths


def update_checkpoint_state(directory: str, latest: str, all_paths: Sequence[str],
                            latest_filename: str | None = None) -> None:
    """Write ``directory/checkpoint`` naming ``latest`` and ``all_paths`` (atomically)."""
    def rel(p: str) -> str:
        return os.path.relpath(p, directory) if os.path.dirname(p) else p
    lines = [f'model_checkpoint_path: "{rel(latest)}"'] + [f'all_model_checkpoint_paths: "{rel(p)}"'
                                                           for p in all_paths]
    target = os.path.join(directory, latest_filename or _STATE_FILE)
    tmp = f"{target}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, target)


def get_checkpoint_state(checkpoint_dir: str, latest_filename: str | None = None) -> CheckpointState | None:
    """The directory's checkpoint state, or None when it has none."""
    path = os.path.join(checkpoint_dir, latest_filename or _STATE_FILE)
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return None
    latest = re.search(r'^model_checkpoint_path:\s*"(.*)"\s*$', text, re.M)
    if latest is None:
        return None

    def full(p: str) -> str:
        return p if os.path.isabs(p) else os.path.join(checkpoint_dir, p)
    return CheckpointState(full(latest.group(1)),
                           [full(p) for p in re.findall(r'^all_model_checkpoint_paths:\s*"(.*)"\s*$', text, re.M)])


def latest_checkpoint(checkpoint_dir: str, latest_filename: str | None = None) -> str | None:
    """The path of the newest checkpoint saved in ``checkpoint_dir``, or None."""
    state = get_checkpoint_state(checkpoint_dir, latest_filename)
    if state is None or not os.path.exists(state.model_checkpoint_path):
        return None
    return state.model_checkpoint_path


def checkpoint_exists(checkpoint_prefix: str) -> bool:
    return os.path.exists(checkpoint_prefix)
