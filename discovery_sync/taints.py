"""Routing taints of model cards: where they live, which are reserved, how topology ones derive.

Taints are the string array ``card_json["runtime_config"]["taints"]`` (absent = none). Taints
beginning with ``dynamo.topology/`` are reserved: they are derived from the object
``runtime_config.topology_domains`` as ``dynamo.topology/{domain}={value}`` (both trimmed)
and cannot be set by callers. Stored taints are sorted and unique.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from .errors import ValidationError
from .validation import check_unicode

TOPOLOGY_TAINT_PREFIX = "dynamo.topology/"


def taints_of(card: dict[str, Any]) -> tuple[str, ...]:
    """The card's taints, sorted and unique; ValidationError when they are not a string array."""
    runtime_config = card.get("runtime_config")
    if not isinstance(runtime_config, dict):
        return ()
    taints = runtime_config.get("taints")
    if taints is None:
        return ()
    if not isinstance(taints, list):
        raise ValidationError("model card runtime_config.taints must be an array of strings")
    if not all(isinstance(t, str) for t in taints):
        raise ValidationError("model card runtime_config.taints entries must be strings")
    return tuple(sorted(set(taints)))


def card_without_taints(card: dict[str, Any]) -> dict[str, Any]:
    """The card with ``runtime_config.taints`` removed: what a taint update may not change. A
    ``runtime_config`` left empty is left out (an absent one is the reference's default: the first
    taints given to a card without one add nothing else)."""
    runtime_config = card.get("runtime_config")
    if not isinstance(runtime_config, dict) or (runtime_config and "taints" not in runtime_config):
        return card
    stripped = dict(card)
    rest = {k: v for k, v in runtime_config.items() if k != "taints"}
    if rest:
        stripped["runtime_config"] = rest
    else:
        del stripped["runtime_config"]
    return stripped


def topology_taints(card: dict[str, Any]) -> frozenset[str]:
    """Taints derived from ``runtime_config.topology_domains`` (an object of strings)."""
    runtime_config = card.get("runtime_config")
    domains = runtime_config.get("topology_domains") if isinstance(runtime_config, dict) else None
    if not isinstance(domains, dict):
        return frozenset()
    derived = set()
    for domain, value in domains.items():
        if not isinstance(domain, str) or not isinstance(value, str):
            raise ValidationError("model card runtime_config.topology_domains must map strings to strings")
        domain, value = domain.strip(), value.strip()
        if domain and value:
            derived.add(f"{TOPOLOGY_TAINT_PREFIX}{domain}={value}")
    return frozenset(derived)


def check_caller_taints(taints: Iterable[str]) -> frozenset[str]:
    """Validate taints given by a caller: non-empty strings, none with the reserved prefix, in a
    collection that is not a string or a mapping (whose keys alone would be taken)."""
    if isinstance(taints, Mapping):
        raise ValidationError(
            f"taints must be a collection of strings, e.g. ['gpu=a100'], not a mapping ({type(taints).__name__})"
        )
    if isinstance(taints, (str, bytes)) or not isinstance(taints, Iterable):
        raise ValidationError("taints must be a collection of strings, e.g. ['gpu=a100']")
    result = set()
    for taint in taints:
        if not isinstance(taint, str) or not taint:
            raise ValidationError(f"every taint must be a non-empty string, got {taint!r}")
        check_unicode(taint, "taint")
        if taint.startswith(TOPOLOGY_TAINT_PREFIX):
            raise ValidationError(
                f"taint {taint!r} uses the reserved prefix {TOPOLOGY_TAINT_PREFIX!r}; "
                "topology taints derive from runtime_config.topology_domains"
            )
        result.add(taint)
    return frozenset(result)


def with_taints(card: dict[str, Any], caller_taints: Iterable[str]) -> dict[str, Any]:
    """A copy of ``card`` whose taints are the caller's plus the derived topology taints, sorted.
    A card without ``runtime_config`` gets one holding the taints alone: the reference reads an
    absent ``runtime_config`` as its default (no taints) and writes it back with them."""
    runtime_config = card.get("runtime_config", {})
    if not isinstance(runtime_config, dict):
        raise ValidationError(
            f"the model card's runtime_config is {type(runtime_config).__name__}, not an object, so it cannot "
            "carry taints; register the card with an object there (or none)"
        )
    taints = sorted(check_caller_taints(caller_taints) | topology_taints(card))
    updated = copy.copy(card)
    updated["runtime_config"] = {**runtime_config, "taints": taints}
    return updated


def normalized_card(card: dict[str, Any]) -> dict[str, Any]:
    """The card as registered: topology taints derived from its domains, taints sorted and unique.

    A card without ``runtime_config`` is returned unchanged. Reserved taints that do not match
    the card's topology domains are refused.
    """
    runtime_config = card.get("runtime_config")
    if not isinstance(runtime_config, dict):
        return card
    present = set(taints_of(card))
    derived = topology_taints(card)
    stray = {t for t in present if t.startswith(TOPOLOGY_TAINT_PREFIX)} - derived
    if stray:
        raise ValidationError(
            f"reserved taints {sorted(stray)} do not match runtime_config.topology_domains; remove them"
        )
    taints = sorted(present | derived)
    if not taints and "taints" not in runtime_config:
        return card
    if runtime_config.get("taints") == taints:
        return card
    updated = copy.copy(card)
    updated["runtime_config"] = {**runtime_config, "taints": taints}
    return updated
