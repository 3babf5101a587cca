"""Load a relocatable x86-64 ELF object into executable memory without LLVM.

What a warm process needs from llvmlite is only MCJIT's loader: place the sections, bind the
undefined symbols, apply the relocations. Importing ``llvmlite.binding`` for that costs
15 ms (its shared library and Python wrappers) and an engine per module 1 ms, most of a warm
start's budget. The objects flowjit's renderers emit (PIC, small code model, no TLS, no
C++ exceptions) use a handful of relocations, which this module applies itself: sections go
into one mapping (code, then read-only data, then writable data and ``.bss``), calls to
other libraries go through 16-byte jump stubs placed with the code, GOT-relative loads
through 8-byte slots with the read-only data, and the pages end read+execute, read-only or
read+write. ``load_object`` returns None for anything else (another machine, an unknown
relocation, a symbol it cannot bind, a system refusing the page protections), and the
caller loads the object with MCJIT as before: this loader only ever makes loading cheaper,
never different.
"""

from __future__ import annotations

import ctypes
import mmap
import struct
import sys
from collections.abc import Callable

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SYM = struct.Struct("<IBBHQQ")
_RELA = struct.Struct("<QQq")

_SHT_SYMTAB, _SHT_RELA, _SHT_NOBITS = 2, 4, 8
_SHF_WRITE, _SHF_ALLOC, _SHF_EXECINSTR = 0x1, 0x2, 0x4
_SHN_UNDEF, _SHN_LORESERVE, _SHN_ABS = 0, 0xFF00, 0xFFF1
_STB_LOCAL = 0

# x86-64 relocation types (System V psABI): the ones PIC code of the small model uses.
R_64, R_PC32, R_PLT32, R_GOTPCREL, R_PC64, R_GOTPCRELX, R_REX_GOTPCRELX = 1, 2, 4, 9, 24, 41, 42
_GOT = frozenset((R_GOTPCREL, R_GOTPCRELX, R_REX_GOTPCRELX))
_HANDLED = frozenset((R_64, R_PC32, R_PLT32, R_PC64)) | _GOT

# jmp *0(%rip) followed by the 8-byte target: reaches any address from a stub near the code.
_STUB = b"\xff\x25\x00\x00\x00\x00"
_STUB_SIZE = 16
_PROT_R, _PROT_W, _PROT_X = 1, 2, 4
_PAGE = mmap.PAGESIZE

_mprotect: Callable[..., int] | None = None


def _protect(address: int, size: int, prot: int) -> bool:
    global _mprotect
    if _mprotect is None:
        libc = ctypes.CDLL(None, use_errno=True)
        f = libc.mprotect
        f.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        f.restype = ctypes.c_int
        _mprotect = f
    return size == 0 or _mprotect(address, size, prot) == 0


