"""The option parsers every backend shares: what each accepts, and the message for what it does not."""

from __future__ import annotations

import math
import threading

import pytest

import discovery_sync as ds
from discovery_sync.options import (
    MAX_SECONDS,
    OptionSet,
    boolean,
    choice,
    connect_timeout,
    duration,
    integer,
    optional,
    path,
    text,
    uint64,
    wait_timeout,
    zero_is_default,
)


@pytest.mark.parametrize(
    ("given", "expected"), [("2.5", 2.5), (" 3 ", 3.0), (4, 4.0), (0.05, 0.05), (str(MAX_SECONDS), MAX_SECONDS)]
)
def test_duration_accepts_finite_seconds_in_range(given, expected):
    assert duration(0.05)(given, "x") == expected


@pytest.mark.parametrize("given", ["nan", "inf", "-inf", "1e300", "0", "-1", "0.01", "x", "", True, None, [], math.inf])
def test_duration_refuses_everything_else_naming_option_value_and_range(given):
    with pytest.raises(ds.ValidationError) as caught:
        duration(0.05)(given, "file store option rescan_interval")
    message = str(caught.value)
    assert message.startswith(f"file store option rescan_interval={given!r} is not valid")
    assert "at least 0.05 and at most 604800" in message


def test_exclusive_minimum():
    assert duration(0.0, exclusive_minimum=True)("0.001", "x") == 0.001
    with pytest.raises(ds.ValidationError, match="more than 0"):
        duration(0.0, exclusive_minimum=True)("0", "x")


@pytest.mark.parametrize(("given", "expected"), [("7", 7), (7, 7), (7.0, 7), ("+7", 7), (" 1024 ", 1024)])
def test_integer_accepts_whole_numbers(given, expected):
    assert integer(1, 2000)(given, "x") == expected


@pytest.mark.parametrize("given", ["7.5", 7.5, "0x10", "", "abc", True, 0, 2001, "-1", None, "1e3"])
def test_integer_refuses_fractions_text_bools_and_out_of_range(given):
    with pytest.raises(ds.ValidationError, match="a whole number of bytes between 1 and 2000"):
        integer(1, 2000, "bytes")(given, "x")


@pytest.mark.parametrize(("given", "expected"), [("0", 0), ("0x1f", 31), ("0X1F", 31), (2**64 - 1, 2**64 - 1)])
def test_uint64_accepts_decimal_and_hex(given, expected):
    assert uint64(given, "instance_id") == expected


@pytest.mark.parametrize("given", ["", "abc", "-1", -1, 2**64, str(2**70), "0x", "0xg", "1.0", 1.0, True, None])
def test_uint64_refuses_everything_outside_0_to_2_64(given):
    with pytest.raises(ds.ValidationError, match="between 0 and 18446744073709551615"):
        uint64(given, "instance_id")


def test_boolean_choice_text_and_path():
    assert [boolean(v, "b") for v in ("TRUE", "on", "1", True, "no", "Off", "0", False)] == [True] * 4 + [False] * 4
    for bad in ("maybe", "", 1, None):
        with pytest.raises(ds.ValidationError, match="true or false"):
            boolean(bad, "b")
    assert choice("a", "b")("b", "c") == "b"
    with pytest.raises(ds.ValidationError, match="use one of a, b"):
        choice("a", "b")("A", "c")
    assert text("", "t") == ""
    for bad in ("a\0b", 5, b"x"):
        with pytest.raises(ds.ValidationError):
            text(bad, "t")
    for bad in ("", "a\0b", b"/tmp", 5):
        with pytest.raises(ds.ValidationError, match="non-empty path"):
            path(bad, "p")
    assert optional(boolean)(None, "b") is None


def test_an_option_set_lists_the_valid_options_for_an_unknown_one():
    options = OptionSet("demo", {"ttl": duration(1.0), "lock": choice("hard", "soft")})
    assert options.parse({"ttl": "2", "lock": "soft"}) == {"ttl": 2.0, "lock": "soft"}
    with pytest.raises(ds.ValidationError, match="unknown demo options 'colour', 'size': the valid ones are lock, ttl"):
        options.parse({"colour": "blue", "size": 1, "ttl": 2})
    with pytest.raises(ds.ValidationError, match="demo option ttl='0' is not valid"):
        options.parse({"ttl": "0"})


def test_wait_timeouts_of_blocking_calls():
    assert [wait_timeout(v, "timeout") for v in (None, math.inf, 1e300, 2.5, -3)] == [None, None, None, 2.5, 0.0]
    for bad in (math.nan, "5", True, []):
        with pytest.raises(ds.ValidationError, match="timeout"):
            wait_timeout(bad, "timeout")


