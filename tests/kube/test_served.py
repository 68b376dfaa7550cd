"""The incremental served set gives what a rebuild from scratch gives, after any sequence of changes."""

from __future__ import annotations

import random

from discovery_sync.backends.kube.layout import spec_data
from discovery_sync.backends.kube.liveness import is_served, update_entry
from discovery_sync.backends.kube.served import ServedSet

from testrigs.helpers import endpoint_spec
from tests.kube.test_view_rules import cr, served_records

WORKERS = ["a", "b", "c", "mine"]


def random_entry(rng: random.Random, name: str, version: int):
    # ids overlap between workers (instance ids 1-3, endpoints e0-e2), so precedence matters
    records = [
        endpoint_spec(endpoint=f"e{rng.randrange(3)}", port=rng.randrange(1, 9)).to_instance(rng.randrange(1, 4))
        for _ in range(rng.randrange(4))
    ]
    return update_entry(None, cr(name, version, spec_data(records), owner=f"uid-{name}"))


def test_incremental_changes_match_a_rebuild():
    rng = random.Random(7)
    served = ServedSet(exclude="mine")
    entries, ready, local = {}, {}, {}
    every_id = set()  # of every record ever handed to the set: none may be served by mistake
    for version in range(1, 600):
        step = rng.randrange(4)
        name = rng.choice(WORKERS)
        if step == 0:
            entries[name] = random_entry(rng, name, version)
        elif step == 1:
            entries.pop(name, None)
        elif step == 2:
            ready[name] = rng.choice([set(), {f"uid-{name}"}, {f"uid-{name}", "other"}])
        else:
            record = endpoint_spec(endpoint=f"e{rng.randrange(3)}", port=99).to_instance(rng.randrange(1, 4))
            local = {} if rng.random() < 0.3 else {record.id(): record}
            served.set_local(local, {key: version for key in local})
        entry = entries.get(name)
        every_id |= set(local) | set(entry.records if entry is not None else ())
        served.set_worker(name, entry if entry is not None and is_served(entry, ready) else None)
        expected, expected_seen = served_records(
            entries, ready, exclude="mine", local=local, local_seen={key: None for key in local}
        )
        got = {key: candidate for key in every_id if (candidate := served.candidate(key)) is not None}
        assert {key: record for key, (record, _) in got.items()} == expected
        assert all(got[key][1] == expected_seen[key] for key in expected if key not in local)


def test_a_record_held_by_two_workers_comes_from_the_first_by_name_and_falls_back():
    one = endpoint_spec(port=1).to_instance(1)
    two = endpoint_spec(port=2).to_instance(1)
    served = ServedSet()
    served.set_worker("b", update_entry(None, cr("b", 1, spec_data([two]))))
    touched = served.set_worker("a", update_entry(None, cr("a", 2, spec_data([one]))))
    assert touched == {one.id()} and served.candidate(one.id()) == (one, 2)
    assert served.set_worker("a", None) == {one.id()}
    assert served.candidate(one.id()) == (two, 1)
    served.set_worker("b", None)
    assert served.candidate(one.id()) is None
