"""Which names in a bucket are records (backends/file/names.py), for any name a directory can hold."""

from __future__ import annotations

import os

from discovery_sync.backends.file.names import id_of_name, is_leftover, may_be_record, printable, record_name
from hypothesis import given, settings
from hypothesis import strategies as st

import discovery_sync as ds

BOUNDED = settings(max_examples=300, deadline=None, derandomize=True, database=None)
# names a directory can hold: any bytes but NUL and "/", as os.fsdecode gives them to Python
NAMES = st.binary(min_size=1, max_size=60).filter(lambda b: b"\0" not in b and b"/" not in b).map(os.fsdecode)
RECORDISH = st.text(alphabet="nsbackendgenrat0123456789abcdef%2F", min_size=1, max_size=60)


@BOUNDED
@given(NAMES | RECORDISH, st.sampled_from(list(ds.RecordKind)))
def test_a_name_is_a_record_name_exactly_when_its_identity_gives_it_back(name, kind):
    instance_id = id_of_name(kind, name)  # never raises, whatever the name
    if instance_id is not None:
        assert record_name(instance_id) == name and may_be_record(name) and not is_leftover(name)
    assert isinstance(printable(name), str) and printable(name).isprintable()


@BOUNDED
@given(
    st.text(alphabet=st.characters(exclude_categories=("Cs", "Cc")), min_size=1, max_size=12).filter(
        lambda s: "/" not in s
    )
)
def test_every_endpoint_record_name_is_recognised(endpoint):
    instance_id = ds.EndpointInstanceId("ns", "backend", endpoint, 0x2A)
    assert id_of_name(ds.RecordKind.ENDPOINT, record_name(instance_id)) == instance_id
    assert id_of_name(ds.RecordKind.MODEL, record_name(instance_id)) is not None  # the same path layout
    assert id_of_name(ds.RecordKind.EVENT_CHANNEL, record_name(instance_id)) is None
