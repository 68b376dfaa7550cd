"""Numbers in connect options and environment variables (issue 28, case 12): every backend's
option parsers, given text that Python's ``int()``/``float()`` would read (other scripts' digits,
superscripts, underscores, whitespace, signs, exponents, thousands of digits) or Python values of
any size, return a value or raise a ValidationError naming the option — never a bare ValueError,
TypeError, KeyError or OverflowError — and accept numbers written in ASCII digits only.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from discovery_sync.backends.etcd.options import OPTIONS as ETCD_OPTIONS
from discovery_sync.backends.etcd.options import env_connect_timeout
from discovery_sync.backends.etcd.options import env_ttl as etcd_env_ttl
from discovery_sync.backends.file.options import OPTIONS as FILE_OPTIONS
from discovery_sync.backends.file.options import env_ttl as file_env_ttl
from discovery_sync.backends.kube.options import OPTIONS as KUBE_OPTIONS
from discovery_sync.backends.memory import OPTIONS as MEMORY_OPTIONS
from hypothesis import given
from hypothesis import strategies as st

import discovery_sync as ds
from discovery_sync.logical_id import ID_OPTION, ID_VARIABLE, rust_trim
from discovery_sync.logical_id import resolve as resolve_logical_id
from discovery_sync.options import ASCII_SPACE, OptionSet
from tests.fuzz.strategies import FUZZ, FUZZ_PER_CASE, number_text

OPTION_SETS = {"file": FILE_OPTIONS, "etcd": ETCD_OPTIONS, "kube": KUBE_OPTIONS, "memory": MEMORY_OPTIONS}
#: the numeric options of each backend (their parsers are numbers' parsers)
NUMERIC = {
    name
    for options in OPTION_SETS.values()
    for name in options.names()
    if name in ("ttl", "max_record_bytes", "instance_id", ID_OPTION)
    or name.endswith(("_timeout", "_interval"))
    or name in ("lock_stale", "cache_window")
}

numeric_values = st.one_of(
    number_text,
    st.integers(min_value=-(10**5000), max_value=10**5000) | st.sampled_from([10**5000, -(10**5000), 2**64]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
)


def parsed_or_refused(options: OptionSet, name: str, value: Any) -> Any:
    """``options.parse({name: value})[name]``, or None when that is a ValidationError naming the option."""
    try:
        return options.parse({name: value})[name]
    except ds.ValidationError as refused:
        assert f"{options.owner} option {name}=" in str(refused), str(refused)
        return None


def assert_ascii_number(text: str, trim: Callable[[str], str]) -> None:
    """Text a numeric option accepted is a number in ASCII digits (``none`` aside)."""
    core = trim(text)
    assert core.isascii() and "_" not in core and " " not in core, repr(text)


@pytest.mark.parametrize(
    ("backend", "name"),
    [(backend, name) for backend, options in OPTION_SETS.items() for name in sorted(NUMERIC & set(options.names()))],
)
@FUZZ_PER_CASE
@given(value=numeric_values)
def test_numeric_options_accept_ascii_numbers_and_refuse_the_rest_with_a_validation_error(backend, name, value):
    options = OPTION_SETS[backend]
    result = parsed_or_refused(options, name, value)  # any other exception fails the test
    if result is not None and isinstance(value, str):
        assert_ascii_number(value, rust_trim if name == ID_OPTION else lambda text: text.strip(ASCII_SPACE))


@pytest.mark.parametrize(
    "value", ["²", "٣", "\uff11", "1_000", "+-1", "9" * 5000, "1e3", "\u00a05", "5\u3000", "0x1_0", "\U0001d7d9"]
)
@pytest.mark.parametrize(("backend", "name"), [("file", "ttl"), ("file", "max_record_bytes"), ("etcd", "ttl")])
def test_the_reported_cases_are_validation_errors_saying_ascii(backend, name, value):
    with pytest.raises(ds.ValidationError, match="ASCII digits"):
        OPTION_SETS[backend].parse({name: value})


PADDED = ["0" * 10_000 + "1", "+" + "0" * 10_000 + "1", "0x" + "0" * 10_000 + "1", "0" * 10_000 + ".5"]


@pytest.mark.parametrize("value", PADDED)
@pytest.mark.parametrize(
    ("backend", "name"),
    [(backend, name) for backend, options in OPTION_SETS.items() for name in sorted(NUMERIC & set(options.names()))],
)
def test_numbers_of_ten_thousand_digits_are_refused_naming_the_option_or_read(backend, name, value):
    """Beyond int()'s 4,300 digits (issue 38, point 5): a ValidationError naming the option,
    never int()'s ValueError; a logical id reads its leading zeros as the reference does."""
    result = parsed_or_refused(OPTION_SETS[backend], name, value)
    if name == ID_OPTION:
        assert result == (1 if value != PADDED[-1] else None)
    else:
        assert result is None  # more than 40 characters: refused whatever they hold (discovery_sync.options)


