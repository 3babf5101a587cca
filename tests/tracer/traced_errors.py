"""A helper for the tests of trace-time errors: what a call raises inside an fj.function."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest

import flowjit as fj


def assert_traced_error(call: Callable[[], object], error: type[Exception], words: Sequence[str],
                        source_file: str) -> None:
    """``call()`` traced inside an fj.function raises ``error`` whose message holds every one of
    ``words`` and names the user's line in ``source_file``."""
    def traced(x):
        call()
        return x

    with pytest.raises(error) as info:
        fj.function(traced)(np.ones(1))
    for w in words:
        assert w in str(info.value), (w, str(info.value))
    assert source_file in str(info.value), str(info.value)
