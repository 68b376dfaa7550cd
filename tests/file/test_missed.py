"""When a change a rescan finds counts as missed (backends/file/missed.py), on a made-up clock."""

from __future__ import annotations

from discovery_sync.backends.file.missed import MAX_NOTICE_GRACE, NOTICE_GRACE, Suspects, notice_grace

GRACE = 1.0


def scan(suspects: Suspects, began: float, found: dict[str, bytes | None], ended: float | None = None) -> set[str]:
    """One rescan from ``began`` to ``ended`` that finds ``found`` (name -> content) not yet
    delivered; the names it lets through as missed."""
    gate = suspects.gate(began)
    through = {name for name, content in found.items() if gate(name, content)}
    suspects.scan_ended(began if ended is None else ended)
    return through


def test_a_change_is_missed_on_the_second_scan_after_the_grace():
    suspects = Suspects(GRACE)
    assert scan(suspects, 0.0, {"a": b"1"}) == set()
    assert suspects  # held back
    assert scan(suspects, 0.5, {"a": b"1"}) == set()
    assert scan(suspects, 1.0, {"a": b"1"}) == set()  # due: the notifier gets one more interval
    assert scan(suspects, 1.2, {"a": b"1"}) == {"a"}


def test_the_grace_counts_from_the_end_of_the_first_scan_that_found_it():
    suspects = Suspects(GRACE)
    assert scan(suspects, 0.0, {"a": None}, ended=3.0) == set()  # stalled after its listing
    assert scan(suspects, 3.5, {"a": None}) == set()
    assert scan(suspects, 3.9, {"a": None}) == set()
    assert scan(suspects, 4.0, {"a": None}) == set()  # due
    assert scan(suspects, 4.1, {"a": None}) == {"a"}


def test_a_stall_of_the_whole_process_leaves_the_notifier_one_more_scan():
    suspects = Suspects(GRACE)
    assert scan(suspects, 0.0, {"a": b"1"}) == set()
    # five seconds later the notifier had no time to run yet: not missed
    assert scan(suspects, 5.0, {"a": b"1"}) == set()
    # the notification delivered it meanwhile: the next scan no longer finds it, nor does it come back
    assert scan(suspects, 5.2, {}) == set()
    assert not suspects
    assert scan(suspects, 5.4, {"a": b"1"}) == set()


def test_other_content_under_the_name_starts_again():
    suspects = Suspects(GRACE)
    assert scan(suspects, 0.0, {"a": b"1"}) == set()
    assert scan(suspects, 2.0, {"a": b"1"}) == set()  # due
    assert scan(suspects, 2.1, {"a": b"2"}) == set()  # rewritten: new
    assert scan(suspects, 2.2, {"a": b"2"}) == set()
    assert scan(suspects, 3.2, {"a": b"2"}) == set()  # due
    assert scan(suspects, 3.3, {"a": None}) == set()  # removed: new again
    assert scan(suspects, 4.5, {"a": None}) == set()
    assert scan(suspects, 4.6, {"a": None}) == {"a"}


def test_names_are_judged_apart():
    suspects = Suspects(GRACE)
    assert scan(suspects, 0.0, {"a": b"1"}) == set()
    assert scan(suspects, 1.0, {"a": b"1", "b": b"1"}) == set()
    assert scan(suspects, 1.1, {"a": b"1", "b": b"1"}) == {"a"}
    assert scan(suspects, 2.0, {"b": b"1"}) == set()
    assert scan(suspects, 2.1, {"b": b"1"}) == {"b"}


def test_a_scan_that_failed_before_it_ended_counts_from_the_end_of_the_next():
    suspects = Suspects(GRACE)
    suspects.gate(0.0)("a", b"1")  # no scan_ended: the scan raised
    assert scan(suspects, 5.0, {"a": b"1"}, ended=5.1) == set()
    assert scan(suspects, 6.0, {"a": b"1"}) == set()
    assert scan(suspects, 6.1, {"a": b"1"}) == set()  # due
    assert scan(suspects, 6.2, {"a": b"1"}) == {"a"}


def test_the_grace_is_three_polls_of_the_polling_observer_within_bounds():
    assert notice_grace("inotify", 0.1) == NOTICE_GRACE
    assert notice_grace("polling", 0.1) == NOTICE_GRACE
    assert notice_grace("polling", 0.6) == 3 * 0.6
    assert notice_grace("polling", 3600) == MAX_NOTICE_GRACE
