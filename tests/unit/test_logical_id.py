"""Logical instance ids (failover cohorts): the reference's rules (``logical_id.rs``), its test
vectors, ``$(VAR)`` expansion, and how the connect options and the environment combine."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import discovery_sync as ds
from discovery_sync.logical_id import (
    ID_VARIABLE,
    KEY_VARIABLE,
    MASK,
    hash_key,
    id_option,
    logical_instance_id,
    member_instance_id,
    resolve,
    rust_trim,
)
from discovery_sync.siphash import rust_str_hash

U64_MAX = 2**64 - 1
POD = {"POD_NAME": "leader-0"}


def logical(explicit: str | None, key: str | None, env: dict[str, str] | None = None) -> int | None:
    lookup = (POD if env is None else env).get
    return logical_instance_id(explicit, key, lookup, id_label="ID", key_label="KEY")


# -- the reference's vectors -------------------------------------------------------------------------
def test_a_key_hashes_as_the_reference_does():
    assert logical(None, "vllm-decode-7f9c8d-xk2lp") == 7575908917934716
    assert hash_key("vllm-decode-7f9c8d-xk2lp") == 7575908917934716


def test_explicit_ids_are_decimal_or_hex():
    assert logical("0x2a", None) == 42
    assert logical("0X2A", None) == 42
    assert logical("42", None) == 42
    assert logical("007", None) == 7


@pytest.mark.parametrize("raw", ["0", "0x0", "00", "nope", "0x", "x2a", "-1", "4 2", "1_000", "0x0x2a", "+", "1e3"])
def test_zero_and_junk_explicit_ids_are_refused(raw):
    with pytest.raises(ds.ValidationError) as caught:
        logical(raw, "k")
    message = str(caught.value)
    assert message.startswith(f"ID={raw!r} is not valid: ")
    assert "non-zero whole number up to 18446744073709551615, decimal or hexadecimal with 0x" in message


def test_the_reference_message_shape_names_the_variable():
    with pytest.raises(ds.ValidationError) as caught:
        resolve({}, {ID_VARIABLE: "0"})
    assert str(caught.value) == (
        "DYN_DISCOVERY_LOGICAL_INSTANCE_ID='0' is not valid: a non-zero whole number up to "
        "18446744073709551615, decimal or hexadecimal with 0x"
    )


@pytest.mark.parametrize("raw", ["٤٢", "\uff14\uff12", "0x٤٢", "²", "0x\uff12a"])
def test_digits_of_other_scripts_are_refused(raw):
    # Arabic-Indic, fullwidth and superscript digits: Python's int() takes most (int("٤٢") == 42), Rust's
    # parser none
    with pytest.raises(ds.ValidationError, match="is not valid"):
        logical(raw, None)


def test_a_plus_sign_is_accepted_as_rust_parses_it():
    assert logical("+42", None) == 42
    assert logical("0x+2a", None) == 42


def test_explicit_ids_cover_the_u64_range_unmasked():
    assert logical(str(U64_MAX), None) == U64_MAX
    assert logical("0xFFFFFFFFFFFFFFFF", None) == U64_MAX
    assert logical("1", None) == 1
    for too_big in (str(U64_MAX + 1), "0x10000000000000000"):
        with pytest.raises(ds.ValidationError):
            logical(too_big, None)


def test_leading_zeros_are_taken_as_rusts_parser_takes_them():
    """Any number of leading zeros (issue 38, point 5): 10,000 of them then ``1`` is 1, as the
    reference's ``raw.parse::<u64>()`` reads it; Python's ``int()`` refuses text over 4,300 digits
    with a bare ValueError, which must never escape."""
    zeros = "0" * 10_000
    assert logical(zeros + "1", None) == 1
    assert logical("+" + zeros + "42", None) == 42
    assert logical("0x" + zeros + "2a", None) == 42
    assert logical("0X+" + zeros + "FFFFFFFFFFFFFFFF", None) == U64_MAX
    assert logical(f" {zeros}{U64_MAX}\n", "k") == U64_MAX
    assert resolve({}, {ID_VARIABLE: zeros + "7"}) == 7
    assert resolve({"logical_instance_id": zeros + "7"}, {}) == 7


@pytest.mark.parametrize(
    ("raw", "larger"),
    [
        ("0" * 10_000, False),
        ("0x" + "0" * 10_000, False),
        ("0" * 10_000 + str(U64_MAX + 1), True),
        ("0" * 10_000 + "1" * 10_000, True),
        ("0x" + "0" * 10_000 + "1" * 17, True),
        ("0" * 10_000 + "1x", False),
        ("0" * 10_000 + "\u0661", False),
    ],
)
def test_what_the_reference_refuses_stays_refused_however_many_digits(raw, larger):
    for parse in (lambda: logical(raw, None), lambda: resolve({}, {ID_VARIABLE: raw})):
        with pytest.raises(ds.ValidationError) as caught:
            parse()
        message = str(caught.value)
        assert "is not valid: a non-zero whole number up to 18446744073709551615" in message
        assert message.endswith("(this one is larger)") == larger
        assert len(message) < 300  # the value is shown cut short


def test_the_explicit_id_beats_the_key():
    assert logical("42", "k") == 42
    assert logical("0x2a", "ns/$(MISSING)") == 42  # the key is not even expanded


def test_whitespace_is_trimmed():
    assert logical("  42\n", None) == 42
    assert logical(" \t ", "k") == hash_key("k")  # a blank id is no id: the key counts
    assert logical(None, "  vllm-decode-7f9c8d-xk2lp\n") == 7575908917934716
    assert logical(None, "  ") is None
    assert logical(None, "") is None
    assert logical(None, None) is None
    assert logical("", None) is None


def test_trimming_is_rusts():
    # Python's strip() also removes U+001C..U+001F, Rust's trim() does not
    assert rust_trim("\u2003k\u3000") == "k"
    assert rust_trim("\x1ck\x1f") == "\x1ck\x1f"
    assert logical(None, "\x1ck") == hash_key("\x1ck") != hash_key("k")


# -- $(VAR) expansion --------------------------------------------------------------------------------
def test_cohort_members_with_one_key_share_one_id():
    primary = logical(None, "ns/$(POD_NAME)/engine")
    standby = logical(None, "ns/$(POD_NAME)/engine")
    assert primary == standby == hash_key("ns/leader-0/engine") == logical(None, "ns/leader-0/engine")
    assert primary != logical(None, "ns/other/engine")
    assert primary is not None and 0 < primary <= MASK


def test_an_unset_variable_is_an_error_naming_it():
    with pytest.raises(ds.ValidationError, match=r"KEY='ns/\$\(MISSING\)' is not valid: .*'MISSING'.*not set"):
        logical(None, "ns/$(MISSING)")


def test_an_unterminated_placeholder_is_an_error():
    for key in ("ns/$(POD_NAME", "$(", "a$(b$(c"):
        with pytest.raises(ds.ValidationError, match=r"unterminated '\$\('"):
            logical(None, key)


@pytest.mark.parametrize(
    ("key", "expanded"),
    [
        ("a$b)c", "a$b)c"),  # a lone $ or ) is literal
        ("$$(POD_NAME)", "$leader-0"),
        ("$(POD_NAME))(", "leader-0)("),
        ("$(POD_NAME)$(POD_NAME)", "leader-0leader-0"),
        ("$(A$(B)", "<A$(B>"),  # the name runs to the first ')'
        ("$( X )", "< X >"),
        ("$()", "<>"),
        ("x$(EMPTY)y", "xy"),  # set but empty: expands to nothing
        ("$(V)", "$(POD_NAME)"),  # a value is not expanded again
    ],
)
def test_expansion_of_odd_text(key, expanded):
    env = {"POD_NAME": "leader-0", "A$(B": "<A$(B>", " X ": "< X >", "": "<>", "EMPTY": "", "V": "$(POD_NAME)"}
    assert logical(None, key, env) == hash_key(expanded)


def test_text_that_is_not_utf8_is_refused():
    with pytest.raises(ds.ValidationError, match="not valid UTF-8"):
        logical(None, "k\udcff")
    with pytest.raises(ds.ValidationError, match="not valid UTF-8"):
        logical(None, "$(V)", {"V": "\udcff"})


# -- properties --------------------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(st.text())
def test_text_without_placeholders_hashes_as_rust_does(text):
    key = text.replace("$(", "$")
    trimmed = rust_trim(key)
    expected = (rust_str_hash(trimmed) & MASK) or 1 if trimmed else None
    assert logical(None, key, {}) == expected
    assert logical("", key, {}) == expected


# any characters, and often the pieces the parsers care about (hypothesis rarely draws surrogates)
PIECES = [
    "$(",
    "$",
    "(",
    ")",
    "$(POD_NAME)",
    "0x",
    "0X",
    "+",
    "-",
    "0",
    "42",
    "ff",
    " ",
    "\x1c",
    "\u3000",
    "٤",
    "\udcff",
]
arbitrary = st.lists(st.one_of(st.characters(), st.sampled_from(PIECES)), max_size=12).map("".join)


@settings(max_examples=200, deadline=None)
@given(explicit=st.one_of(st.none(), arbitrary), key=st.one_of(st.none(), arbitrary))
def test_arbitrary_text_raises_nothing_but_validation_error(explicit, key):
    try:
        found = logical(explicit, key)
    except ds.ValidationError:
        found = "refused"
    try:
        # os.environ cannot even look up a name with a lone surrogate: such a variable is unset
        by_option = resolve({"logical_instance_id": explicit, "logical_instance_key": key}, os.environ)
    except ds.ValidationError:
        by_option = "refused"
    try:
        by_variable = resolve({}, {**POD, **{ID_VARIABLE: explicit, KEY_VARIABLE: key}})
    except ds.ValidationError:
        by_variable = "refused"
    assert found == by_variable
    assert found is None or found == "refused" or 0 < found <= U64_MAX
    if "$(" not in (key or "") or (explicit or "").strip():
        assert by_option == found


# -- resolve(): options and environment --------------------------------------------------------------
def test_resolve_pops_the_options():
    options = {"logical_instance_id": "7", "logical_instance_key": "k", "ttl": "3"}
    assert resolve(options, {}) == 7
    assert options == {"ttl": "3"}
    options = {"ttl": "3"}
    assert resolve(options, {}) is None
    assert options == {"ttl": "3"}


def test_resolve_reads_the_environment_without_options():
    assert resolve({}, {ID_VARIABLE: "0x2a"}) == 42
    assert resolve({}, {KEY_VARIABLE: "ns/$(POD_NAME)/engine", "POD_NAME": "leader-0"}) == hash_key(
        "ns/leader-0/engine"
    )
    assert resolve({}, {ID_VARIABLE: " ", KEY_VARIABLE: "k"}) == hash_key("k")
    assert resolve({}, {}) is None
    with pytest.raises(ds.ValidationError, match=f"{KEY_VARIABLE}='ns/\\$\\(POD_NAME\\)' is not valid"):
        resolve({}, {KEY_VARIABLE: "ns/$(POD_NAME)"})


def test_an_option_replaces_the_whole_environment():
    env = {ID_VARIABLE: "99", KEY_VARIABLE: "env-key", "POD_NAME": "leader-0"}
    assert resolve({"logical_instance_key": "k"}, env) == hash_key("k")  # the variable id is not read
    assert resolve({"logical_instance_id": "5"}, env) == 5
    assert resolve({"logical_instance_id": ""}, env) is None  # given, even blank: the environment is ignored
    assert resolve({"logical_instance_key": "$(POD_NAME)"}, env) == hash_key("leader-0")  # $(VAR) from environ
    assert resolve({"logical_instance_id": None}, env) == 99  # None means not given


def test_option_errors_name_the_backend_option():
    with pytest.raises(ds.ValidationError, match=r"^file store option logical_instance_id='nope' is not valid"):
        resolve({"logical_instance_id": "nope"}, {}, owner="file store")
    with pytest.raises(ds.ValidationError, match=r"^memory option logical_instance_key='\$\(NOPE\)' is not valid"):
        resolve({"logical_instance_key": "$(NOPE)"}, {}, owner="memory")
    with pytest.raises(ds.ValidationError, match=r"^memory option logical_instance_key=3 is not valid: text"):
        resolve({"logical_instance_key": 3}, {}, owner="memory")


@pytest.mark.parametrize("value", [1, 42, U64_MAX])
def test_an_int_id_option_is_taken_as_it_is(value):
    assert resolve({"logical_instance_id": value, "logical_instance_key": "k"}, {}) == value


@pytest.mark.parametrize("value", [0, -1, U64_MAX + 1, True, False, 4.0, b"42", [42]])
def test_an_id_option_that_is_no_u64_is_refused(value):
    with pytest.raises(ds.ValidationError, match=r"^connect option logical_instance_id=.* is not valid"):
        resolve({"logical_instance_id": value}, {})


def test_the_id_parser_accepts_its_own_output():
    assert id_option(42, "x") == 42
    assert id_option("0x2a", "x") == 42
    assert id_option(None, "x") is None
    assert id_option("  ", "x") is None


def test_read_only_ignores_the_environment_and_refuses_options():
    env = {ID_VARIABLE: "0", KEY_VARIABLE: "$(MISSING)"}  # not even checked
    assert resolve({}, env, read_only=True) is None
    for name in ("logical_instance_id", "logical_instance_key"):
        with pytest.raises(ds.ValidationError, match=f"memory option {name} cannot be used with read_only=true"):
            resolve({name: "5"}, {}, owner="memory", read_only=True)


def test_member_instance_id():
    assert member_instance_id(None, None, read_only=False, owner="o") is None
    assert member_instance_id(7, None, read_only=True, owner="o") == 7
    assert member_instance_id(None, 5, read_only=False, owner="o") == 5
    assert member_instance_id(5, 5, read_only=False, owner="o") == 5
    with pytest.raises(ds.ValidationError, match="instance_id=7 and logical_instance_id=5 disagree"):
        member_instance_id(7, 5, read_only=False, owner="o")
    with pytest.raises(ds.ValidationError, match="read-only client registers nothing"):
        member_instance_id(None, 5, read_only=True, owner="o")
