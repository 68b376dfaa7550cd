"""The command line through an outage and on a mistyped store path (issue 38, point 7): ``watch``
shows the client's connection-state changes as lines (documents) of their own and, after an
outage that changed nothing, no record as REMOVED and ADDED; a read command on a file store that
does not exist says so, exits 1 and creates nothing."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from discovery_sync.tools import cli
from discovery_sync.tools.output import record_document

import discovery_sync as ds
from testrigs.etcd_server import EtcdServer
from testrigs.helpers import endpoint_spec
from testrigs.tcp_proxy import TcpProxy
from tests.tools.terminal import Terminal, command, environment

WAIT = 30.0  # seconds a watch may take to show a change, on a loaded machine
STAMP = r"\d\d:\d\d:\d\d\.\d{3}"


class Lines:
    """The stdout lines of a running ``discovery-sync`` process, read by a thread of their own."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.seen: list[str] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def until(self, wanted: str) -> list[str]:
        """The lines read until one that matches the regular expression ``wanted`` (included)."""
        taken: list[str] = []
        deadline = time.monotonic() + WAIT
        while True:
            try:
                line = self._lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                raise AssertionError(f"no line matching {wanted!r} within {WAIT} s; saw {self.seen}") from None
            if line is None:
                stderr = self.process.stderr.read() if self.process.stderr else ""
                raise AssertionError(f"the command ended before a line matching {wanted!r}; saw {self.seen}; {stderr}")
            self.seen.append(line)
            taken.append(line)
            if re.search(wanted, line):
                return taken

    def until_all(self, *wanted: str) -> list[str]:
        """The lines read until each of the regular expressions ``wanted`` matched one, in any
        order (the state thread and the watch's thread print independently)."""
        taken: list[str] = []
        left = list(wanted)
        while left:
            taken += self.until("|".join(f"(?:{pattern})" for pattern in left))
            left = [pattern for pattern in left if not re.search(pattern, taken[-1])]
        return taken


@pytest.fixture
def proxy(etcd_server: EtcdServer) -> Iterator[TcpProxy]:
    proxy = TcpProxy(etcd_server.client_port)
    yield proxy
    proxy.close()


