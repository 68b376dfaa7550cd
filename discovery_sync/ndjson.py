"""Newline-delimited JSON streams: the lines of a body that arrives in chunks, with one size bound.

The etcd gateway's watch stream and the Kubernetes API server's watch responses are both a JSON
document per line, read as the server sends them, in chunks that need not end where a line does.
:func:`split_lines` cuts such a body into lines for both. A line may be at most
:data:`MAX_LINE` bytes long: past that, what arrives is not a message in transit but junk (a
server of another kind, a broken proxy), and holding it whole would only grow the process.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from .errors import BackendUnavailable

#: the longest line read, in bytes (64 MiB): far above what a watch message holds (etcd refuses
#: requests over 1.5 MiB by default, which bounds a stored value and so a Kubernetes object)
MAX_LINE = 64 * 2**20


class LineTooLong(BackendUnavailable):
    """A streamed body held a line longer than the bound: the stream is not what it claims."""


def split_lines(chunks: Iterable[bytes], source: str, limit: int = MAX_LINE) -> Iterator[bytes]:
    """The lines of the body arriving as ``chunks``, each without its ``\\n``, as soon as it is whole.

    Lines of ASCII whitespace only (empty ones included) are skipped. When the body ends without
    a ``\\n``, its last line is yielded as it is (its consumer finds out whether it is whole).
    A line, ended or not, longer than ``limit`` bytes raises :class:`LineTooLong`, naming
    ``source`` (who sends the body, and where: "etcd on /v3/watch") and the bound.
    """
    buffer = bytearray()
    for chunk in chunks:
        searched = len(buffer)  # the part held before has no newline
        buffer += chunk
        start = 0
        end = buffer.find(b"\n", searched)
        while end >= 0:
            if end - start > limit:
                raise _too_long(source, limit)
            line = bytes(buffer[start:end])
            if line and not line.isspace():
                yield line
            start = end + 1
            end = buffer.find(b"\n", start)
        del buffer[:start]
        if len(buffer) > limit:
            raise _too_long(source, limit)
    if buffer and not buffer.isspace():
        yield bytes(buffer)


def _too_long(source: str, limit: int) -> LineTooLong:
    return LineTooLong(
        f"{source} sent a line longer than {limit} bytes ({limit / 2**20:g} MiB), the bound of a line of a "
        "JSON stream this client reads: no watch message comes near it, so check that the address is the "
        "server meant and that no proxy in front of it corrupts the stream"
    )
