"""Which Python values can be stored as JSON that every reader — the reference runtime's
``serde_json`` included — reads back as the same value.

A storable value is built only from:

* ``dict`` (subclasses too) whose keys are exactly ``str``;
* ``list`` (subclasses too) and ``tuple`` (exactly ``tuple``; stored as an array, so it reads
  back as a list);
* ``str`` (subclasses too) holding valid Unicode (no lone surrogates);
* ``int`` (subclasses such as ``IntEnum`` too; not ``bool``) from ``-2**63`` to ``2**63 - 1``,
  the range the Kubernetes API server keeps exact (it turns larger integers into rounded
  floats; ``serde_json`` would read up to ``2**64 - 1``);
* ``float`` (exactly ``float``) that is finite (JSON has no NaN or infinity), not ``-0.0`` (the
  API server stores it as ``0``) and not a whole number the API server writes back as another
  integer (from ``2**53`` on, where it prints the shortest digits padded with zeros: ``2.0**60``
  comes back as ``1152921504606847000``); ``1.0`` comes back as ``1``, an equal number;
* ``bool`` and ``None``;

nested at most :data:`MAX_DEPTH` levels, the record itself counting as the first: ``serde_json``
stops at 128 levels, and a Kubernetes watch event wraps each record in five more.

The number rules hold for what callers put in a record (cards, metadata, opaque transports), so
that a record valid on one backend is valid on all (:func:`numbers_kept`); a record's own id
(``instance_id``, ``publisher_id``: ``0 .. 2**64 - 1``, checked by the identity types) is the
library's, and only the serialisable range, ``-2**63 .. 2**64 - 1``, binds it.

Readers apply the same limit: :func:`too_deep` is the one depth test of :func:`storable` and of
the parse of a stored record (``discovery_sync.model.instance_from_json``), so a record
``register()`` refuses is unreadable everywhere. Depth is the only rule a parse needs to check:
``orjson`` reads integers beyond the range above as floats (as ``serde_json`` does) and refuses
NaN, infinities, lone surrogates and bytes that are not UTF-8, so every other value it returns is
storable.

Everything else (sets, bytes, datetimes, UUIDs, enums, dataclasses, ``float`` subclasses such as
NumPy scalars, non-string keys, …) is refused rather than converted, so what a caller registers
is what every backend returns.

:func:`storable` is the hot path: one ``orjson`` serialisation and parse plus an equality
test (and, when the JSON holds more than :data:`MAX_DEPTH` brackets, a bound of its depth on
the serialised bytes, :func:`too_deep`). Only when a check fails is the value walked, to name the offending field.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import orjson

from .errors import ValidationError
from .validation import is_unicode

#: the integers orjson writes (and serde_json reads back exact): a record's own id may use all of them
MIN_INT = -(2**63)
MAX_INT = 2**64 - 1
#: the integers every store keeps exact, the Kubernetes API server's int64 (what callers store)
MAX_EXACT_INT = 2**63 - 1
MAX_DEPTH = 100

ALLOWED = (
    "JSON holds objects with string keys, arrays, strings, integers from -2**63 to 2**63-1, "
    "finite numbers, true, false and null"
)

_Problem = tuple[str, str]  # (path, what is wrong there)


def storable(value: Any, subject: Callable[[], str], own_id: str | None = None) -> Any:
    """The value every reader will see: ``value`` parsed back from its JSON (a copy sharing
    nothing with ``value``; tuples became lists), when that is equal to ``value`` but for
    tuples and equal-comparing subclasses.

    ValidationError, before anything is written, when ``value`` is not storable (see the module
    docstring): the message names ``subject()`` (e.g. ``"model ns/c/e/2a"``), the path of the
    first offending field (``card_json["runtime_config"]["x"]``) and what is allowed.
    ``own_id``: for a record, the key of its own id, which only the serialisable range binds;
    every other number must come back unchanged from every store (:func:`numbers_kept`).
    """
    raw = to_json(value, subject)
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:  # an orjson.Fragment can carry anything
        raise _refusal(value, subject, fallback=f"its JSON does not parse back: {exc}") from None
    if _equal(parsed, value):
        if own_id is not None:
            numbers_kept(value, raw, subject, own_id)
        return parsed
    # converted on the way (NaN became null, a datetime a string, a tuple an array): refused
    # unless only tuples and equal-comparing subclasses made the difference
    _raise_for_problem(value, subject)
    return parsed


def to_json(value: Any, subject: Callable[[], str]) -> bytes:
    """``value`` as compact JSON (``orjson.dumps``): the first step of :func:`storable`, for a
    value already checked by it, or one only to be written out (``instance_to_json``).

    ValidationError naming ``subject()``, the path of the first offending field and what is
    allowed, as :func:`storable`, when orjson cannot serialise ``value`` (an integer outside
    ``-2**63 .. 2**64-1``, a set, a non-string key, a lone surrogate...) or it nests deeper than
    :data:`MAX_DEPTH`; never orjson's TypeError. What orjson converts without complaint (NaN to
    ``null``, a datetime to text, a tuple to an array) only :func:`storable` refuses.
    """
    try:
        raw = orjson.dumps(value)
    except orjson.JSONEncodeError as exc:
        raise _refusal(value, subject, fallback=str(exc)) from None
    if too_deep(raw):
        _raise_for_problem(value, subject)
    return raw


#: orjson's output with every digit written 0 and every ``+`` dropped, where a number some store
#: changes shows as 16 digits in a row or an exponent of two digits (orjson writes ``1e+16``; older
#: releases ``1e16``); a negative zero is looked for in the output itself. A string holding such
#: text only costs a walk that finds nothing.
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_SIXTEEN_DIGITS = b"0" * 16


def _may_hold_changed_number(text: bytes) -> bool:
    """Whether orjson's ``text`` may hold a number :func:`numbers_kept` refuses: three byte
    searches and a translation, far cheaper than a regular expression over a large card."""
    if b"-0.0" in text:
        return True
    digits = text.translate(_DIGITS_AS_ZERO, b"+")
    return b"e00" in digits or _SIXTEEN_DIGITS in digits


#: floats from here on are whole and may come back from the Kubernetes API server as another integer
_FIRST_INEXACT_WHOLE = 2.0**53
#: floats from here on the API server prints with an exponent, so readers get them back as they were
_FIRST_EXPONENT = 1e21


def numbers_kept(record: dict[str, Any], raw: bytes, subject: Callable[[], str], own_id: str) -> None:
    """ValidationError naming the field when a number of ``record`` (its JSON: ``raw``), other
    than its own id ``record[own_id]``, would come back from some store as a different number.

    The Kubernetes API server keeps integers as int64 and floats as float64, and prints a float
    the way Go does (the shortest digits; a whole number below 1e21 without a decimal point,
    padded with zeros), which it reads back as an integer where it can: so larger integers, a
    negative zero and whole floats from 2**53 on that print other digits than their own change
    on the way. Costs a search of ``raw`` for most records; the record is walked only when that
    search finds digits that may be such a number."""
    own = record.get(own_id)
    text = raw.replace(b'"%s":%d' % (own_id.encode(), own), b"", 1) if type(own) is int else raw
    if not _may_hold_changed_number(text):
        return
    for key, item in record.items():
        problem = None if key == own_id else changed_number(item, key)
        if problem is not None:
            raise _error(subject(), problem)


def changed_number(value: Any, path: str = "") -> tuple[str, str] | None:
    """The path of the first number under ``value`` (already storable) that some store would
    change (:func:`numbers_kept`), under ``path``, and why; None when there is none."""
    if isinstance(value, dict):
        for key, item in value.items():
            problem = changed_number(item, f"{path}[{_quote(key)}]")
            if problem is not None:
                return problem
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            problem = changed_number(item, f"{path}[{index}]")
            if problem is not None:
                return problem
    elif isinstance(value, int) and not isinstance(value, bool) and not MIN_INT <= value <= MAX_EXACT_INT:
        return (
            path,
            f"is {_short(value)}, outside the integers every store keeps exact ({MIN_INT} to {MAX_EXACT_INT}: the "
            "Kubernetes API server turns larger ones into rounded floats); store it as a string",
        )
    elif type(value) is float:
        if value == 0 and math.copysign(1.0, value) < 0:
            return (path, "is -0.0, which the Kubernetes API server stores as 0: store 0.0 (or a string)")
        printed = _kubernetes_whole_number(value)
        if printed is not None and printed != value:
            return (
                path,
                f"is {value!r}, which the Kubernetes API server writes back as the integer {printed}; "
                "store it as an integer or a string",
            )
    return None


def _kubernetes_whole_number(value: float) -> int | None:
    """The integer readers get back from the Kubernetes API server for the whole float ``value``
    that it prints without an exponent and readers take for an integer; None for any other float."""
    if not (_FIRST_INEXACT_WHOLE <= abs(value) < _FIRST_EXPONENT) or not value.is_integer():
        return None
    printed = int(Decimal(repr(value)))  # Go's shortest digits, padded with zeros
    return printed if MIN_INT <= printed <= MAX_INT else None  # beyond, readers take it for a float


def problem_of(value: Any) -> str | None:
    """What makes ``value`` unstorable, naming the field (``card_json["x"] has type set ...``), or
    None when nothing does. A walk of ``value`` that stops :data:`MAX_DEPTH` levels down (and at a
    value containing itself): meant for values already known to fail, as it costs a lot more than
    :func:`storable`."""
    problem = _find_problem(value, "", 1)
    return None if problem is None else f"{shortened_path(problem[0])} {problem[1]}"


def _raise_for_problem(value: Any, subject: Callable[[], str]) -> None:
    problem = _find_problem(value, "", 1)
    if problem is not None:
        raise _error(subject(), problem)


def _equal(parsed: Any, value: Any) -> bool:
    try:
        return bool(parsed == value)
    except Exception:  # an exotic __eq__ (an array, say) that cannot answer: look closer
        return False


def too_deep(raw: bytes, levels_above: int = 0) -> bool:
    """Whether the JSON text ``raw`` nests arrays and objects more than :data:`MAX_DEPTH` levels
    deep, the outermost counting as the first: what :func:`storable` refuses and readers skip.
    ``levels_above``: how deep in its record ``raw``'s value sits (a ``card_json``: 1).

    Cheap where it matters, on every record read: nothing for at most ``2 * MAX_DEPTH`` bytes,
    two byte counts for at most MAX_DEPTH brackets (records almost always hold fewer), a pass
    over the brackets outside strings otherwise. Meant for valid JSON (any writer's: whitespace
    and escapes do not matter); the answer for other bytes means nothing."""
    return _nests_deeper_than(raw, MAX_DEPTH - levels_above)


TOO_DEEP = (
    f"nests JSON more than {MAX_DEPTH} levels deep (counting the record itself), which register() "
    "refuses: the reference runtime reads at most 128, Kubernetes envelopes included"
)
#: what is wrong with a value inside itself (after "X is Y itself: ")
CONTAINS_ITSELF = "JSON cannot hold a value that contains itself; break the loop (store an id, say)"


def _nests_deeper_than(raw: bytes, limit: int) -> bool:
    """Whether the JSON text ``raw`` nests arrays and objects more than ``limit`` levels deep,
    measured on the bytes. At most ``limit`` brackets (or ``2 * limit`` bytes) cannot; otherwise
    the brackets outside strings bound the depth (the opening ones less those that follow a
    closing one: a sibling opens no new level), and only a bound above ``limit`` has the depth
    measured, each pass removing one level."""
    if len(raw) <= 2 * limit or raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    brackets = _brackets_outside_strings(raw)
    if brackets.count(b"[") - brackets.count(b"][") <= limit:
        return False
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
    return ValidationError(f"cannot store {subject}: {shortened_path(path)} {what}")


def shortened_path(path: str, limit: int = 160) -> str:
    """The path for a message: a very deep one keeps its start and end."""
    if not path:
        return "the record"
    return path if len(path) <= limit else f"{path[: limit // 2]}...{path[-limit // 2 :]}"


def _find_problem(value: Any, path: str, depth: int, ancestors: dict[int, str] | None = None) -> _Problem | None:
    """The first field of ``value`` that is not storable, and why; ``ancestors``: the paths of
    the containers ``value`` is inside, by id (a container among them is a cycle)."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        return _text_problem(value, path, "is text that")
    if isinstance(value, int):
        return _int_problem(value, path)
    if type(value) is float:
        return None if math.isfinite(value) else (path, f"is {value}: JSON has no NaN or infinity; use null or text")
    if not (isinstance(value, (dict, list)) or type(value) is tuple):
        return (path, _type_problem(value))
    if ancestors is None:
        ancestors = {}
    outer = ancestors.get(id(value))
    if outer is not None:
        return (path, f"is {shortened_path(outer)} itself: {CONTAINS_ITSELF}")
    problem = _too_deep(path, depth)
    if problem is None:
        ancestors[id(value)] = path
        if isinstance(value, dict):
            problem = _dict_problem(value, path, depth, ancestors)
        else:
            problem = _items_problem(value, path, depth, ancestors)
        del ancestors[id(value)]
    return problem


def _dict_problem(value: dict[Any, Any], path: str, depth: int, ancestors: dict[int, str]) -> _Problem | None:
    for key, item in value.items():
        if type(key) is not str:
            return (path, f"has the key {_short(key)} ({type(key).__name__}): JSON object keys are strings")
        key_problem = _text_problem(key, path, f"has the key {_quote(key)} that")
        if key_problem is not None:
            return key_problem
        problem = _find_problem(item, f"{path}[{_quote(key)}]" if path else key, depth + 1, ancestors)
        if problem is not None:
            return problem
    return None


def _items_problem(
    value: list[Any] | tuple[Any, ...], path: str, depth: int, ancestors: dict[int, str]
) -> _Problem | None:
    for index, item in enumerate(value):
        problem = _find_problem(item, f"{path}[{index}]", depth + 1, ancestors)
        if problem is not None:
            return problem
    return None


def _too_deep(path: str, depth: int) -> _Problem | None:
    return None if depth <= MAX_DEPTH else (path, TOO_DEEP)


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
