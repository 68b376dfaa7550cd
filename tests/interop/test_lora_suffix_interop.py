"""The suffix a reference-runtime 1.6.1 worker gives a LoRA card is ``ds.lora_suffix`` of its name
(issue 25, case 6): the slug register() advises for a suffix with a ``/``."""

from __future__ import annotations

import discovery_sync as ds

ENDPOINT = "pyns.backend.generate"
NAMES = ["a/b", "My LoRA.Adapter", "__x-Y_z", "Ünï/çødé"]


def test_reference_workers_store_lora_cards_under_the_slug_of_their_name(file_store, rust_peer, tiny_model):
    peer = rust_peer()
    instance_id = peer.call("serve", endpoint=ENDPOINT)["instance_id"]
    peer.call("register_model", endpoint=ENDPOINT, path=str(tiny_model), name="tiny")
    for name in NAMES:
        peer.call(
            "register_model",
            endpoint=ENDPOINT,
            path=str(tiny_model),
            name=name,
            lora_name=name,
            base_model_path=str(tiny_model),
        )
    with ds.connect(f"file://{file_store}", read_only=True) as client:
        cards = client.list(ds.Query.models("pyns", "backend", "generate"))
    suffixes = {card.card_json["lora"]["name"]: card.model_suffix for card in cards if card.model_suffix is not None}
    assert suffixes == {name: ds.lora_suffix(name) for name in NAMES}
    assert {card.instance_id for card in cards} == {instance_id}
