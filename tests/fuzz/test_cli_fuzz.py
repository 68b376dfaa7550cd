"""The command line, in-process, on generated arguments and spec files: every outcome is an exit
status (0, 1 or 2) with at most one line on stderr; no traceback, and never the line that
reports a bug."""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from discovery_sync.tools import cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz.strategies import FUZZ, json_values, library_records, mutated_records

CLI_FUZZ = settings(FUZZ, suppress_health_check=[HealthCheck.function_scoped_fixture])
URL = "memory://cli-fuzz"
files = itertools.count()

junk = st.one_of(
    st.sampled_from(["", "nan", "inf", "-1", "0", "1e300", "{}", "[]", "{bad", "null", "models", "\x7f", "-"]),
    st.text(alphabet=st.characters(exclude_categories=("Cs",), exclude_characters="\0"), max_size=12),
)
query_flags = ["--kind", "--namespace", "--component", "--endpoint", "--scope", "--topic"]


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="discovery-sync-cli-fuzz-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def flags(names: list[str]) -> st.SearchStrategy[list[str]]:
    pairs = st.lists(st.tuples(st.sampled_from(names), junk), max_size=4)
    return pairs.map(lambda chosen: [part for pair in chosen for part in pair])


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    try:
        status = cli.main(argv)
    except SystemExit as exit_:  # argparse: a bad command line
        status = exit_.code
    err = capsys.readouterr().err
    assert status in (0, 1, 2), (argv, status, err)
    assert "Traceback" not in err and "please report" not in err, (argv, err)
    assert len(err.strip().splitlines()) <= 1, (argv, err)


@CLI_FUZZ
@given(command=st.sampled_from(["list", "watch"]), arguments=flags([*query_flags, "--count", "--idle-timeout"]))
def test_query_commands(command: str, arguments: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    stop = ["--count", "1"] if command == "watch" else []  # the Resync ends the watch
    run(["--url", URL, command, *arguments, *stop], capsys)


valid_specs = st.sampled_from([{k: v for k, v in r.items() if k != "instance_id"} for r in library_records()])
spec_documents = st.one_of(
    valid_specs,
    mutated_records(valid_specs),
    st.dictionaries(
        st.sampled_from(["type", "namespace", "component", "endpoint", "transport", "card_json"]), json_values
    ),
    json_values,
)


@CLI_FUZZ
@given(document=spec_documents, raw=st.binary(max_size=40), use_raw=st.booleans())
def test_register_spec_files(
    sandbox: Path, document: object, raw: bytes, use_raw: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = sandbox / f"spec-{next(files)}.json"
    spec.write_bytes(raw if use_raw else orjson.dumps(document))
    run(["--url", URL, "register", "--no-hold", str(spec)], capsys)


@CLI_FUZZ
@given(argv=st.lists(junk, max_size=5))
def test_arbitrary_argument_lists(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    if {"demo", "bench", "gc", "doctor", "register", "watch"} & set(argv):
        return  # the commands that run long or wait are generated above with their stop flags
    run(["--url", URL, *argv], capsys)