def test_a_watch_waits_without_limit_for_an_infinite_timeout_and_refuses_nan():
    with ds.connect("memory://wait-timeouts") as client, client.list_and_watch(ds.Query.endpoints()) as watch:
        assert isinstance(watch.get(timeout=math.inf), ds.Resync)
        writer = threading.Timer(0.05, client.register, [ds.EndpointSpec("ns", "c", "e", ds.Transport.tcp("x:1"))])
        writer.start()
        assert isinstance(watch.get(timeout=1e300), ds.Added)
        writer.join()
        with pytest.raises(ds.ValidationError, match="timeout=nan"):
            watch.get(timeout=math.nan)
        with pytest.raises(ds.ValidationError, match="idle_timeout"):
            next(watch.events(idle_timeout="soon"))


# -- numbers are ASCII digits (issue 28, case 12) ------------------------------------------------------
UNICODE_AND_PYTHON_ONLY = ["²", "\u0663", "\uff11", "1_000", "1e3", "inf", "\u00a05", "5\u3000", "1 0", "+-5", "--5"]


@pytest.mark.parametrize(("given", "expected"), [("+2.5", 2.5), (".5", 0.5), ("5.", 5.0), (" 7\t", 7.0), ("10", 10.0)])
def test_seconds_are_ascii_digits_with_an_optional_sign_and_decimal_point(given, expected):
    assert duration(0.0)(given, "x") == expected


@pytest.mark.parametrize("given", [*UNICODE_AND_PYTHON_ONLY, "9" * 5000, ".", "+", "0x10"])
def test_seconds_in_anything_else_are_refused_saying_what_is_accepted(given):
    with pytest.raises(ds.ValidationError, match=r"ASCII digits, an optional sign and decimal point, e\.g\. 10"):
        duration(0.0)(given, "x")


@pytest.mark.parametrize("given", [*UNICODE_AND_PYTHON_ONLY, "9" * 5000, "7.0", "+"])
def test_whole_numbers_in_anything_but_ascii_digits_are_refused(given):
    with pytest.raises(ds.ValidationError, match=r"between 1 and 2000 \(ASCII digits and an optional sign\)$"):
        integer(1, 2000)(given, "x")


@pytest.mark.parametrize("given", ["\u0663", "\uff11", "²", "0x1_0", "1_0", "+5", "0x+5", " 0x 5", "9" * 5000])
def test_ids_in_anything_but_ascii_decimal_or_hex_are_refused(given):
    with pytest.raises(ds.ValidationError, match=r"\(ASCII decimal digits, or hexadecimal with 0x\)$"):
        uint64(given, "instance_id")


def test_numbers_too_big_for_a_float_or_repr_are_validation_errors_or_infinity():
    with pytest.raises(ds.ValidationError, match=r"^x=<int of \d+ bits> is not valid"):
        duration(0.0)(10**5000, "x")
    with pytest.raises(ds.ValidationError, match="x=-1000"):
        duration(0.0)(-(10**400), "x")
    assert wait_timeout(10**400, "timeout") is None and wait_timeout(-(10**400), "timeout") == 0.0


def test_connect_timeout_takes_positive_seconds_or_none():
    assert [connect_timeout(v, "c") for v in ("0.5", " 2 ", "+3", "none", " NONE ", None, 1, 2.5)] == [
        0.5, 2.0, 3.0, None, None, None, 1.0, 2.5
    ]  # fmt: skip
    for bad in ("0", "-1", "nan", "inf", "²", "", "forever", 0, -0.5, math.nan, math.inf, 1e300, True, "0x1"):
        with pytest.raises(ds.ValidationError, match=r"^c=.* is not valid: a number of seconds, more than 0 .* none"):
            connect_timeout(bad, "c")


def test_zero_is_default_maps_zero_only():
    parse = zero_is_default(connect_timeout, 10.0)
    assert [parse(v, "V") for v in ("0", "0.0", "-0", 0, "none", "3")] == [10.0, 10.0, 10.0, 10.0, None, 3.0]
    with pytest.raises(ds.ValidationError, match="V='-1'"):
        parse("-1", "V")


def test_an_option_set_refuses_a_refused_option_with_its_reason_and_does_not_list_it():
    options = OptionSet("demo", {"ttl": duration(1.0)}, refused={"connect_timeout": "not here: remove it"})
    with pytest.raises(ds.ValidationError, match=r"^demo option connect_timeout=5 is not valid: not here: remove it$"):
        options.parse({"connect_timeout": 5})
    with pytest.raises(ds.ValidationError, match=r"the valid ones are ttl$"):
        options.parse({"colour": 1})
