"""Percent-encoding of identity-path segments and file names (docs/design.md §2, §6)."""

import contextlib
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from discovery_sync import ValidationError
from discovery_sync.pathcodec import decode, encode_filename, encode_segment

ENCODERS = [encode_segment, encode_filename]

# Expected escapes written out by hand (UTF-8 bytes, uppercase hex).
RESERVED = [
    ("/", "%2F"),
    (".", "%2E"),
    ("*", "%2A"),
    (">", "%3E"),
    ("%", "%25"),
    (" ", "%20"),
    ("é", "%C3%A9"),
    ("日本", "%E6%97%A5%E6%9C%AC"),
    ("🚀", "%F0%9F%9A%80"),
]


@pytest.mark.parametrize("encode", ENCODERS)
@pytest.mark.parametrize(("text", "expected"), RESERVED)
def test_reserved_characters_become_uppercase_hex_escapes(encode, text, expected):
    assert encode(text) == expected


@pytest.mark.parametrize("encode", ENCODERS)
@pytest.mark.parametrize(
    "text",
    [text for text, _ in RESERVED] + ["kv.events/*>% é日本🚀", "a%2Fb", "plain", "with-dash_and_underscore", ""],
)
def test_encode_then_decode_round_trips(encode, text):
    assert decode(encode(text)) == text


@pytest.mark.parametrize("encode", ENCODERS)
def test_ascii_letters_and_digits_are_kept(encode):
    alnum = string.ascii_letters + string.digits
    assert encode(alnum) == alnum


def test_segment_keeps_dash_and_underscore():
    assert encode_segment("kv-events_v2") == "kv-events_v2"


def test_filename_escapes_dash_and_underscore():
    assert encode_filename("kv-events_v2") == "kv%2Devents%5Fv2"


def test_filename_of_a_key_matches_the_reference_layout():
    assert encode_filename("dynamo/backend/generate/2a") == "dynamo%2Fbackend%2Fgenerate%2F2a"


def test_filename_re_escapes_the_percent_of_an_encoded_segment():
    key = f"namespace/{encode_segment('a/b')}/topic/t/2a"
    assert encode_filename(key) == "namespace%2Fa%252Fb%2Ftopic%2Ft%2F2a"
    assert decode(encode_filename(key)) == key


@pytest.mark.parametrize(("text", "expected"), [("%c3%a9", "é"), ("%2f", "/"), ("%2e%2A", ".*"), ("a%3eb", "a>b")])
def test_decode_accepts_lowercase_hex(text, expected):
    assert decode(text) == expected


def test_decode_leaves_text_without_escapes_alone():
    assert decode("日本-é_x") == "日本-é_x"


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("%", id="lone-percent"),
        pytest.param("%4", id="one-digit"),
        pytest.param("abc%", id="trailing-percent"),
        pytest.param("abc%2", id="trailing-one-digit"),
        pytest.param("%zz", id="not-hex"),
        pytest.param("%4g", id="second-digit-not-hex"),
        pytest.param("%%41", id="percent-percent"),
        pytest.param("%é1", id="non-ascii-in-escape"),
        pytest.param("%FF", id="not-utf8"),
        pytest.param("%C3", id="truncated-utf8"),
        pytest.param("%C3%28", id="bad-continuation-byte"),
    ],
)
def test_decode_rejects_malformed_input(text):
    with pytest.raises(ValidationError):
        decode(text)


@pytest.mark.parametrize("text", ["\udcff", "ns%2F\udcfe", "\ud800x", b"ns", None, 42])
def test_decode_rejects_what_is_not_utf8_text(text):
    """Names os.fsdecode makes of non-UTF-8 bytes hold lone surrogates; they are not records."""
    with pytest.raises(ValidationError):
        decode(text)


# -- properties (bounded: a few hundred examples each) ---------------------------------------------

BOUNDED = settings(max_examples=300, deadline=None, derandomize=True, database=None)


@BOUNDED
@given(st.text() | st.text(alphabet="%%%0123456789abcdefABCDEFGZ/é\udcff\ud800"))
def test_decode_of_any_text_returns_text_or_raises_a_validation_error(text):
    with contextlib.suppress(ValidationError):
        assert isinstance(decode(text), str)


@BOUNDED
@given(st.text(alphabet=st.characters(exclude_categories=("Cs",))))
def test_every_encoder_round_trips_any_text_and_file_names_use_letters_digits_and_escapes(text):
    for encode in ENCODERS:
        assert decode(encode(text)) == text
    assert all(c.isascii() and (c.isalnum() or c == "%") for c in encode_filename(text))


@BOUNDED
@given(st.text(alphabet="abcXYZ019/_.-%é ", max_size=40))
def test_the_fast_path_of_file_names_agrees_with_the_byte_by_byte_encoding(text):
    slow = "".join(c if c.isascii() and c.isalnum() else "".join(f"%{b:02X}" for b in c.encode()) for c in text)
    assert encode_filename(text) == slow
