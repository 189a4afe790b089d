"""Spark's JSON reading as Jackson does it: ``from_json`` (PERMISSIVE,
default options) of a column of messages into a struct of
:data:`JSON_TYPES` fields, as :mod:`gpuwm.project` evaluates a
``{"from_json": ...}`` expression.

The messages go through ``pyarrow.json`` in one call; only
those it rejects are parsed one by one, by :func:`spark_json`, which follows
Spark's ``JacksonParser`` with its default options (single quotes and
``NaN``/``Infinity`` allowed; leading zeros, control characters, comments
and trailing commas not; text after the first value ignored): a value that
is not JSON gives a struct of nulls, a field that does not convert a null
field (the others kept), an empty or blank message a null struct. A field
whose value is malformed inside (``{"s": {"a": 1,}, "k": 1}``) is read on
as Jackson reads on after the error, from where the error left it: ``s``
null and ``k`` 1 there, every field null elsewhere (:class:`_Jackson`).
Each message not parsed whole is counted (``malformed``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .javatext import _is_int, _java_double

JSON_TYPES = {"bigint": pa.int64(), "int": pa.int32(), "smallint": pa.int16(), "tinyint": pa.int8(),
              "double": pa.float64(), "boolean": pa.bool_(), "string": pa.string()}
_INT_RANGE = {"bigint": 63, "int": 31, "smallint": 15, "tinyint": 7}


def json_struct(fields: list) -> pa.StructType:
    return pa.struct([pa.field(n, JSON_TYPES[t]) for n, t in fields])


def from_json(values: pa.Array, fields: list) -> tuple[pa.Array, int]:
    """Spark's ``from_json(values, struct)`` (PERMISSIVE), and how many
    messages did not parse whole."""
    import pyarrow.json as pj

    typ = json_struct(fields)
    n = len(values)
    if n == 0:
        return pa.array([], typ), 0
    raw = values.view(pa.binary()) if pa.types.is_string(values.type) else values
    # pyarrow.json: one object per line; a line it would skip (blank) or misread (not an
    # object: its root must be one) goes the slow way
    # (and a non-finite number goes the slow way too: pyarrow reads `Inf`, which Jackson refuses)
    fast = pc.and_(pc.starts_with(raw, "{"), pc.ends_with(raw, "}")).fill_null(False).to_numpy(zero_copy_only=False)
    fast[_holding(raw, (b"\n", b"\r", b"Inf", b"NaN"))] = False
    idx = np.flatnonzero(fast)
    opts = pj.ParseOptions(explicit_schema=pa.schema(list(typ)), unexpected_field_behavior="ignore")
    parsed: list[tuple[np.ndarray, pa.Table]] = []
    slow = list(np.flatnonzero(~fast))

    def parse(ix: np.ndarray) -> None:  # the rows pyarrow takes, in one call or by halves
        if not len(ix):
            return
        try:
            got = pj.read_json(pa.BufferReader(_lines(raw if len(ix) == n else raw.take(pa.array(ix)))),
                               parse_options=opts)
        except (pa.ArrowInvalid, UnicodeDecodeError):
            got = None
        if got is not None and got.num_rows == len(ix):
            parsed.append((ix, got))
        elif len(ix) == 1:
            slow.append(int(ix[0]))
        else:
            parse(ix[: len(ix) // 2])
            parse(ix[len(ix) // 2:])

    parse(idx)
    bad = 0
    pieces, order = [], []
    for ix, got in parsed:
        pieces.append(pa.StructArray.from_arrays([got.column(f.name).combine_chunks().cast(f.type) for f in typ],
                                                 fields=list(typ)))
        order.append(ix)
    if slow:
        slow_ix = np.asarray(sorted(slow), np.int64)
        rows = []
        for v in raw.take(pa.array(slow_ix)).to_pylist():
            row, ok = spark_json(v, fields)
            bad += (v is not None) and not ok
            rows.append(row)
        pieces.append(pa.array(rows, typ))
        order.append(slow_ix)
    allrows = pa.concat_arrays(pieces) if len(pieces) > 1 else pieces[0]
    at = np.concatenate(order)
    if len(at) == n and (at[1:] > at[:-1]).all():
        return allrows, bad
    inv = np.empty(n, np.int64)
    inv[at] = np.arange(n)
    return allrows.take(pa.array(inv)), bad


def _offsets(values: pa.Array) -> np.ndarray:
    """A binary or string array's value offsets (32- or 64-bit), as NumPy, without a copy."""
    wide = pa.types.is_large_binary(values.type) or pa.types.is_large_string(values.type)
    return np.frombuffer(values.buffers()[1], np.int64 if wide else np.int32, len(values) + 1,
                         values.offset * (8 if wide else 4))


