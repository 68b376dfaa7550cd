"""Logical instance ids: one instance id shared by a failover cohort (a primary and its standby).

The reference runtime (``lib/runtime/src/discovery/logical_id.rs``) lets the members of a
failover cohort publish one worker: each is configured with the same logical id, either given
(``DYN_DISCOVERY_LOGICAL_INSTANCE_ID``) or hashed from a key (``DYN_DISCOVERY_LOGICAL_INSTANCE_KEY``,
typically ``ns/$(POD_NAME)/engine``), and registers under it. The rules, as the reference's:

* The explicit id, trimmed, wins when it is not empty: decimal or ``0x``/``0X`` hexadecimal, a
  u64 and not 0 (it is not masked). Digits are ASCII only (Python's ``int()`` would also take
  other scripts' digits, which Rust refuses); one leading ``+`` and any number of leading zeros
  are accepted, as Rust's parser does (``int()`` would refuse text over 4,300 digits).
* Else the key, trimmed; empty or absent means no logical id. Every ``$(VAR)`` in it is replaced
  by the variable's value; an unset variable or an unterminated ``$(`` is an error, so cohort
  members never silently end up with different ids. Other text (a lone ``$`` or ``)``) is kept.
* The expanded key is hashed as Rust's ``DefaultHasher`` hashes a ``str`` (SipHash-1-3, keys 0,
  over the UTF-8 bytes and one ``0xFF``), masked to 53 bits like Kubernetes-derived ids (exact in
  a JSON double), and 0 becomes 1.

"Trimmed" is Rust's ``str::trim``: Unicode White_Space, which is Python's ``str.strip()`` less
U+001C..U+001F (Python counts those separators as space, Rust does not).

Connect options (``logical_instance_id``, ``logical_instance_key``) replace the two variables
entirely when either is given: see :func:`resolve`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from .errors import ValidationError
from .options import OptionSet, Parser, _bad
from .siphash import rust_str_hash
from .validation import U64_MAX

ID_VARIABLE = "DYN_DISCOVERY_LOGICAL_INSTANCE_ID"
KEY_VARIABLE = "DYN_DISCOVERY_LOGICAL_INSTANCE_KEY"
ID_OPTION = "logical_instance_id"
KEY_OPTION = "logical_instance_key"
OPTION_NAMES = (ID_OPTION, KEY_OPTION)

#: hashed ids keep 53 bits, as Kubernetes-derived instance ids do (LOGICAL_INSTANCE_ID_MASK)
MASK = 0x1F_FFFF_FFFF_FFFF
#: what Rust's ``str::trim`` removes: the characters with the Unicode White_Space property
RUST_WHITESPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)
ACCEPTED_ID = f"a non-zero whole number up to {U64_MAX}, decimal or hexadecimal with 0x"

_DECIMAL = re.compile(r"\+?[0-9]+")
_HEXADECIMAL = re.compile(r"\+?[0-9a-fA-F]+")


def rust_trim(text: str) -> str:
    """``text`` without leading and trailing whitespace, as Rust's ``str::trim`` removes it."""
    return text.strip(RUST_WHITESPACE)


def parse_explicit_id(raw: str, label: str) -> int:
    """A trimmed, non-empty explicit id: decimal or ``0x`` hex, 1..2**64-1, ASCII digits only.

    As Rust's ``u64`` parsers do, any number of leading zeros is accepted (``"0" * 10_000 + "1"``
    is 1) and one leading ``+``; anything else is a ValidationError naming ``label``, the value
    and what is accepted (never Python's own ValueError: the digits that count are converted,
    not the text, so ``int()``'s limit of 4,300 digits is never reached)."""
    hexadecimal = raw[:2] in ("0x", "0X")
    text = raw[2:] if hexadecimal else raw
    if not (_HEXADECIMAL if hexadecimal else _DECIMAL).fullmatch(text):
        raise _bad(label, raw, ACCEPTED_ID)
    significant = text.removeprefix("+").lstrip("0")
    # more digits than a u64 has is out of range: refused without converting them
    most, base = (16, 16) if hexadecimal else (20, 10)
    number = int(significant or "0", base) if len(significant) <= most else U64_MAX + 1
    if number > U64_MAX:
        raise _bad(label, raw, f"{ACCEPTED_ID} (this one is larger)")
    if number == 0:
        raise _bad(label, raw, ACCEPTED_ID)
    return number


def hash_key(key: str) -> int:
    """The logical id of an (expanded) key: ``rust_str_hash(key) & MASK``, never 0."""
    return (rust_str_hash(key) & MASK) or 1


