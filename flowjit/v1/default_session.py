"""The default session: the innermost ``Session`` entered with ``with`` (or an
``InteractiveSession``), per thread.

``Tensor.eval()`` and ``Operation.run()`` (flowjit.v1.graph), ``Variable.load()`` and
``tf.train.start_queue_runners`` run in it; ``flowjit.v1.session`` pushes and pops it. It
imports nothing of v1, so the graph can reach the session that runs it without importing
the session module, which builds on the graph.
"""

from __future__ import annotations

import threading
from typing import Any

_sessions = threading.local()


def session_stack() -> list[Any]:
    """This thread's entered sessions, innermost last (``flowjit.v1.session.Session``s)."""
    if not hasattr(_sessions, "stack"):
        _sessions.stack = []
    return _sessions.stack


def get_default_session() -> Any:
    """The innermost session entered with ``with`` (or an InteractiveSession), or None."""
    s = session_stack()
    return s[-1] if s else None


def get_default_session_or_raise(what: str) -> Any:
    s = get_default_session()
    if s is None:
        raise ValueError(f"{what} needs a session: pass session=..., or call it inside `with tf.Session() as sess:`")
    return s