def _holding(values: pa.Array, needles: tuple[bytes, ...]) -> np.ndarray:
    """The rows of a binary array whose bytes hold any of ``needles``: each
    found by a byte search over the whole data buffer (a loop over the
    matches, usually none), not a regex per row."""
    offsets = _offsets(values)
    lo, hi = int(offsets[0]), int(offsets[-1])
    buf = values.buffers()[2]
    data = b"" if buf is None else memoryview(buf)[lo:hi].tobytes()
    hits = []
    for needle in needles:
        if len(needle) > 1 and data.find(needle[:1]) < 0:  # (a one-byte search runs at memchr's speed)
            continue
        i = data.find(needle)
        while i >= 0:
            hits.append(i)
            i = data.find(needle, i + 1)
    if not hits:
        return np.zeros(0, np.int64)
    # (a match across two rows' bytes names the first: a row sent the slow, exact way for nothing)
    return np.unique(np.searchsorted(offsets, np.asarray(hits, np.int64) + lo, side="right") - 1)


def _lines(values: pa.Array) -> pa.Buffer:
    """The values, each followed by a newline, as one buffer (no Python per value)."""
    joined = pc.binary_join_element_wise(values, pa.scalar(b"", values.type), pa.scalar(b"\n", values.type))
    offsets = _offsets(joined)
    return joined.buffers()[2][offsets[0]:offsets[-1]]


# -- one message, as Spark's JacksonParser reads it ------------------------------------
class _Bad(Exception):
    """The message is not JSON (Jackson's ``JsonProcessingException``)."""


_WS = b" \t\n\r"
_ESCAPES = {0x22: b'"', 0x5C: b"\\", 0x2F: b"/", 0x62: b"\b", 0x66: b"\f", 0x6E: b"\n", 0x72: b"\r", 0x74: b"\t"}
_NUMBER_WORDS = {b"NaN": math.nan, b"Infinity": math.inf, b"+Infinity": math.inf, b"-Infinity": -math.inf}


def spark_json(v: bytes | None, fields: list) -> tuple[dict | None, bool]:
    """One message through Spark's ``from_json`` (PERMISSIVE, default
    options): (the struct as a dict or None, whether it parsed whole)."""
    if v is None:
        return None, True
    p = _Jackson(v)
    try:
        tok = p.next_token()
        if tok is None:  # empty or blank: no row, a null struct
            return None, False
        if tok != "{":  # a root that is not an object: every field null
            raise _Bad()
        return p.record(dict(fields))
    except (_Bad, IndexError, ValueError, UnicodeDecodeError):
        return {n: None for n, _ in fields}, False


