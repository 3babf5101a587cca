from agpeer.builtins import dict, isinstance, list, tuple, type  # noqa: F401
