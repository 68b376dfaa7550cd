"""Model suffixes: the last segment of a LoRA card's store key, and the slug the reference gives it.

The reference runtime's Python bindings register a LoRA adapter (``register_model(...,
lora_name=NAME)``) under the suffix ``Slug::slugify(NAME)`` (``ai-dynamo/dynamo``,
``lib/llm/src/local_model.rs``, ``LocalModel::attach``; ``Slug`` in ``lib/runtime/src/slug.rs``),
which :func:`lora_suffix` reproduces. Its Rust API (``DiscoverySpec::from_model_with_suffix``) and
our :class:`~discovery_sync.ModelSpec` take the suffix itself, as the key holds it.
"""

from __future__ import annotations

from typing import Any

from .errors import ValidationError
from .validation import check_name

_SLUG_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_")


def lora_suffix(name: str) -> str:
    """The model suffix the reference's ``register_model(lora_name=name)`` stores: ``name``
    lowercased, each character other than ``a-z``, ``0-9``, ``-`` and ``_`` replaced by ``_``,
    leading ``_`` removed (``"My LoRA/v2"`` → ``"my_lora_v2"``). Empty for a name without
    letters, digits or ``-`` (the reference then tries the base card's key). ValidationError
    when ``name`` is not a string."""
    if not isinstance(name, str):
        raise ValidationError(f"a LoRA name must be a string, got {type(name).__name__}")
    return "".join(c if c in _SLUG_CHARACTERS else "_" for c in name.lower()).lstrip("_")


def check_model_suffix(suffix: Any) -> str | None:
    """``suffix`` when a model card may be registered under it: None (a base card) or a non-empty
    string of valid Unicode, at most 255 UTF-8 bytes, without ``/``. The reference splits a model
    key at every ``/`` and keys an empty suffix as the base card while counting it as a LoRA, so
    for such a card its frontends would miss the removal (it stays listed until a resync).
    ValidationError otherwise, showing the slug to use instead of a suffix with ``/``."""
    if suffix is None:
        return None
    if isinstance(suffix, str) and "/" in suffix:
        raise ValidationError(_slash_advice(suffix))
    if suffix == "":
        raise ValidationError(
            "model_suffix must not be empty: leave it out (None) for a base model card, and give a "
            "LoRA card a suffix of its own (the reference's is lora_suffix(lora name))"
        )
    return check_name(suffix, "model_suffix")


def _slash_advice(suffix: str) -> str:
    problem = (
        f"model_suffix {suffix!r} must not contain '/': it is the last segment of the card's store key, which "
        "the reference runtime splits at every '/' (its frontends would keep listing the card after it is "
        "unregistered)"
    )
    slug = lora_suffix(suffix)
    if not slug:
        return f"{problem}; choose a suffix with letters or digits"
    return (
        f"{problem}; use {slug!r}, the suffix the reference's register_model(lora_name={suffix!r}) stores "
        "(discovery_sync.lora_suffix computes it)"
    )
