"""An llvmlite IR module's text, and the module taken apart once it is text.

llvmlite's IR builder links every value to its parent and back (a module to its
functions, a function to its blocks and arguments, a block to its instructions, a phi to
the values of later blocks), so a module that is dropped after ``str()`` is cyclic
garbage: 30,000 objects (instructions, their operand lists, constants, types) on the zoo
CNN's first training call, which only a collection frees, tracing each. Taken apart here,
the module's objects are freed by their reference counts as it is dropped.
"""

from __future__ import annotations

from typing import Any


def module_text(module: Any) -> str:
    """``str(module)`` (an ``llvmlite.ir.Module``), after which the module is emptied: its
    functions' arguments, blocks and instructions cleared of their links, its globals and
    metadata dropped. The caller must hold no other reference it will use to the module's
    arguments, blocks or instructions; its functions keep their names and types (a call in
    another module may name one)."""
    text = str(module)
    for g in module.globals.values():
        for value in (*getattr(g, "args", ()), getattr(g, "return_value", None)):
            if value is not None:   # an argument links to its function, which lists it
                vars(value).clear()
        blocks = getattr(g, "blocks", None)
        if blocks:
            for block in blocks:
                for instruction in block.instructions:
                    vars(instruction).clear()
                vars(block).clear()
            blocks.clear()
    module.globals.clear()
    module.metadata.clear()
    module.namedmetadata.clear()
    cache = getattr(module, "_metadatacache", None)   # llvmlite's: metadata by its operands
    if cache:
        cache.clear()
    return text