def expand(key: str, lookup: Callable[[str], str | None], label: str) -> str:
    """``key`` with every ``$(VAR)`` replaced by ``lookup(VAR)``; an unset variable (None) or an
    unterminated ``$(`` is a ValidationError naming ``label``. The name runs to the first ``)``."""
    out: list[str] = []
    rest = key
    while (start := rest.find("$(")) >= 0:
        out.append(rest[:start])
        after = rest[start + 2 :]
        end = after.find(")")
        if end < 0:
            raise ValidationError(
                f"{label}={key!r} is not valid: it has an unterminated '$(' (write $(VARIABLE) to insert a "
                "variable's value)"
            )
        name = after[:end]
        value = lookup(name)
        if value is None:
            raise ValidationError(
                f"{label}={key!r} is not valid: it names the variable {name!r} ($({name})), which is not set; "
                "every cohort member must expand its key to the same text, so set the variable (e.g. from "
                "the Downward API) or remove it from the key"
            )
        out.append(value)
        rest = after[end + 1 :]
    out.append(rest)
    return "".join(out)


def logical_instance_id(
    explicit: str | None,
    key: str | None,
    lookup: Callable[[str], str | None],
    *,
    id_label: str,
    key_label: str,
) -> int | None:
    """The logical instance id that ``explicit`` (an id) or else ``key`` (hashed) give, or None.

    ``explicit`` is trimmed; when not empty it must be a non-zero u64, decimal or ``0x``/``0X``
    hexadecimal in ASCII digits, and it is the id as given (not masked), whatever ``key`` is.
    Otherwise ``key`` is trimmed (empty or None: no logical id), its ``$(VAR)`` placeholders are
    replaced by ``lookup(VAR)`` (None: unset, an error) and the result is hashed as Rust's
    ``DefaultHasher`` hashes a ``str``, masked to 53 bits, 0 becoming 1. Errors are
    ValidationErrors naming ``id_label`` or ``key_label``, the value and what is accepted.
    """
    if explicit is not None:
        raw = rust_trim(explicit)
        if raw:
            return parse_explicit_id(raw, id_label)
    if key is None:
        return None
    trimmed = rust_trim(key)
    if not trimmed:
        return None
    expanded = expand(trimmed, lookup, key_label)
    try:
        return hash_key(expanded)
    except UnicodeEncodeError:  # lone surrogates (undecodable bytes from the environment)
        raise ValidationError(
            f"{key_label}={key!r} is not valid: its text (after expanding variables) is not valid UTF-8"
        ) from None


