"""Connect options: one set of parsers for URL query parameters, keyword arguments and
environment variables of every backend.

A parser takes the value as given (a string from a URL or the environment, or a Python value
from a keyword argument) and the label to blame (``"file store option ttl"``,
``"DYN_FILE_KV_TTL_SECS"``), and returns the typed value or raises :class:`ValidationError`
naming the option, the value and what is accepted. Parsers accept their own output, so a
constructor may check values that ``from_url`` already parsed.

Numbers given as text (a URL, an environment variable, a keyword argument's string) are ASCII
only, whatever Python's ``int()`` and ``float()`` would take (other scripts' digits such as
``'٣'``, fullwidth digits, superscripts such as ``'²'``, ``'1_000'``, ``'1e3'``, ``'inf'``):
ASCII whitespace around the value is ignored (none inside it), and the value itself is

* seconds (:func:`duration`, :func:`connect_timeout`): an optional sign, ASCII digits with at
  most one decimal point (``10``, ``+2.5``, ``.5``, ``5.``); no exponent;
* a whole number (:func:`integer`): an optional sign and ASCII digits (``1024``, ``+7``);
* an id (:func:`uint64`): ASCII decimal digits, or ``0x``/``0X`` and ASCII hexadecimal digits.

A sign is accepted for the syntax only: the range then refuses what is out of it (``-1``).
Text of more than 40 characters (whitespace aside) is refused whatever it holds.
"""

from __future__ import annotations

import math
import os
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from .clock import Clock
from .errors import ValidationError
from .validation import U64_MAX

T = TypeVar("T")
Parser = Callable[[Any, str], T]

# The longest duration an option may name: threading's waits overflow far above it, and no
# lease, interval or timeout of a discovery client is sensibly longer.
MAX_SECONDS = 7 * 24 * 3600.0
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")

#: the whitespace a number's text may have around it (ASCII only, as its digits)
ASCII_SPACE = " \t\n\r\f\v"
_SECONDS_TEXT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)")
_WHOLE_TEXT = re.compile(r"[+-]?[0-9]+")
_ID_TEXT = re.compile(r"[0-9]+|0[xX][0-9a-fA-F]+")
# int() refuses more than 4300 digits with a ValueError of its own; no option needs 40
_MAX_DIGITS = 40
#: how the text of each kind of number is written, for error messages
SECONDS_FORM = "ASCII digits, an optional sign and decimal point, e.g. 10 or 2.5"
WHOLE_FORM = "ASCII digits and an optional sign"
ID_FORM = "ASCII decimal digits, or hexadecimal with 0x"


def _bad(label: str, value: Any, accepted: str) -> ValidationError:
    try:
        shown = repr(value)
    except Exception:  # an int too long for repr() (over 4300 digits), a hostile __repr__
        shown = f"<{type(value).__name__} of {value.bit_length()} bits>" if isinstance(value, int) else "<?>"
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return ValidationError(f"{label}={shown} is not valid: {accepted}")


def ascii_number(text: str, form: re.Pattern[str]) -> str | None:
    """``text`` without the ASCII whitespace around it when the rest is a number written as
    ``form`` says (ASCII digits only, at most :data:`_MAX_DIGITS` characters); None otherwise."""
    stripped = text.strip(ASCII_SPACE)
    if len(stripped) > _MAX_DIGITS or not form.fullmatch(stripped):
        return None
    return stripped


def _number(value: Any, label: str, accepted: str) -> float:
    """``value`` as a float: an int or float (an int beyond the float range is ±infinity), or text
    written as :data:`SECONDS_FORM` says."""
    if isinstance(value, bool):
        raise _bad(label, value, accepted)
    if isinstance(value, int):
        try:
            return float(value)
        except OverflowError:
            return math.inf if value > 0 else -math.inf
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        text = ascii_number(value, _SECONDS_TEXT)
        if text is not None:
            return float(text)
    raise _bad(label, value, accepted)


