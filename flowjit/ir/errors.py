"""The errors flowjit raises at trace, parse and verify time.

Every error that concerns an op carries the primitive's name, the shapes and dtypes
involved and, when known, the user's source line, so the message alone says where to
look and how to fix it.
"""

from __future__ import annotations

from collections.abc import Callable

# How an error about the user's program finds the user's source line when it is made. The
# tracer (a layer above) registers it; without it, or where the error does not arise under
# the tracer's API (an IR file the CLI parses), errors carry no line.
_locator: Callable[[], object | None] | None = None


def set_locator(locate: Callable[[], object | None]) -> None:
    """Register how errors find the user's line (the tracer does, when it is imported)."""
    global _locator
    _locator = locate


def _user_line(message: str) -> object | None:
    """The user's line for an error with ``message``, None if unknown or already named."""
    loc = _locator() if _locator is not None else None
    if loc is None or str(loc) in message or "\n  at " in message:
        return None
    return loc


class FlowjitError(Exception):
    """Base class of every error flowjit raises on purpose."""


class _UserProgramError(FlowjitError):
    """An error in the user's program (a type, a traced value used as a Python one, a
    gradient or a batch that cannot be taken): its message ends with the user's line,
    found when it is made, wherever in flowjit the check sits."""

    def __init__(self, *args: object) -> None:
        if len(args) == 1 and isinstance(args[0], str) and (loc := _user_line(args[0])) is not None:
            args = (f"{args[0]}\n  at {loc}",)
        super().__init__(*args)


class ShapeError(FlowjitError, ValueError):
    """An op was given inputs or attributes its shape/dtype rule rejects.

    Shape rules raise it with the reason; the builder adds the op and the user's line
    (``with_location``) before it reaches the user.
    """

    def __init__(self, message: str, *, op: str | None = None, loc: object = None):
        self.reason = message
        self.op = op
        self.loc = loc if loc is not None else _user_line(message)
        super().__init__(self._format())

    def _format(self) -> str:
        text = self.reason
        if self.op is not None and not text.startswith(self.op + ":"):
            text = f"{self.op}: {text}"
        if self.loc is not None:
            text += f"\n  at {self.loc}"
        return text

    def with_location(self, op: str, loc: object) -> ShapeError:
        """Return a copy of this error that names ``op`` and the user's line ``loc``."""
        err = type(self)(self.reason, op=self.op or op, loc=self.loc or loc)
        return err


class AxisError(ShapeError, IndexError):
    """An axis out of range for an array's rank: a ShapeError, and an IndexError as NumPy's
    ``AxisError`` and the array API's specification have it."""


class FlowjitTypeError(_UserProgramError, TypeError):
    """A value of an unsupported Python or NumPy type reached flowjit."""


class TracerError(_UserProgramError, TypeError):
    """A traced value was used where a concrete Python value is needed."""


class ParseError(FlowjitError, ValueError):
    """Malformed IR text; carries the 1-based line and column of the problem."""

    def __init__(self, message: str, line: int, col: int):
        self.message = message
        self.line = line
        self.col = col
        super().__init__(f"line {line}, column {col}: {message}")


class VerifyError(FlowjitError, ValueError):
    """A Function breaks an IR invariant (dominance, use lists, result types)."""


class AutodiffError(_UserProgramError):
    """A gradient was asked through an op that has none (or that needs more information
    to have one, such as a while loop without ``maximum_iterations``)."""


class OutputTypeError(AutodiffError, TypeError):
    """``grad`` of a function whose output is not a real float scalar (a complex or an
    integer result, an array of more than one element): an AutodiffError, and a TypeError as
    ``jax.grad`` raises for it."""


class BatchingError(_UserProgramError):
    """An op cannot be batched (``fj.vmap``): its primitive has no batching rule, or its rule
    does not accept the operands that carry the batch (a random draw from a batched key).
    The message names the primitive, the operand types, which are batched, and how to fix it."""


# What a backend adds to the error of a kernel it generated that fails to compile: that
# is always flowjit's bug, never the user's, and the interpreter runs the program meanwhile.
class KernelCompileError(FlowjitError):
    """A generated kernel failed to compile (its loop IR or LLVM IR did not verify, or the
    backend's compiler rejected it): the message names the kernel, its ops and the user's
    lines, and where its loop IR, LLVM IR or source was saved. A bug in flowjit."""


BUG_REPORT = ("this is a bug in flowjit, not in your program: please report it with the generated "
              "source below and the failing call (fj.function(..., interpret=True) runs it meanwhile)")