class _Jackson:
    """Jackson's streaming parser as Spark's ``JacksonParser`` drives it,
    down to how it goes on after an error inside a field: a token that
    fails is consumed but does not become the current one, and the parsing
    context stays where it was (its entry count advanced) — so Spark's loop
    over the root object's fields goes on from there, in whatever context
    that is (``{"s": {"a": 1,}, "k": 1}`` as a ``s string, k bigint``:
    ``s`` null, ``k`` 1 — the trailing comma's ``}`` was consumed, ``, "k":
    1`` read as the inner object's). Contexts are ``[kind, index, name]``;
    tokens ``{ } [ ]``, ``("name", text)`` and the scalars of
    :class:`_Parser`; a field name's value is read with it (Jackson's
    ``_nextToken``; after a field name whose colon or value failed, the next
    token is none, the end), a string's text is read when asked for (a bad
    one poisons the rest)."""

    def __init__(self, b: bytes):
        self.lex = _Parser(b)
        self.ctx: list[list] = [["root", -1, None]]
        self.cur: Any = None
        self._pending: Any = None  # the value read with a field name
        self._poisoned = False  # a string whose text Jackson cannot read: the next token fails

    def next_token(self) -> Any:
        if isinstance(self.cur, tuple) and self.cur[0] == "name":  # after a field name: its value — none where
            t, self._pending = self._pending, None  # it failed to read, which ends Spark's loop over the fields
            return self._set(t)
        if self._poisoned:
            raise _Bad()
        lex = self.lex
        lex._skip_ws()
        b, i = lex.b, lex.i
        top = self.ctx[-1]
        if i >= len(b):  # the end: fine at the root only
            if top[0] != "root":
                raise _Bad()
            self.cur = None
            return None
        c = b[i:i + 1]
        if c in (b"}", b"]"):  # a closing mark closes the scope (a mismatch is an error)
            lex.i = i + 1
            if top[0] != ("object" if c == b"}" else "array"):
                raise _Bad()
            self.ctx.pop()
            return self._set(c.decode())
        top[1] += 1
        if top[0] != "root" and top[1] > 0:  # a comma, then the next mark
            lex.i = i + 1
            if c != b",":
                raise _Bad()
            lex._skip_ws()
            if lex.i >= len(b):
                raise _Bad()
            c = b[lex.i:lex.i + 1]
        if top[0] == "object":  # a field name (quoted), its colon, its value
            if c not in (b'"', b"'"):
                lex.i += 1
                raise _Bad()
            top[2] = lex._string(c)
            self.cur = ("name", top[2])
            lex._skip_ws()
            if lex.b[lex.i:lex.i + 1] != b":":
                lex.i += 1
                raise _Bad()
            lex.i += 1
            self._pending = self._value()
            return self.cur
        return self._set(self._value())

    def _value(self) -> Any:
        """The value token at the lexer's position (not yet the current one)."""
        lex = self.lex
        lex._skip_ws()
        c = lex.b[lex.i:lex.i + 1]
        if c in (b"}", b"]", b",", b":", b""):
            lex.i += 1
            raise _Bad()  # expected a value
        if c in (b'"', b"'"):
            at = lex.i
            try:
                return ("s", lex._string(c))
            except (_Bad, IndexError, ValueError, UnicodeDecodeError):
                lex.i = at
                return ("s!", None)
        if c in (b"{", b"["):
            lex.i += 1
            return c.decode()
        return lex.token()

    def _set(self, t: Any) -> Any:
        if t in ("{", "["):
            self.ctx.append(["object" if t == "{" else "array", -1, None])
        self.cur = t
        if isinstance(t, tuple) and t[0] == "s!":
            self._poisoned = True
        return t

    def text(self, t: Any) -> str:
        """A string token's text (Jackson reads it now)."""
        if t[0] == "s!":
            raise _Bad()
        return t[1]

    def current_name(self) -> str | None:
        """Jackson's ``getCurrentName``: a start mark's is its parent's."""
        at = -2 if self.cur in ("{", "[") and len(self.ctx) > 1 else -1
        return self.ctx[at][2]

    def skip_children(self) -> None:
        """Past the structure the current token starts (nothing for a scalar)."""
        if self.cur not in ("{", "["):
            return
        depth = 1
        while depth:
            t = self.next_token()
            if t is None:
                raise _Bad()
            depth += 1 if t in ("{", "[") else -1 if t in ("}", "]") else 0

    def record(self, types: dict) -> tuple[dict, bool]:
        """The root object's fields, as Spark's ``convertObject`` reads them
        (the current token its ``{``): each field a converter may fail
        (that field null, the rest kept, the record partial); an error
        between fields fails the record."""
        row: dict = {n: None for n in types}
        ok = True
        while True:
            t = self.next_token()
            if t is None or t == "}":
                return row, ok
            name = self.current_name()
            if name in types:
                try:
                    row[name] = self._convert(types[name])
                except (_Field, _Bad, IndexError, ValueError, UnicodeDecodeError):
                    ok = False  # the field keeps what an earlier duplicate of it gave
                    self.skip_children()
            else:
                self.skip_children()

    def _convert(self, typ: str) -> Any:
        tok = self.cur
        if isinstance(tok, tuple) and tok[0] == "name":  # the field's value
            tok = self.next_token()
        if tok is None or tok == ("z", None):
            return None
        kind = tok[0] if isinstance(tok, tuple) else tok
        if typ in _INT_RANGE:
            if kind != "n" or not _is_int(tok[1]):
                raise _Field()
            x = int(tok[1])
            top = 256 if typ == "tinyint" else 1 << _INT_RANGE[typ]  # Jackson's getByteValue takes 128..255, wrapped
            if not -(1 << _INT_RANGE[typ]) <= x < top:
                raise _Field()
            return x - 256 if x > 127 and typ == "tinyint" else x
        if typ == "double":
            if kind == "n":
                return _NUMBER_WORDS.get(tok[1].encode(), None) if tok[1][-1:].isalpha() else float(tok[1])
            if kind in ("s", "s!"):
                text = self.text(tok)
                if text in ("NaN", "+INF", "+Infinity", "Infinity", "-INF", "-Infinity"):
                    return {"NaN": math.nan, "-INF": -math.inf, "-Infinity": -math.inf}.get(text, math.inf)
            raise _Field()
        if typ == "boolean":
            if kind in ("t", "f"):
                return kind == "t"
            raise _Field()
        if typ == "string":
            if kind in ("s", "s!"):
                return self.text(tok)
            return self.copy()  # anything else: Jackson's copy of it (from_json reads through a Reader)
        raise _Field()

    def copy(self) -> str:
        """The value the current token starts as Jackson's generator writes
        it (``copyCurrentStructure``): compact, numbers as Java prints them."""
        tok = self.cur
        if tok in ("{", "["):
            close = "}" if tok == "{" else "]"
            out = []
            while True:
                t = self.next_token()
                if t == close:
                    return tok + ",".join(out) + close
                if t is None or t in ("}", "]"):
                    raise _Bad()
                if isinstance(t, tuple) and t[0] == "name":
                    name = _jackson_string(t[1])
                    self.next_token()
                    out.append(name + ":" + self.copy())
                else:
                    out.append(self.copy())
        if not isinstance(tok, tuple) or tok[0] == "name":
            raise _Bad()  # (a closing mark: the generator has nothing open)
        kind, text = tok
        if kind in ("s", "s!"):
            return _jackson_string(self.text(tok))
        if kind in ("t", "f", "z"):
            return {"t": "true", "f": "false", "z": "null"}[kind]
        if _is_int(text):
            return str(int(text))
        return _java_double(_NUMBER_WORDS[text.encode()] if text[-1:].isalpha() else float(text))


