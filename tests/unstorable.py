"""Stored records that ``register()`` refuses, as raw JSON another writer could leave in a store."""

from __future__ import annotations

import orjson

#: the deepest JSON orjson parses (and so the deepest record a reader can be handed)
ORJSON_MAX_DEPTH = 1024


def deep_model(
    depth: int, *, namespace: str = "ns", component: str = "backend", endpoint: str = "generate", instance_id: int = 1
) -> bytes:
    """The JSON of a Model record nesting ``depth`` levels deep, the record itself counting as the
    first (its card, the second, holds ``display_name`` and a chain of objects under ``"k"``)."""
    assert depth >= 2
    head = orjson.dumps(
        {
            "type": "Model",
            "namespace": namespace,
            "component": component,
            "endpoint": endpoint,
            "instance_id": instance_id,
        }
    )[:-1]
    chain = depth - 2  # objects below the card
    card = b'{"display_name":"deep","k":' + b'{"k":' * chain + b"1" + b"}" * chain + b"}"
    return head + b',"card_json":' + card + b"}"


def model_file_name(
    namespace: str = "ns", component: str = "backend", endpoint: str = "generate", instance_id: int = 1
) -> str:
    """The file name of a base model card in a file store's ``v1/mdc`` (docs/design.md §6)."""
    return f"{namespace}%2F{component}%2F{endpoint}%2F{instance_id:x}"