def duration(minimum: float = 0.0, maximum: float = MAX_SECONDS, *, exclusive_minimum: bool = False) -> Parser[float]:
    """A finite number of seconds in [minimum, maximum] (or (minimum, maximum])."""
    low = "more than" if exclusive_minimum else "at least"
    accepted = f"a number of seconds, {low} {minimum:g} and at most {maximum:g} ({SECONDS_FORM})"

    def parse(value: Any, label: str) -> float:
        seconds = _number(value, label, accepted)
        too_low = seconds <= minimum if exclusive_minimum else seconds < minimum
        if not math.isfinite(seconds) or too_low or seconds > maximum:
            raise _bad(label, value, accepted)
        return seconds

    return parse


def wait_timeout(value: Any, label: str) -> float | None:
    """How long a blocking call may wait: None or infinity (or more than threading can wait)
    means without limit, a negative number means not at all; NaN and non-numbers are refused."""
    if value is None:
        return None
    if type(value) in (int, float) and 0 <= value < threading.TIMEOUT_MAX:  # the usual timeouts (NaN fails)
        return float(value)
    accepted = "a number of seconds, or None to wait without limit"
    seconds = _number(value, label, accepted)
    if isinstance(value, str) or math.isnan(seconds):
        raise _bad(label, value, accepted)
    if seconds >= threading.TIMEOUT_MAX:
        return None
    return max(seconds, 0.0)


#: how long ``connect()`` of the etcd and Kubernetes backends keeps trying to reach the server,
#: by default. Seconds, as other coordination clients wait: etcdctl's ``--dial-timeout`` is 2 s,
#: the etcd Go client's examples dial with 5 s, kazoo's ``KazooClient.start()`` waits 15 s for
#: ZooKeeper; so a wrong URL or a stopped server is an error a person sees, not a long hang
DEFAULT_CONNECT_TIMEOUT = 10.0
CONNECT_TIMEOUT_FORM = (
    f"a number of seconds, more than 0 and at most {MAX_SECONDS:g} ({SECONDS_FORM}), or none to wait without limit"
)


def connect_timeout(value: Any, label: str) -> float | None:
    """The ``connect_timeout`` option of the etcd and Kubernetes backends: how many seconds
    ``connect()`` keeps trying to reach the server in all (every endpoint, every retry) before it
    raises BackendUnavailable. None, or the text ``none`` (any case), means without limit: for a
    worker that may start before its store. Zero, negative, non-finite and unparsable values are
    refused (:data:`CONNECT_TIMEOUT_FORM`)."""
    if value is None or (isinstance(value, str) and value.strip(ASCII_SPACE).lower() == "none"):
        return None
    seconds = _number(value, label, CONNECT_TIMEOUT_FORM)
    if not math.isfinite(seconds) or not 0 < seconds <= MAX_SECONDS:
        raise _bad(label, value, CONNECT_TIMEOUT_FORM)
    return seconds


def integer(minimum: int, maximum: int, unit: str = "") -> Parser[int]:
    """A whole number in [minimum, maximum]: an int, a float without a fraction, or its text
    (:data:`WHOLE_FORM`)."""
    accepted = f"a whole number{' of ' + unit if unit else ''} between {minimum} and {maximum} ({WHOLE_FORM})"

    def parse(value: Any, label: str) -> int:
        if isinstance(value, bool):
            raise _bad(label, value, accepted)
        if isinstance(value, int):
            number = value
        elif isinstance(value, float) and value.is_integer():
            number = int(value)
        elif isinstance(value, str) and (digits := ascii_number(value, _WHOLE_TEXT)) is not None:
            number = int(digits, 10)
        else:
            raise _bad(label, value, accepted)
        if not minimum <= number <= maximum:
            raise _bad(label, value, accepted)
        return number

    return parse


def uint64(value: Any, label: str) -> int:
    """An unsigned 64-bit id: an int, or its text (:data:`ID_FORM`)."""
    accepted = f"a whole number between 0 and {U64_MAX} ({ID_FORM})"
    if isinstance(value, str):
        digits = ascii_number(value, _ID_TEXT)
        if digits is None:
            raise _bad(label, value, accepted)
        value = int(digits[2:], 16) if digits[:2] in ("0x", "0X") else int(digits, 10)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= U64_MAX:
        raise _bad(label, value, accepted)
    return value


