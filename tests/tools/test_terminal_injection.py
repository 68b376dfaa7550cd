"""Records written by anyone reach an operator's terminal escaped (issue 28, point 6).

Every field the CLI prints holds escape sequences (clear screen, retitle, OSC 8 hyperlinks,
``\\r\\x1b[K`` drawing a fake row), BEL, TAB, C1 (``\\x9b`` is CSI) and bidi controls. Each
command runs in a pseudo-terminal and the test checks what it shows: the stream holds no
character a terminal acts on but the line ends (and the CLI's own clear-screen in ``--live``,
its own progress line if a wait took over a second), so the screen is exactly its lines; and
those lines are compared with the expected ones, each hostile field written out escaped.

(No terminal emulator is needed for that: with no control character in the stream, a VT100
model would show these very lines.)
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import orjson
import pytest
import yaml
from discovery_sync.tools import cli, output
from discovery_sync.tools.commands import CLEAR_SCREEN

import discovery_sync as ds
from tests.tools.terminal import run_in_terminal

ESC = "\x1b[2J\x1b]0;pwned\x07"  # clear the screen, retitle the window (ended by BEL)
OSC8 = "\x1b]8;;http://evil\x1b\\text\x1b]8;;\x1b\\"  # a hyperlink hiding its target
FAKE = "\r\x1b[Kendpoint   ns/fake"  # back to the line's start, erase it, draw a row of our own
C1 = "\x9b2J"  # CSI as one C1 character: clear the screen
BIDI = "\u202egnp.exe\u202c\u2066x\u2069"  # right-to-left override (shows "exe.png"), isolates
NAMESPACE, COMPONENT, ENDPOINT = "ns" + ESC, "c" + BIDI, "e" + C1 + "\t"  # names may hold any of these

# the same, as the screen must show them
SHOWN_ESC = r"\x1b[2J\x1b]0;pwned\x07"
SHOWN_OSC8 = r"\x1b]8;;http://evil\x1b\\text\x1b]8;;\x1b\\"
SHOWN_FAKE = r"\r\x1b[Kendpoint   ns/fake"
SHOWN_C1 = r"\x9b2J"
SHOWN_BIDI = r"\u202egnp.exe\u202c\u2066x\u2069"
SHOWN_WHERE = rf"ns{SHOWN_ESC}/c{SHOWN_BIDI}/e{SHOWN_C1}\t"
SHOWN_SUFFIX = rf"l{SHOWN_BIDI}"
CHANNEL_KEY = (
    "v1/event_channels/namespace/ns%1B%5B2J%1B%5D0%3Bpwned%07/topic/"
    "t%1B%5D8%3B%3Bhttp%3A%2F%2Fevil%1B%5Ctext%1B%5D8%3B%3B%1B%5C/{id}"
)
SOURCE_KEY = (
    "v1/event_sources/namespace/ns%1B%5B2J%1B%5D0%3Bpwned%07/component/c%E2%80%AEgnp%2Eexe%E2%80%AC%E2%81%A6x"
    "%E2%81%A9/topic/s%0D%1B%5BKendpoint%20%20%20ns%2Ffake/7"
)
WIDE = 500  # columns: no table is cut, each line is whole on the screen
PROGRESS = re.compile(r"\r\x1b\[K(?:[^\r\n\x1b]*\.\.\. \d+\.\d s)?")  # the CLI's own "waiting" line, if shown


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"file://{tmp_path / 'store'}?ttl=3600&rescan_interval=0.2"


@pytest.fixture
def hostile(url: str):
    """A worker whose records carry terminal controls in every field the CLI prints; its hex id."""
    with ds.connect(url) as client:
        client.register(
            ds.EndpointSpec(NAMESPACE, COMPONENT, ENDPOINT, ds.Transport.tcp("10.0.0.7:9000" + OSC8 + FAKE))
        )
        card = {"display_name": OSC8 + "\x07", "model_type": FAKE + C1}
        client.register(ds.ModelSpec(NAMESPACE, COMPONENT, ENDPOINT, card, "l" + BIDI))
        client.register(ds.EventChannelSpec(ds.EventScope(NAMESPACE), "t" + OSC8, ds.ZmqTransport("tcp://" + ESC)))
        client.register(ds.EventSourceSpec(ds.EventScope(NAMESPACE, COMPONENT), "s" + FAKE, 7, {"k": C1 + BIDI}))
        yield f"{client.instance_id:x}"


def screen(shown: str, *, cleared: bool = False) -> list[str]:
    """The lines a terminal shows for ``shown``, checked to hold nothing a terminal acts on."""
    text = PROGRESS.sub("", shown)
    if cleared:
        assert text.count(CLEAR_SCREEN) == 1, text
        text = text.replace(CLEAR_SCREEN, "")
    acted_on = sorted({char for char in text if char != "\n" and not char.isprintable()})
    assert acted_on == [], f"raw control characters reached the terminal: {acted_on}: {text!r}"
    return text.splitlines()


def rows(hex_id: str, *, wide: bool) -> list[list[str]]:
    endpoint = ["endpoint", SHOWN_WHERE, hex_id, f"tcp 10.0.0.7:9000{SHOWN_OSC8}{SHOWN_FAKE}"]
    model = ["model", f"{SHOWN_WHERE} ({SHOWN_SUFFIX})", hex_id, "-"]
    channel = ["event-channel", f"ns{SHOWN_ESC} topic=t{SHOWN_OSC8}", hex_id, f"zmq tcp://{SHOWN_ESC}"]
    source = ["event-source", f"ns{SHOWN_ESC}/c{SHOWN_BIDI} topic=s{SHOWN_FAKE}", "7", "-"]
    if wide:
        endpoint += ["-", f"v1/instances/{SHOWN_WHERE}/{hex_id}"]
        model += [f"{SHOWN_OSC8}\\x07 [{SHOWN_FAKE}{SHOWN_C1}]", f"v1/mdc/{SHOWN_WHERE}/{hex_id}/{SHOWN_SUFFIX}"]
        channel += ["-", CHANNEL_KEY.format(id=hex_id)]
        source += ["-", SOURCE_KEY]
    return [endpoint, model, channel, source]


@pytest.mark.parametrize("fmt", ["table", "wide"])
def test_list_shows_every_hostile_field_escaped(url, hostile, fmt):
    status, shown = run_in_terminal("list", "--url", url, "-o", fmt, columns=WIDE)
    assert status == 0, shown
    headers = output.WIDE_HEADERS if fmt == "wide" else output.RECORD_HEADERS
    assert screen(shown) == output.table(headers, rows(hostile, wide=fmt == "wide"))


def events(lines: list[str]) -> list[str]:
    """Event lines without their time (``HH:MM:SS.mmm  ``)."""
    assert all(re.match(r"\d\d:\d\d:\d\d\.\d{3}  ", line) for line in lines), lines
    return [line[14:] for line in lines]


@pytest.mark.parametrize(
    ("kind", "added"),
    [
        ("endpoints", f"v1/instances/{SHOWN_WHERE}/{{id}}  tcp 10.0.0.7:9000{SHOWN_OSC8}{SHOWN_FAKE}"),
        (
            "models",
            f"v1/mdc/{SHOWN_WHERE}/{{id}}/{SHOWN_SUFFIX}  model {SHOWN_OSC8}\\x07 [{SHOWN_FAKE}{SHOWN_C1}]",
        ),
        ("event_channels", f"{CHANNEL_KEY}  zmq tcp://{SHOWN_ESC}"),
        ("event_sources", f'{SOURCE_KEY}  metadata {{{{"k":"{SHOWN_C1}{SHOWN_BIDI}"}}}}'),
    ],
)
def test_watch_shows_every_hostile_field_escaped(url, hostile, kind, added):
    status, shown = run_in_terminal("watch", "--url", url, "--kind", kind, "--count", "2", columns=WIDE)
    assert status == 0, shown
    header, *lines = screen(shown)
    assert header == f"watching {kind} in {url}; Ctrl-C to stop"
    assert events(lines) == [f"ADDED    {added.format(id=hostile)}", "RESYNC   1 record  the complete current set"]


def test_watch_live_shows_every_hostile_field_escaped(url, hostile):
    status, shown = run_in_terminal("watch", "--live", "--kind", "models", "--url", url, "--count", "1", columns=WIDE)
    assert status == 0, shown
    heading, blank, *table = screen(shown, cleared=True)
    assert re.fullmatch(rf"models in {re.escape(url)} at \d\d:\d\d:\d\d: 1 record \(Ctrl-C to stop\)", heading)
    assert blank == ""
    assert table == output.table(output.RECORD_HEADERS, [rows(hostile, wide=False)[1]])


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_json_and_yaml_on_a_terminal_carry_the_fields_escaped_and_exact(url, hostile, fmt):
    status, shown = run_in_terminal("list", "--url", url, "-o", fmt, columns=WIDE)
    assert status == 0, shown
    text = "\n".join(screen(shown)) + "\n"
    with ds.connect(url, read_only=True) as reader:
        expected = [output.record_document(i) for kind in ("endpoints", "models", "event_channels", "event_sources")
                    for i in reader.list(ds.Query.from_dict({"kind": kind}))]  # fmt: skip
    if fmt == "json":
        assert [orjson.loads(line) for line in text.splitlines()] == expected
    else:
        assert list(yaml.load_all(text, Loader=yaml.CSafeLoader)) == expected


def test_log_and_error_lines_are_escaped_too(capsys):
    message = "bad name " + ESC + OSC8 + C1 + BIDI
    cli._report(ds.ValidationError(message), message + FAKE)  # a line break starts a new part: "; "
    assert capsys.readouterr().err == (
        f"discovery-sync: error: bad name {SHOWN_ESC}{SHOWN_OSC8}{SHOWN_C1}{SHOWN_BIDI}; {SHOWN_FAKE[2:]}\n"
    )
    record = logging.LogRecord("discovery_sync", logging.WARNING, __file__, 1, "skipped %s", (message,), None)
    assert cli._LogLine().format(record) == (
        f"discovery-sync: warning: skipped bad name {SHOWN_ESC}{SHOWN_OSC8}{SHOWN_C1}{SHOWN_BIDI}"
    )
