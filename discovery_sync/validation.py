"""Checks shared by the model, the identity paths and the specs.

Every failure raises ValidationError with a message that names the field and says what is allowed.
"""

from __future__ import annotations

import operator
import os
from typing import Any

from .errors import ValidationError

U64_MAX = 2**64 - 1
JSON_SAFE_MAX = 2**53 - 1
MAX_NAME_BYTES = 255


def check_name(value: Any, field: str, *, allow_slash: bool = True) -> str:
    """A namespace/component/endpoint/topic name: a non-empty str of at most 255 UTF-8 bytes.

    Names that become unencoded path segments (endpoint and model identities) must not
    contain '/', because the reference runtime would split them apart when parsing.
    """
    if (  # the usual names: plain ASCII, each character one byte
        type(value) is str
        and value.isascii()
        and 0 < len(value) <= MAX_NAME_BYTES
        and (allow_slash or "/" not in value)
    ):
        return value
    if not isinstance(value, str):
        raise ValidationError(f"{field} must be a string, got {type(value).__name__}")
    if not value:
        raise ValidationError(f"{field} must not be empty")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ValidationError(f"{field} is not valid Unicode text: {exc}") from None
    if size > MAX_NAME_BYTES:
        raise ValidationError(f"{field} is {size} bytes long; at most {MAX_NAME_BYTES} UTF-8 bytes are allowed")
    if not allow_slash and "/" in value:
        raise ValidationError(f"{field} {value!r} must not contain '/' (it is a path segment of the record key)")
    return value


def plain_segments(first: Any, second: Any, third: Any) -> bool:
    """Whether the three values are names :func:`check_name` accepts at a glance with
    ``allow_slash=False`` (each a str of 1 to 255 ASCII characters, no '/'): readers check an
    identity's names so, and leave anything else to the full checks and their messages."""
    return (
        type(first) is str
        and type(second) is str
        and type(third) is str
        and 0 < len(first) <= MAX_NAME_BYTES
        and 0 < len(second) <= MAX_NAME_BYTES
        and 0 < len(third) <= MAX_NAME_BYTES
        and (joined := first + second + third).isascii()
        and "/" not in joined
    )


def plain_u64(value: Any) -> bool:
    """Whether ``value`` is an int :func:`check_instance_id` accepts (not a bool, 0 to 2**64-1)."""
    return type(value) is int and 0 <= value <= U64_MAX


def is_unicode(text: str) -> bool:
    """Whether a str is valid Unicode: no lone surrogates (``os.fsdecode`` makes them of bad bytes)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_unicode(value: str, field: str) -> str:
    """``value`` when it is valid Unicode text; ValidationError naming ``field`` otherwise."""
    if not is_unicode(value):
        raise ValidationError(f"{field} {value!r} is not valid Unicode text (it holds a lone surrogate)")
    return value


def printable(name: str) -> str:
    """``name`` safe to show on a terminal or in a log line: itself when every character is
    printable, else its Python escapes (``\\x1b``, ``\\r``, ``\\u202e``; backslashes doubled), so
    that no record can send a terminal a control sequence or reorder what it shows. Escaped: C0
    controls (ESC, CR, LF, BEL, TAB...), DEL, C1 (U+0080-U+009F), format characters (the bidi
    controls U+202A-U+202E and U+2066-U+2069, zero-width ones), line and paragraph separators,
    unassigned code points. Bytes that are not UTF-8 (a file name's) show as ``\\xNN``."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return repr(os.fsencode(name))[2:-1]
    return name if name.isprintable() else repr(name)[1:-1]


def check_instance_id(value: Any, field: str = "instance_id", *, maximum: int = U64_MAX) -> int:
    """An unsigned 64-bit id (or smaller, with ``maximum``)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(f"{field} must be an integer, got {type(value).__name__}")
    if not 0 <= value <= maximum:
        raise ValidationError(f"{field} {value} is out of range: it must be between 0 and {maximum}")
    return value


def require(data: dict[str, Any], key: str, kind: str) -> Any:
    """``data[key]`` or a ValidationError saying which field of which record is missing."""
    try:
        return data[key]
    except KeyError:
        raise ValidationError(f"{kind} record is missing the field {key!r}") from None
    except TypeError:
        raise ValidationError(f"{kind} record must be a JSON object, got {type(data).__name__}") from None


class RequiredFields:
    """The fields a record of one kind must have, read from its JSON object in one step (a
    parser calls this per record read: one C call instead of one Python call per field)."""

    __slots__ = ("_get", "_kind")

    def __init__(self, kind: str, first: str, second: str, *more: str) -> None:
        self._kind = kind
        self._get = operator.itemgetter(first, second, *more)

    def of(self, data: dict[str, Any]) -> tuple[Any, ...]:
        """The fields' values in order; ValidationError naming the first one missing."""
        try:
            values: tuple[Any, ...] = self._get(data)
        except KeyError as missing:
            raise ValidationError(f"{self._kind} record is missing the field {missing.args[0]!r}") from None
        except TypeError:
            raise ValidationError(f"{self._kind} record must be a JSON object, got {type(data).__name__}") from None
        return values


def require_object(value: Any, field: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValidationError(f"{field} must be a JSON object, got {type(value).__name__}")
    return value


def require_str(value: Any, field: str) -> str:
    if not isinstance(value, str):
        raise ValidationError(f"{field} must be a string, got {type(value).__name__}")
    return value
