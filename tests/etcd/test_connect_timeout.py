"""``connect_timeout`` of the etcd backend (issue 28, case 5): connecting to an etcd that is not
there ends within the bound with BackendUnavailable saying what to do, and ``none`` waits for an
etcd that starts later.

Durations are asserted with generous bounds only (the machine is shared): a 0.5 s timeout must
end within 5 s, never within a tighter margin.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any

import pytest
from discovery_sync.backends.etcd import EtcdDiscovery
from discovery_sync.backends.etcd.options import CONNECT_TIMEOUT_VARIABLE

import discovery_sync as ds
from testrigs.etcd_server import EtcdServer
from testrigs.helpers import endpoint_spec
from testrigs.net import free_port

GENEROUS = 5.0  # seconds a connect with a 0.5 s timeout may take at most, on a loaded machine
ADVICE = "start etcd or check the address, or pass connect_timeout=none to wait for etcd without limit"


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.delenv(CONNECT_TIMEOUT_VARIABLE, raising=False)
    return monkeypatch


def repr_short(value: object) -> str:
    return repr(value)[:20]


def connect_failure(url: str, **options: Any) -> tuple[str, float]:
    """The message of the BackendUnavailable ``connect(url, **options)`` raises, and how long it took."""
    started = time.monotonic()
    with pytest.raises(ds.BackendUnavailable) as raised:
        ds.connect(url, **options)
    return str(raised.value), time.monotonic() - started


def test_a_closed_port_fails_within_the_connect_timeout_naming_address_timeout_and_remedy(clean_env):
    port = free_port()
    message, elapsed = connect_failure(f"etcd://127.0.0.1:{port}?connect_timeout=0.5")
    assert elapsed < GENEROUS
    assert message.startswith(f"cannot reach etcd at http://127.0.0.1:{port}: connection refused (tried for ")
    assert "connect_timeout=0.5)" in message and message.endswith(ADVICE) and "\n" not in message


def test_a_server_that_never_answers_is_bounded_by_connect_timeout_not_request_timeout(clean_env, silent_port):
    # request_timeout (10 s by default) would let one try last 10 s: the connect is cut to 0.5 s
    message, elapsed = connect_failure(f"etcd://127.0.0.1:{silent_port}", connect_timeout=0.5)
    assert elapsed < GENEROUS
    assert f"http://127.0.0.1:{silent_port}: no reply within" in message and "connect_timeout=0.5)" in message


def test_the_endpoints_share_the_time_so_a_silent_one_does_not_hide_a_live_one(clean_env, silent_port, etcd_server):
    url = f"etcd://127.0.0.1:{silent_port},127.0.0.1:{etcd_server.client_port}"
    started = time.monotonic()
    with ds.connect(url, connect_timeout=2) as client:  # the silent one, tried first, gets half
        assert client.list(ds.Query.endpoints()) is not None
    assert time.monotonic() - started < 2 + GENEROUS


def test_the_default_is_10_seconds(clean_env, etcd_server, prefix):
    with ds.connect(f"etcd://127.0.0.1:{etcd_server.client_port}/{prefix}") as client:
        assert client.connect_timeout == 10.0
    assert EtcdDiscovery([etcd_server.url]).connect_timeout == 10.0


def test_none_waits_for_an_etcd_started_after_connect_began(clean_env):
    server = EtcdServer()  # its ports are chosen now; it starts later
    outcome: list[Any] = []

    def connect() -> None:
        try:
            outcome.append(ds.connect(f"etcd://127.0.0.1:{server.client_port}/late?connect_timeout=none"))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=connect, daemon=True)
    try:
        thread.start()
        thread.join(1.5)  # past the first retries: still waiting, since nothing listens
        assert thread.is_alive() and not outcome
        server.start()
        thread.join(30)
        assert not thread.is_alive()
        (client,) = outcome
        assert isinstance(client, ds.Discovery), client
        with client:
            assert client.connect_timeout is None
            endpoint = client.register(endpoint_spec())
            assert client.list(ds.Query.endpoints()) == [endpoint]
    finally:
        server.close()


# -- where the value comes from ----------------------------------------------------------------------
def test_keywords_beat_the_url_as_for_every_option(clean_env, etcd_server, prefix):
    url = f"etcd://127.0.0.1:{etcd_server.client_port}/{prefix}"
    with ds.connect(f"{url}?connect_timeout=0.5", connect_timeout=None) as client:
        assert client.connect_timeout is None
    with ds.connect(f"{url}?connect_timeout=none", connect_timeout=3) as client:
        assert client.connect_timeout == 3.0
    message, elapsed = connect_failure(f"etcd://127.0.0.1:{free_port()}?connect_timeout=none", connect_timeout=0.5)
    assert elapsed < GENEROUS and "connect_timeout=0.5)" in message


@pytest.mark.parametrize(
    ("value", "expected"),
    [("none", None), ("NONE", None), ("2.5", 2.5), (" 7 ", 7.0), ("0", 10.0), ("", 10.0)],
)
def test_the_reference_variable_sets_it_below_the_url(clean_env, etcd_server, prefix, value, expected):
    clean_env.setenv(CONNECT_TIMEOUT_VARIABLE, value)
    url = f"etcd://127.0.0.1:{etcd_server.client_port}/{prefix}"
    with ds.connect(url) as client:
        assert client.connect_timeout == expected
    with ds.connect(f"{url}?connect_timeout=4") as client:
        assert client.connect_timeout == 4.0


ACCEPTED = "a number of seconds, more than 0 and at most 604800 (ASCII digits, an optional sign and decimal point"


@pytest.mark.parametrize(
    "value",
    ["0", "-1", "-0.5", "nan", "inf", "1e3", "²", "\u0663", "\uff11", "1_0", "1 0", "", "soon", "0x10", "\u00a05"],
)
def test_bad_text_is_a_validation_error_naming_the_option_and_what_is_accepted(clean_env, value):
    for given in ({"url": f"etcd://127.0.0.1:1?connect_timeout={value}"}, {"connect_timeout": value}):
        url = given.pop("url", "etcd://127.0.0.1:1")
        with pytest.raises(ds.ValidationError) as refused:
            ds.connect(url, **given)
        message = str(refused.value)
        assert message.startswith("etcd option connect_timeout=") and ACCEPTED in message
        assert message.endswith("or none to wait without limit")


@pytest.mark.parametrize("value", [0, -1, 0.0, math.nan, math.inf, -math.inf, 10**400, True, [], 1e300], ids=repr_short)
def test_bad_keyword_values_are_validation_errors(clean_env, value):
    with pytest.raises(ds.ValidationError, match=r"^etcd option connect_timeout=.* is not valid: a number of seconds"):
        ds.connect("etcd://127.0.0.1:1", connect_timeout=value)


@pytest.mark.parametrize("value", ["-1", "abc", "²", "inf"])
def test_bad_reference_variable_is_a_validation_error_naming_it(clean_env, value):
    clean_env.setenv(CONNECT_TIMEOUT_VARIABLE, value)
    with pytest.raises(ds.ValidationError, match=f"^{CONNECT_TIMEOUT_VARIABLE}=.* is not valid: a number of seconds"):
        ds.connect("etcd://127.0.0.1:1")


def test_the_former_startup_timeout_is_refused_naming_connect_timeout(clean_env):
    for given in ({"url": "etcd://127.0.0.1:1?startup_timeout=0"}, {"startup_timeout": 30}):
        url = given.pop("url", "etcd://127.0.0.1:1")
        with pytest.raises(ds.ValidationError, match=r"^etcd option startup_timeout=.* is now called connect_timeout"):
            ds.connect(url, **given)
