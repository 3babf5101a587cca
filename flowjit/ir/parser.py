"""Read the text form (see ``printer``) back into a Function.

``parse(print_function(f))`` rebuilds ``f`` exactly: printing the result gives the same
text, and every attribute and literal has the same bits. Any malformed input (bad
syntax, unknown primitives or attributes, attributes of the wrong kind, undefined or
redefined values, types that disagree with a primitive's rule, literals that do not fit
their type) raises ``ParseError`` with the 1-based line and column of the problem;
nothing else escapes, whatever the input.

Grammar (one op a line; ``#`` starts a comment, and a ``# file:line`` comment on an op's
line is its source location)::

    function := "func" @name "(" [arg {"," arg}] ")" "->" "(" [type {"," type}] ")" "{" body "}"
    arg      := %name ":" type ["var"] ["donated"] [@device | @"device"]
    body     := {op NEWLINE} "return" [%v {"," %v}]
    op       := [%r {"," %r} "="] prim [%v {"," %v}] ["{" [attr {"," attr}] "}"]
                [":" type {"," type}] [@device | @"device"]
    type     := dtype "[" [int {"," int}] "]"
    attr     := name "=" (int | float | true | false | "string" | dtype | "(" [value {"," value}] [","] ")"
                          | literal)
    literal  := scalar | "[" ... "]" (nested lists) | b64"<base64 of the little-endian bytes>"
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from flowjit.ir.core import Block, Function, Op, SourceLoc, Value
from flowjit.ir.dtypes import from_short
from flowjit.ir.errors import ParseError, ShapeError
from flowjit.ir.registry import PRIMITIVES, AttrSpec, Literal, Primitive, coerce_attr
from flowjit.ir.types import TensorType

_STRING = r'"(?:[^"\\\n]|\\.)*"'
_TOKEN_RE = re.compile(rf"""
    (?P<ws>[ \t\r]+)
  | (?P<nl>\n)
  | (?P<comment>\#[^\n]*)
  | (?P<pct>%[A-Za-z0-9_.]+)
  | (?P<at>@(?:[A-Za-z0-9_.:]+|{_STRING}))
  | (?P<string>{_STRING})
  | (?P<number>-?(?:inf|nan)\b|-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<punct>->|[()\[\]{{}},=:^])
""", re.VERBOSE | re.ASCII)

# "# file:line" after an op: the printer writes one space after '#'.
_LOC_RE = re.compile(r"#\s?(.*?):(-?\d{1,4000})\s*", re.ASCII)
_INT_RE = re.compile(r"-?\d+", re.ASCII)

MAX_DIM = 2 ** 62            # a dimension must be below this
MAX_ELEMENTS = 2 ** 62       # the product of a type's non-zero dimensions must not exceed this
INT_MIN, INT_MAX = -2 ** 63, 2 ** 63 - 1   # integer attributes are 64-bit
MAX_ATTR_DEPTH = 32          # nesting of tuples in an attribute value
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\"}


@dataclass(slots=True)
class Token:
    kind: str
    text: str
    line: int
    col: int


def _short(text: str, limit: int = 40) -> str:
    """``text`` quoted for a message, cut to ``limit`` characters."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _found(t: Token) -> str:
    return "end of input" if t.kind == "eof" else _short(t.text)


def tokenize(text: str) -> list[Token]:
    """Split ``text`` into tokens with 1-based line and column; ParseError on a stray character."""
    tokens: list[Token] = []
    pos, line, line_start = 0, 1, 0
    n = len(text)
    while pos < n:
        m = _TOKEN_RE.match(text, pos)
        col = pos - line_start + 1
        if m is None:
            c = text[pos]
            if c == '"' or text.startswith('@"', pos):
                raise ParseError("unterminated string (a string must close with \" on the same line)", line, col)
            if c in "%@":
                raise ParseError(f"expected a name after {c!r} (letters, digits, '_' or '.')", line, col)
            raise ParseError(f"unexpected character {c!r}", line, col)
        kind = m.lastgroup or ""
        if kind == "nl":
            line, line_start = line + 1, m.end()
        elif kind != "ws":
            tokens.append(Token(kind, m.group(), line, col))
        pos = m.end()
    tokens.append(Token("eof", "", line, pos - line_start + 1))
    return tokens


def _unescape(tok: Token, body: str) -> str:
    """The value of a string token's ``body`` (without quotes): ``\\n \\t \\r \\" \\\\ \\xHH``."""
    if "\\" not in body:
        return body
    out: list[str] = []
    i = 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        e = body[i + 1]  # the token regex guarantees a character after a backslash
        if e in _ESCAPES:
            out.append(_ESCAPES[e])
            i += 2
        elif e == "x" and re.fullmatch(r"[0-9A-Fa-f]{2}", body[i + 2:i + 4]):
            out.append(chr(int(body[i + 2:i + 4], 16)))
            i += 4
        else:
            # Column of the backslash: the token starts with '"' (or '@"').
            offset = tok.text.index('"') + 1 + i
            raise ParseError(f"unknown escape {_short(body[i:i + 2])} in a string "
                             "(use \\n, \\t, \\r, \\\", \\\\ or \\xHH)", tok.line, tok.col + offset)
    return "".join(out)


@dataclass
class _RawLiteral:
    """A literal attribute before the op's result type says its dtype and shape."""

    kind: str        # "b64" or "list"
    payload: Any     # the base64 text, or (shape, flat values, flat tokens)
    tok: Token       # where the literal starts
    data_tok: Token  # the token holding the base64 text (or the first token)


class _Parser:
    def __init__(self, text: str):
        self.toks = tokenize(text)
        self.i = 0
        self.last = self.toks[0]
        self.values: dict[str, Value] = {}
        self.defined_at: dict[str, Token] = {}

    # ---- token helpers ---------------------------------------------------------------
    def _skip(self) -> int:
        j = self.i
        while self.toks[j].kind == "comment":
            j += 1
        return j

    def peek(self) -> Token:
        """The next token that is not a comment (without consuming it)."""
        return self.toks[self._skip()]

    def next(self) -> Token:
        """Consume and return the next token that is not a comment (never moves past the end)."""
        j = self._skip()
        t = self.toks[j]
        if t.kind != "eof":
            self.i = j + 1
        self.last = t
        return t

    def error(self, msg: str, tok: Token | None = None) -> ParseError:
        t = tok or self.peek()
        return ParseError(msg, t.line, t.col)

    def expect(self, text: str, context: str = "") -> Token:
        t = self.peek()
        if t.text != text or t.kind not in ("punct", "ident"):
            raise self.error(f"expected {text!r}{context}, found {_found(t)}", t)
        return self.next()

    def accept(self, text: str) -> bool:
        t = self.peek()
        if t.text == text and t.kind in ("punct", "ident"):
            self.next()
            return True
        return False

    def end_of_line(self, what: str) -> None:
        t = self.peek()
        if t.kind != "eof" and t.line == self.last.line:
            raise self.error(f"unexpected {_found(t)} after {what} (one op a line)", t)

    def int_token(self, t: Token, what: str, lo: int = INT_MIN, hi: int = INT_MAX) -> int:
        """The integer of number token ``t``, which must be in ``[lo, hi]``."""
        if t.kind != "number" or not _INT_RE.fullmatch(t.text):
            raise self.error(f"expected {what}, found {_found(t)}", t)
        digits = t.text.lstrip("-").lstrip("0")
        if len(digits) > 20:
            raise self.error(f"{what} {_short(t.text)} is out of range [{lo}, {hi}]", t)
        v = int(t.text)
        if not lo <= v <= hi:
            raise self.error(f"{what} {t.text} is out of range [{lo}, {hi}]", t)
        return v

    def number(self, t: Token) -> int | float:
        """An int or float number token (ints are 64-bit)."""
        if _INT_RE.fullmatch(t.text):
            return self.int_token(t, "integer")
        return self.float_token(t)

    def float_token(self, t: Token) -> float:
        v = float(t.text)
        if v in (float("inf"), float("-inf")) and "inf" not in t.text:
            raise self.error(f"number {_short(t.text)} is out of range (write inf or -inf)", t)
        return v

    # ---- types -------------------------------------------------------------------------
    def parse_type(self) -> TensorType:
        t = self.next()
        d = from_short(t.text) if t.kind == "ident" else None
        if d is None:
            raise self.error(f"expected a type such as f32[2,3], found {_found(t)}", t)
        self.expect("[", f" after the dtype {t.text}")
        dims: list[int] = []
        if not self.accept("]"):
            while True:
                n = self.next()
                if n.kind != "number" or not n.text.isdigit():
                    raise self.error(f"expected a dimension (a non-negative int), found {_found(n)}", n)
                dims.append(self.int_token(n, "dimension", 0, MAX_DIM - 1))
                if self.accept("]"):
                    break
                self.expect(",", " or ']' in the type's dimensions")
        count = 1
        for k in dims:
            count *= k or 1
            if count > MAX_ELEMENTS:
                raise self.error(f"type {t.text}[{','.join(map(str, dims))}] has more than 2**62 elements", t)
        return TensorType(tuple(dims), d)

    # ---- function ----------------------------------------------------------------------
    def parse_function(self) -> Function:
        first = self.peek()
        if first.kind == "eof":
            raise self.error("empty input: expected a function such as 'func @f(%x: f32[2]) -> (f32[2]) {'", first)
        self.expect("func")
        name_tok = self.next()
        if name_tok.kind != "at" or name_tok.text.startswith('@"'):
            raise self.error(f"expected a function name such as @f, found {_found(name_tok)}", name_tok)
        self.expect("(", " after the function name")
        args: list[Value] = []
        is_var: list[bool] = []
        donated: list[bool] = []
        arg_devices: list[str | None] = []
        if not self.accept(")"):
            while True:
                t = self.next()
                if t.kind != "pct":
                    raise self.error(f"expected an argument such as %x, found {_found(t)}", t)
                self.expect(":", f" after argument {t.text}")
                ty = self.parse_type()
                self.define(t)
                v = Value(ty, name=t.text[1:])
                self.values[t.text[1:]] = v
                args.append(v)
                is_var.append(self.accept("var"))
                donated.append(self.accept("donated"))
                device = None
                if self.peek().kind == "at":
                    d = self.next()
                    device = _unescape(d, d.text[2:-1]) if d.text.startswith('@"') else d.text[1:]
                arg_devices.append(device)
                if self.accept(")"):
                    break
                self.expect(",", " or ')' between arguments")
        self.expect("->", " after the arguments")
        self.expect("(", " before the result types")
        result_types: list[TensorType] = []
        if not self.accept(")"):
            while True:
                result_types.append(self.parse_type())
                if self.accept(")"):
                    break
                self.expect(",", " or ')' between result types")
        self.expect("{", " to open the function body")
        block = Block(args)
        ret_tok = self.parse_block_body(block)
        got = [v.type for v in block.returns]
        if got != result_types:
            raise self.error(f"returned types ({', '.join(map(str, got))}) differ from the declared "
                             f"result types ({', '.join(map(str, result_types))})", ret_tok)
        self.expect("}", " to close the function body")
        end = self.peek()
        if end.kind != "eof":
            raise self.error(f"unexpected {_found(end)} after the end of the function", end)
        return Function(name_tok.text[1:], block, is_var, arg_devices, donated)

    def define(self, t: Token) -> None:
        """Check that value token ``t`` names a value not defined yet."""
        name = t.text[1:]
        if name in self.defined_at:
            first = self.defined_at[name]
            raise self.error(f"value {t.text} defined twice (first at line {first.line}, "
                             f"column {first.col})", t)
        self.defined_at[name] = t

    def parse_block_body(self, block: Block) -> Token:
        """Parse ops up to and including ``return``; return the ``return`` token."""
        while True:
            t = self.peek()
            if t.kind == "ident" and t.text == "return":
                self.next()
                rets: list[Value] = []
                if self.peek().kind == "pct" and self.peek().line == t.line:
                    while True:
                        rets.append(self.use(self.next()))
                        if not self.accept(","):
                            break
                block.set_returns(rets)
                if self.peek().text != "}":
                    self.end_of_line("return")
                return t
            if t.kind not in ("pct", "ident"):
                raise self.error(f"expected an op such as '%0 = add %a, %b : f32[2]' or 'return', "
                                 f"found {_found(t)}", t)
            block.append(self.parse_op())

    def use(self, t: Token) -> Value:
        if t.kind != "pct":
            raise self.error(f"expected a value such as %0, found {_found(t)}", t)
        v = self.values.get(t.text[1:])
        if v is None:
            raise self.error(f"undefined value {t.text}", t)
        return v

    # ---- ops ---------------------------------------------------------------------------
    def parse_op(self) -> Op:
        result_toks: list[Token] = []
        if self.peek().kind == "pct":
            while True:
                r = self.next()
                if r.kind != "pct":
                    raise self.error(f"expected a result name such as %1, found {_found(r)}", r)
                self.define(r)
                result_toks.append(r)
                if not self.accept(","):
                    break
            self.expect("=", " after the result names")
        name_tok = self.next()
        if name_tok.kind != "ident":
            raise self.error(f"expected a primitive name, found {_found(name_tok)}", name_tok)
        if not result_toks and self.peek().text in ("=", ","):
            raise self.error(f"expected a result name such as %0, found {_found(name_tok)}", name_tok)
        prim = PRIMITIVES.get(name_tok.text)
        if prim is None:
            raise self.error(f"unknown primitive {_short(name_tok.text)}", name_tok)
        inputs: list[Value] = []
        if self.peek().kind == "pct" and self.peek().line == name_tok.line:
            while True:
                inputs.append(self.use(self.next()))
                if not self.accept(","):
                    break
        attrs, literals = self.parse_attrs(prim)
        types: list[TensorType] = []
        type_toks: list[Token] = []
        colon = None
        if result_toks or self.peek().text == ":":
            colon = self.expect(":", f" and the result type(s) of {prim.name}")
            while True:
                type_toks.append(self.peek())
                types.append(self.parse_type())
                if not self.accept(","):
                    break
        device = None
        if self.peek().kind == "at" and self.peek().line == self.last.line:
            d = self.next()
            device = _unescape(d, d.text[2:-1]) if d.text.startswith('@"') else d.text[1:]
        block_open = None
        if prim.num_blocks and self.peek().text == "{" and self.peek().line == self.last.line:
            block_open = self.next()
        loc = self.parse_loc()
        self.end_of_line(f"the {prim.name} op")
        where = colon or name_tok
        blocks = self.parse_nested_blocks(prim) if block_open is not None else []
        if len(types) != len(result_toks):
            raise self.error(f"{prim.name}: {len(result_toks)} result name(s) but {len(types)} type(s)", where)
        for k, raw in literals.items():
            if not types:
                raise self.error(f"{prim.name}: a literal attribute needs a result type to give its dtype "
                                 "and shape", raw.tok)
            attrs[k] = self.make_literal(raw, types[0])
        try:
            canon = prim.normalize_attrs(attrs)
        except ShapeError as e:
            raise self.error(f"{prim.name}: {e.reason}", name_tok) from None
        except Exception as e:  # a bug in the registry; still a parse error at this op
            raise self.error(f"{prim.name}: invalid attributes ({_describe(e)})", name_tok) from None
        in_types = [v.type for v in inputs]
        try:
            inferred = prim.infer(in_types, canon, blocks)
        except ShapeError as e:
            raise self.error(e.reason if e.reason.startswith(prim.name + ":") else f"{prim.name}: {e.reason}",
                             name_tok) from None
        except Exception as e:  # a shape rule that raised something else than ShapeError
            raise self.error(f"{prim.name}: its shape rule failed on inputs ({', '.join(map(str, in_types))}) "
                             f"({_describe(e)})", name_tok) from None
        if inferred != types:
            bad = next((i for i, (a, b) in enumerate(zip(types, inferred)) if a != b), 0)
            at = type_toks[bad] if bad < len(type_toks) else where
            raise self.error(f"{prim.name}: declared result type {', '.join(map(str, types)) or '()'} differs "
                             f"from the type its rule gives, {', '.join(map(_type_str, inferred)) or '()'}", at)
        op = Op(prim, inputs, canon, types, device=device, loc=loc, blocks=blocks)
        for t, r in zip(result_toks, op.results):
            self.values[t.text[1:]] = r
        return op

    def parse_nested_blocks(self, prim: Primitive) -> list[Block]:
        """The blocks an op owns: ``^(%args...)`` lines, ops, ``return``, ``}``, with ``} {``
        between blocks. A block sees only its own arguments and ops (isolated from above)."""
        blocks: list[Block] = []
        while True:
            caret = self.peek()
            if caret.text != "^" or caret.kind != "punct":
                raise self.error(f"expected '^(...)' opening a block of {prim.name}, found {_found(caret)}", caret)
            self.next()
            self.expect("(", " after '^'")
            args: list[Value] = []
            if not self.accept(")"):
                while True:
                    t = self.next()
                    if t.kind != "pct":
                        raise self.error(f"expected a block argument such as %3, found {_found(t)}", t)
                    self.define(t)
                    self.expect(":", f" after block argument {t.text}")
                    args.append(Value(self.parse_type(), name=t.text[1:]))
                    if self.accept(")"):
                        break
                    self.expect(",", " or ')' between block arguments")
            self.end_of_line("the block arguments")
            block = Block(args)
            outer, self.values = self.values, {a.name: a for a in args}
            try:
                self.parse_block_body(block)
            finally:
                self.values = outer
            close = self.expect("}", f" closing the block of {prim.name}")
            blocks.append(block)
            if self.peek().text == "{" and self.peek().kind == "punct" and self.peek().line == close.line:
                self.next()
                self.end_of_line("'{'")
                continue
            self.end_of_line("'}'")
            return blocks

    def parse_loc(self) -> SourceLoc | None:
        """A ``# file:line`` comment right after the op, on its line, or None."""
        t = self.toks[self.i]
        if t.kind != "comment" or t.line != self.last.line:
            return None
        m = _LOC_RE.fullmatch(t.text)
        if m is None:
            return None
        return SourceLoc(m.group(1), int(m.group(2)))

    def parse_attrs(self, prim: Primitive) -> tuple[dict[str, Any], dict[str, _RawLiteral]]:
        attrs: dict[str, Any] = {}
        literals: dict[str, _RawLiteral] = {}
        if not self.accept("{"):
            return attrs, literals
        if self.accept("}"):
            return attrs, literals
        while True:
            k = self.next()
            if k.kind != "ident":
                raise self.error(f"expected an attribute name, found {_found(k)}", k)
            spec: AttrSpec | None = prim.attrs.get(k.text)
            if spec is None:
                takes = ", ".join(prim.attrs) or "no attributes"
                raise self.error(f"unknown attribute {_short(k.text)} of {prim.name} (it takes {takes})", k)
            if k.text in attrs or k.text in literals:
                raise self.error(f"attribute {k.text} given twice", k)
            self.expect("=", f" after attribute {k.text}")
            vtok = self.peek()
            if spec.kind == "literal":
                literals[k.text] = self.parse_literal()
            else:
                raw = self.parse_attr_value(0)
                try:
                    attrs[k.text] = coerce_attr(prim.name, k.text, spec.kind, raw)
                except ShapeError as e:
                    raise self.error(f"{prim.name}: {e.reason}", vtok) from None
                except Exception as e:  # a bug in coerce_attr; still a parse error here
                    raise self.error(f"{prim.name}: invalid value for attribute {k.text} of kind {spec.kind} "
                                     f"({_describe(e)})", vtok) from None
            if self.accept("}"):
                return attrs, literals
            self.expect(",", " or '}' between attributes")

    def parse_attr_value(self, depth: int) -> Any:
        t = self.next()
        if t.kind == "number":
            return self.number(t)
        if t.kind == "string":
            return _unescape(t, t.text[1:-1])
        if t.kind == "ident":
            if t.text in ("true", "false"):
                return t.text == "true"
            d = from_short(t.text)
            if d is not None:
                return d
            raise self.error(f"unexpected {_short(t.text)} in an attribute value", t)
        if t.text == "(" and t.kind == "punct":
            if depth >= MAX_ATTR_DEPTH:
                raise self.error("attribute value nested too deeply", t)
            items: list[Any] = []
            if self.accept(")"):
                return ()
            while True:
                items.append(self.parse_attr_value(depth + 1))
                if self.accept(")"):
                    return tuple(items)
                self.expect(",", " or ')' in a tuple")
                if self.accept(")"):
                    return tuple(items)
        raise self.error(f"expected an attribute value, found {_found(t)}", t)

    # ---- literals ----------------------------------------------------------------------
    def parse_literal(self) -> _RawLiteral:
        t = self.peek()
        if t.kind == "ident" and t.text == "b64":
            self.next()
            s = self.next()
            if s.kind != "string" or s.line != t.line or s.col != t.col + 3:
                raise self.error('expected b64"<base64 bytes>"', s)
            return _RawLiteral("b64", s.text[1:-1], t, s)
        if t.kind == "punct" and t.text == "[":
            return _RawLiteral("list", self.parse_list(), t, t)
        if t.kind == "number" or (t.kind == "ident" and t.text in ("true", "false")):
            self.next()
            return _RawLiteral("list", ((), [self.scalar(t)], [t]), t, t)
        raise self.error(f"expected an array literal (a number, true, false, nested [lists] or b64\"...\"), "
                         f"found {_found(t)}", t)

    def scalar(self, t: Token) -> int | float | bool:
        if t.kind == "number":
            if _INT_RE.fullmatch(t.text):
                if len(t.text) > 24:
                    raise self.error(f"literal element {_short(t.text)} is out of range", t)
                return int(t.text)
            return self.float_token(t)
        if t.kind == "ident" and t.text in ("true", "false"):
            return t.text == "true"
        raise self.error(f"expected a number, true, false or '[' in a literal, found {_found(t)}", t)

    def parse_list(self) -> tuple[tuple[int, ...], list[Any], list[Token]]:
        """A rectangular nested list, parsed without recursion: (shape, flat values, their tokens)."""
        self.next()  # '['
        dims: list[int | None] = [None]   # the length of every list at each depth, once known
        counts = [0]                      # elements so far of the open list at each depth
        leaf_depth: int | None = None     # the depth scalars sit at
        flat: list[Any] = []
        toks: list[Token] = []
        depth = 1
        want_element = True               # just after '[' or ','
        after_comma = False

        def ragged(t: Token) -> ParseError:
            return self.error("literal is not rectangular (nested lists of different lengths or depths)", t)

        while depth:
            t = self.next()
            if t.kind == "punct" and t.text == "]":
                if after_comma:
                    raise self.error("expected a literal element before ']'", t)
                n = counts[depth - 1]
                if dims[depth - 1] is None:
                    dims[depth - 1] = n
                elif dims[depth - 1] != n:
                    raise ragged(t)
                depth -= 1
                want_element = after_comma = False
            elif t.kind == "punct" and t.text == ",":
                if want_element:
                    raise self.error("expected a literal element before ','", t)
                want_element, after_comma = True, True
            else:
                if not want_element:
                    raise self.error(f"expected ',' or ']' in a literal, found {_found(t)}", t)
                counts[depth - 1] += 1
                after_comma = False
                if t.kind == "punct" and t.text == "[":
                    if leaf_depth is not None and depth >= leaf_depth:
                        raise ragged(t)
                    depth += 1
                    if len(dims) < depth:
                        dims.append(None)
                        counts.append(0)
                    counts[depth - 1] = 0
                else:
                    if leaf_depth is None:
                        if len(dims) > depth:
                            raise ragged(t)
                        leaf_depth = depth
                    elif leaf_depth != depth:
                        raise ragged(t)
                    flat.append(self.scalar(t))
                    toks.append(t)
                    want_element = False
        return tuple(d or 0 for d in dims), flat, toks

    def make_literal(self, raw: _RawLiteral, ty: TensorType) -> Literal:
        d = ty.dtype
        if raw.kind == "b64":
            try:
                data = base64.b64decode(raw.payload, validate=True)
            except (binascii.Error, ValueError):
                raise self.error("malformed base64 in a literal", raw.data_tok) from None
            if len(data) != ty.nbytes:
                raise self.error(f"literal has {len(data)} bytes, the result type {ty} needs {ty.nbytes}",
                                 raw.data_tok)
            if d.is_bool and data and max(data) > 1:
                raise self.error("a bool literal's bytes must be 0 or 1", raw.data_tok)
            try:
                arr = np.frombuffer(data, dtype=d.np.newbyteorder("<")).astype(d.np).reshape(ty.shape)
            except (ValueError, OverflowError, MemoryError) as e:
                raise self.error(f"cannot build a literal of type {ty} ({_describe(e)})", raw.tok) from None
            return Literal(arr)
        shape, flat, toks = raw.payload
        if shape != ty.shape:
            raise self.error(f"literal has shape {list(shape)}, the result type {ty} needs {list(ty.shape)}",
                             raw.tok)
        for x, t in zip(flat, toks):
            if isinstance(x, bool) != d.is_bool or (d.is_int and not isinstance(x, int)):
                raise self.error(f"literal element {_short(t.text)} does not fit dtype {d}", t)
        try:
            with np.errstate(over="raise", invalid="raise"):
                arr = np.array(flat, dtype=d.np).reshape(ty.shape)
        except (OverflowError, FloatingPointError, ValueError, MemoryError):
            bad = raw.tok
            for x, t in zip(flat, toks):
                try:
                    with np.errstate(over="raise", invalid="raise"):
                        np.array([x], dtype=d.np)
                except (OverflowError, FloatingPointError, ValueError):
                    bad = t
                    break
            raise self.error(f"literal element {_short(bad.text)} is out of range for dtype {d}", bad) from None
        return Literal(arr)


def _type_str(t: Any) -> str:
    try:
        return str(t)
    except Exception:
        return "<unprintable type>"


def _describe(e: BaseException) -> str:
    try:
        text = str(e)
    except Exception:
        text = ""
    text = text if len(text) <= 200 else text[:200] + "..."
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def parse(text: str) -> Function:
    """Parse the text form of one function; raises ParseError with line and column."""
    if not isinstance(text, str):
        raise TypeError(f"parse expects a str, got {type(text).__name__}")
    p = _Parser(text)
    try:
        return p.parse_function()
    except RecursionError:
        t = p.toks[min(p.i, len(p.toks) - 1)]
        raise ParseError("input nested too deeply", t.line, t.col) from None


def parse_type(text: str) -> TensorType:
    """Parse one type such as ``f32[2,3]``; raises ParseError with line and column."""
    if not isinstance(text, str):
        raise TypeError(f"parse_type expects a str, got {type(text).__name__}")
    p = _Parser(text)
    ty = p.parse_type()
    end = p.peek()
    if end.kind != "eof":
        raise p.error(f"unexpected {_found(end)} after the type", end)
    return ty
