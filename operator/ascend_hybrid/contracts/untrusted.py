"""Reading what others write — a pod's report on its job's channel, a ConfigMap's rank table, a trainer's metrics
page, a device annotation — within bounds, and totally: every reader here returns a value or raises `Rejected`
(a ValueError) naming why, and never anything else, whatever the input.

The bounds are sizes checked before any parsing (JSON text, compressed and expanded bytes), integers within the
range the field can mean (JSON has no limit: `-10**400` is valid JSON), finite numbers, and times that say their
zone (a naive one cannot be compared with the operator's clock). Nesting deeper than MAX_DEPTH is a rejection
too, counted before decoding: Python's decoder recurses, and how deep it may go is a process-wide limit that any
imported library can raise (MindSpore sets 10000), so it cannot be the bound. The shell counts each rejection in
`ascend_hybrid_rejected_inputs_total{kind,reason}` by `Rejected.reason`.
"""

from __future__ import annotations

import json
import math
import re
import zlib
from datetime import UTC, datetime
from itertools import accumulate
from typing import Any

# Rejection reasons: the metric's `reason` label, a closed set.
TOO_LARGE, NOT_JSON, TOO_DEEP, OUT_OF_RANGE, BAD_TIME, MALFORMED = (
    "too-large", "not-json", "too-deep", "out-of-range", "bad-time", "malformed")
REASONS = (TOO_LARGE, NOT_JSON, TOO_DEEP, OUT_OF_RANGE, BAD_TIME, MALFORMED)

MAX_INTEGER_DIGITS = 19  # int64's width: no field we read means more, and a longer one costs quadratic time
# What the apiserver holds at most: all of an object's annotations together, and a ConfigMap's data.
ANNOTATIONS_LIMIT = 256 * 1024
CONFIGMAP_LIMIT = 1024 * 1024
MAX_DEPTH = 64  # arrays and objects inside each other; the deepest document we read (a rank table) nests 5

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(r"[\[\]{}]")
_NESTING = {"[": 1, "{": 1, "]": -1, "}": -1}


class Rejected(ValueError):
    """An input refused: `reason` one of REASONS, the message says what and why for a person."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def _integer(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INTEGER_DIGITS:
        raise Rejected(OUT_OF_RANGE, f"an integer of {len(text.lstrip('-'))} digits")
    return int(text)


def _no_constant(name: str) -> float:
    raise Rejected(OUT_OF_RANGE, f"{name} is not a number JSON holds")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise Rejected(OUT_OF_RANGE, f"{text[:32]} is not a finite number")
    return value


def json_value(text: str | bytes, limit: int, what: str) -> Any:
    """`text` parsed as JSON, at most `limit` bytes long; integers of at most MAX_INTEGER_DIGITS digits, finite
    numbers only (no NaN, Infinity, nor 1e999)."""
    size = len(text.encode() if isinstance(text, str) else text)
    if size > limit:
        raise Rejected(TOO_LARGE, f"{what} is {size} bytes: more than the {limit} read")
    try:
        decoded = text if isinstance(text, str) else text.decode(json.detect_encoding(text), "surrogatepass")
        if depth(decoded) > MAX_DEPTH:
            raise Rejected(TOO_DEEP, f"nests deeper than {MAX_DEPTH}")
        return json.loads(decoded, parse_int=_integer, parse_constant=_no_constant, parse_float=_finite_float)
    except Rejected as rejected:
        raise Rejected(rejected.reason, f"{what}: {rejected}") from None
    except RecursionError:  # unreachable below MAX_DEPTH, kept so that no input escapes as anything but Rejected
        raise Rejected(TOO_DEEP, f"{what} nests deeper than JSON is read") from None
    except ValueError as error:  # UnicodeDecodeError among them
        raise Rejected(NOT_JSON, f"{what} is not JSON: {str(error)[:120]}") from None


def depth(text: str) -> int:
    """The deepest nesting of arrays and objects in `text`, brackets inside strings not counted; on text that is
    not JSON a number that means nothing, which the decoder then refuses."""
    brackets = _BRACKET.findall(_STRING.sub("", text))
    return max(accumulate(_NESTING[bracket] for bracket in brackets), default=0)


def integer(value: object, low: int, high: int, what: str) -> int:
    """`value` as an int within [low, high]; booleans are not integers."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise Rejected(MALFORMED, f"{what} is not an integer")
    if not low <= value <= high:
        raise Rejected(OUT_OF_RANGE, f"{what}={value} is outside [{low}, {high}]")
    return value


def optional_integer(value: object, low: int, high: int, what: str) -> int | None:
    return None if value is None else integer(value, low, high, what)


# A time in the years a job can run in: what datetime arithmetic on it can never overflow.
EARLIEST, LATEST = datetime(2000, 1, 1, tzinfo=UTC), datetime(2200, 1, 1, tzinfo=UTC)


def aware_time(value: object, what: str) -> datetime:
    """An RFC 3339 time with its zone (Z or an offset), in UTC, between EARLIEST and LATEST."""
    if not isinstance(value, str) or len(value) > 64:
        raise Rejected(BAD_TIME, f"{what} is not an RFC 3339 time")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise Rejected(BAD_TIME, f"{what}={value!r} is not an RFC 3339 time") from None
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise Rejected(BAD_TIME, f"{what}={value!r} names no time zone")
    try:
        moment = moment.astimezone(UTC)
    except OverflowError:
        raise Rejected(BAD_TIME, f"{what}={value!r} is out of range") from None
    if not EARLIEST <= moment <= LATEST:
        raise Rejected(BAD_TIME, f"{what}={value!r} is outside {EARLIEST.year}–{LATEST.year}")
    return moment


GZIP_WINDOW = 16 + zlib.MAX_WBITS  # zlib's window bits for the gzip format


def gunzip(data: bytes, limit: int, what: str) -> bytes:
    """`data` (gzip) expanded, refused as soon as it would expand past `limit` bytes: decompression stops there,
    so a small input that expands to gigabytes costs at most `limit` bytes of memory."""
    expander = zlib.decompressobj(GZIP_WINDOW)
    try:
        out = expander.decompress(data, limit + 1)
    except zlib.error as error:
        raise Rejected(MALFORMED, f"{what} is not gzip: {error}") from None
    if len(out) > limit or expander.unconsumed_tail:
        raise Rejected(TOO_LARGE, f"{what} expands past {limit} bytes")
    if not expander.eof:
        raise Rejected(MALFORMED, f"{what} is a truncated gzip stream")
    return out
