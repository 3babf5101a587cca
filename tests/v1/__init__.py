"""Tests of flowjit.v1; ``load_example`` imports a program of examples/v1/ as a module."""

import importlib.util
import os
from types import ModuleType

EXAMPLES_V1 = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                           "examples", "v1")


def load_example(name: str) -> ModuleType:
    """examples/v1/<name>.py, loaded fresh (its ``main(argv)`` runs a short version)."""
    spec = importlib.util.spec_from_file_location(f"v1_example_{name}", os.path.join(EXAMPLES_V1, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