def id_option(value: Any, label: str) -> int | None:
    """The ``logical_instance_id`` option as a parser: None or blank text (no id), an int in
    1..2**64-1 (not a bool), or the explicit id's text."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise _bad(label, value, ACCEPTED_ID)
    if isinstance(value, int):
        if not 0 < value <= U64_MAX:
            raise _bad(label, value, ACCEPTED_ID)
        return value
    if isinstance(value, str):
        raw = rust_trim(value)
        return parse_explicit_id(raw, label) if raw else None
    raise _bad(label, value, ACCEPTED_ID)


def key_option(value: Any, label: str) -> str | None:
    """The ``logical_instance_key`` option as a parser: None or a string."""
    if value is None or isinstance(value, str):
        return value
    raise _bad(label, value, "text, e.g. ns/$(POD_NAME)/engine ($(VARIABLE) inserts an environment variable)")


#: the two options' parsers, for a backend's OptionSet (its from_url pops them with :func:`from_options`)
PARSERS: dict[str, Parser[Any]] = {ID_OPTION: id_option, KEY_OPTION: key_option}


def _environment_lookup(environ: Mapping[str, str]) -> Callable[[str], str | None]:
    def lookup(name: str) -> str | None:
        try:
            return environ.get(name)
        except (UnicodeError, ValueError):  # a name os.environ cannot encode is a name nobody set
            return None

    return lookup


def resolve(
    options: dict[str, Any],
    environ: Mapping[str, str],
    *,
    owner: str = "connect",
    read_only: bool = False,
) -> int | None:
    """The logical instance id a client is configured with, or None; pops the connect options
    ``logical_instance_id`` and ``logical_instance_key`` from ``options``.

    When either option is given (not None) the caller's configuration wins entirely: the
    environment's ``DYN_DISCOVERY_LOGICAL_INSTANCE_ID``/``_KEY`` are not read, and errors name
    ``"<owner> option logical_instance_id"`` (or ``_key``). Otherwise the two variables are read
    from ``environ`` and errors name them. ``$(VAR)`` placeholders are always looked up in
    ``environ``. An id option may be an int (1..2**64-1) or text; a key option is text.

    A ``read_only`` client registers nothing, so it has no logical id: the variables are ignored
    (a ``discovery-sync list`` in a cohort's pod works), and either option is a ValidationError.
    """
    given = {name: options.pop(name, None) for name in OPTION_NAMES}
    explicit: Any
    if any(value is not None for value in given.values()):
        if read_only:
            named = " and ".join(f"{owner} option {name}" for name, value in given.items() if value is not None)
            raise ValidationError(
                f"{named} cannot be used with read_only=true: a read-only client registers nothing, so it "
                "has no instance id to share with a failover cohort; drop the option (read-only clients "
                f"ignore {ID_VARIABLE} and {KEY_VARIABLE})"
            )
        id_label, key_label = (f"{owner} option {name}" for name in OPTION_NAMES)
        explicit, key = given[ID_OPTION], key_option(given[KEY_OPTION], key_label)
        if not isinstance(explicit, str):  # an int (or junk) is checked as a value, not as text
            number = id_option(explicit, id_label)
            if number is not None:
                return number
            explicit = None
    elif read_only:
        return None
    else:
        id_label, key_label = ID_VARIABLE, KEY_VARIABLE
        explicit, key = environ.get(ID_VARIABLE), environ.get(KEY_VARIABLE)
    return logical_instance_id(explicit, key, _environment_lookup(environ), id_label=id_label, key_label=key_label)


def from_options(
    options: dict[str, Any], option_set: OptionSet, environ: Mapping[str, str] | None = None
) -> int | None:
    """:func:`resolve` for a backend's ``from_url``: pops the two options from ``options`` (the
    URL's parameters and keyword arguments, not yet parsed), reads ``read_only`` from them with
    ``option_set``'s parser and names ``option_set``'s owner in errors; ``environ`` defaults to
    ``os.environ``."""
    read_only = option_set.check("read_only", options.get("read_only", False))
    environ = os.environ if environ is None else environ
    return resolve(options, environ, owner=option_set.owner, read_only=read_only)


def refuse_cohort(
    options: dict[str, Any],
    option_set: OptionSet,
    *,
    backend: str,
    reason: str,
    environ: Mapping[str, str] | None = None,
) -> None:
    """For a backend that cannot host a failover cohort: :func:`from_options` (popping the two
    options), and a ValidationError when the client has a logical id, saying where it came from,
    why ``backend`` cannot host a cohort (``reason``) and what to do instead. Call it before any
    network access."""
    environ = os.environ if environ is None else environ
    named = [option_set.label(name) for name in OPTION_NAMES if options.get(name) is not None]
    if not named:
        named = [name for name in (ID_VARIABLE, KEY_VARIABLE) if rust_trim(environ.get(name) or "")]
    logical_id = from_options(options, option_set, environ)
    if logical_id is None:
        return
    raise ValidationError(
        f"{' and '.join(named)} give{'s' if len(named) == 1 else ''} this client the logical instance id "
        f"{logical_id}, but the {backend} backend cannot host a failover cohort: {reason}. Failover cohorts use "
        "the file backend on the pod's shared directory (DYN_DISCOVERY_BACKEND=file and DYN_FILE_KV=<that "
        "directory>, or a file:// URL), as the reference's design does; to use this backend, remove the "
        "logical id (a read_only=true client ignores the variables)"
    )


def member_instance_id(
    instance_id: int | None, logical_instance_id: int | None, *, read_only: bool, owner: str
) -> int | None:
    """The instance id a client is given: its logical id when it has one, else ``instance_id``
    (None: the backend chooses). ValidationError when both are given and differ, or when a
    read-only client is given a logical id. Both values are already parsed."""
    if logical_instance_id is None:
        return instance_id
    if read_only:
        raise ValidationError(
            f"{owner} option {ID_OPTION}={logical_instance_id} cannot be used with read_only=true: a read-only "
            "client registers nothing, so it has no instance id to share with a failover cohort"
        )
    if instance_id is not None and instance_id != logical_instance_id:
        raise ValidationError(
            f"{owner} options instance_id={instance_id} and {ID_OPTION}={logical_instance_id} disagree: a "
            "failover-cohort member's instance id is its logical instance id; give one of them (or the same value)"
        )
    return logical_instance_id
