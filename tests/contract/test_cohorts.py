"""Failover cohorts (docs/design.md §4.1): clients sharing one logical instance id take over each
other's records in place; a replaced member never fights its successor.

On etcd and Kubernetes a cohort cannot exist (the instance id is the lease id, or the pod's CR):
connecting a member is a ValidationError that says so."""

from __future__ import annotations

import queue

import pytest

import discovery_sync as ds

LOGICAL_ID = 0x1D_CAFE
HOSTS_COHORTS = ("memory", "file-inotify", "file-polling", "file-sshfs")


def _endpoint(transport: str) -> ds.EndpointSpec:
    return ds.EndpointSpec("ns", "backend", "generate", ds.Transport.tcp(transport))


def _model(name: str = "llama", taints: list[str] | None = None) -> ds.ModelSpec:
    card: dict[str, object] = {"display_name": name, "source_path": f"/models/{name}"}
    if taints is not None:
        card["runtime_config"] = {"taints": taints}
    return ds.ModelSpec("ns", "backend", "generate", card)


def _channel(address: str) -> ds.EventChannelSpec:
    return ds.EventChannelSpec(ds.EventScope.for_namespace("ns"), "kv-events", ds.ZmqTransport(address))


def _next(watch: ds.Watch, timeout: float) -> ds.DiscoveryEvent:
    return watch.get(timeout=timeout)


def _quiet(watch: ds.Watch, seconds: float) -> list[ds.DiscoveryEvent]:
    events = []
    try:
        while True:
            events.append(watch.get(timeout=seconds))
    except queue.Empty:
        return events


def _skip_initial(watch: ds.Watch, timeout: float) -> list[ds.DiscoveryEvent]:
    events = []
    while not isinstance(event := watch.get(timeout=timeout), ds.Resync):
        events.append(event)
    return events


def _refused(rig) -> bool:
    if rig.name in HOSTS_COHORTS:
        return False
    with pytest.raises(ds.ValidationError, match="cannot host a failover cohort"):
        rig.member(LOGICAL_ID)
    return True


def test_a_successor_takes_the_records_over_in_place(rig):
    if _refused(rig):
        return
    primary = rig.member(LOGICAL_ID)
    assert primary.instance_id == LOGICAL_ID and primary.logical_instance_id == LOGICAL_ID
    primary.register(_endpoint("127.0.0.1:9001"))
    primary.register(_model(taints=["gpu=a100"]))
    primary.register(_channel("tcp://127.0.0.1:5001"))
    observer = rig.client()
    endpoints = observer.list_and_watch(ds.Query.endpoints("ns"))
    models = observer.list_and_watch(ds.Query.models("ns"))
    channels = observer.list_and_watch(ds.Query.event_channels())
    for watch in (endpoints, models, channels):
        assert len(_skip_initial(watch, rig.event_timeout)) == 1

    standby = rig.member(LOGICAL_ID)
    assert primary.replaced is None and standby.replaced is None  # a member that wrote nothing fences nobody
    endpoint = standby.register(_endpoint("127.0.0.1:9002"))
    model = standby.register(_model(taints=["gpu=h100"]))
    channel = standby.register(_channel("tcp://127.0.0.1:5002"))

    # the worker changes in place: never Removed
    event = _next(endpoints, rig.event_timeout)
    assert event == ds.Added(endpoint), event
    event = _next(models, rig.event_timeout)
    assert isinstance(event, ds.ModelTaintsUpdated) and event.taints == ("gpu=h100",), event
    assert [_next(channels, rig.event_timeout), _next(channels, rig.event_timeout)] == [
        ds.Removed(channel.id()),
        ds.Added(channel),
    ]
    assert observer.list(ds.Query.endpoints("ns")) == [endpoint]
    assert observer.get(model.id()) == model

    # the predecessor learns it was replaced, and can neither write nor remove anything
    assert primary.wait_replaced(timeout=rig.event_timeout)
    assert "replaced by" in str(primary.replaced)
    assert primary.owned() == ()
    with pytest.raises(ds.InstanceReplaced):
        primary.register(_endpoint("127.0.0.1:9001"))
    with pytest.raises(ds.InstanceReplaced):
        primary.unregister(endpoint.id())
    primary.shutdown()
    for watch in (endpoints, models, channels):
        assert _quiet(watch, rig.quiet_period) == []
    assert observer.list(ds.Query.endpoints("ns")) == [endpoint]
    assert observer.get(model.id()) == model and observer.get(channel.id()) == channel
    assert standby.replaced is None and set(standby.owned()) == {endpoint, model, channel}

    standby.shutdown()  # the successor's records are its own to remove
    assert isinstance(_next(endpoints, rig.event_timeout), ds.Removed)
    assert observer.list(ds.Query.endpoints("ns")) == []


def test_a_changed_card_is_replaced_and_a_conflicting_one_refused(rig):
    if _refused(rig):
        return
    primary = rig.member(LOGICAL_ID)
    primary.register(_endpoint("127.0.0.1:9001"))
    old = primary.register(_model("llama"))
    other = rig.client()  # another worker serves mistral on the same endpoint's component? no: its own id
    observer = rig.client()
    models = observer.list_and_watch(ds.Query.models("ns"))
    _skip_initial(models, rig.event_timeout)
    standby = rig.member(LOGICAL_ID)
    new = standby.register(_model("llama-2"))
    assert [_next(models, rig.event_timeout), _next(models, rig.event_timeout)] == [ds.Removed(old.id()), ds.Added(new)]
    other.register(_model("llama-2"))  # the same model on another worker: no conflict
    third = rig.member(LOGICAL_ID)
    with pytest.raises(ds.ConflictError):  # llama-3 conflicts with the other worker's llama-2
        third.register(_model("llama-3"))
    assert observer.get(new.id()) == new


def test_callbacks_tell_the_replaced_member(rig):
    if _refused(rig):
        return
    primary = rig.member(LOGICAL_ID)
    told: queue.Queue[ds.Replacement] = queue.Queue()
    primary.on_replaced(told.put)
    primary.register(_endpoint("127.0.0.1:9001"))
    standby = rig.member(LOGICAL_ID)
    standby.register(_endpoint("127.0.0.1:9002"))
    replacement = told.get(timeout=rig.event_timeout)
    assert replacement.logical_instance_id == LOGICAL_ID
    late: queue.Queue[ds.Replacement] = queue.Queue()
    primary.on_replaced(late.put)  # registered after the fact: called at once
    assert late.get(timeout=rig.event_timeout) == replacement
    assert standby.replaced is None


def test_a_leasing_predecessor_releases_nothing_of_its_successor(rig):
    if _refused(rig):
        return
    primary = rig.member(LOGICAL_ID)
    lease = primary.lease_endpoint(_endpoint("127.0.0.1:9001"))
    standby = rig.member(LOGICAL_ID)
    endpoint = standby.register(_endpoint("127.0.0.1:9002"))
    assert primary.wait_replaced(timeout=rig.event_timeout)
    lease.release()
    with pytest.raises(ds.InstanceReplaced):
        primary.lease_endpoint(_endpoint("127.0.0.1:9001"))
    observer = rig.client()
    assert observer.list(ds.Query.endpoints("ns")) == [endpoint]


def test_clients_without_a_logical_id_are_no_cohort(rig):
    client = rig.client()
    assert client.logical_instance_id is None and client.replaced is None
    with pytest.raises(ds.ValidationError, match="failover-cohort members"):
        client.wait_replaced(0)
    with pytest.raises(ds.ValidationError, match="failover-cohort members"):
        client.on_replaced(print)
