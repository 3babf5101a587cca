"""Reading checkpoints without a Saver: ``tf.train.NewCheckpointReader`` (``load_checkpoint``),
``list_variables``, ``load_variable``, and ``init_from_checkpoint``, which makes chosen
variables' initializers load their values from a checkpoint (fine-tuning a pretrained
model: its layers from the file, the new head from its own initializer).

Each takes a checkpoint file or a directory (its latest checkpoint, as ``latest_checkpoint``
finds it). A reader reads the file's header when it is made and each tensor when asked.
``init_from_checkpoint`` reads nothing until the initializer runs: the variables'
initializers become host ops that read their tensors from the file then, as TensorFlow's
restore ops do.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from flowjit import checkpoint
from flowjit.ir.dtypes import DType
from flowjit.ir.dtypes import dtype as as_dtype
from flowjit.v1 import errors
from flowjit.v1.graph import get_default_graph
from flowjit.v1.train.saver import latest_checkpoint
from flowjit.v1.variables import Variable, assign_initializer, global_variables

# TensorFlow's names of the dtypes whose names differ from NumPy's.
_TF_TYPE_NAMES = {"float32": "DT_FLOAT", "float64": "DT_DOUBLE", "float16": "DT_HALF"}


def _checkpoint_file(ckpt_dir_or_file: Any) -> str:
    path = os.fspath(ckpt_dir_or_file)
    if os.path.isdir(path):
        latest = latest_checkpoint(path)
        if latest is None:
            raise ValueError(f"Couldn't find 'checkpoint' file or checkpoints in given directory {path}")
        return latest
    if not os.path.exists(path):
        raise errors.NotFoundError(None, None, f"Unsuccessful TensorSliceReader constructor: failed to find any "
                                   f"matching files for {path} (a checkpoint file, or the directory holding them)")
    return path


class CheckpointReader:
    """The tensors of one checkpoint (``tf.train.NewCheckpointReader``): their names,
    shapes and dtypes from the file's header, each tensor read when asked for."""

    def __init__(self, ckpt_dir_or_file: Any):
        self._path = _checkpoint_file(ckpt_dir_or_file)
        self._contents = checkpoint.contents(self._path)

    def get_variable_to_shape_map(self) -> dict[str, list[int]]:
        return {name: list(shape) for name, (shape, _) in self._contents.items()}

    def get_variable_to_dtype_map(self) -> dict[str, DType]:
        return {name: as_dtype(dt) for name, (_, dt) in self._contents.items()}

    def has_tensor(self, tensor_str: str) -> bool:
        return tensor_str in self._contents

    def get_tensor(self, tensor_str: str) -> np.ndarray:
        """The tensor's value; NotFoundError naming the file when it has none of that name."""
        if tensor_str not in self._contents:
            raise errors.NotFoundError(None, None, f"Key {tensor_str} not found in checkpoint {self._path}")
        return checkpoint.load(self._path, names=[tensor_str])[0][tensor_str]

    def debug_string(self) -> bytes:
        """One line a tensor, ``name (DT_FLOAT) [2,3]``, in name order."""
        return "".join(f"{name} ({_TF_TYPE_NAMES.get(as_dtype(dt).name, 'DT_' + as_dtype(dt).name.upper())}) "
                       f"[{','.join(map(str, shape))}]\n"
                       for name, (shape, dt) in sorted(self._contents.items())).encode()


def NewCheckpointReader(filepattern: Any) -> CheckpointReader:  # noqa: N802  (TensorFlow's name)
    """A ``CheckpointReader`` of ``filepattern`` (a checkpoint file or its directory)."""
    return CheckpointReader(filepattern)


def load_checkpoint(ckpt_dir_or_file: Any) -> CheckpointReader:
    """A ``CheckpointReader`` of the checkpoint file or of a directory's latest one."""
    return CheckpointReader(ckpt_dir_or_file)


def list_variables(ckpt_dir_or_file: Any) -> list[tuple[str, list[int]]]:
    """``(name, shape)`` of every tensor in the checkpoint, in name order."""
    return sorted(load_checkpoint(ckpt_dir_or_file).get_variable_to_shape_map().items())


def load_variable(ckpt_dir_or_file: Any, name: str) -> np.ndarray:
    """The value of tensor ``name`` (a variable's name, ``:0`` allowed) in the checkpoint."""
    return load_checkpoint(ckpt_dir_or_file).get_tensor(name[:-2] if name.endswith(":0") else name)


def _graph_variables() -> dict[str, Variable]:
    return {v.op.name: v for v in global_variables()}


def init_from_checkpoint(ckpt_dir_or_file: Any, assignment_map: dict[str, Any]) -> None:
    """Make variables' initializers load them from a checkpoint (``tf.train.init_from_checkpoint``;
    call it before ``global_variables_initializer``). ``assignment_map`` maps checkpoint names
    to graph ones: ``{"old/": "new/"}`` every variable of graph scope ``new/`` from the
    checkpoint's ``old/`` of the same relative name (``{"/": "/"}``: every variable of the
    graph from its own name), ``{"old/w": "new/w"}`` (or a Variable) one variable. A name
    the checkpoint lacks, or a shape or dtype that differs, is a ValueError naming it."""
    reader = load_checkpoint(ckpt_dir_or_file)
    have = reader.get_variable_to_shape_map()
    types = reader.get_variable_to_dtype_map()
    variables = _graph_variables()
    pairs: list[tuple[str, Variable]] = []
    for ckpt_name, target in assignment_map.items():
        if isinstance(target, Variable):
            pairs.append((ckpt_name, target))
            continue
        if not isinstance(target, str):
            raise TypeError(f"init_from_checkpoint: the assignment map's values are graph names or Variables, "
                            f"got {target!r} for {ckpt_name!r}")
        if ckpt_name.endswith("/") or ckpt_name == "/":
            old = "" if ckpt_name == "/" else ckpt_name
            new = "" if target == "/" else target if target.endswith("/") else target + "/"
            matched = [(old + name[len(new):], v) for name, v in sorted(variables.items()) if name.startswith(new)]
            if not matched:
                raise ValueError(f"init_from_checkpoint: no variable of the graph is in scope {target!r}")
            pairs += matched
            continue
        if target not in variables:
            raise ValueError(f"init_from_checkpoint: the graph has no variable named {target!r} "
                             f"(to load {ckpt_name!r} into)")
        pairs.append((ckpt_name, variables[target]))
    for ckpt_name, var in pairs:
        if ckpt_name not in have:
            raise ValueError(f"init_from_checkpoint: tensor {ckpt_name!r} is not found in {reader._path} "
                             f"(for variable {var.op.name!r})")
        if have[ckpt_name] != var.shape.as_list() or types[ckpt_name] != var.dtype:
            raise ValueError(f"init_from_checkpoint: {ckpt_name!r} is {types[ckpt_name].name}{have[ckpt_name]} in "
                             f"the checkpoint, variable {var.op.name!r} is {var.dtype.name}{var.shape.as_list()}")
    graph = get_default_graph()
    for ckpt_name, var in pairs:
        path = reader._path

        def restore(ev: Any, op: Any, xs: list[Any], path: str = path, key: str = ckpt_name) -> list[Any]:
            return [checkpoint.load(path, names=[key])[0][key]]
        with graph.name_scope(var.op.name + "/"), graph.control_dependencies(None):
            value = graph.create_op("RestoreV2", [], restore, name="restore", host=True,
                                    outputs=[(tuple(have[ckpt_name]), var.dtype)]).outputs[0]
        assign_initializer(var, value)
