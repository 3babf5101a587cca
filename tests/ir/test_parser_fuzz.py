"""Fuzzing ``parse``: whatever the text, the only exception it may raise is ParseError.

Hypothesis feeds arbitrary text, token soups, and valid printed programs (from
``test_text.programs``) with random mutations: characters or tokens deleted, inserted or
replaced, lines swapped, duplicated or dropped, numbers made huge, negative or zero, types
changed. A ParseError must point inside the text; a text that parses must verify and
print stably (printing, parsing and printing again gives the same text).
"""

from __future__ import annotations

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowjit.ir import ParseError, parse, print_function, verify
from flowjit.ir.registry import all_primitives
from tests.ir.test_text import BASE, programs

FUZZ = settings(max_examples=300, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much])

PRIMS = sorted(p.name for p in all_primitives())
ATTRS = sorted({k for p in all_primitives() for k in p.attrs})
DTYPES = ["bool", "i32", "i64", "f16", "f32", "f64"]
NUMBERS = ["0", "1", "-1", "2", "-0", "00", "7", "4294967296", "4611686018427387903", "4611686018427387904",
           "9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
           "18446744073709551616", "1" + "0" * 30, "9" * 400, "9" * 5000, "-" + "9" * 5000, "1e400", "-1e400",
           "1e-400", "0.1", "-0.0", "1.", ".5", "inf", "-inf", "nan", "-nan", "65504.0", "65520.0", "3.5e38"]
PUNCT = ["(", ")", "[", "]", "{", "}", ",", "=", ":", "->", "%", "@", "#", '"', "\\", "-", "\n", " ", "\t"]
WORDS = ["func", "return", "var", "true", "false", "b64", "SAME", "VALID", "@f", "@cpu:0", '@"x y"', "%0", "%1",
         "%x", "%k", "%99", "%a.b", '"SAME"', '"x\\"y"', '"\\q"', '"\\x4"', 'b64"AAAA"', 'b64""', 'b64"A$"',
         "# model.py:3", "# f:" + "9" * 5000, "# :-5"]
VOCAB = PRIMS + ATTRS + DTYPES + NUMBERS + PUNCT + WORDS + [t + "[2,3]" for t in DTYPES] + ["f32[]", "i32[2]"]

_TOKEN_SPLIT = re.compile(r'(\s+|"(?:[^"\\\n]|\\.)*"|[%@]?[A-Za-z0-9_.:]+|->|.)')


def check(text: str) -> None:
    """parse(text) either raises ParseError inside the text, or gives a function that verifies
    and prints stably."""
    try:
        fn = parse(text)
    except ParseError as e:
        lines = text.split("\n")
        assert isinstance(e.line, int) and isinstance(e.col, int)
        assert 1 <= e.line <= len(lines), (e, len(lines))
        assert 1 <= e.col <= len(lines[e.line - 1]) + 1, (e, lines[e.line - 1][:200])
        assert e.message and str(e).startswith(f"line {e.line}, column {e.col}: ")
        return
    verify(fn)
    printed = print_function(fn)
    again = parse(printed)
    verify(again)
    assert print_function(again) == printed


# ---- (a) arbitrary text ---------------------------------------------------------------------

IR_CHARS = "".join(sorted(set("".join(VOCAB)))) + "\r\x00\u00e9\u2028\U0001f600"


@FUZZ
@given(st.one_of(st.text(), st.text(alphabet=IR_CHARS), st.binary().map(lambda b: b.decode("latin-1"))))
def test_arbitrary_text_raises_only_parse_error(text):
    check(text)


@FUZZ
@given(st.lists(st.sampled_from(VOCAB), max_size=60), st.lists(st.sampled_from(["", " ", "\n", ", "]), min_size=1))
def test_token_soup_raises_only_parse_error(tokens, seps):
    check("".join(t + seps[i % len(seps)] for i, t in enumerate(tokens)))


