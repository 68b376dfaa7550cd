"""When a change that a rescan of the file backend finds counts as missed by the notifier.

A rescan often sees a change before the notifier delivers it: the notification is on its way
through watchdog's threads, or the polling observer has not polled yet. Publishing such a change
at once would turn every slow notification into a Resync. So a change found by a rescan is held
back (:class:`Suspects` is the rescan's ``gate``, see :meth:`.view.BucketView.refresh`) and
published as missed only when

- rescans found the same content under that name for ``grace`` seconds, counted from the end of
  the first scan that found it (a scan that stalled after its listing does not shorten the
  grace), and
- one more rescan after that found it still: a stall of the whole process (a loaded machine)
  ages every pending notification past the grace at once, and the notifier's threads then need
  some running time to deliver them.

Content is compared, not the file's version: heartbeats move the mtime every second at short TTLs.
"""

from __future__ import annotations

from dataclasses import dataclass

from .view import Content, Gate

NOTICE_GRACE = 1.0  # seconds a notification may lag a rescan before the change counts as missed
MAX_NOTICE_GRACE = 3.0


def notice_grace(observer: str, poll_interval: float) -> float:
    """Seconds a notification may take: a few polls of the polling observer (a poll of a big
    directory over the network takes long), bounded so a stalled observer still gets repaired."""
    if observer == "polling":
        return min(max(3 * poll_interval, NOTICE_GRACE), MAX_NOTICE_GRACE)
    return NOTICE_GRACE


@dataclass(slots=True)
class _Suspect:
    content: Content | None  # None: the file is gone
    found_at: float | None  # monotonic end of the first scan that found it (None: that scan is under way)
    due: bool = False  # a scan found it after the grace had passed: the next one publishes it


class Suspects:
    """The changes of one bucket that rescans found and no notification has delivered yet.
    One rescan at a time: :meth:`gate` when it begins, :meth:`scan_ended` when it is done."""

    def __init__(self, grace: float) -> None:
        self.grace = grace
        self._held: dict[str, _Suspect] = {}  # what the last scan held back

    def gate(self, now: float) -> Gate:
        """The gate of a scan beginning at ``now`` (monotonic): True lets a change through as
        missed; False holds it back for a later scan (or its notification). A change that this
        scan does not find again (a notification delivered it) is forgotten."""
        previous = self._held
        current: dict[str, _Suspect] = {}
        self._held = current

        def confirm(name: str, content: Content | None) -> bool:
            seen = previous.get(name)
            if seen is None or seen.content != content:
                current[name] = _Suspect(content, None)
                return False
            if seen.found_at is not None and now - seen.found_at >= self.grace:
                if seen.due:
                    return True
                seen.due = True
            current[name] = seen
            return False

        return confirm

    def scan_ended(self, now: float) -> None:
        """The scan is done (``now``: monotonic): what it found first counts from now."""
        for suspect in self._held.values():
            if suspect.found_at is None:
                suspect.found_at = now

    def __bool__(self) -> bool:
        """Whether the last scan held a change back."""
        return bool(self._held)
