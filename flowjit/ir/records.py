"""Frozen records: what ``@dataclass(frozen=True)`` gives a class (its fields,
``dataclasses.fields`` and ``replace``, ``__init__``, ``__repr__``, ``__eq__`` and
``__hash__`` over the fields, no assignment after ``__init__``), made cheaply at import.

``@dataclass(frozen=True)`` compiles six functions per class, each by an ``exec`` of its
own: about 0.3 ms a class, which every process that compiles or loads a native program paid
for the compiler's plan and loop-IR classes (5 ms for the loop IR's alone). ``@record``
only collects a class; ``compile_records()``, called once at the end of the defining
module, gives every class collected so far its ``__init__`` (a signature of the class's own
fields, as fast to call as dataclasses'): one compiled per count of fields, renamed per class
by its code object's ``replace`` (compiling one per class had taken 1.7 ms of a cold first
call, the 33 classes of an MLP's compile). ``__eq__``,
``__hash__`` and ``__repr__`` are closures over a function that takes the fields' tuple
(``operator.attrgetter`` for two fields or more): compiling those too had taken 80% of
the ``exec``'s time (4 of a cold first call's 5 ms). A record keeps its hash once computed
(not in a pickle or a copy: string hashes are salted per process), so a loop-IR tree looked
up in memo after memo is hashed once, not walked again each time. A method the class body
defines itself (a ``__repr__`` of its own) is kept, as dataclasses keep it.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import threading
import types
from typing import Any, TypeVar

_T = TypeVar("_T", bound=type)
_pending: list[type] = []
# Modules import lazily, on a program's first call, from any thread: a class is collected
# and its methods installed under one lock, so that no thread compiles another's half.
_lock = threading.Lock()
# Where a record keeps its hash once computed (its fields never change): a loop-IR tree's
# hash had walked the whole tree at every lookup of it in a memo.
_HASH = "_record_hash"


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
        d = self.__dict__
        h = d.get(_HASH)
        if h is None:
            h = d[_HASH] = hash(values(self))
        return h

    def __getstate__(self: Any) -> dict:
        # The kept hash is this process's (str hashes are salted per process): never pickled.
        # A copy, made in one step: another thread may hash the record while it is pickled.
        state = self.__dict__.copy()
        state.pop(_HASH, None)
        return state

    # The cache keys of programs and kernels are reprs of their plans and loop IR.
    shown = ("(" + ", ".join(f"{name}={{!r}}" for name in names) + ")").format

    def __repr__(self: Any) -> str:
        return self.__class__.__qualname__ + shown(*values(self))
    return {"__eq__": __eq__, "__hash__": __hash__, "__repr__": __repr__, "__getstate__": __getstate__}


@functools.cache
def _init_template(n: int) -> types.FunctionType:
    """An ``__init__`` of ``n`` fields named ``_f0``.. (parameters and the attribute names
    it sets), compiled once per count of fields: ``_init`` renames it per class."""
    params = "".join(f", _f{i}" for i in range(n))
    body = "".join(f"    _set(self, '_f{i}', _f{i})\n" for i in range(n)) or "    pass\n"
    namespace: dict[str, Any] = {}
    exec(f"def __init__(self{params}):\n{body}", {"_set": object.__setattr__}, namespace)
    return namespace["__init__"]


def _init(fields: list[dataclasses.Field]) -> types.FunctionType:
    """The ``__init__`` of a record of ``fields``: the template of their count with its
    parameters and constants renamed to the fields' names (a code object's ``replace``, no
    compile), the fields' defaults its defaults."""
    names = [f.name for f in fields]
    template = _init_template(len(names))
    code = template.__code__
    consts = tuple(names[int(c[2:])] if isinstance(c, str) and c.startswith("_f") else c for c in code.co_consts)
    code = code.replace(co_varnames=("self", *names), co_consts=consts)
    defaults = tuple(f.default for f in fields if f.default is not dataclasses.MISSING)
    return types.FunctionType(code, template.__globals__, "__init__", defaults or None)


def _compile(pending: list[type]) -> None:
    for cls in pending:
        fields = list(dataclasses.fields(cls))
        methods = _methods([f.name for f in fields])
        methods["__init__"] = _init(fields)
        for name, fn in methods.items():
            if name in cls._record_own:  # type: ignore[attr-defined]
                continue
            fn.__qualname__ = f"{cls.__qualname__}.{name}"
            setattr(cls, name, fn)
