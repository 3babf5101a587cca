"""Frozen records: what ``@dataclass(frozen=True)`` gives a class (its fields,
``dataclasses.fields`` and ``replace``, ``__init__``, ``__repr__``, ``__eq__`` and
``__hash__`` over the fields, no assignment after ``__init__``), made cheaply at import.

``@dataclass(frozen=True)`` compiles six functions per class, each by an ``exec`` of its
own: about 0.3 ms a class, which every process that compiles or loads a native program paid
for the compiler's plan and loop-IR classes (5 ms for the loop IR's alone). ``@record``
only collects a class; ``compile_records()``, called once at the end of the defining
module, compiles the ``__init__`` of every class collected so far in one ``exec`` (a
signature of the class's own fields, as fast to call as dataclasses'). ``__eq__``,
``__hash__`` and ``__repr__`` are closures over a function that takes the fields' tuple
(``operator.attrgetter`` for two fields or more): compiling those too had taken 80% of
the ``exec``'s time (4 of a cold first call's 5 ms). A method the class body defines itself (a
``__repr__`` of its own) is kept, as dataclasses keep it.
"""

from __future__ import annotations

import dataclasses
import operator
import threading
from typing import Any, TypeVar

_T = TypeVar("_T", bound=type)
_pending: list[type] = []
# Modules import lazily, on a program's first call, from any thread: a class is collected
# and its methods installed under one lock, so that no thread compiles another's half.
_lock = threading.Lock()


def _frozen_setattr(self: Any, name: str, value: Any) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self: Any, name: str) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


def record(cls: _T) -> _T:
    """``cls`` as a frozen dataclass whose methods ``compile_records`` makes (the module
    docstring); fields may have plain defaults, not ``default_factory``."""
    own = set(cls.__dict__)
    cls = dataclasses.dataclass(init=False, repr=False, eq=False)(cls)
    for f in dataclasses.fields(cls):
        if f.default_factory is not dataclasses.MISSING:
            raise TypeError(f"record {cls.__qualname__}: field {f.name} has a default_factory")
    cls.__setattr__ = _frozen_setattr   # type: ignore[assignment]
    cls.__delattr__ = _frozen_delattr   # type: ignore[assignment]
    cls._record_own = own               # type: ignore[attr-defined]
    with _lock:
        _pending.append(cls)
    return cls


def compile_records() -> None:
    """Compile ``__init__`` and install ``__repr__``, ``__eq__`` and ``__hash__`` of every
    class ``record`` collected since the last call (the module docstring)."""
    with _lock:
        _compile(list(_pending))
        _pending.clear()


def _fields_of(names: list[str]) -> Any:
    """The function from a record to its fields' values as a tuple (a tuple whatever their
    count, so that a field equal only to itself, a NaN, compares as dataclasses' tuples do)."""
    if len(names) >= 2:
        return operator.attrgetter(*names)
    if names:
        one = operator.attrgetter(names[0])
        return lambda self: (one(self),)
    return lambda self: ()


def _methods(names: list[str]) -> dict[str, Any]:
    values = _fields_of(names)

    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return values(self) == values(other)
        return NotImplemented

    def __hash__(self: Any) -> int:
        return hash(values(self))

    # The cache keys of programs and kernels are reprs of their plans and loop IR.
    shown = ("(" + ", ".join(f"{name}={{!r}}" for name in names) + ")").format

    def __repr__(self: Any) -> str:
        return self.__class__.__qualname__ + shown(*values(self))
    return {"__eq__": __eq__, "__hash__": __hash__, "__repr__": __repr__}


def _compile(pending: list[type]) -> None:
    source, namespace = [], {"_set": object.__setattr__}
    for n, cls in enumerate(pending):
        fields = [f.name for f in dataclasses.fields(cls)]
        params = []
        for f in dataclasses.fields(cls):
            if f.default is dataclasses.MISSING:
                params.append(f.name)
            else:
                namespace[f"_default{n}_{f.name}"] = f.default
                params.append(f"{f.name}=_default{n}_{f.name}")
        source.append(f"def __init__{n}(self, {', '.join(params)}):\n"
                      + ("".join(f"    _set(self, {f!r}, {f})\n" for f in fields) or "    pass\n"))
    exec("".join(source), namespace)
    for n, cls in enumerate(pending):
        methods = _methods([f.name for f in dataclasses.fields(cls)])
        methods["__init__"] = namespace[f"__init__{n}"]
        for name, fn in methods.items():
            if name in cls._record_own:  # type: ignore[attr-defined]
                continue
            fn.__qualname__ = f"{cls.__qualname__}.{name}"
            setattr(cls, name, fn)