def _align(n: int, a: int) -> int:
    return -(-n // max(a, 1)) * max(a, 1)


class LoadedObject:
    """An object's sections in executable memory: ``address(name)`` of a global symbol it
    defines (0 when it defines none). The memory lives as long as this object."""

    def __init__(self, memory: mmap.mmap, anchor: ctypes.c_char, symbols: dict[str, int]) -> None:
        self._memory = memory   # never closed: machine code may be running from it
        self._anchor = anchor   # the exported view that gives the mapping's address
        self._symbols = symbols

    def address(self, name: str) -> int:
        """The address of global symbol ``name``, or 0."""
        return self._symbols.get(name, 0)


def load_object(obj: bytes, resolve: Callable[[str], int | None]) -> LoadedObject | None:
    """``obj`` (a relocatable ELF object for x86-64) placed and linked in this process,
    its undefined symbols bound by ``resolve(name)`` (an address, or None when unknown);
    None when the object needs anything this loader does not do (see the module's doc)."""
    try:
        return _load(obj, resolve)
    except (struct.error, IndexError, ValueError, UnicodeDecodeError, OSError):
        return None  # not an object this loader understands: MCJIT reports what is wrong


def _sections(obj: bytes) -> list[tuple] | None:
    """The section headers of ``obj`` when it is a relocatable 64-bit little-endian ELF
    object (any machine), else None."""
    if len(obj) < _EHDR.size:
        return None
    (ident, e_type, _, _, _, _, shoff, _, _, _, _, shentsize, shnum, _) = _EHDR.unpack_from(obj)
    if ident[:4] != b"\x7fELF" or ident[4] != 2 or ident[5] != 1 or e_type != 1:
        return None
    if shentsize != _SHDR.size or shoff + shnum * shentsize > len(obj):
        return None
    # (name, type, flags, addr, offset, size, link, info, addralign, entsize)
    return [_SHDR.unpack_from(obj, shoff + i * shentsize) for i in range(shnum)]


def _symbol_table(obj: bytes, sections: list[tuple]) -> tuple[list[tuple], Callable[[tuple], str]] | None:
    """The symbols of ``obj``'s one symbol table, (name, info, other, shndx, value, size)
    each, and the function naming one; None without exactly one table."""
    symtabs = [s for s in sections if s[1] == _SHT_SYMTAB]
    if len(symtabs) != 1:
        return None
    symtab = symtabs[0]
    strtab = sections[symtab[6]]
    strings = obj[strtab[4]:strtab[4] + strtab[5]]

    def symbol_name(sym: tuple) -> str:
        return strings[sym[0]:strings.index(b"\0", sym[0])].decode()
    return [_SYM.unpack_from(obj, symtab[4] + k * _SYM.size) for k in range(symtab[5] // _SYM.size)], symbol_name


def symbol_names(obj: bytes) -> tuple[list[str], list[str]]:
    """The global symbols ``obj`` (a relocatable ELF object) defines, and those it uses and
    does not define: what linking it must bind, the calls the code generator made by name (a
    compiler builtin) among them. Both empty for what is not a 64-bit little-endian ELF object."""
    try:
        sections = _sections(obj)
        table = _symbol_table(obj, sections) if sections is not None else None
        if table is None:
            return [], []
        symbols, symbol_name = table
        named = [sym for sym in symbols[1:] if sym[0] and sym[1] >> 4 != _STB_LOCAL]
        return ([symbol_name(sym) for sym in named if sym[3] != _SHN_UNDEF],
                [symbol_name(sym) for sym in named if sym[3] == _SHN_UNDEF])
    except (struct.error, IndexError, ValueError, UnicodeDecodeError):
        return [], []


def _load(obj: bytes, resolve: Callable[[str], int | None]) -> LoadedObject | None:
    if sys.platform != "linux":
        return None
    sections = _sections(obj)
    if sections is None or _EHDR.unpack_from(obj)[2] != 62:   # x86-64
        return None

    # Sections to place: allocated ones, except unwind tables (nothing unwinds through
    # kernels: they are nounwind C functions, and MCJIT's registration is for debuggers).
    shstr = sections[_EHDR.unpack_from(obj)[13]]
    names = obj[shstr[4]:shstr[4] + shstr[5]]

    def section_name(s: tuple) -> bytes:
        return names[s[0]:names.index(b"\0", s[0])]
    placed = [i for i, s in enumerate(sections)
              if s[2] & _SHF_ALLOC and s[5] and section_name(s) != b".eh_frame"]
    text = [i for i in placed if sections[i][2] & _SHF_EXECINSTR]
    rodata = [i for i in placed if not sections[i][2] & (_SHF_EXECINSTR | _SHF_WRITE)]
    data = [i for i in placed if sections[i][2] & _SHF_WRITE and not sections[i][2] & _SHF_EXECINSTR]

    table = _symbol_table(obj, sections)
    if table is None:
        return None
    symbols, symbol_name = table

    relocations = []
    for s in sections:
        if s[1] == _SHT_RELA and s[7] in placed:
            for k in range(s[5] // _RELA.size):
                offset, info, addend = _RELA.unpack_from(obj, s[4] + k * _RELA.size)
                kind = info & 0xFFFFFFFF
                if kind not in _HANDLED:
                    return None
                relocations.append((s[7], offset, info >> 32, kind, addend))

    # Undefined symbols: bound now, each called through a stub and read through a GOT slot
    # only when a relocation asks for one.
    external: dict[int, int] = {}
    for k, sym in enumerate(symbols):
        if k and sym[3] == _SHN_UNDEF:
            address = resolve(symbol_name(sym))
            if not address:
                return None
            external[k] = address
    stubs = sorted({sym for _, _, sym, kind, _ in relocations if sym in external and kind == R_PLT32})
    got = sorted({sym for _, _, sym, kind, _ in relocations if kind in _GOT})

    # Layout: code and stubs | read-only data and GOT | writable data, each part on pages of its own.
    base: dict[int, int] = {}
    end = 0
    for i in text:
        end = base[i] = _align(end, sections[i][8])
        end += sections[i][5]
    stub_at = _align(end, _STUB_SIZE)
    end = _align(stub_at + _STUB_SIZE * len(stubs), _PAGE)
    text_end = end
    for i in rodata:
        end = base[i] = _align(end, sections[i][8])
        end += sections[i][5]
    got_at = _align(end, 8)
    end = _align(got_at + 8 * len(got), _PAGE)
    rodata_end = end
    for i in data:
        end = base[i] = _align(end, sections[i][8])
        end += sections[i][5]
    size = max(_align(end, _PAGE), _PAGE)

    # Private: a forked child gets its own copy of the module's writable data (the native
    # pool's state), as with MCJIT's memory, not pages shared with its parent.
    memory = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    anchor = ctypes.c_char.from_buffer(memory)
    origin = ctypes.addressof(anchor)
    for i in placed:
        s = sections[i]
        if s[1] != _SHT_NOBITS:
            memory[base[i]:base[i] + s[5]] = obj[s[4]:s[4] + s[5]]

    def defined(sym: tuple) -> int | None:
        shndx = sym[3]
        if shndx == _SHN_ABS:
            return sym[4]
        if shndx in base:
            return origin + base[shndx] + sym[4]
        return None

    stub_of = {}
    for n, k in enumerate(stubs):
        at = stub_at + n * _STUB_SIZE
        memory[at:at + 14] = _STUB + struct.pack("<Q", external[k])
        stub_of[k] = origin + at
    got_of = {}
    for n, k in enumerate(got):
        target = external.get(k)
        if target is None:
            target = defined(symbols[k])
        if target is None:
            return None
        struct.pack_into("<Q", memory, got_at + 8 * n, target)
        got_of[k] = origin + got_at + 8 * n

    for section, offset, k, kind, addend in relocations:
        where = base[section] + offset
        p = origin + where
        if kind in _GOT:
            value = got_of[k] + addend - p
        elif k in external:
            # A call goes through its stub; data of another library is reached directly
            # (an R_64 always fits, a 32-bit displacement only if the library is near).
            value = (stub_of[k] if kind == R_PLT32 else external[k]) + addend - (0 if kind == R_64 else p)
        else:
            s = defined(symbols[k])
            if s is None:
                return None  # a reference into a section not placed (.eh_frame's own relocations are skipped)
            value = s + addend - (0 if kind == R_64 else p)
        if kind in (R_64, R_PC64):
            struct.pack_into("<q" if kind == R_PC64 else "<Q", memory, where, value)
        elif -(1 << 31) <= value < (1 << 31):
            struct.pack_into("<i", memory, where, value)
        else:
            return None

    if not (_protect(origin, text_end, _PROT_R | _PROT_X)
            and _protect(origin + text_end, rodata_end - text_end, _PROT_R)):
        return None
    exported = {symbol_name(sym): defined(sym) for sym in symbols
                if sym[1] >> 4 != _STB_LOCAL and defined(sym) is not None and sym[0]}
    return LoadedObject(memory, anchor, exported)
