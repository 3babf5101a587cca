"""The one place flowjit imports tensorboardX, when a summary, a writer or a graph is made
(so a process that writes none never loads it), with an error naming the extra when it is
not installed. The writer and the graph both use it."""

from __future__ import annotations

from types import ModuleType

INSTALL_HINT = "pip install 'flowjit[viz]' (or: pip install tensorboardX)"


def require_tensorboardx(what: str) -> ModuleType:
    """tensorboardX, imported now; an ImportError naming ``what`` and the extra to install
    when it is missing."""
    try:
        import tensorboardX
    except ImportError as e:
        raise ImportError(f"{what} writes TensorBoard event files through tensorboardX, which is not "
                          f"installed: {INSTALL_HINT}") from e
    return tensorboardX
