"""The pure rules behind the view: readiness, ownership, last valid data, the read barrier."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from discovery_sync.backends.kube.layout import spec_data
from discovery_sync.backends.kube.liveness import (
    Readiness,
    WorkerEntry,
    is_served,
    ready_from_pods,
    ready_from_slices,
    update_entry,
)
from discovery_sync.backends.kube.served import ServedSet
from discovery_sync.backends.kube.summary import versioned
from discovery_sync.backends.kube.view import ResourceCache
from discovery_sync.backends.kube.wire import Resource

from discovery_sync.identity import DiscoveryInstanceId
from discovery_sync.model import DiscoveryInstance
from testrigs.helpers import endpoint_spec, model_spec


def cr(name: str, rv: int, data: Any, uid: str = "cr-uid", owner: str | None = "pod-uid") -> dict[str, Any]:
    refs = [{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": owner}] if owner else []
    return {
        "metadata": {"name": name, "uid": uid, "resourceVersion": str(rv), "ownerReferences": refs},
        "spec": {"data": data},
    }


def served_records(
    entries: Mapping[str, WorkerEntry],
    ready: Readiness,
    *,
    exclude: str | None = None,
    local: Mapping[DiscoveryInstanceId, DiscoveryInstance] | None = None,
    local_seen: Mapping[DiscoveryInstanceId, int | None] | None = None,
) -> tuple[dict[DiscoveryInstanceId, DiscoveryInstance], dict[DiscoveryInstanceId, int | None]]:
    """What a ServedSet built from scratch serves: the records and the version each first appeared at."""
    served = ServedSet(exclude)
    served.set_local(local or {}, local_seen or {})
    for name, entry in entries.items():
        served.set_worker(name, entry if is_served(entry, ready) else None)
    records: dict[DiscoveryInstanceId, DiscoveryInstance] = {}
    seen: dict[DiscoveryInstanceId, int | None] = {}
    for key in {*(local or {}), *(key for entry in entries.values() for key in entry.records)}:
        candidate = served.candidate(key)
        if candidate is not None:
            records[key], seen[key] = candidate
    return records, seen


def obj(name: str, rv: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": str(rv)}}


def test_slice_readiness_needs_ready_and_a_complete_target_ref():
    endpoints = [
        {"conditions": {"ready": True}, "targetRef": {"kind": "Pod", "name": "a", "uid": "ua"}},
        {"conditions": {"ready": False}, "targetRef": {"kind": "Pod", "name": "b", "uid": "ub"}},
        {"conditions": {}, "targetRef": {"kind": "Pod", "name": "c", "uid": "uc"}},
        {"conditions": {"ready": True}, "targetRef": {"kind": "Pod", "name": "d"}},
        {"conditions": {"ready": True}, "targetRef": {"kind": "Node", "name": "e", "uid": "ue"}},
        {"conditions": {"ready": True}},
    ]
    stale = [{"conditions": {"ready": True}, "targetRef": {"name": "a", "uid": "ua-old"}}]
    assert ready_from_slices([{"endpoints": endpoints}]) == {"a": {"ua"}}
    assert ready_from_slices([{"endpoints": endpoints}, {"endpoints": stale}]) == {"a": {"ua", "ua-old"}}


def test_container_readiness_names_crs_per_container():
    pod = {
        "metadata": {"name": "p", "uid": "u"},
        "status": {
            "containerStatuses": [
                {"name": "main", "ready": True},
                {"name": "side", "ready": True},
                {"name": "x", "ready": False},
            ]
        },
    }
    assert ready_from_pods([pod]) == {"p": {"u"}, "p-side": {"u"}}


def test_served_only_when_ready_owned_and_unambiguous():
    a = endpoint_spec(endpoint="a").to_instance(1)
    entries = {"w": update_entry(None, cr("w", 5, spec_data([a])))}
    assert served_records(entries, {"w": {"pod-uid"}})[0] == {a.id(): a}
    assert served_records(entries, {"w": {"other"}})[0] == {}
    assert served_records(entries, {"w": {"pod-uid", "other"}})[0] == {}
    assert served_records(entries, {})[0] == {}
    assert served_records(entries, {"w": {"pod-uid"}}, exclude="w")[0] == {}
    unowned = {"w": update_entry(None, cr("w", 5, spec_data([a]), owner=None))}
    assert served_records(unowned, {"w": {"pod-uid"}})[0] == {}


def test_local_records_are_always_served_and_win():
    theirs = endpoint_spec(endpoint="a", port=1).to_instance(1)
    mine = endpoint_spec(endpoint="a", port=2).to_instance(1)
    entries = {"w": update_entry(None, cr("w", 5, spec_data([theirs])))}
    records, seen = served_records(entries, {}, local={mine.id(): mine}, local_seen={mine.id(): 3})
    assert records == {mine.id(): mine} and seen == {mine.id(): 3}


def test_last_valid_data_and_first_seen_versions():
    a, b = endpoint_spec(endpoint="a").to_instance(1), model_spec().to_instance(1)
    first = update_entry(None, cr("w", 5, spec_data([a])))
    assert first.first_seen == {a.id(): 5}
    second = update_entry(first, cr("w", 7, spec_data([a, b])))
    assert second.first_seen == {a.id(): 5, b.id(): 7}
    for bad in (None, [], {"endpoints": []}):
        kept = update_entry(second, cr("w", 8, bad))
        assert kept.records == second.records and kept.first_seen == second.first_seen
    renewed = update_entry(second, cr("w", 9, None, uid="new-uid"))
    assert renewed.records == {}
    reowned = update_entry(second, cr("w", 9, None, owner="new-pod"))
    assert reowned.records == {}


def test_a_null_map_holds_no_records():
    """Server-side apply stores null for a map its manager emptied (ssa_empty_map.json): its
    records are gone, as the reference reads it; the other maps still count (issue 34, case 1)."""
    a, b = endpoint_spec().to_instance(1), model_spec().to_instance(1)
    both = update_entry(None, cr("w", 5, spec_data([a, b])))
    emptied = update_entry(both, cr("w", 6, {**spec_data([a]), "model_cards": None}))
    assert emptied.records == {a.id(): a}
    all_null = update_entry(
        emptied, cr("w", 7, dict.fromkeys(("endpoints", "model_cards", "event_channels", "event_sources")))
    )
    assert all_null.records == {}
    assert update_entry(None, cr("w", 5, {"endpoints": None})).records == {}  # missing maps are empty too
    for bad in ({"model_cards": []}, {"model_cards": 0}, {"endpoints": "x"}):  # not a map: keep the last valid
        assert update_entry(both, cr("w", 8, bad)).records == both.records


def test_records_in_the_wrong_map_are_skipped():
    a = endpoint_spec().to_instance(1)
    data = {"model_cards": {"x": a.to_dict()}, "endpoints": {"y": a.to_dict()}, "future_map": {"z": 1}}
    entry = update_entry(None, cr("w", 5, data))
    assert entry.records == {a.id(): a}


@pytest.mark.parametrize(
    ("cached", "progress", "listed", "at", "covered"),
    [
        ({}, 10, {}, "10", True),
        ({"a": obj("a", 4)}, 10, {"a": obj("a", 4)}, "20", True),  # unrelated writes moved the list version
        ({"a": obj("a", 4)}, 4, {"a": obj("a", 6)}, "20", False),  # a modification not applied yet
        ({}, 4, {"a": obj("a", 6)}, "20", False),  # a creation not applied yet
        ({}, 7, {"a": obj("a", 6)}, "20", True),  # created and deleted since: applied
        ({"a": obj("a", 4)}, 9, {}, "20", False),  # deleted before the list, not applied yet
        ({"a": obj("a", 25)}, 25, {}, "20", True),  # created after the list
        ({"a": obj("a", 4)}, None, {"a": {"metadata": {"resourceVersion": "opaque"}}}, "x", True),
    ],
)
def test_the_read_barrier_compares_versions_per_object(cached, progress, listed, at, covered):
    summaries = {name: versioned(o) for name, o in cached.items()}
    cache = ResourceCache(Resource("things", lambda **kw: None), objects=summaries, progress=progress)
    assert cache.covers({name: versioned(o) for name, o in listed.items()}, at) is covered
