"""Java's text of a number, as Spark's JVM writes it: ``Double.toString``'s
digits (:func:`_java_double`) — Java 19 on the shortest that read back
(:func:`_java_digits`), Java 8 to 18 their free-format digit loop
(:func:`_java18_digits`, JDK-4511638's digits included) — and whether a
JSON number's text is an integer (:func:`_is_int`). What ``to_json``
(:mod:`gpuwm.project`) writes a double with, and what ``from_json``'s
string fields copy a number as (:mod:`gpuwm.sparkjson`)."""

from __future__ import annotations

import math
import struct


def _java_digits(x: float, java: int) -> tuple[str, int]:
    """The digits and scientific exponent of Java ``java``'s
    ``Double.toString`` of positive finite ``x``. From Java 19 on: the
    shortest that read back as ``x`` (Python's ``repr``'s); where those
    are one digit, the closest two that read back as ``x`` if closer
    (``4.9E-324``). Before: an integer below 2^63 as the exact value's
    digits, the low ``floor(log10(2^(e - 54)))`` of them rounded away (half
    up) when ``x`` has ``2^e`` as its highest bit and ``e > 55``
    (``1.61304845894623136E17`` where the shortest is
    ``1.6130484589462314E17``); any other value as :func:`_java18_digits`
    develops it (JDK-4511638: ``1e23`` as ``9.999999999999999E22``)."""
    e2 = math.frexp(x)[1] - 1  # x's highest bit: 2^e2
    if java < 19 and x.is_integer() and e2 < 63:
        value, drop = int(x), len(str(2 ** (e2 - 54))) - 1 if e2 - 54 > 1 else 0  # floor(log10(2^(e2 - 54)))
        if drop:
            value, residue = divmod(value, 10 ** drop)
            value += residue >= 10 ** drop // 2
        text = str(value)
        return text.rstrip("0"), len(text) - 1 + drop
    if java < 19:
        return _java18_digits(x)
    from decimal import ROUND_HALF_EVEN, Decimal

    short = Decimal(repr(x)).normalize()
    _, digs, exp = short.as_tuple()
    if len(digs) == 1:  # Java's at least two digits: the closest of those with two that read back as x
        exact = Decimal(x)
        two = exact.quantize(Decimal(1).scaleb(exact.adjusted() - 1), rounding=ROUND_HALF_EVEN)
        if float(two) == x and abs(two - exact) < abs(short - exact):
            _, digs, exp = two.normalize().as_tuple()
    digits = "".join(map(str, digs))
    return digits, len(digits) + exp - 1


#: bits of 5**i, as Java 8-18's digit loop sizes its integers (5**0: 0)
_BITS_OF_5 = [0] + [(5 ** i).bit_length() for i in range(1, 27)]


