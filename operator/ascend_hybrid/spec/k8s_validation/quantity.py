"""Resource quantities as apimachinery's ParseQuantity reads them (its scanner and suffixes ported, quirks included)."""

from __future__ import annotations

import re
from decimal import MAX_EMAX, MIN_EMIN, Context, Decimal

# --- apimachinery api/resource: ParseQuantity ---------------------------------------------------------------------

QUANTITY_FORMAT_MESSAGE = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_INT64_MAX = 2 ** 63 - 1
_EXACT = Context(prec=80, Emax=MAX_EMAX, Emin=MIN_EMIN)


class QuantityError(ValueError):
    pass


def _scan_quantity(text: str) -> tuple[bool, str, str, str, str]:
    """parseQuantityString: (positive, numeric part, numerator, denominator, suffix), exactly as Go scans them."""
    positive, pos, end = True, 0, len(text)
    if text[:1] in ("-", "+"):
        positive = text[0] == "+"
        pos = 1
    while pos < end and text[pos] == "0":  # leading zeros
        pos += 1
    if pos >= end:
        return positive, text, "0", "", ""
    start = pos
    while pos < end and text[pos].isdigit() and text[pos].isascii():
        pos += 1
    numerator = text[start:pos] or "0"
    if pos >= end:
        return positive, text, numerator, "", ""
    denominator = ""
    if text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos].isdigit() and text[pos].isascii():
            pos += 1
        denominator = text[start:pos]
        if pos >= end:
            return positive, text, numerator, denominator, ""
    value, suffix_start = text[:pos], pos
    while pos < end and text[pos] in "eEinumkKMGTP":
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos].isdigit() and text[pos].isascii():
        pos += 1
    if pos < end:
        raise QuantityError(QUANTITY_FORMAT_MESSAGE)
    return positive, value, numerator, denominator, text[suffix_start:]


def parse_quantity(text: str) -> Decimal:
    """ParseQuantity: the value of a Kubernetes quantity ('500m', '16Gi', '1e3'), QuantityError with apimachinery's
    message. Like ParseQuantity it refuses surrounding whitespace; the apiserver trims it from JSON first
    (Quantity.UnmarshalJSON), so callers checking a field's value strip it (`json_quantity`)."""
    if not text:
        raise QuantityError(QUANTITY_FORMAT_MESSAGE)
    if text == "0":
        return Decimal(0)
    positive, value, numerator, denominator, suffix = _scan_quantity(text)
    if suffix in _DECIMAL_SUFFIXES:
        base, exponent = 10, _DECIMAL_SUFFIXES[suffix]
    elif suffix in _BINARY_SUFFIXES:
        base, exponent = 2, _BINARY_SUFFIXES[suffix]
    elif len(suffix) > 1 and suffix[0] in "eE" and re.fullmatch("[-+]?[0-9]+", suffix[1:]):
        base, exponent = 10, int(suffix[1:])
        if not -2 ** 63 <= exponent <= _INT64_MAX:
            raise QuantityError("unable to parse quantity's suffix")
    else:
        raise QuantityError("unable to parse quantity's suffix")
    digits = numerator + denominator
    if not _fast_path(base, exponent, numerator, denominator) and not any(c.isdigit() for c in value):
        # ParseQuantity's slow path reads the numeric part with inf.Dec, which needs at least one digit
        raise QuantityError("unable to parse numeric part of quantity")
    scale = (exponent if base == 10 else 0) - len(denominator)
    mantissa = _EXACT.multiply(Decimal(int(digits)), Decimal(1 if base == 10 else 1 << exponent))
    magnitude = mantissa.scaleb(max(-10 ** 17, min(10 ** 17, scale)), _EXACT)
    return magnitude if positive else -magnitude


def json_quantity(text: str) -> Decimal:
    """A quantity as the apiserver decodes it from JSON: trimmed (strings.TrimSpace), then ParseQuantity."""
    return parse_quantity(text.strip())


def _fast_path(base: int, exponent: int, numerator: str, denominator: str) -> bool:
    """Whether ParseQuantity's int64 fast path takes the number (then even '.' or '+' read as 0)."""
    if base == 10:
        precision, scale = 18 - (len(numerator) + len(denominator)), exponent - len(denominator)
        mantissa = 1
    elif exponent >= 0 and not denominator:
        precision, scale = 15 - len(numerator) - int(exponent * 3 / 10) - 1, 0
        mantissa = 1 << exponent
    else:
        return False
    if precision < 0 or scale < -9:
        return False
    shifted = int(numerator + denominator)
    return shifted <= _INT64_MAX and shifted * mantissa <= _INT64_MAX
