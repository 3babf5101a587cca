"""Passes: each a function from Function to Function in its own module.

A pass receives a Function the pipeline owns (a clone of the traced one), may rewrite it
in place, and returns it; its docstring states what it guarantees. Passes import only
``flowjit.ir``, never a backend.
"""