def boolean(value: Any, label: str) -> bool:
    """true/false, 1/0, yes/no, on/off (any case), or a bool."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
    raise _bad(label, value, "true or false (also 1/0, yes/no, on/off)")


def choice(*allowed: str) -> Parser[str]:
    """One of ``allowed`` (exactly)."""

    def parse(value: Any, label: str) -> str:
        if isinstance(value, str) and value in allowed:
            return value
        raise _bad(label, value, f"use one of {', '.join(allowed)}")

    return parse


def text(value: Any, label: str) -> str:
    """Any string without NUL characters."""
    if not isinstance(value, str) or "\0" in value:
        raise _bad(label, value, "a string without NUL characters")
    return value


def path(value: Any, label: str) -> str:
    """A file-system path: a non-empty string (or os.PathLike) without NUL characters."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, bytes) or not isinstance(value, str) or not value or "\0" in value:
        raise _bad(label, value, "a non-empty path without NUL characters")
    return value


def clock(value: Any, label: str) -> Clock:
    """A :class:`discovery_sync.clock.Clock` object (a keyword argument: a URL cannot name one)."""
    if isinstance(value, Clock):
        return value
    raise _bad(label, value, "a discovery_sync.clock.Clock object, given as a keyword argument (tests: ManualClock())")


def optional(parser: Parser[T]) -> Parser[T | None]:
    """``parser``, or None passed through (meaning "the default")."""

    def parse(value: Any, label: str) -> T | None:
        return None if value is None else parser(value, label)

    return parse


#: why the file and memory backends refuse ``connect_timeout`` (for an OptionSet's ``refused``)
SERVER_ONLY = {
    "connect_timeout": (
        "connect_timeout applies to the etcd and Kubernetes backends only, which wait for a server; "
        "this backend has none to wait for: remove the option"
    )
}


def zero_is_default(parser: Parser[T], default: T) -> Parser[T]:
    """``parser``, except that zero (``0``, ``"0.0"``, ...) means ``default``: the reference
    runtime's convention for the environment variables it reads."""
    zero = duration(0.0, 0.0)

    def parse(value: Any, label: str) -> T:
        try:
            zero(value, label)
        except ValidationError:
            return parser(value, label)
        return default

    return parse


class OptionSet:
    """The options one backend accepts, by name, and what each accepts.

    ``refused`` names options of other backends (or former names) that this one refuses with a
    reason of its own rather than as unknown: ``{name: why}`` makes ``name=value`` a
    ValidationError "<owner> option name=value is not valid: why". They are not listed as valid.
    """

    def __init__(
        self, owner: str, parsers: Mapping[str, Parser[Any]], *, refused: Mapping[str, str] | None = None
    ) -> None:
        self.owner = owner
        self.parsers = dict(parsers)
        self.refused = dict(refused or {})

    def names(self) -> list[str]:
        return sorted(self.parsers)

    def label(self, name: str) -> str:
        return f"{self.owner} option {name}"

    def parse(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """Every option in ``given`` parsed; a refused name is a ValidationError saying why, an
        unknown one a ValidationError listing the valid ones."""
        for name, value in given.items():
            if name in self.refused:
                raise _bad(self.label(name), value, self.refused[name])
        unknown = sorted(str(name) for name in given if name not in self.parsers)
        if unknown:
            valid = ", ".join(self.names()) or "none"
            raise ValidationError(
                f"unknown {self.owner} option{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}: "
                f"the valid ones are {valid}"
            )
        return {name: self.parsers[name](value, self.label(name)) for name, value in given.items()}

    def check(self, name: str, value: Any) -> Any:
        """``value`` of the option ``name`` checked (and converted) by its parser."""
        return self.parsers[name](value, self.label(name))


def from_environment(variable: str, parser: Parser[T], default: T) -> T:
    """The value of an environment variable parsed by ``parser``; ``default`` when unset or blank
    (ASCII whitespace only: other spaces are text the parser judges)."""
    raw = os.environ.get(variable, "").strip(ASCII_SPACE)
    if not raw:
        return default
    return parser(raw, variable)
