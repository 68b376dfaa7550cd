"""Which Python values can be stored as JSON that every reader — the reference runtime's
``serde_json`` included — reads back as the same value.

A storable value is built only from:

* ``dict`` (subclasses too) whose keys are exactly ``str``;
* ``list`` (subclasses too) and ``tuple`` (exactly ``tuple``; stored as an array, so it reads
  back as a list);
* ``str`` (subclasses too) holding valid Unicode (no lone surrogates);
* ``int`` (subclasses such as ``IntEnum`` too; not ``bool``) from ``-2**63`` to ``2**64 - 1``,
  the range ``serde_json`` reads as an integer (beyond it, it reads a rounded float);
* ``float`` (exactly ``float``) that is finite: JSON has no NaN or infinity;
* ``bool`` and ``None``;

nested at most :data:`MAX_DEPTH` levels, the record itself counting as the first: ``serde_json``
stops at 128 levels, and a Kubernetes watch event wraps each record in five more.

Everything else (sets, bytes, datetimes, UUIDs, enums, dataclasses, ``float`` subclasses such as
NumPy scalars, non-string keys, …) is refused rather than converted, so what a caller registers
is what every backend returns.

:func:`storable` is the hot path: one ``orjson`` serialisation and parse plus an equality
test (and, when the JSON holds more than :data:`MAX_DEPTH` brackets, a measure of its depth on
the serialised bytes). Only when a check fails is the value walked, to name the offending field.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import orjson

from .errors import ValidationError
from .validation import is_unicode

MIN_INT = -(2**63)
MAX_INT = 2**64 - 1
MAX_DEPTH = 100

ALLOWED = (
    "JSON holds objects with string keys, arrays, strings, integers from -2**63 to 2**64-1, "
    "finite numbers, true, false and null"
)

_Problem = tuple[str, str]  # (path, what is wrong there)


def storable(value: Any, subject: Callable[[], str]) -> Any:
    """The value every reader will see: ``value`` parsed back from its JSON (a copy sharing
    nothing with ``value``; tuples became lists), when that is equal to ``value`` but for
    tuples and equal-comparing subclasses.

    ValidationError, before anything is written, when ``value`` is not storable (see the module
    docstring): the message names ``subject()`` (e.g. ``"model ns/c/e/2a"``), the path of the
    first offending field (``card_json["runtime_config"]["x"]``) and what is allowed.
    """
    try:
        raw = orjson.dumps(value)
    except orjson.JSONEncodeError as exc:
        raise _refusal(value, subject, fallback=str(exc)) from None
    if _nests_deeper_than(raw, MAX_DEPTH):
        _raise_for_problem(value, subject)
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:  # an orjson.Fragment can carry anything
        raise _refusal(value, subject, fallback=f"its JSON does not parse back: {exc}") from None
    if _equal(parsed, value):
        return parsed
    # converted on the way (NaN became null, a datetime a string, a tuple an array): refused
    # unless only tuples and equal-comparing subclasses made the difference
    _raise_for_problem(value, subject)
    return parsed


def _raise_for_problem(value: Any, subject: Callable[[], str]) -> None:
    problem = _find_problem(value, "", 1)
    if problem is not None:
        raise _error(subject(), problem)


def _equal(parsed: Any, value: Any) -> bool:
    try:
        return bool(parsed == value)
    except Exception:  # an exotic __eq__ (an array, say) that cannot answer: look closer
        return False


def _nests_deeper_than(raw: bytes, limit: int) -> bool:
    """Whether the JSON text ``raw`` (as orjson writes it) nests arrays and objects more than
    ``limit`` levels deep, measured on the bytes: no more than ``limit`` brackets means no such
    depth; otherwise the brackets outside strings are kept, and each pass removes one level."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    brackets = _brackets_outside_strings(raw)
    for _ in range(limit):
        if not brackets:
            return False
        brackets = brackets.replace(b"[]", b"")  # non-overlapping: exactly the innermost level goes
    return bool(brackets)


def _brackets_outside_strings(raw: bytes) -> bytes:
    """The brackets of ``raw`` that are not inside strings, all written ``[`` and ``]``."""
    if b"\\" in raw:  # orjson escapes each quote and backslash inside a string: drop the escapes
        raw = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    # now every quote delimits a string; a string without brackets leaves an adjacent pair of
    # quotes, and only when every string is such a pair does removing the pairs remove all quotes
    tokens = raw.translate(_AS_SQUARE, _NOT_BRACKETS_OR_QUOTES).replace(b'""', b"")
    if b'"' in tokens:  # brackets inside some strings: keep the even parts of a split, outside them
        tokens = b"".join(tokens.split(b'"')[::2])
    return tokens


