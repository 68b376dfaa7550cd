"""Type-checked by tests/test_typing.py (mypy --strict), never run: a query carries the kind of
record it selects, so listings, watch events and live views are typed without a cast."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, assert_type

import discovery_sync as ds


@dataclasses.dataclass
class Card:
    display_name: str


def listed_kinds(client: ds.Discovery, scope: ds.EventScope) -> None:
    assert_type(ds.Query.endpoints("ns"), ds.Query[ds.Endpoint])
    assert_type(client.list(ds.Query.endpoints("ns")), list[ds.Endpoint])
    assert_type(client.list(ds.Query.models("ns", "c")), list[ds.Model])
    assert_type(client.list(ds.Query.event_channels(scope)), list[ds.EventChannel])
    assert_type(client.list(ds.Query.event_sources(topic="kv")), list[ds.EventSource])
    # of unknown kind: any record
    assert_type(ds.Query.from_dict({"kind": "models"}), ds.Query[ds.DiscoveryInstance])
    assert_type(client.list(ds.Query.from_dict({"kind": "models"})), list[ds.DiscoveryInstance])
    for endpoint in client.list(ds.Query.endpoints("ns")):
        assert_type(endpoint.transport, ds.Transport)
    assert_type(client.status(), dict[str, Any])
    # a typed query is still a query
    query: ds.Query = ds.Query.models()
    assert_type(client.list(query), list[ds.DiscoveryInstance])


def watched_events(client: ds.Discovery) -> None:
    with client.list_and_watch(ds.Query.endpoints("ns")) as watch:
        assert_type(watch, ds.Watch[ds.Endpoint])
        assert_type(watch.query, ds.Query[ds.Endpoint])
        assert_type(watch.snapshot(), tuple[ds.Endpoint, ...])
        event = watch.get(timeout=5)
        assert_type(event, ds.WatchEvent[ds.Endpoint])
        if isinstance(event, ds.Added):
            assert_type(event.instance, ds.Endpoint)
        elif isinstance(event, ds.Resync):
            assert_type(event.instances, tuple[ds.Endpoint, ...])
        elif isinstance(event, ds.Removed):
            assert_type(event.id, ds.DiscoveryInstanceId)
    for each in client.list_and_watch(ds.Query.models()).events(idle_timeout=1):
        if isinstance(each, ds.Added):
            assert_type(each.instance, ds.Model)
    untyped: ds.Watch = client.list_and_watch(ds.Query.event_sources())  # a typed watch is still a watch
    any_event: ds.DiscoveryEvent = untyped.get()
    assert_type(any_event, ds.Added | ds.Removed | ds.ModelTaintsUpdated | ds.Resync)


def live_views(client: ds.Discovery) -> None:
    # a model card's field through extract (the card is a dict: its fields are Any)
    names = client.live_view(ds.Query.models("ns"), lambda card: str(card["display_name"]))
    assert_type(names, ds.LiveView[int, str])
    assert_type(names.get(1), str | None)
    assert_type(names.get(1, ""), str)
    assert_type(names.snapshot(), Mapping[int, str])
    assert_type(names[1], str)
    # card_type: the values are typed cards, or what extract makes of them
    cards = client.live_view(ds.Query.models("ns"), card_type=Card, base_models_only=True)
    assert_type(cards, ds.LiveView[int, Card])
    assert_type(cards.snapshot(), Mapping[int, Card])
    card = cards.get(1)
    assert card is not None
    assert_type(card.display_name, str)
    lengths = client.live_view(ds.Query.models(), lambda card: len(card.display_name), card_type=Card)
    assert_type(lengths.get(1), int | None)
    # other kinds: extract takes the record; no extract: the records themselves
    addresses = client.live_view(ds.Query.endpoints("ns"), lambda endpoint: endpoint.transport.kind)
    assert_type(addresses, ds.LiveView[int, str])
    endpoints = client.live_view(ds.Query.endpoints("ns"))
    assert_type(endpoints.snapshot(), Mapping[int, ds.Endpoint])
    models = client.live_view(ds.Query.models("ns"))
    assert_type(models.get(1), ds.Model | None)
    # key: one entry per record
    by_record = client.live_view(ds.Query.event_channels(), key=lambda channel: channel.id())
    assert_type(by_record, ds.LiveView[ds.EventChannelInstanceId, ds.EventChannel])
    namespaces = client.live_view(ds.Query.endpoints(), lambda e: e.namespace, key=lambda e: e.id())
    assert_type(namespaces, ds.LiveView[ds.EndpointInstanceId, str])
    per_card = client.live_view(ds.Query.models(), lambda card: card.display_name, card_type=Card, key=lambda m: m.id())
    assert_type(per_card, ds.LiveView[ds.ModelCardInstanceId, str])
    # a query of several kinds: extract takes any of their records, or a card
    several: ds.Query[ds.Endpoint | ds.Model] = ds.Query.endpoints()
    assert_type(client.live_view(several).snapshot(), Mapping[int, ds.Endpoint | ds.Model])
    either = client.live_view(several, lambda x: x if isinstance(x, dict) else x.namespace)
    assert_type(either.get(1), dict[str, Any] | str | None)
    # a query of unknown kind: extract takes anything, and without one the values are records
    unknown = ds.Query.from_dict({"kind": "endpoints"})
    assert_type(client.live_view(unknown), ds.LiveView[int, ds.DiscoveryInstance])
    assert_type(client.live_view(unknown, lambda x: x), ds.LiveView[int, ds.DiscoveryInstance | dict[str, Any]])
    # the change callback sees the view's own types
    with client.live_view(
        ds.Query.models(),
        card_type=Card,
        on_change=lambda snapshot, event: print(snapshot[1].display_name, event),
    ) as view:
        assert_type(view, ds.LiveView[int, Card])