@FUZZ
@given(st.lists(st.sampled_from(VOCAB), max_size=30))
def test_garbage_after_a_valid_prefix(tokens):
    # Most of the text is valid, so the parser gets deep before it meets the garbage.
    cut = BASE.index("%1 = pad")
    for prefix in (BASE[:cut], BASE[:BASE.index("{low=") + 1], BASE[:BASE.index("-> (") + 4]):
        check(prefix + " ".join(tokens))


# ---- (b) mutated programs ----------------------------------------------------------------------

def _tokens(text: str) -> list[str]:
    return [t for t in _TOKEN_SPLIT.findall(text) if t]


def _where(draw, n: int, body: int) -> int:
    """An index in [0, n], seven times in eight past ``body`` (the end of the header line)."""
    lo = draw(st.sampled_from([min(body, n)] * 7 + [0]))
    return draw(st.integers(lo, n))


@st.composite
def mutated(draw) -> str:
    text = print_function(draw(programs(max_ops=5)))
    for _ in range(draw(st.integers(1, 4))):
        body = text.find("\n") + 1
        kind = draw(st.sampled_from(["rep_tok", "number", "type", "del_tok", "ins_tok", "dup_tok", "del_char",
                                     "ins_char", "rep_char", "swap_lines", "dup_line", "del_line", "cut"]))
        if kind.endswith("_char"):
            i = _where(draw, len(text), body)
            c = draw(st.one_of(st.sampled_from(list(IR_CHARS)), st.characters()))
            j = min(len(text), i + draw(st.integers(1, 3)))
            text = {"del_char": text[:i] + text[j:], "ins_char": text[:i] + c + text[i:],
                    "rep_char": text[:i] + c + text[i + 1:]}[kind]
        elif kind.endswith("_tok"):
            toks = _tokens(text)
            i = _where(draw, max(0, len(toks) - 1), len(_tokens(text[:body])))
            new = draw(st.sampled_from(VOCAB))
            if kind == "del_tok":
                del toks[i:i + 1]
            elif kind == "ins_tok":
                toks.insert(i, new)
            elif kind == "rep_tok":
                toks[i:i + 1] = [new]
            else:
                toks.insert(i, toks[i] if toks else new)
            text = "".join(toks)
        elif kind.endswith("_line"):
            lines = text.split("\n")
            i, j = _where(draw, len(lines) - 1, 1), _where(draw, len(lines) - 1, 1)
            if kind == "swap_lines":
                lines[i], lines[j] = lines[j], lines[i]
            elif kind == "dup_line":
                lines.insert(j, lines[i])
            else:
                del lines[i]
            text = "\n".join(lines)
        elif kind == "number":
            spans = [m.span() for m in re.finditer(r"-?\d+(?:\.\d*)?(?:e[+-]?\d+)?", text)]
            if spans:
                a, b = spans[_where(draw, len(spans) - 1, len(spans) // 3)]
                text = text[:a] + draw(st.sampled_from(NUMBERS)) + text[b:]
        elif kind == "type":
            spans = [m.span() for m in re.finditer(r"\b(?:bool|i32|i64|f16|f32|f64)\b", text)]
            if spans:
                a, b = spans[_where(draw, len(spans) - 1, len(spans) // 3)]
                text = text[:a] + draw(st.sampled_from(DTYPES + ["u8", "f128", "i32[", "f32[2]"])) + text[b:]
        else:
            text = text[:_where(draw, len(text), body)]
    return text


@FUZZ
@given(mutated())
def test_mutated_programs_raise_only_parse_error(text):
    check(text)


@FUZZ
@given(programs(max_ops=4), st.data())
def test_every_prefix_and_single_deletion_of_a_program(fn, data):
    text = print_function(fn)
    check(text)
    for _ in range(10):
        i = data.draw(st.integers(0, len(text)))
        check(text[:i])
        check(text[:i] + text[i + 1:])
