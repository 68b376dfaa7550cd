"""discovery_sync.ndjson.split_lines: the lines of a body however it is chunked, with one bound."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from discovery_sync.errors import BackendUnavailable
from discovery_sync.ndjson import MAX_LINE, LineTooLong, split_lines

# lines without a newline and not blank (blank lines are skipped by design)
LINE = st.binary(min_size=1, max_size=40).map(lambda b: b.replace(b"\n", b"x")).filter(lambda b: not b.isspace())


def chunked(body: bytes, cuts: list[int]) -> list[bytes]:
    """``body`` cut at the offsets ``cuts`` (any order, repeats: empty chunks)."""
    points = sorted(min(c, len(body)) for c in cuts)
    edges = [0, *points, len(body)]
    return [body[a:b] for a, b in pairwise(edges)]


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(LINE, max_size=20), cuts=st.lists(st.integers(0, 1000), max_size=30), ended=st.booleans())
def test_any_chunking_of_any_lines_gives_the_same_lines_back(lines: list[bytes], cuts: list[int], ended: bool) -> None:
    body = b"\n".join(lines) + (b"\n" if ended and lines else b"")
    assert list(split_lines(chunked(body, cuts), "the test server")) == lines


def test_blank_lines_are_skipped_and_an_unended_last_line_is_given_as_it_is() -> None:
    body = [b'{"a":1}\n\n  \r\n{"b":', b'2}\n\t\n{"c":3', b"}"]
    assert list(split_lines(body, "s")) == [b'{"a":1}', b'{"b":2}', b'{"c":3}']
    assert list(split_lines([b"{}\n", b"  "], "s")) == [b"{}"]  # a blank tail is nothing
    assert list(split_lines([], "s")) == []


@pytest.mark.parametrize(
    "chunks",
    [
        [b"x" * 11 + b"\n"],  # whole in one chunk
        [b"x" * 6, b"x" * 5, b"\n"],  # growing over chunks
        [b"ok\n" + b"x" * 11],  # not ended yet
        [b"x" * 12],  # never ended
    ],
)
def test_a_line_over_the_bound_is_refused_with_the_bound_and_the_source(chunks: list[bytes]) -> None:
    with pytest.raises(LineTooLong, match=r"^the test server sent a line longer than 10 bytes .*check") as caught:
        list(split_lines(chunks, "the test server", limit=10))
    assert isinstance(caught.value, BackendUnavailable)  # what both backends' streams retry on


def test_a_line_of_exactly_the_bound_passes_however_it_arrives() -> None:
    assert list(split_lines([b"x" * 10 + b"\n"], "s", limit=10)) == [b"x" * 10]
    assert list(split_lines([b"x" * 5, b"x" * 5, b"\ny\n"], "s", limit=10)) == [b"x" * 10, b"y"]
    assert list(split_lines([b"x" * 10], "s", limit=10)) == [b"x" * 10]


def test_the_shared_bound_is_64_mib_and_named_in_the_message() -> None:
    assert MAX_LINE == 64 * 2**20
    with pytest.raises(LineTooLong, match=r"longer than 67108864 bytes \(64 MiB\)"):
        list(split_lines([b"x" * (MAX_LINE + 1)], "etcd on /v3/watch"))
