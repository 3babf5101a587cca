"""flowjit's version, in a module of its own so that any layer can read it without
importing the package's public API (``flowjit/__init__.py``) it sits under."""

__version__ = "0.1.0"