@contextlib.contextmanager
def _watching(url: str, *args: str) -> Iterator[Lines]:
    """``discovery-sync watch`` of ``url`` in a process of its own, its output line by line; ended
    on the way out, when its stderr must hold no traceback."""
    process = subprocess.Popen(
        command("--url", url, "--timeout", "2", "watch", *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment(),
    )
    try:
        yield Lines(process)
    finally:
        _stop(process)


def _stop(process: subprocess.Popen[str]) -> None:
    """End the watch; its stderr must hold no traceback."""
    process.terminate()
    try:
        _, stderr = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        _, stderr = process.communicate()
    assert "Traceback" not in stderr, stderr


# (the watch's arguments, what its initial state ends with, a state line's pattern, an event's)
FORMATS = {
    "json": (("-o", "json"), r'^\{"event":"Resync"', r'^\{"state":"{state}"', r'^\{"event":"(Added|Removed)"'),
    "table": ((), rf"^{STAMP}  RESYNC ", rf"^{STAMP}  {{STATE}}  ", rf"^{STAMP}  (ADDED|REMOVED) "),
    "live-json": (("--live", "-o", "json"), r'^\{"version":', r'^\{"state":"{state}"', r'^\{"version":'),
}


def _state(pattern: str, state: str) -> str:
    return pattern.replace("{state}", state).replace("{STATE}", state.upper())


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_an_etcd_outage_is_shown_as_state_lines_and_nothing_that_did_not_change_is_removed(
    etcd_server, etcd_prefix, proxy, fmt
):
    args, initial, state, record_change = FORMATS[fmt]
    with ds.connect(f"etcd://127.0.0.1:{etcd_server.client_port}/{etcd_prefix}?ttl=60") as writer:
        endpoint = writer.register(endpoint_spec())  # before the watch: its initial state holds it
        with _watching(f"etcd://127.0.0.1:{proxy.port}/{etcd_prefix}", *args) as lines:
            lines.until(initial)
            proxy.cut()
            suspended = lines.until(_state(state, "suspended"))
            proxy.restore()
            # the watch's resync after the outage (the complete set, and nothing else) and the state
            # line come from two threads: in either order
            after = [_state(state, "reconnected")] + ([initial] if fmt != "live-json" else [])
            during = suspended + lines.until_all(*after)
            assert not [line for line in during if re.search(record_change, line)], during
            if fmt == "json":
                resync = [line for line in during if line.startswith('{"event":"Resync"')][-1]
                assert orjson.loads(resync) == {"event": "Resync", "instances": [record_document(endpoint)]}
                documents = [orjson.loads(line) for line in during if line.startswith('{"state"')]
                assert [d["state"] for d in documents] == ["suspended", "reconnected"]
                assert documents[0]["previous"] == "connected" and "etcd" in documents[0]["reason"]
                assert documents[1] == {**documents[1], "previous": "suspended", "rewritten": []}
            if fmt == "table":
                (line,) = [line for line in during if "SUSPENDED" in line]
                assert "etcd" in line


def test_a_file_store_that_goes_away_and_comes_back_is_shown_as_state_documents(tmp_path):
    store = tmp_path / "store"
    url = f"file://{store}?ttl=60&rescan_interval=0.2"
    with ds.connect(url) as writer:
        writer.register(endpoint_spec())
        with _watching(url, "-o", "json") as lines:
            lines.until(r'^\{"event":"Resync"')
            store.rename(tmp_path / "away")  # what a reader sees of a store unmounted, say
            suspended = orjson.loads(lines.until(r'^\{"state":')[-1])
            assert suspended["state"] == "suspended" and str(store) in suspended["reason"], suspended
            (tmp_path / "away").rename(store)
            reconnected = orjson.loads(lines.until(r'^\{"state":')[-1])
            assert reconnected["state"] == "reconnected" and reconnected["previous"] == "suspended", reconnected


def test_a_live_table_on_a_terminal_shows_the_state_in_its_heading(tmp_path):
    store = tmp_path / "store"
    url = f"file://{store}?ttl=60&rescan_interval=0.2"
    with ds.connect(url) as writer:
        writer.register(endpoint_spec())
        terminal = Terminal("--url", url, "watch", "--live")
        try:
            terminal.expect("1 record (Ctrl-C to stop)")
            store.rename(tmp_path / "away")
            heading = terminal.expect("connection SUSPENDED at ")
            assert "the store was removed" in heading.rsplit("connection SUSPENDED at ", 1)[1]
            (tmp_path / "away").rename(store)
            terminal.expect("connection RECONNECTED at ")
            terminal.ctrl_c()
            status, shown = terminal.finish()
        finally:
            terminal.close()
    assert status == cli.EXIT_INTERRUPTED, shown
    assert "Traceback" not in shown


def test_a_watch_that_ends_prints_no_state_of_its_own_shutdown(tmp_path):
    url = f"file://{tmp_path / 'store'}"
    ds.connect(url).shutdown()  # a writer creates the store
    result = subprocess.run(
        command("--url", url, "watch", "--idle-timeout", "0.3", "-o", "json"),
        capture_output=True,
        text=True,
        timeout=60,
        env=environment(),
    )
    assert result.returncode == 0, result.stderr
    assert [orjson.loads(line) for line in result.stdout.splitlines()] == [{"event": "Resync", "instances": []}]


# -- a store that does not exist ---------------------------------------------------------------------
READ_COMMANDS = [
    ["list"],
    ["list", "-o", "json"],
    ["get", "2a"],
    ["watch", "--count", "1"],
    ["watch", "--live", "--count", "1"],
    ["top", "--count", "1"],
    ["gc", "--dry-run"],
    ["gc"],  # it removes records, but creates no store to remove nothing from
]


def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``main(args)`` in-process: its exit status, stdout and stderr."""
    try:
        status: Any = cli.main(list(args))
    except SystemExit as exc:
        status = exc.code
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture(autouse=True)
def no_debug(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(cli.DEBUG_ENV, raising=False)


@pytest.mark.parametrize("args", READ_COMMANDS, ids=" ".join)
def test_a_read_command_on_a_store_that_does_not_exist_says_so_and_creates_nothing(capsys, tmp_path, args):
    typo = tmp_path / "stroe"
    status, out, err = run_main(capsys, "--url", f"file://{typo}?ttl=2", *args)
    assert status == cli.EXIT_STORE_ERROR, err
    assert out == ""
    (line,) = err.splitlines()
    assert line.startswith(f"discovery-sync: error: the file store {typo} does not exist"), line
    assert "Check the path" in line and "register" in line
    assert os.listdir(tmp_path) == []


def test_the_store_the_environment_names_is_checked_too(capsys, tmp_path, monkeypatch):
    for variable, value in {
        "DYN_DISCOVERY_BACKEND": "",
        "ETCD_ENDPOINTS": "",
        "DYN_FILE_KV": str(tmp_path / "kv"),
    }.items():
        monkeypatch.setenv(variable, value)
    status, _, err = run_main(capsys, "list")
    assert status == cli.EXIT_STORE_ERROR
    assert f"the file store {tmp_path / 'kv'} (from DYN_FILE_KV) does not exist" in err
    assert os.listdir(tmp_path) == []


def test_a_directory_that_holds_no_store_is_no_store(capsys, tmp_path):
    status, _, err = run_main(capsys, "--url", f"file://{tmp_path}", "gc")
    assert status == cli.EXIT_STORE_ERROR
    assert f"no file store at {tmp_path}: the directory holds no bucket (v1/...)" in err
    assert os.listdir(tmp_path) == []


def test_register_creates_the_store_and_the_read_commands_then_find_it_empty(capsys, tmp_path):
    url = f"file://{tmp_path / 'store'}?ttl=2"
    spec = tmp_path / "spec.json"
    spec.write_bytes(orjson.dumps({"type": "Endpoint", "namespace": "ns", "component": "c", "endpoint": "e",
                                   "transport": {"tcp": "x"}}))  # fmt: skip
    assert run_main(capsys, "--url", url, "register", "--no-hold", str(spec))[0] == 0
    status, out, err = run_main(capsys, "--url", url, "list")
    assert (status, out) == (0, "")
    assert "no records found" in err


def test_a_program_reading_a_store_that_does_not_exist_still_finds_it_empty(tmp_path):
    """The library is unchanged: a read-only client sees a store not created yet as empty."""
    with ds.connect(f"file://{tmp_path / 'store'}", read_only=True) as reader:
        assert reader.list(ds.Query.endpoints()) == []
    assert not (tmp_path / "store").exists()
