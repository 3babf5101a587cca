"""The numba kernel generator's tests: every ``fj.function`` here runs on the numba
backend (``FLOWJIT_BACKEND=numba``), which is no longer the default."""

import pytest


@pytest.fixture(autouse=True)
def numba_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLOWJIT_BACKEND", "numba")
