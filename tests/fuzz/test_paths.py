"""Identity paths and the percent codec: any input gives a result or a ValidationError, and
every identity round-trips through its path. (tests/unit/test_pathcodec.py holds the codec's
round-trip and alphabet properties for valid text; these add the inputs it leaves out.)"""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

import discovery_sync as ds
from discovery_sync.identity import parse_hex_id
from discovery_sync.pathcodec import decode, encode_filename, encode_segment
from tests.fuzz.strategies import FUZZ, any_values, instances, names, only_discovery_errors, scopes

KINDS = list(ds.RecordKind)
SEGMENT_ESCAPED = re.compile(r"(?:[A-Za-z0-9_-]|%[0-9A-F]{2})*")

#: path segments that make the parsers go down every branch
segments = st.one_of(
    st.sampled_from(["namespace", "component", "endpoint", "topic", "", "2a", "0", "ffffffffffffffff", "1" * 17]),
    st.sampled_from(["%2F", "%zz", "%", "%C3", "%C3%A9", "A", "g", "\udcff", "\u0663", " 2a"]),
    st.text(max_size=6),
)
structured_paths = st.lists(segments, min_size=1, max_size=9).map("/".join)


@FUZZ
@given(st.sampled_from(KINDS), structured_paths | st.text(max_size=40))
def test_id_from_path_of_any_text(kind, path):
    parsed = only_discovery_errors(ds.id_from_path, kind, path)
    if parsed is not None:
        assert parsed.kind is kind
        assert ds.id_from_path(kind, parsed.to_path()) == parsed  # the canonical path parses the same


@FUZZ
@given(st.sampled_from(KINDS) | any_values, any_values | structured_paths)
def test_id_from_path_of_any_values(kind, path):
    only_discovery_errors(ds.id_from_path, kind, path)


@FUZZ
@given(instances)
def test_every_identity_round_trips_through_its_path(instance):
    identity = instance.id()
    assert ds.id_from_path(identity.kind, identity.to_path()) == identity


@FUZZ
@given(st.text(max_size=20) | any_values)
def test_parse_hex_id(text):
    number = only_discovery_errors(parse_hex_id, text)
    if number is not None:
        assert f"{number:x}" == text.lstrip("0").rjust(1, "0")


@FUZZ
@given(scopes, st.lists(segments, max_size=4))
def test_scope_paths_round_trip_and_leave_the_rest(scope, rest):
    parsed, remaining = ds.EventScope.from_path_parts([*scope.to_path().split("/"), "topic", *rest])
    assert parsed == scope
    assert remaining == ["topic", *rest]


@FUZZ
@given(st.lists(segments, max_size=8))
def test_scope_from_any_path_parts(parts):
    only_discovery_errors(ds.EventScope.from_path_parts, parts)


# -- percent codec ----------------------------------------------------------------------------------
@FUZZ
@given(st.text(max_size=20) | any_values)
def test_encoders_take_any_value_and_refuse_what_is_not_unicode_text(value):
    for encode in (encode_segment, encode_filename):
        encoded = only_discovery_errors(encode, value)
        if encoded is None:
            assert not isinstance(value, str) or _has_surrogate(value)
        else:
            assert decode(encoded) == value


def _has_surrogate(text: str) -> bool:
    return any("\ud800" <= c <= "\udfff" for c in text)


@FUZZ
@given(st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=20))
def test_segments_keep_only_their_alphabet_and_uppercase_escapes(text):
    assert SEGMENT_ESCAPED.fullmatch(encode_segment(text))


@FUZZ
@given(st.binary(max_size=12), st.booleans())
def test_decoding_escaped_bytes_gives_their_utf8_or_a_validation_error(raw, lowercase):
    escaped = "".join(f"%{byte:02x}" if lowercase else f"%{byte:02X}" for byte in raw)
    try:
        expected = raw.decode("utf-8")
    except UnicodeDecodeError:
        expected = None
    assert only_discovery_errors(decode, escaped) == expected


@FUZZ
@given(names, names)
def test_distinct_names_have_distinct_encodings(first, second):
    if first != second:
        assert encode_segment(first) != encode_segment(second)
        assert encode_filename(first) != encode_filename(second)
