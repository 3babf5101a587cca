"""How a user's state becomes named Variables (the naming scheme is in the package docstring).

``flatten`` walks Variables, Optimizers and dicts/lists/tuples of them. Optimizer slots
are created lazily by the first update, so a freshly built optimizer has none yet;
``FlatState.pending_slot`` recognises a file's slot names for trainable Variables of the
same state, so a training script can restore before its first step, as with TensorFlow's
deferred restoration.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flowjit.checkpoint.safetensors_format import METADATA_KEY, CheckpointError
from flowjit.optim.optimizer import Optimizer
from flowjit.tracer.variables import Variable


@dataclass(frozen=True)
class PendingSlot:
    """A slot named in a file that the optimizer has not created yet."""

    optimizer: Optimizer
    var: Variable
    slot: str

    def create(self) -> Variable:
        return self.optimizer.slot(self.var, self.slot)


@dataclass
class FlatState:
    """The state's Variables by checkpoint name, with what deferred slots need."""

    variables: dict[str, Variable]
    optimizers: list[tuple[str, Optimizer]]
    trainable: list[Variable]

    def pending_slot(self, name: str) -> PendingSlot | None:
        """The slot ``name`` would be once created, if it names one of a trainable Variable
        of this state in one of its optimizers, and a slot that optimizer declares in its
        ``slot_names``."""
        for prefix, opt in self.optimizers:
            if not name.startswith(prefix):
                continue
            rest = name[len(prefix):]
            for var in self.trainable:
                if not rest.startswith(var.name + "/"):
                    continue
                slot = rest[len(var.name) + 1:]
                if slot in opt.slot_names:
                    return PendingSlot(opt, var, slot)
        return None


def flatten(state: Any) -> FlatState:
    """Name every Variable of ``state``; raise ``CheckpointError`` on objects that cannot be
    checkpointed and on two different Variables that would share a name (all listed)."""
    found: list[tuple[str, Variable]] = []
    optimizers: list[tuple[str, Optimizer]] = []
    _walk(state, "", found, optimizers)

    variables: dict[str, Variable] = {}
    clashes: dict[str, list[Variable]] = {}
    for name, var in found:
        if name == METADATA_KEY:
            raise CheckpointError(f"a Variable cannot be named {METADATA_KEY!r}: safetensors reserves it")
        held = variables.setdefault(name, var)
        # The same Variable reached twice under one name is one entry, not a clash.
        if held is not var:
            group = clashes.setdefault(name, [held])
            if all(v is not var for v in group):
                group.append(var)
    if clashes:
        lines = [f"  {name!r}: {', '.join(repr(v) for v in group)}" for name, group in sorted(clashes.items())]
        raise CheckpointError("different Variables share a checkpoint name; rename them or put them under "
                              "different dict keys:\n" + "\n".join(lines))

    owned = {id(v) for _, opt in optimizers for v in [opt.iterations, *opt.slots().values()]}
    trainable = [v for v in variables.values() if v.trainable and id(v) not in owned]
    return FlatState(variables, optimizers, trainable)


def _walk(obj: Any, prefix: str, found: list[tuple[str, Variable]], optimizers: list[tuple[str, Optimizer]]) -> None:
    if isinstance(obj, Variable):
        found.append((prefix + obj.name, obj))
    elif isinstance(obj, Optimizer):
        optimizers.append((prefix, obj))
        found.append((prefix + "iterations", obj.iterations))
        found.extend((prefix + name, var) for name, var in obj.slots().items())
    elif isinstance(obj, dict):
        for key, value in obj.items():
            if not isinstance(key, str) or not key:
                raise CheckpointError(f"dict keys of a checkpointed state must be non-empty strings; "
                                      f"got {key!r} under {prefix or 'the top level'!r}")
            _walk(value, f"{prefix}{key}/", found, optimizers)
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            _walk(item, prefix, found, optimizers)
    else:
        where = f"under {prefix!r}" if prefix else "at the top level"
        raise CheckpointError(f"cannot checkpoint a {type(obj).__name__} {where}: a state is a Variable, an "
                              "Optimizer, or a dict/list/tuple of them (wrap arrays in fj.Variable)")
