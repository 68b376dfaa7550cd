"""JSON as the Go API server reads, stores and writes it.

* :func:`stored_value`: what a parsed request value becomes once the server has stored it. Numbers
  are int64 or float64: an integer within int64 stays exact, a bigger one becomes the nearest
  float64, a float64 with an integral value within int64 becomes that integer (``1.0`` → ``1``,
  ``-0.0`` → ``0``); a lone UTF-16 surrogate (``"\\ud83d"`` without its pair) becomes U+FFFD.
* :func:`encode`: Go's ``encoding/json`` text: no spaces, non-ASCII as literal UTF-8, ``<``, ``>``,
  ``&``, U+2028 and U+2029 escaped as ``\\u00XX``/``\\u20XX``, floats in Go's shortest form (fixed
  notation from 1e-6 up to 1e21, else ``1e+30``, ``5e-324``).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from json.encoder import encode_basestring as _quote
from typing import Any

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_NEEDS_GO_ESCAPE = re.compile("[\b\f<>&\u2028\u2029]")


def stored_value(value: Any) -> Any:
    """``value`` (as :func:`json.loads` parsed it) the way the API server stores and returns it."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value if INT64_MIN <= value <= INT64_MAX else stored_value(float(value))
    if isinstance(value, float):
        if math.isfinite(value) and value == math.floor(value) and INT64_MIN <= value <= INT64_MAX:
            return int(value)
        return value
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {stored_value(k): stored_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [stored_value(v) for v in value]
    return value


def sorted_keys(value: Any) -> Any:
    """``value`` with every object's keys in sorted order (how the server writes unstructured objects)."""
    if isinstance(value, dict):
        return {k: sorted_keys(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [sorted_keys(v) for v in value]
    return value


def go_float(value: float) -> str:
    """A float64 as Go's ``encoding/json`` writes it."""
    shortest = repr(value)  # the shortest digits that read back as the same float, as Go's -1 precision
    if value == 0 or 1e-6 <= abs(value) < 1e21:
        text = format(Decimal(shortest), "f")
        return text[:-2] if text.endswith(".0") else text
    mantissa, exponent = shortest.split("e")
    sign, digits = exponent[0], exponent[1:].lstrip("0") or "0"
    return f"{mantissa}e{sign}{digits.zfill(2) if sign == '+' else digits}"


_GO_ONLY_ESCAPES = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)
_PYTHON_ONLY_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\([bf])")  # Python writes \b and \f; Go writes \u0008 and \u000c


def _string(text: str) -> str:
    quoted: str = _quote(text)  # the C encoder: quotes, backslashes and control characters
    if _NEEDS_GO_ESCAPE.search(text):
        quoted = quoted.translate(_GO_ONLY_ESCAPES)
        quoted = _PYTHON_ONLY_ESCAPE.sub(lambda m: m.group(1) + ("\\u0008" if m.group(2) == "b" else "\\u000c"), quoted)
    return quoted


def _text(value: Any) -> str:
    kind = type(value)
    if kind is str:
        return _string(value)
    if kind is dict:
        return "{" + ",".join([_string(str(k)) + ":" + _text(v) for k, v in value.items()]) + "}"
    if kind is int:
        return str(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join([_text(v) for v in value]) + "]"
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, str):
        return _string(str(value))
    if isinstance(value, dict):
        return _text(dict(value))
    raise TypeError(f"not JSON: {type(value).__name__}")


def encode(value: Any) -> bytes:
    """``value`` as the UTF-8 JSON text the API server writes (without the trailing newline)."""
    return _text(value).encode("utf-8", errors="surrogatepass")
