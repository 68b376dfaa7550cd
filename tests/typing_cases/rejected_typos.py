"""Type-checked by tests/test_typing.py, never run: mypy --strict must reject every line that
ends with a "rejected:" comment, with an error holding the comment's text, and nothing else."""

from __future__ import annotations

import dataclasses

import discovery_sync as ds


@dataclasses.dataclass
class Card:
    display_name: str


def typos(client: ds.Discovery) -> None:
    for endpoint in client.list(ds.Query.endpoints("ns")):
        print(endpoint.transprot)  # rejected: "Endpoint" has no attribute "transprot"
    with client.list_and_watch(ds.Query.models()) as watch:
        event = watch.get()
        if isinstance(event, ds.Added):
            print(event.instance.card_jsno)  # rejected: "Model" has no attribute "card_jsno"
    cards = client.live_view(ds.Query.models(), card_type=Card)
    for card in cards.snapshot().values():
        print(card.display_nmae)  # rejected: "Card" has no attribute "display_nmae"
    names = client.live_view(ds.Query.models(), lambda card: card.display_name, card_type=Card)
    print(names[1].uper())  # rejected: "str" has no attribute "uper"
    endpoints = ds.Query.endpoints()
    client.live_view(endpoints, lambda endpoint: endpoint.transprot)  # rejected: has no attribute "transprot"
