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
    raw = to_json(value, subject)
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