def _java18_digits(x: float) -> tuple[str, int]:
    """``Double.toString``'s digits of positive finite ``x`` that is not an
    integer below 2^63, as Java 8 to 18 develop them (Steele and White's
    free-format digit loop, as ``FloatingDecimal`` runs it): the decimal
    exponent estimated from the binary one (one too high is corrected by a
    leading zero), then digit after digit of ``x / 10^exp`` until the rest
    is below the margin ``m`` (half the gap to the next double; a quarter
    for a power of two, whose lower gap is the smaller) or above ``10 - m``;
    at least two digits in E-form (below 10^-3 or from 10^8); the last
    digit rounded up by the rest (ties to even). Java's arithmetic is
    kept: ``long`` where the operands fit (``int`` where they fit in 32
    bits, which a double's 53-bit margin leaves none), else big integers;
    ``long`` wraps where the margin outgrows it (then the loop stops) and
    tests ``b + m > 10s`` where the big integers test ``>=``. A digit
    rounded up may leave zeros at the end, written as they are. Checked
    equal to a Java 17 JVM's on ~110 k doubles in ``tests/test_project.py``
    (and ~1 M by hand)."""
    raw = struct.unpack("<q", struct.pack("<d", x))[0]
    bexp, fract = (raw >> 52) & 0x7FF, raw & ((1 << 52) - 1)
    if bexp == 0:  # subnormal: its bits moved up to the 2^52 place
        shift = 53 - fract.bit_length()
        fract, bexp, nsig = fract << shift, 1 - shift, fract.bit_length()
    else:
        fract, nsig = fract | 1 << 52, 53
    bexp -= 1023
    tail = (fract & -fract).bit_length() - 1
    nfract = 53 - tail  # the significant bits of the fraction
    ntiny = max(0, nfract - bexp - 1)  # its bits below 2^0
    mant = struct.unpack("<d", struct.pack("<q", (1023 << 52) | (fract & ((1 << 52) - 1))))[0]  # in [1, 2)
    dec = math.floor((mant - 1.5) * 0.289529654 + 0.176091259 + bexp * 0.301029995663981)
    # x / 10^dec as b / s, and the margin as m / s: each as powers of 2 and 5
    b5, s5 = max(0, -dec), max(0, dec)
    b2, s2 = b5 + ntiny + bexp, s5 + ntiny
    m2 = b2 - nsig
    b2 -= nfract - 1
    common = min(b2, s2)
    b2, s2, m2 = b2 - common, s2 - common, m2 - common - (nfract == 1)
    if m2 < 0:
        b2, s2, m2 = b2 - m2, s2 - m2, 0
    bbits = nfract + b2 + (_BITS_OF_5[b5] if b5 < len(_BITS_OF_5) else b5 * 3)
    tbits = s2 + 1 + (_BITS_OF_5[s5 + 1] if s5 + 1 < len(_BITS_OF_5) else (s5 + 1) * 3)
    width = 32 if bbits < 32 and tbits < 32 else 64 if bbits < 64 and tbits < 64 else 0  # 0: big integers

    def w(v: int) -> int:  # Java's int or long arithmetic
        if not width:
            return v
        v &= (1 << width) - 1
        return v - (1 << width) if v >> (width - 1) else v

    b, s, m = (fract >> tail) * 5 ** b5 << b2, 5 ** s5 << s2, 5 ** b5 << m2
    tens = 10 * s
    q, b = divmod(b, s)
    b, m = 10 * b, w(10 * m)
    low, high = b < m, (w(b + m) > tens) if width else b + m >= tens
    digits = []
    if q or high:
        digits.append(q)
    else:  # the estimate was one too high
        dec -= 1
    if dec < -3 or dec >= 8:
        low = high = False
    while not low and not high:
        q, b = divmod(b, s)
        b, m = 10 * b, w(10 * m)
        if width and m <= 0:  # the margin wrapped
            low = high = True
        else:
            low, high = b < m, (w(b + m) > tens) if width else b + m >= tens
        digits.append(q)
    rest = w(w(b << 1) - tens)  # twice the rest against one unit of the last digit
    if high and (not low or rest > 0 or rest == 0 and digits[-1] & 1):
        i = len(digits) - 1
        while digits[i] == 9 and i:
            digits[i], i = 0, i - 1
        if digits[i] == 9:  # 9...9 carried out: 1 and zeros, one place up
            digits[0], dec = 1, dec + 1
        else:
            digits[i] += 1
    return "".join(map(str, digits)), dec


def _java_double(x: float, java: int = 17) -> str:
    """Java ``java``'s ``Double.toString`` (:func:`_java_digits`; Jackson
    writes non-finite values quoted)."""
    if x != x:
        return '"NaN"'
    if math.isinf(x):
        return '"Infinity"' if x > 0 else '"-Infinity"'
    if x == 0:
        return "-0.0" if math.copysign(1, x) < 0 else "0.0"
    sign = "-" if x < 0 else ""
    digits, e = _java_digits(abs(x), java)  # e: the scientific exponent
    if -3 <= e < 7:
        if e >= 0:
            whole, frac = (digits + "0" * (e + 1))[:e + 1], digits[e + 1:]
        else:
            whole, frac = "0", "0" * (-e - 1) + digits
        return f"{sign}{whole}.{frac or '0'}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{e}"


def _is_int(text: str) -> bool:
    return text.lstrip("-").isdigit()