class _Parser:
    """A JSON tokenizer with Spark's Jackson features; tokens: ``{ } [ ] : ,``,
    ``("s", text)``, ``("n", text)``, ``("t"|"f"|"z", None)``."""

    def __init__(self, b: bytes):
        self.b, self.i = b, 0

    def _skip_ws(self) -> None:
        b, i = self.b, self.i
        while i < len(b) and b[i] in _WS:
            i += 1
        self.i = i

    def token(self) -> Any:
        self._skip_ws()
        b, i = self.b, self.i
        if i >= len(b):
            return None
        c = b[i:i + 1]
        if c in (b"{", b"}", b"[", b"]", b":", b","):
            self.i = i + 1
            return c.decode()
        if c in (b'"', b"'"):
            return ("s", self._string(c))
        for word, kind in ((b"true", "t"), (b"false", "f"), (b"null", "z")):
            if b.startswith(word, i):
                self.i = i + len(word)
                self._end_of_word()
                return (kind, None)
        for word in _NUMBER_WORDS:
            if b.startswith(word, i):
                self.i = i + len(word)
                self._end_of_word()
                return ("n", word.decode())
        return ("n", self._number())

    def _end_of_word(self) -> None:
        if self.i < len(self.b) and (chr(self.b[self.i]).isalnum() or self.b[self.i] in b"_"):
            raise _Bad()

    def _number(self) -> str:
        b, i = self.b, self.i
        j = i + (b[i:i + 1] == b"-")
        k = j
        while k < len(b) and 48 <= b[k] <= 57:
            k += 1
        if k == j or (b[j:j + 1] == b"0" and k - j > 1):  # no digits, or a leading zero
            raise _Bad()
        if b[k:k + 1] == b".":
            m = k + 1
            while m < len(b) and 48 <= b[m] <= 57:
                m += 1
            if m == k + 1:
                raise _Bad()
            k = m
        if b[k:k + 1] in (b"e", b"E"):
            m = k + 1 + (b[k + 1:k + 2] in (b"+", b"-"))
            s = m
            while m < len(b) and 48 <= b[m] <= 57:
                m += 1
            if m == s:
                raise _Bad()
            k = m
        self.i = k
        self._end_of_word()
        return b[i:k].decode()

    def _string(self, quote: bytes) -> str:
        b, i = self.b, self.i + 1
        out = bytearray()
        q = quote[0]
        while True:
            c = b[i]
            if c == q:
                self.i = i + 1
                return out.decode("utf-8")
            if c < 0x20:
                raise _Bad()  # an unquoted control character
            if c == 0x5C:  # backslash
                e = b[i + 1]
                if e in _ESCAPES:
                    out += _ESCAPES[e]
                    i += 2
                elif e == 0x75:  # \uXXXX, surrogate pairs joined
                    cp = int(b[i + 2:i + 6].decode("ascii"), 16)
                    i += 6
                    if 0xD800 <= cp < 0xDC00 and b[i:i + 2] == b"\\u":
                        lo = int(b[i + 2:i + 6].decode("ascii"), 16)
                        if 0xDC00 <= lo < 0xE000:
                            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00)
                            i += 6
                    out += chr(cp).encode("utf-8", "surrogatepass")
                elif e == 0x27 and q == 0x27:  # \' inside a single-quoted string
                    out += b"'"
                    i += 2
                else:
                    raise _Bad()
                continue
            out.append(c)
            i += 1


class _Field(Exception):
    """A field whose value does not convert to its type: null, the record partial."""


def _jackson_string(text: str) -> str:
    out = []
    for ch in text:
        o = ord(ch)
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif o < 0x20:
            out.append({8: "\\b", 9: "\\t", 10: "\\n", 12: "\\f", 13: "\\r"}.get(o, f"\\u{o:04X}"))
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'