@contextmanager
def environment(variable: str, value: str) -> Iterator[None]:
    """``variable`` set to ``value`` for the block (hypothesis runs many examples in one test call)."""
    before = os.environ.get(variable)
    os.environ[variable] = value
    try:
        yield
    finally:
        if before is None:
            del os.environ[variable]
        else:
            os.environ[variable] = before


ENVIRONMENT_READERS: dict[str, Callable[[], Any]] = {
    "ETCD_LEASE_TTL": etcd_env_ttl,
    "ETCD_STARTUP_CONNECT_TIMEOUT_SECONDS": env_connect_timeout,
    "DYN_FILE_KV_TTL_SECS": file_env_ttl,
    ID_VARIABLE: lambda: resolve_logical_id({}, os.environ),
}


@pytest.mark.parametrize("variable", sorted(ENVIRONMENT_READERS))
@FUZZ_PER_CASE
@given(text=number_text.filter(lambda text: "\0" not in text))
def test_numeric_environment_variables_refuse_what_is_not_an_ascii_number_naming_the_variable(variable, text):
    with environment(variable, text):
        try:
            ENVIRONMENT_READERS[variable]()
        except ds.ValidationError as refused:
            assert str(refused).startswith(f"{variable}="), str(refused)
            return
    trim = rust_trim if variable == ID_VARIABLE else lambda value: value.strip(ASCII_SPACE)
    assert_ascii_number(text, trim)


@pytest.mark.parametrize("variable", sorted(ENVIRONMENT_READERS))
@pytest.mark.parametrize("text", PADDED)
def test_environment_numbers_of_ten_thousand_digits_are_refused_naming_the_variable_or_read(variable, text):
    with environment(variable, text):
        try:
            value = ENVIRONMENT_READERS[variable]()
        except ds.ValidationError as refused:
            assert str(refused).startswith(f"{variable}="), str(refused)
            assert variable != ID_VARIABLE or text == PADDED[-1]
        else:
            assert variable == ID_VARIABLE and value == 1


@pytest.mark.parametrize("variable", ["ETCD_LEASE_TTL", "DYN_FILE_KV_TTL_SECS", "ETCD_STARTUP_CONNECT_TIMEOUT_SECONDS"])
@pytest.mark.parametrize("text", ["²", "٣", "\uff11", "1_0", "+-1", "1e3"])
def test_the_reported_environment_cases_are_validation_errors(variable, text):
    with environment(variable, text), pytest.raises(ds.ValidationError, match=f"^{variable}=.*ASCII digits"):
        ENVIRONMENT_READERS[variable]()


@FUZZ
@given(st.dictionaries(st.sampled_from(sorted(NUMERIC & set(FILE_OPTIONS.names()))), numeric_values, max_size=3))
def test_numeric_keywords_of_connect_are_validation_errors_or_a_client(tmp_path_factory, given):
    store = tmp_path_factory.getbasetemp() / "numbers"
    try:
        client = ds.connect(f"file://{store}", **given)
    except ds.ValidationError:
        return
    client.shutdown()
