"""User-level checkpoints (``fj.checkpoint``): Variables and optimizer state in safetensors files.

``save(path, state, step=..., metadata=...)`` writes a file atomically, ``restore(path,
state)`` reads it back into the same state after checking it matches (``partial=True``:
the file may hold more than the state names), ``load(path, names=None)``
returns its arrays (all, or those named) for inspection, ``contents(path)`` each tensor's
shape and dtype from the header alone, and ``CheckpointManager`` keeps numbered checkpoints
of a training run. Files are plain safetensors, never pickles, written and read by the
``safetensors`` library (the format's reference implementation, which memory-maps them),
so any other implementation reads them; our metadata lives in the header's
``__metadata__`` as ``{"flowjit": "<JSON: version, step, user metadata>"}``.

Names. A *state* is a Variable, an Optimizer, or dicts/lists/tuples of them, nested
freely; each Variable is stored under ``prefix + name`` where the prefix is the chain of
dict keys leading to it, each followed by ``/`` (lists and tuples add nothing):

- a Variable contributes ``var.name``;
- an Optimizer contributes ``iterations`` (its step counter) and its slot names,
  ``<variable name>/<slot>`` (``W/m``, ``W/v`` for Adam);
- ``{"model": [W, b], "opt": adam}`` gives ``model/W``, ``model/b``,
  ``opt/iterations``, ``opt/W/m``, ``opt/W/v``.

So names depend only on Variable names and dict keys, never on list positions or
traversal order. Two different Variables under one name are an error that names them
(two optimizers in one list both claim ``iterations``: put them under dict keys).
An optimizer that has not taken a step yet has no slots; ``restore`` creates the slots a
file holds for trainable Variables of the same state, so a script can restore before
training. Everything raised on purpose is a ``CheckpointError`` (a ``FlowjitError``);
a damaged file (truncated, not safetensors, a tensor failing its CRC-32, which each file
stores per tensor in its metadata under ``"flowjit.checksums"``) is its subclass
``CorruptCheckpointError``, which ``CheckpointManager.restore`` skips for the newest older
checkpoint that verifies, with a ``CheckpointWarning``; a missing file is the usual
``FileNotFoundError``.
"""

from flowjit.checkpoint.manager import CheckpointManager
from flowjit.checkpoint.safetensors_format import CheckpointError, CheckpointWarning, CorruptCheckpointError
from flowjit.checkpoint.saving import contents, load, restore, save

__all__ = ["CheckpointError", "CheckpointManager", "CheckpointWarning", "CorruptCheckpointError", "contents", "load",
           "restore", "save"]
