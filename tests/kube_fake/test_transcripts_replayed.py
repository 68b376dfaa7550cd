"""Together, the replay tests cover every recorded transcript: a new recording cannot go unreplayed."""

from __future__ import annotations

from tests.kube_fake import test_transcripts_watches, test_transcripts_writes
from tests.kube_fake.transcripts import names


def test_every_transcript_is_replayed():
    replayed = test_transcripts_writes.REPLAYED | test_transcripts_watches.REPLAYED
    assert replayed == set(names())
    assert not test_transcripts_writes.REPLAYED & test_transcripts_watches.REPLAYED  # each file has one owner
