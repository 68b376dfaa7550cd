"""Connect options: one set of parsers for URL query parameters, keyword arguments and
environment variables of every backend.

A parser takes the value as given (a string from a URL or the environment, or a Python value
from a keyword argument) and the label to blame (``"file store option ttl"``,
``"DYN_FILE_KV_TTL_SECS"``), and returns the typed value or raises :class:`ValidationError`
naming the option, the value and what is accepted. Parsers accept their own output, so a
constructor may check values that ``from_url`` already parsed.
"""

from __future__ import annotations

import math
import os
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


def _bad(label: str, value: Any, accepted: str) -> ValidationError:
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return ValidationError(f"{label}={shown} is not valid: {accepted}")


def _number(value: Any, label: str, accepted: str) -> float:
    if isinstance(value, bool):
        raise _bad(label, value, accepted)
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            raise _bad(label, value, accepted) from None
    raise _bad(label, value, accepted)


def duration(minimum: float = 0.0, maximum: float = MAX_SECONDS, *, exclusive_minimum: bool = False) -> Parser[float]:
    """A finite number of seconds in [minimum, maximum] (or (minimum, maximum])."""
    low = "more than" if exclusive_minimum else "at least"
    accepted = f"a number of seconds, {low} {minimum:g} and at most {maximum:g}"

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


def integer(minimum: int, maximum: int, unit: str = "") -> Parser[int]:
    """A whole number in [minimum, maximum]: an int, a float without a fraction, or its decimal text."""
    accepted = f"a whole number{' of ' + unit if unit else ''} between {minimum} and {maximum}"

    def parse(value: Any, label: str) -> int:
        if isinstance(value, bool):
            raise _bad(label, value, accepted)
        if isinstance(value, int):
            number = value
        elif isinstance(value, float) and value.is_integer():
            number = int(value)
        elif isinstance(value, str) and value.strip().lstrip("+-").isdigit():
            number = int(value.strip())
        else:
            raise _bad(label, value, accepted)
        if not minimum <= number <= maximum:
            raise _bad(label, value, accepted)
        return number

    return parse


def uint64(value: Any, label: str) -> int:
    """An unsigned 64-bit id: an int, or decimal or ``0x`` hexadecimal text."""
    accepted = f"a whole number between 0 and {U64_MAX} (decimal, or hexadecimal with 0x)"
    if isinstance(value, str):
        text = value.strip().lower()
        try:
            value = int(text, 16) if text.startswith("0x") else int(text, 10) if text.isdigit() else None
        except ValueError:
            value = None
        if value is None:
            raise _bad(label, text, accepted)
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


class OptionSet:
    """The options one backend accepts, by name, and what each accepts."""

    def __init__(self, owner: str, parsers: Mapping[str, Parser[Any]]) -> None:
        self.owner = owner
        self.parsers = dict(parsers)

    def names(self) -> list[str]:
        return sorted(self.parsers)

    def label(self, name: str) -> str:
        return f"{self.owner} option {name}"

    def parse(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """Every option in ``given`` parsed; an unknown name is a ValidationError listing the valid ones."""
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
    """The value of an environment variable parsed by ``parser``; ``default`` when unset or blank."""
    raw = os.environ.get(variable, "").strip()
    if not raw:
        return default
    return parser(raw, variable)
