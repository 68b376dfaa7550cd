"""The discovery-sync command reports every failure in one line on stderr, never a traceback.

Exit status: 2 for a usage error (bad arguments, spec file, JSON, URL or option), 1 for a store
error (any other DiscoveryError) or a bug, 130 for Ctrl-C. Most cases run in-process through
``main()``; one of each kind runs as a real subprocess too.
"""

from __future__ import annotations

import io
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from discovery_sync.tools import cli, commands

import discovery_sync as ds

ENDPOINT = {"type": "Endpoint", "namespace": "ns", "component": "backend", "endpoint": "e", "transport": {"tcp": "x"}}


def model(name: str) -> dict:
    """A model spec on the endpoint of ENDPOINT, with its own card."""
    names = {key: ENDPOINT[key] for key in ("namespace", "component", "endpoint")}
    return {"type": "Model", **names, "card_json": {"display_name": name}}


@pytest.fixture(autouse=True)
def no_debug(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests expect the default (no traceback) whatever the developer's environment says."""
    monkeypatch.delenv(cli.DEBUG_ENV, raising=False)


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"file://{tmp_path / 'store'}?ttl=2&rescan_interval=0.2"


def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """``main(args)`` in-process: its exit status (returned or raised) and its stderr."""
    try:
        code = cli.main(list(args))
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr().err


def assert_one_line(stderr: str, *expected: str) -> str:
    """stderr is exactly one non-empty line, no traceback, holding every ``expected`` text."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    for text in expected:
        assert text in lines[0], stderr
    return lines[0]


def write(path: Path, content: bytes) -> str:
    path.write_bytes(content)
    return str(path)


# Each case: how to make the command line from tmp_path, and what the error line must say.
USAGE_ERRORS: dict[str, tuple[Callable[[Path], list[str]], list[str]]] = {
    "missing spec file": (lambda tmp: ["register", str(tmp / "nonexistent.json")], ["does not exist"]),
    "spec is a directory": (lambda tmp: ["register", str(tmp)], ["cannot read the spec file {}: it is a directory"]),
    "empty spec file": (lambda tmp: ["register", write(tmp / "s.json", b"")], ["is empty"]),
    "blank spec file": (lambda tmp: ["register", write(tmp / "s.json", b" \n")], ["is empty"]),
    "non-UTF-8 spec file": (lambda tmp: ["register", write(tmp / "s.json", b"\xff\xfe{}")], ["not valid JSON"]),
    "spec not JSON": (lambda tmp: ["register", write(tmp / "s.json", b"{bad")], ["not valid JSON"]),
    "spec of a wrong type": (
        lambda tmp: ["register", write(tmp / "s.json", b'{"type": "Nope"}')],
        ["not a valid spec", "unknown instance type 'Nope'"],
    ),
    "spec missing fields": (
        lambda tmp: ["register", write(tmp / "s.json", b'{"type": "Endpoint"}')],
        ["not a valid spec", "missing the field 'namespace'"],
    ),
    "spec with a wrong field type": (
        lambda tmp: ["register", write(tmp / "s.json", orjson.dumps({**ENDPOINT, "namespace": 1}))],
        ["namespace must be a string"],
    ),
    "spec is a string": (lambda tmp: ["register", write(tmp / "s.json", b'"x"')], ["must be a JSON object"]),
    "spec list holding a number": (lambda tmp: ["register", write(tmp / "s.json", b"[1]")], ["item 0 is not a valid"]),
    "spec is an empty list": (lambda tmp: ["register", write(tmp / "s.json", b"[]")], ["nothing to register"]),
    "endless spec file": (lambda tmp: ["register", "/dev/zero"], ["/dev/zero is larger than 64 MiB"]),
    "scope not JSON": (lambda tmp: ["list", "--scope", "{bad"], ["--scope is not valid JSON", "example: --scope"]),
    "scope not an object": (lambda tmp: ["list", "--scope", "[1]"], ["--scope must be a JSON object, got list"]),
    "scope without its kind": (lambda tmp: ["list", "--scope", "{}"], ["missing the field 'kind'"]),
    "unknown kind": (lambda tmp: ["list", "--kind", "foo"], ["invalid kind 'foo': choose all, endpoints"]),
    "mixed filters": (lambda tmp: ["list", "--namespace", "ns", "--topic", "t"], ["filters of one sort"]),
    "filter of another kind": (lambda tmp: ["list", "--kind", "models", "--topic", "t"], ["not scope/topic"]),
    "not a store key": (lambda tmp: ["get", "v2/x"], ["is not a store key", "v1/instances/"]),
    "bad id path": (lambda tmp: ["get", "--kind", "models", "a/b"], ["must be namespace/component/endpoint/id"]),
    "unknown scheme": (lambda tmp: ["--url", "nosuch://x", "list"], ["scheme must be one of"]),
    "NUL in the URL": (lambda tmp: ["--url", "file:///a%00b", "list"], []),  # ValidationError from connect()
    "bad integer argument": (lambda tmp: ["watch", "--count", "x"], ["--count", "discovery-sync watch --help"]),
    "unknown option": (lambda tmp: ["list", "--frobnicate"], ["unrecognized arguments"]),
    "no command": (lambda tmp: [], ["required: COMMAND", "discovery-sync --help"]),
}


@pytest.mark.parametrize("case", USAGE_ERRORS)
def test_usage_errors_exit_2_with_one_line(case, tmp_path, url, capsys):
    make_args, expected = USAGE_ERRORS[case]
    args = make_args(tmp_path)
    argv = args if "--url" in args else ["--url", url, *args]
    code, stderr = run_main(capsys, *argv)
    assert code == cli.EXIT_USAGE_ERROR, stderr
    line = assert_one_line(stderr, "discovery-sync: error: ", *(text.format(tmp_path) for text in expected))
    assert not line.startswith("discovery-sync: error: unexpected"), line
    assert not list(tmp_path.glob("store/**/ns%2F*")), "nothing was registered"


def test_a_spec_on_stdin_that_is_empty_is_a_usage_error(url, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
    code, stderr = run_main(capsys, "--url", url, "register", "--no-hold", "-")
    assert code == cli.EXIT_USAGE_ERROR
    assert_one_line(stderr, "the spec on stdin is empty")


def test_a_store_that_cannot_be_created_exits_1(tmp_path, capsys):
    not_a_directory = write(tmp_path / "file", b"")
    spec = write(tmp_path / "spec.json", orjson.dumps(ENDPOINT))
    code, stderr = run_main(capsys, "--url", f"file://{not_a_directory}", "register", "--no-hold", spec)
    assert code == cli.EXIT_STORE_ERROR
    assert_one_line(stderr, "discovery-sync: error: cannot create the file store")


def test_an_unreachable_etcd_exits_1(capsys):
    code, stderr = run_main(capsys, "--url", "etcd://127.0.0.1:1?connect_timeout=0.5", "list")
    assert code == cli.EXIT_STORE_ERROR
    assert_one_line(stderr, "discovery-sync: error: ", "127.0.0.1:1")


def test_a_conflicting_registration_exits_1(tmp_path, url, capsys):
    specs = write(tmp_path / "specs.json", orjson.dumps([model("a"), model("b")]))
    code, stderr = run_main(capsys, "--url", url, "register", "--no-hold", specs)
    assert code == cli.EXIT_STORE_ERROR
    assert_one_line(stderr, "already registered with different content")


def fail_with(monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> None:
    """Make ``discovery-sync list`` raise ``exc``."""

    def failing_command(args: object) -> int:
        raise exc

    monkeypatch.setattr(commands, "cmd_list", failing_command)


def test_a_bug_is_one_line_asking_for_a_report(url, capsys, monkeypatch):
    fail_with(monkeypatch, RuntimeError("boom\nsecond line"))
    code, stderr = run_main(capsys, "--url", url, "list")
    assert code == 1
    assert_one_line(stderr, "unexpected RuntimeError: boom; second line", "please report", cli.DEBUG_ENV)


def test_the_debug_variable_adds_the_traceback(url, capsys, monkeypatch):
    monkeypatch.setenv(cli.DEBUG_ENV, "1")
    fail_with(monkeypatch, RuntimeError("boom"))
    code, stderr = run_main(capsys, "--url", url, "list")
    assert code == 1
    assert "Traceback" in stderr and "in failing_command" in stderr
    assert "please report" in stderr.splitlines()[-1]


def test_an_interrupt_exits_130_in_process(url, capsys, monkeypatch):
    fail_with(monkeypatch, KeyboardInterrupt())
    code, stderr = run_main(capsys, "--url", url, "list")
    assert code == cli.EXIT_INTERRUPTED
    assert_one_line(stderr, "interrupted")


def test_a_closed_stdout_exits_quietly(url, capsys, monkeypatch):
    fail_with(monkeypatch, BrokenPipeError())
    code, stderr = run_main(capsys, "--url", url, "list")
    assert code == cli.EXIT_BROKEN_PIPE
    assert stderr == ""


def test_help_explains_exit_codes_and_the_debug_variable(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    assert exit_info.value.code == 0
    help_text = capsys.readouterr().out
    assert f"{cli.DEBUG_ENV}=1" in help_text and "130 Ctrl-C" in help_text and "2 bad arguments" in help_text


# -- as a real subprocess ----------------------------------------------------------------------


def command(url: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "discovery_sync.tools", "--url", url, *args]


def environment() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if key != cli.DEBUG_ENV}


def test_a_usage_error_as_a_process(url, tmp_path):
    result = subprocess.run(
        command(url, "register", str(tmp_path)), capture_output=True, text=True, timeout=60, env=environment()
    )
    assert result.returncode == 2
    assert_one_line(result.stderr, f"cannot read the spec file {tmp_path}: it is a directory")


def test_a_store_error_as_a_process(tmp_path):
    not_a_directory = write(tmp_path / "file", b"")
    spec = write(tmp_path / "spec.json", orjson.dumps(ENDPOINT))
    result = subprocess.run(
        command(f"file://{not_a_directory}", "register", "--no-hold", spec),
        capture_output=True,
        text=True,
        timeout=60,
        env=environment(),
    )
    assert result.returncode == 1
    assert_one_line(result.stderr, "cannot create the file store")


def default_sigint() -> None:
    """In the child: SIGINT as a terminal's Ctrl-C delivers it, even if the test runner ignores it
    (a background job of a shell does), since Python raises KeyboardInterrupt only then."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_ends_a_watch_with_130_and_no_traceback(url):
    ds.connect(url).shutdown()  # a writer creates the store: a watch of a store that does not exist fails
    watch = subprocess.Popen(
        command(url, "watch", "-o", "json"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment(),
        preexec_fn=default_sigint,
    )
    try:
        assert orjson.loads(watch.stdout.readline()) == {"event": "Resync", "instances": []}
        watch.send_signal(signal.SIGINT)
        _, stderr = watch.communicate(timeout=30)
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
    assert watch.returncode == 130, stderr
    assert_one_line(stderr, "interrupted")


def test_the_library_log_shows_errors_during_a_command_and_the_callers_logging_is_left_as_it_was(tmp_path, capsys):
    logger = logging.getLogger("discovery_sync")
    before = (logger.handlers[:], logger.level, logger.propagate, logger.isEnabledFor(logging.WARNING))
    assert cli.main(["--url", "etcd://127.0.0.1:1", "--timeout", "0.2", "-v", "list"]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert lines[-1].startswith("discovery-sync: error: cannot reach etcd at http://127.0.0.1:1")
    assert all(line.startswith("discovery-sync: ") for line in lines)
    assert (logger.handlers, logger.level, logger.propagate, logger.isEnabledFor(logging.WARNING)) == before
