"""Suite-wide settings: hypothesis draws the same examples on every run (``derandomize``),
so the suite is deterministic from run to run and a failure on CI fails the same way on
a contributor's machine. ``HYPOTHESIS_PROFILE=random`` explores new examples instead."""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("deterministic", derandomize=True)
settings.register_profile("random", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))
