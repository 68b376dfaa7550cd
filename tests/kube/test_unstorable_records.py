"""The Kubernetes backend and records that register() refuses, in another worker's CR (issue 25,
case 5): nested deeper than 100 levels, a record is skipped like one that does not parse, and a
record replaced by one keeps its last valid value. (Deeper records than these cannot be tried
here: the fake API server deep-copies objects with the standard library.)"""

from __future__ import annotations

import orjson

import discovery_sync as ds
from discovery_sync.jsonsafe import MAX_DEPTH
from testrigs.helpers import assert_quiet, caught_logs, initial_state, model_spec
from testrigs.kube_fake import WORKER_METADATA
from tests.unstorable import deep_model

TOO_DEEP = f"more than {MAX_DEPTH} levels deep"


def test_a_record_too_deep_is_skipped_and_one_replaced_by_it_keeps_its_last_value(server, pod_client):
    worker, reader = pod_client("worker-a"), pod_client("reader")
    model = worker.register(model_spec())
    cr = server.get(WORKER_METADATA, "worker-a")
    cards = cr["spec"]["data"]["model_cards"]
    deep_id = ds.ModelCardInstanceId("ns", "backend", "generate", 2)
    cards[deep_id.to_path()] = orjson.loads(deep_model(MAX_DEPTH + 1, instance_id=2))
    with caught_logs("discovery_sync.backends.kube") as warnings, reader.list_and_watch(ds.Query.models()) as watch:
        server.upsert(WORKER_METADATA, cr)
        _, resync = initial_state(watch)
        assert resync.instances == (model,)
        assert reader.list(ds.Query.models()) == [model] and reader.get(deep_id) is None
        assert warnings.wait_for(repr(deep_id.to_path()))
        cards[model.id().to_path()] = orjson.loads(
            deep_model(MAX_DEPTH + 1, instance_id=model.instance_id).replace(b'"deep"', b'"Qwen/Qwen3-0.6B"')
        )
        server.upsert(WORKER_METADATA, cr)  # the worker's own card replaced by one too deep
        assert warnings.wait_for(repr(model.id().to_path()))
        assert_quiet(watch, 0.5)
        assert reader.list(ds.Query.models()) == [model]
    assert all(TOO_DEEP in message for message in warnings.messages)
