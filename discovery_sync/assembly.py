"""Records rebuilt from values their reader has already checked: the hot path of every read.

A frozen dataclass sets each field through ``object.__setattr__`` and runs its
``__post_init__``: about 2 µs for an endpoint and its identity, more than orjson takes to
parse its JSON. A parser that has checked the values exactly as ``__post_init__`` would (and
only then) stores them with the slots' own setters instead, in about a third of the time. Any
value that is not plainly valid goes through the class itself, whose checks say what is wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

SlotSetter = Callable[[Any, Any], None]

#: an instance of a class, made without running its ``__init__`` (every slot unset)
blank = object.__new__


def slot_setters(cls: type, *names: str) -> tuple[SlotSetter, ...]:
    """The setters of the slots ``names`` of ``cls``: ``setter(instance, value)`` stores a value
    in a :func:`blank` instance, frozen dataclasses included. The caller vouches for the values."""
    return tuple(getattr(cls, name).__set__ for name in names)
