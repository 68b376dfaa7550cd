"""Percent-encoding of key segments and file names, with strict decoding.

Two alphabets are used by the reference runtime:

* identity-path segments of event channels and sources keep ASCII letters, digits, ``-`` and
  ``_`` (``SEGMENT_SAFE``);
* file names of the file store keep ASCII letters and digits only (``FILENAME_SAFE``).

Every other byte of the UTF-8 encoding becomes ``%XX`` with uppercase hex digits.
"""

from __future__ import annotations

import re
import string

from .errors import ValidationError

_ALNUM = frozenset((string.ascii_letters + string.digits).encode())
SEGMENT_SAFE = _ALNUM | frozenset(b"-_")
FILENAME_SAFE = _ALNUM
_HEX = frozenset(b"0123456789abcdefABCDEF")


def _table(safe: frozenset[int]) -> tuple[str, ...]:
    return tuple(chr(b) if b in safe else f"%{b:02X}" for b in range(256))


_SEGMENT_TABLE = _table(SEGMENT_SAFE)
_FILENAME_TABLE = _table(FILENAME_SAFE)


def _utf8(text: str) -> bytes:
    """The UTF-8 of ``text``; ValidationError for a non-string or text with lone surrogates."""
    if not isinstance(text, str):
        raise ValidationError(f"expected text to percent-encode, got {type(text).__name__}")
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError(f"{text!r} is not valid UTF-8 (it holds lone surrogates)") from None


def encode_segment(text: str) -> str:
    """Encode one identity-path segment (event channel / event source paths).

    ValidationError when ``text`` is not a str of valid Unicode (no lone surrogates).
    """
    return "".join(_SEGMENT_TABLE[b] for b in _utf8(text))


_COMMON_KEY = re.compile(r"[A-Za-z0-9/_.-]*")


def encode_filename(text: str) -> str:
    """Encode a whole key (slashes included) into one file name of the file store.

    ValidationError when ``text`` is not a str of valid Unicode (no lone surrogates).
    """
    if isinstance(text, str) and text.isascii():  # the usual keys: a few replaces, not a pass per byte
        if text.replace("/", "").isalnum():
            return text.replace("/", "%2F")
        if _COMMON_KEY.fullmatch(text):
            return text.replace("/", "%2F").replace("-", "%2D").replace("_", "%5F").replace(".", "%2E")
    return "".join(_FILENAME_TABLE[b] for b in _utf8(text))


def decode(text: str) -> str:
    """Decode ``%XX`` escapes. ValidationError for anything that is not percent-encoded UTF-8:
    a non-string, a truncated or bad escape, escapes of bytes that are not UTF-8, or text that
    is not UTF-8 itself (lone surrogates, as ``os.fsdecode`` makes of non-UTF-8 file names)."""
    if not isinstance(text, str):
        raise ValidationError(f"expected percent-encoded text, got {type(text).__name__}")
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError(f"{text!r} is not valid UTF-8 (it holds lone surrogates)") from None
    if "%" not in text:
        return text
    out = bytearray()
    i = 0
    while i < len(raw):
        byte = raw[i]
        if byte != 0x25:  # '%'
            out.append(byte)
            i += 1
            continue
        escape = raw[i + 1 : i + 3]
        if len(escape) < 2:
            raise ValidationError(f"truncated percent escape at offset {i} in {text!r}")
        if escape[0] not in _HEX or escape[1] not in _HEX:
            raise ValidationError(f"bad percent escape {escape.decode('utf-8', 'replace')!r} at offset {i} in {text!r}")
        out.append(int(escape, 16))
        i += 3
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError:
        raise ValidationError(f"percent-encoded text {text!r} does not decode to UTF-8") from None
