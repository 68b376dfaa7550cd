"""Type-checked by tests/test_packaging.py (mypy --strict), never run: what a user's type checker
must infer from the library's annotations."""

from __future__ import annotations

from typing import assert_type

import discovery_sync as ds


def registered_kinds(client: ds.Discovery) -> None:
    endpoint = client.register(ds.EndpointSpec("ns", "c", "e", ds.Transport.tcp("127.0.0.1:1")))
    assert_type(endpoint, ds.Endpoint)
    model = client.register(ds.ModelSpec("ns", "c", "e", {"display_name": "m"}))
    assert_type(model, ds.Model)
    channel = client.register(ds.EventChannelSpec(ds.EventScope.for_namespace("ns"), "kv", ds.NatsTransport("x")))
    assert_type(channel, ds.EventChannel)
    assert_type(client.list(ds.Query.endpoints()), list[ds.Endpoint])
    with client.lease_endpoint(ds.EndpointSpec("ns", "c", "e", ds.Transport.tcp("127.0.0.1:1"))) as lease:
        assert_type(lease.instance, ds.Endpoint)