_AS_SQUARE = bytes.maketrans(b"{}", b"[]")
_NOT_BRACKETS_OR_QUOTES = bytes(b for b in range(256) if b not in b'[]{}"')


def _refusal(value: Any, subject: Callable[[], str], *, fallback: str) -> ValidationError:
    problem = _find_problem(value, "", 1)
    if problem is None:  # orjson refused something the walk accepts: report orjson's reason
        return ValidationError(f"cannot store {subject()}: it is not serialisable as JSON ({fallback}); {ALLOWED}")
    return _error(subject(), problem)


def _error(subject: str, problem: _Problem) -> ValidationError:
    path, what = problem
    return ValidationError(f"cannot store {subject}: {_shortened_path(path)} {what}")


def _shortened_path(path: str, limit: int = 160) -> str:
    """The path for a message: a very deep one keeps its start and end."""
    if not path:
        return "the record"
    return path if len(path) <= limit else f"{path[: limit // 2]}...{path[-limit // 2 :]}"


def _find_problem(value: Any, path: str, depth: int) -> _Problem | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        return _text_problem(value, path, "is text that")
    if isinstance(value, int):
        return _int_problem(value, path)
    if type(value) is float:
        return None if math.isfinite(value) else (path, f"is {value}: JSON has no NaN or infinity; use null or text")
    if isinstance(value, dict):
        return _too_deep(path, depth) or _dict_problem(value, path, depth)
    if isinstance(value, list) or type(value) is tuple:
        return _too_deep(path, depth) or _items_problem(value, path, depth)
    return (path, _type_problem(value))


def _dict_problem(value: dict[Any, Any], path: str, depth: int) -> _Problem | None:
    for key, item in value.items():
        if type(key) is not str:
            return (path, f"has the key {_short(key)} ({type(key).__name__}): JSON object keys are strings")
        key_problem = _text_problem(key, path, f"has the key {_quote(key)} that")
        if key_problem is not None:
            return key_problem
        problem = _find_problem(item, f"{path}[{_quote(key)}]" if path else key, depth + 1)
        if problem is not None:
            return problem
    return None


def _items_problem(value: list[Any] | tuple[Any, ...], path: str, depth: int) -> _Problem | None:
    for index, item in enumerate(value):
        problem = _find_problem(item, f"{path}[{index}]", depth + 1)
        if problem is not None:
            return problem
    return None


def _too_deep(path: str, depth: int) -> _Problem | None:
    if depth <= MAX_DEPTH:
        return None
    return (
        path,
        f"nests JSON more than {MAX_DEPTH} levels deep (counting the record itself): the reference "
        "runtime reads at most 128, Kubernetes envelopes included (or the value contains itself)",
    )


def _text_problem(text: str, path: str, subject: str) -> _Problem | None:
    if is_unicode(text):
        return None
    return (path, f"{subject} is not valid Unicode (it holds a lone surrogate, e.g. from os.fsdecode)")


def _int_problem(value: int, path: str) -> _Problem | None:
    if MIN_INT <= value <= MAX_INT:
        return None
    return (
        path,
        f"is {_short(value)}, outside the integers JSON readers keep exact ({MIN_INT} to {MAX_INT}); "
        "store it as a string",
    )


_ADVICE: dict[type, str] = {
    set: "use a list",
    frozenset: "use a list",
    bytes: "decode it to a string first (e.g. base64)",
    bytearray: "decode it to a string first (e.g. base64)",
    memoryview: "decode it to a string first (e.g. base64)",
}


def _type_problem(value: Any) -> str:
    kind = type(value)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    if isinstance(value, float):
        advice = "convert it with float()"
    elif isinstance(value, tuple):
        advice = "convert it to a list"
    else:
        advice = next((text for base, text in _ADVICE.items() if isinstance(value, base)), "convert it first")
    return f"has type {name} ({_short(value)}), which is not JSON: {advice}; {ALLOWED}"


def _quote(key: str) -> str:
    """A key as it appears in a path: a JSON string literal (unprintable characters escaped)."""
    return json.dumps(key, ensure_ascii=not key.isprintable())


def _short(value: Any, limit: int = 60) -> str:
    """A short, printable repr of a value for an error message."""
    try:
        text = repr(value)
    except Exception:  # a hostile __repr__ must not hide the real problem
        text = f"<{type(value).__name__}>"
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")  # lone surrogates would not print
    return text if len(text) <= limit else text[: limit - 3] + "..."
