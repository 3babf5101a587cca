"""``tf.DeviceSpec``: TensorFlow's device names, parsed into fields and merged as TF merges them.

A name has up to five fields, each optional: ``/job:ps/replica:0/task:1/device:CPU:0``
(``/cpu:0``, ``/gpu:1``, ``CPU:0`` spell the device part too). Nested ``tf.device``
blocks merge: the inner block's fields win and the outer ones fill those it leaves
unset, so ``tf.device("/job:worker/task:1")`` around ``tf.device("/cpu:0")`` places on
``/job:worker/task:1/cpu:0``.

An op's ``device`` string is written in flowjit's spelling: a device of this process is
``cpu:1``/``cuda:0`` (as ``fj.devices()`` names it); a task's device keeps its job and task
(``/job:ps/task:0``, ``/job:worker/task:1/cpu:0``). ``flowjit_device`` maps such a string to
the ``fj.device`` name it runs on.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class DeviceSpec:
    """The fields of a device name (None: unset)."""

    job: str | None = None
    replica: int | None = None
    task: int | None = None
    device_type: str | None = None
    device_index: int | None = None

    @staticmethod
    def from_string(spec: str | None) -> DeviceSpec:
        """Parse ``spec`` (``""`` and None give an empty spec); ValueError naming the part
        that is not a device field."""
        fields: dict[str, Any] = {}
        for part in (spec or "").strip().split("/"):
            if not part:
                continue
            key, _, rest = part.partition(":")
            low = key.lower()
            try:
                if low == "job" and rest:
                    fields["job"] = rest
                elif low in ("replica", "task") and rest:
                    fields[low] = int(rest)
                elif low == "device" and rest:
                    kind, _, index = rest.partition(":")
                    fields.update(_device_part(kind, index))
                elif low in ("cpu", "gpu", "cuda"):
                    fields.update(_device_part(key, rest))
                else:
                    raise ValueError
            except ValueError:
                raise ValueError(f"{spec!r} is not a device name: cannot read {part!r}; devices are named like "
                                 "'/cpu:0', '/gpu:1', '/job:ps/task:0' or '/job:worker/replica:0/task:1/device:CPU:0'"
                                 ) from None
        return DeviceSpec(**fields)

    def make_merged_spec(self, dev: DeviceSpec) -> DeviceSpec:
        """This spec with the fields ``dev`` sets replaced by ``dev``'s (TensorFlow's rule)."""
        return replace(self, **{k: v for k, v in vars(dev).items() if v is not None})

    def replace(self, **fields: Any) -> DeviceSpec:
        return replace(self, **fields)

    @property
    def has_task(self) -> bool:
        return self.job is not None or self.task is not None or self.replica is not None

    def to_string(self) -> str:
        """The name in flowjit's spelling (see the module doc); ``""`` when empty."""
        local = ""
        if self.device_type is not None:
            local = f"{self.device_type}:{0 if self.device_index is None else self.device_index}"
        if not self.has_task:
            return local
        parts = [f"job:{self.job}"] if self.job is not None else []
        parts += [f"replica:{self.replica}"] if self.replica is not None else []
        parts += [f"task:{self.task}"] if self.task is not None else []
        parts += [local] if local else []
        return "/" + "/".join(parts)

    def __str__(self) -> str:
        return self.to_string()


def _device_part(kind: str, index: str) -> dict[str, Any]:
    kind = kind.lower()
    if kind not in ("cpu", "gpu", "cuda"):
        raise ValueError
    return {"device_type": "cpu" if kind == "cpu" else "cuda",
            "device_index": None if index in ("", "*") else int(index)}


def normalize_device(name: str | None) -> str:
    """``/device:GPU:0``, ``/gpu:0`` -> ``cuda:0``; ``/job:worker/replica:0/task:1/device:CPU:0`` ->
    ``/job:worker/replica:0/task:1/cpu:0``: a device name in flowjit's spelling."""
    return DeviceSpec.from_string(name).to_string()


def merge_device(outer: str, inner: str) -> str:
    """``inner`` with the fields it leaves unset taken from ``outer`` (nested ``tf.device``)."""
    return DeviceSpec.from_string(outer).make_merged_spec(DeviceSpec.from_string(inner)).to_string()


# The job naming this process in TensorFlow's local device names (/job:localhost/replica:0/task:0/device:CPU:0).
LOCAL_JOB = "localhost"


def flowjit_device(name: str) -> str:
    """The ``fj.device`` name an op's device string runs on: a task's CPU
    (``/job:ps/task:0`` -> ``/job:ps/task:0/cpu:0``; task 0 when no task is named), or a
    device of this process (``cpu:1``; also for ``/job:localhost``)."""
    spec = DeviceSpec.from_string(name)
    local = f"{spec.device_type or 'cpu'}:{spec.device_index or 0}"
    if not spec.has_task or spec.job in (None, LOCAL_JOB):
        return local
    return f"/job:{spec.job}/task:{spec.task or 0}/{local}"


def names_task(name: str) -> bool:
    """Whether a device name places on a task of a cluster (another process), not on this one."""
    spec = DeviceSpec.from_string(name)
    return spec.has_task and spec.job not in (None, LOCAL_JOB)
