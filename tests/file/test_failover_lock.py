"""The file store's failover lock (and the memory backend's): one holder per name and store, a
holder killed or frozen loses it to a waiter, and a holder that lost it learns it and removes
nothing. Real processes (``tests.failover_holder``) and real signals."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
from discovery_sync.backends.file.directory import StoreDirectory
from discovery_sync.backends.file.failover import FileFailoverLock, marker_name
from discovery_sync.backends.file.softlock import MARKER_SIZE, marker_bytes

import discovery_sync as ds
from discovery_sync.failover import LOCK_THREAD, FailoverLock, MemoryFailoverLock, check_lock_name
from testrigs.helpers import LogCatcher, caught_logs, in_thread

REPO = Path(__file__).resolve().parents[2]
WAIT = 10.0  # a bound for what should take milliseconds: only a failing test waits it out


class Holder:
    """A ``tests.failover_holder`` process, its stdout lines delivered on a queue."""

    def __init__(self, root: Path, name: str, mode: str, stale: float, *extra: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.failover_holder", str(root), name, mode, str(stale), *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        self.pid = self.process.pid
        self.lines: queue.Queue[str] = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._read, name="test-holder-stdout", daemon=True).start()
        threading.Thread(target=self._read_stderr, name="test-holder-stderr", daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.strip())
        self.lines.put("<eof>")

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        self.stderr.extend(self.process.stderr)

    def expect(self, prefix: str, timeout: float = WAIT) -> str:
        line = self.lines.get(timeout=timeout)
        assert line.startswith(prefix), f"expected {prefix!r} from the holder, got {line!r}; stderr: {self.stderr}"
        return line

    def tell(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGCONT)
        self.process.kill()
        self.process.wait(WAIT)


@pytest.fixture
def make_lock(tmp_path: Path, lock_dir: StoreDirectory) -> Iterator[Callable[..., FileFailoverLock]]:
    made: list[FileFailoverLock] = []

    def make(name: str = "primary", mode: str = "hard", stale: float = 30.0) -> FileFailoverLock:
        made.append(FileFailoverLock(name, lock_dir, mode=mode, stale_after=stale, store_root=tmp_path))
        return made[-1]

    yield make
    for lock in made:
        lock.close()


@pytest.fixture
def holders() -> Iterator[Callable[..., Holder]]:
    started: list[Holder] = []

    def start(root: Path, name: str = "primary", mode: str = "hard", stale: float = 30.0, *extra: str) -> Holder:
        started.append(Holder(root, name, mode, stale, *extra))
        return started[-1]

    yield start
    for holder in started:
        holder.stop()


@pytest.fixture
def logs() -> Iterator[LogCatcher]:
    with caught_logs("discovery_sync") as catcher:
        yield catcher


def marker_of(root: Path, name: str = "primary") -> Path:
    return root / ".locks" / marker_name(name)


def holder_pid(marker: Path) -> int:
    return int(orjson.loads(marker.read_bytes())["pid"])


def acquire_in_thread(lock: FailoverLock, timeout: float | None = WAIT) -> queue.Queue[object]:
    """``lock.acquire(timeout)`` on a thread; the queue gets (result, monotonic time) or the error."""
    outcome: queue.Queue[object] = queue.Queue()

    def run() -> None:
        try:
            outcome.put((lock.acquire(timeout), time.monotonic()))
        except BaseException as exc:
            outcome.put(exc)

    threading.Thread(target=run, name="test-failover-waiter", daemon=True).start()
    return outcome


# -- mutual exclusion -----------------------------------------------------------------------------------
def test_the_marker_names_its_holder_and_goes_with_the_release(tmp_path, make_lock):
    lock = make_lock()
    assert not lock.held
    with lock as entered:
        assert entered is lock and lock.held
        marker = marker_of(tmp_path)
        content = marker.read_bytes()
        assert len(content) == MARKER_SIZE
        data = orjson.loads(content)
        assert data["pid"] == os.getpid() and data["token"] and data["flock"]  # hard mode: it keeps a flock
        assert os.listdir(tmp_path / ".locks") == [marker.name]  # nothing else: no temp file left
    assert not lock.held
    assert os.listdir(tmp_path / ".locks") == []
    lock.release()  # idempotent
    assert not lock.wait_lost(0)


def test_threads_exclude_each_other_with_objects_of_their_own_or_one_shared(tmp_path, make_lock):
    inside = []
    overlaps = []
    shared = make_lock(stale=5)
    locks = [make_lock(stale=5) for _ in range(3)] + [shared, shared]
    barrier = threading.Barrier(len(locks))

    def work(lock: FileFailoverLock) -> None:
        barrier.wait()
        for _ in range(8):
            with lock:
                inside.append(threading.current_thread().name)
                if len(inside) > 1:
                    overlaps.append(list(inside))
                time.sleep(0.002)
                inside.remove(threading.current_thread().name)

    threads = [threading.Thread(target=work, args=(lock,), name=f"worker-{i}") for i, lock in enumerate(locks)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads)
    assert overlaps == []
    assert os.listdir(tmp_path / ".locks") == []


@pytest.mark.parametrize("mode", ["hard", "soft"])
def test_processes_exclude_each_other(tmp_path, holders, mode):
    inside = tmp_path / "inside"
    workers = [holders(tmp_path, "primary", mode, 5.0, "--cycles", "10", str(inside)) for _ in range(3)]
    for worker in workers:
        worker.expect("ready")
    for worker in workers:
        worker.tell("go")
    for worker in workers:
        assert worker.expect("done", timeout=30) == "done"
        assert worker.process.wait(WAIT) == 0
    assert os.listdir(tmp_path / ".locks") == []


def test_a_live_holder_keeps_the_lock_and_a_waiter_takes_it_at_its_release(tmp_path, make_lock, holders):
    holder = holders(tmp_path, stale=0.6)  # refreshed every 0.15 s: never stale while alive
    holder.expect("held")
    waiter = make_lock(stale=0.6)
    assert waiter.acquire(timeout=1.5) is False  # 2.5 stale bounds: a live holder is never overruled
    assert holder_pid(marker_of(tmp_path)) == holder.pid
    outcome = acquire_in_thread(waiter)
    holder.tell("release")
    holder.expect("released held=False")
    assert outcome.get(timeout=WAIT)[0] is True
    assert holder_pid(marker_of(tmp_path)) == os.getpid()


def test_an_acquire_with_a_timeout_gives_up_without_burning_the_cpu(tmp_path, make_lock):
    holder = make_lock()
    assert holder.acquire(0)
    waiter = make_lock()
    cpu, wall = time.process_time(), time.monotonic()
    assert waiter.acquire(timeout=0.5) is False
    wall, cpu = time.monotonic() - wall, time.process_time() - cpu
    assert 0.5 <= wall < 2
    assert cpu < 0.25 * wall, f"{cpu:.3f} s of CPU in {wall:.3f} s of waiting"  # polls, 20-50 ms apart
    assert waiter.acquire(timeout=-1) is False  # tries once
    holder.release()
    assert waiter.acquire(timeout=0)


# -- holders that die or freeze ------------------------------------------------------------------------
def test_a_holder_killed_with_sigkill_frees_a_hard_lock_at_once(tmp_path, make_lock, holders, logs):
    holder = holders(tmp_path, stale=30)  # staleness would take 30 s: only the flock can tell this fast
    holder.expect("held")
    waiter = make_lock(stale=30)
    outcome = acquire_in_thread(waiter, timeout=WAIT)
    with pytest.raises(queue.Empty):
        outcome.get(timeout=0.3)  # waiting on a live holder
    holder.process.kill()
    killed = time.monotonic()
    result = outcome.get(timeout=WAIT)
    assert isinstance(result, tuple) and result[0] is True, result
    waited = result[1] - killed
    print(f"acquired {waited * 1000:.0f} ms after the holder's SIGKILL (stale_after 30 s)")
    assert waited < 2
    assert holder_pid(marker_of(tmp_path)) == os.getpid()
    [broke] = logs.matching("broke the failover lock")
    assert f"pid {holder.pid}" in broke and "its process is gone" in broke


@pytest.mark.parametrize(("holder_mode", "waiter_mode"), [("soft", "soft"), ("hard", "soft"), ("soft", "hard")])
def test_without_a_trusted_flock_a_killed_holder_is_overruled_after_the_stale_bound(
    tmp_path, make_lock, holders, logs, holder_mode, waiter_mode
):
    stale = 1.0
    holder = holders(tmp_path, "primary", holder_mode, stale)
    holder.expect("held")
    holder.process.kill()
    holder.process.wait(WAIT)
    killed = time.monotonic()
    waiter = make_lock(mode=waiter_mode, stale=stale)
    assert waiter.acquire(timeout=WAIT)
    waited = time.monotonic() - killed
    assert stale <= waited < stale + 2  # after the stale bound, never through the dead holder's flock
    [broke] = logs.matching("broke the failover lock")
    assert f"pid {holder.pid}" in broke and f"did not change for {stale:g} s" in broke


def test_a_frozen_holder_loses_the_lock_learns_it_when_it_wakes_and_removes_nothing(tmp_path, make_lock, holders, logs):
    stale = 1.5
    holder = holders(tmp_path, stale=stale)
    holder.expect("held")
    holder.process.send_signal(signal.SIGSTOP)  # it keeps its flock: only staleness can overrule it
    stopped = time.monotonic()
    waiter = make_lock(stale=stale)
    assert waiter.acquire(timeout=WAIT)
    waited = time.monotonic() - stopped
    print(f"acquired {waited:.2f} s after the holder's SIGSTOP (stale_after {stale} s)")
    assert stale <= waited < stale + 2
    [broke] = logs.matching("broke the failover lock")
    assert f"pid {holder.pid}" in broke and "did not change" in broke
    ours = marker_of(tmp_path).read_bytes()

    holder.process.send_signal(signal.SIGCONT)
    # its refresher finds the marker is not its own: on_lost runs, on the lock's thread
    assert holder.expect("lost") == f"lost thread={LOCK_THREAD} held=False wait_lost=True"
    holder.tell("release")
    holder.expect("released held=False")
    assert holder.process.wait(WAIT) == 0
    assert waiter.held
    assert orjson.loads(marker_of(tmp_path).read_bytes())["token"] == orjson.loads(ours)["token"]
    assert os.listdir(tmp_path / ".locks") == [marker_name("primary")]
    assert any("lost the failover lock 'primary'" in line for line in holder.stderr), holder.stderr
    waiter.release()
    assert os.listdir(tmp_path / ".locks") == []


# -- losing, in one process -----------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["hard", "soft"])
def test_a_holder_whose_marker_was_taken_loses_it_once_and_says_so(tmp_path, make_lock, logs, mode):
    loser = make_lock(mode=mode, stale=0.4)  # refreshed every 0.1 s
    called: queue.Queue[tuple[str, bool]] = queue.Queue()

    def record(lock: FailoverLock) -> None:
        called.put((threading.current_thread().name, lock.held))

    def fail(lock: FailoverLock) -> None:
        raise RuntimeError("a callback that fails")

    loser.on_lost(fail)
    loser.on_lost(record)
    assert loser.acquire(0)
    marker_of(tmp_path).unlink()  # as another tool would, or a waiter breaking it
    winner = make_lock(mode=mode, stale=0.4)
    assert winner.acquire(0)
    assert loser.wait_lost(timeout=WAIT)
    assert called.get(timeout=WAIT) == (LOCK_THREAD, False)
    assert not loser.held and winner.held
    assert logs.wait_for("lost the failover lock 'primary'")
    assert logs.wait_for("a callback of on_lost() of the failover lock 'primary' raised")
    late: queue.Queue[str] = queue.Queue()
    loser.on_lost(lambda lock: late.put(threading.current_thread().name))  # after the loss: at once
    assert late.get(timeout=WAIT) == LOCK_THREAD
    loser.release()
    assert winner.held and holder_pid(marker_of(tmp_path)) == os.getpid()
    assert os.listdir(tmp_path / ".locks") == [marker_name("primary")]
    with pytest.raises(queue.Empty):
        called.get(timeout=0.3)  # once


def test_a_release_after_the_lock_changed_hands_leaves_the_new_marker(tmp_path, make_lock, logs):
    slow = make_lock(stale=30)  # no refresh in this test's time: the loss is not seen yet
    assert slow.acquire(0)
    marker = marker_of(tmp_path)
    marker.unlink()
    marker.write_bytes(marker_bytes("the-new-holder", 0, time.time()))
    slow.release()
    assert orjson.loads(marker.read_bytes())["token"] == "the-new-holder"
    assert logs.matching("was not this process's any more at its release")


def test_the_refresher_is_a_named_daemon_stopped_by_release_and_by_close(tmp_path, make_lock):
    def refreshers() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == LOCK_THREAD]

    lock = make_lock(stale=0.4)
    assert lock.acquire(0)
    [thread] = refreshers()
    assert thread.daemon
    first = marker_of(tmp_path).read_bytes()
    deadline = time.monotonic() + WAIT
    while marker_of(tmp_path).read_bytes() == first and time.monotonic() < deadline:
        time.sleep(0.05)
    assert orjson.loads(marker_of(tmp_path).read_bytes())["refreshes"] >= 1
    lock.release()
    assert not thread.is_alive() and refreshers() == []
    assert lock.acquire(0)
    [thread] = refreshers()
    outcome = acquire_in_thread(lock, timeout=None)  # this object holds it: a second acquire waits
    lock.close()
    assert isinstance(outcome.get(timeout=WAIT), ds.ClientClosed)
    assert not thread.is_alive() and refreshers() == []
    assert os.listdir(tmp_path / ".locks") == []
    with pytest.raises(ds.ClientClosed):
        lock.acquire(0)


def test_a_callback_may_release_the_lost_lock(tmp_path, make_lock):
    lock = make_lock(stale=0.4)
    released = threading.Event()

    def give_up(which: FailoverLock) -> None:
        which.release()
        released.set()

    lock.on_lost(give_up)
    assert lock.acquire(0)
    marker_of(tmp_path).unlink()
    assert released.wait(WAIT)
    assert lock.acquire(0)  # free again, and the object can take it once more
    assert lock.held


# -- what strangers leave -------------------------------------------------------------------------------
def plant(marker: Path, kind: str, tmp_path: Path) -> None:
    if kind == "empty":
        marker.write_bytes(b"")
    elif kind == "junk":
        marker.write_bytes(b"\x00not json at all")
    elif kind == "fifo":
        os.mkfifo(marker)
    else:
        target = tmp_path / "elsewhere"
        target.write_bytes(b"not to be touched")
        marker.symlink_to(target)


@pytest.mark.parametrize("kind", ["empty", "junk", "fifo", "symlink"])
def test_a_planted_marker_blocks_nobody_and_is_broken_once_stale(tmp_path, make_lock, logs, kind):
    stale = 0.3
    marker = marker_of(tmp_path)
    plant(marker, kind, tmp_path)
    lock = make_lock(stale=stale)
    started = time.monotonic()
    assert lock.acquire(timeout=0.1) is False  # it waits, but is never stuck in an open or a read
    assert time.monotonic() - started < 1
    started = time.monotonic()
    assert lock.acquire(timeout=WAIT)
    assert stale <= time.monotonic() - started < stale + 2
    assert marker.is_file() and not marker.is_symlink() and holder_pid(marker) == os.getpid()
    [broke] = logs.matching("broke the failover lock")
    assert "an unknown holder" in broke
    if kind == "symlink":
        assert (tmp_path / "elsewhere").read_bytes() == b"not to be touched"
    lock.release()
    assert os.listdir(tmp_path / ".locks") == []


# -- names, options, storage errors ---------------------------------------------------------------------
@pytest.mark.parametrize("name", ["", ".hidden", "a/b", "x" * 65, "café", "a b", "..", "nul\0", None, 7])
def test_bad_names_are_refused_saying_what_is_accepted(tmp_path, lock_dir, name):
    with pytest.raises(ds.ValidationError, match=r"not valid: use 1 to 64 characters among ASCII letters"):
        check_lock_name(name)
    with pytest.raises(ds.ValidationError, match="failover lock name"):
        FileFailoverLock(name, lock_dir, mode="hard", stale_after=1, store_root=tmp_path)
    with pytest.raises(ds.ValidationError, match="failover lock name"):
        MemoryFailoverLock(name, "registry")


@pytest.mark.parametrize("name", ["a", "x" * 64, "primary-0.worker_1", "-", "_x."])
def test_good_names(name):
    assert check_lock_name(name) == name


def test_bad_options_and_timeouts_are_refused(tmp_path, lock_dir, make_lock):
    with pytest.raises(ds.ValidationError, match="mode"):
        FileFailoverLock("a", lock_dir, mode="strong", stale_after=1, store_root=tmp_path)
    for stale in (0, -1, float("inf"), float("nan"), "10"):
        with pytest.raises(ds.ValidationError, match="stale_after"):
            FileFailoverLock("a", lock_dir, mode="soft", stale_after=stale, store_root=tmp_path)
    lock = make_lock()
    for timeout in ("soon", float("nan")):
        with pytest.raises(ds.ValidationError, match="timeout"):
            lock.acquire(timeout)
    with pytest.raises(ds.ValidationError, match="callable"):
        lock.on_lost("not a function")


@pytest.mark.parametrize("scheme", ["file", "memory"])
@pytest.mark.parametrize("stale", [0, -1, float("inf"), float("nan"), "soon", True, "0" * 5000 + "1"])
def test_a_bad_stale_after_of_failover_lock_is_blamed_on_stale_after(tmp_path, scheme, stale):
    """The argument the caller gave is named, not the store option (lock_stale) that sets its
    default (issue 38, point 5); the message says what is accepted."""
    url = f"file://{tmp_path}/store" if scheme == "file" else "memory://stale-after"
    with ds.connect(url) as client:
        with pytest.raises(ds.ValidationError) as caught:
            client.failover_lock("primary", stale_after=stale)
        message = str(caught.value)
        assert message.startswith("failover_lock() stale_after="), message
        assert "lock_stale" not in message
        assert "is not valid: a number of seconds, more than 0" in message
        lock = client.failover_lock("primary", stale_after=" 2.5 ")  # text as the store option takes it
        assert getattr(lock, "stale_after", 2.5) == 2.5


@pytest.mark.parametrize("trouble", ["read-only", "no inodes"])
def test_a_store_that_refuses_the_lock_is_backend_unavailable_and_left_clean(disk, trouble):
    disk.store.mkdir()
    lock_dir = StoreDirectory(disk.store, ".locks")
    lock_dir.open(create=True)
    lock = FileFailoverLock("primary", lock_dir, mode="hard", stale_after=30, store_root=disk.store)
    try:
        if trouble == "read-only":
            disk.read_only(True)
            match = "read-only"
        else:
            disk.fill("inodes")
            match = "full"
        with pytest.raises(ds.BackendUnavailable, match=rf"cannot take the failover lock 'primary'.*{match}"):
            lock.acquire(timeout=WAIT)
        assert os.listdir(disk.store / ".locks") == []
    finally:
        if trouble == "read-only":
            disk.read_only(False)
        lock.close()
        lock_dir.close()


@pytest.mark.parametrize("mode", ["hard", "soft"])
def test_a_held_lock_stays_fresh_on_a_full_disk(disk, mode):
    disk.store.mkdir()
    lock_dir = StoreDirectory(disk.store, ".locks")
    lock_dir.open(create=True)
    lock = FileFailoverLock("primary", lock_dir, mode=mode, stale_after=0.4, store_root=disk.store)
    try:
        assert lock.acquire(0)
        disk.fill("space")
        marker = disk.store / ".locks" / marker_name("primary")
        before = orjson.loads(marker.read_bytes())["refreshes"]
        deadline = time.monotonic() + WAIT
        while orjson.loads(marker.read_bytes())["refreshes"] < before + 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert orjson.loads(marker.read_bytes())["refreshes"] >= before + 2  # rewritten in place: no new block
        assert lock.held
    finally:
        lock.close()
        lock_dir.close()


# -- the memory backend's lock --------------------------------------------------------------------------
def test_memory_locks_exclude_threads_and_time_out():
    key = object()
    first, second = MemoryFailoverLock("primary", key), MemoryFailoverLock("primary", key)
    other_registry = MemoryFailoverLock("primary", object())
    try:
        assert first.acquire(0) and first.held
        assert other_registry.acquire(0)  # another registry: another lock
        started = time.monotonic()
        assert second.acquire(timeout=0.2) is False
        assert 0.2 <= time.monotonic() - started < 2
        outcome = acquire_in_thread(second)
        with pytest.raises(queue.Empty):
            outcome.get(timeout=0.1)
        first.release()
        assert outcome.get(timeout=WAIT)[0] is True
        assert second.held and not first.held
        assert not second.wait_lost(0.05)  # never lost
        waiting = acquire_in_thread(first, timeout=None)
        first.close()  # wakes its own waiter
        assert isinstance(waiting.get(timeout=WAIT), ds.ClientClosed)
    finally:
        for lock in (first, second, other_registry):
            lock.close()


def test_memory_locks_exclude_many_threads():
    key = "registry"
    inside: list[str] = []
    overlaps: list[list[str]] = []

    def work() -> None:
        lock = MemoryFailoverLock("primary", key)
        for _ in range(50):
            with lock:
                inside.append(threading.current_thread().name)
                if len(inside) > 1:
                    overlaps.append(list(inside))
                time.sleep(0.0005)
                inside.remove(threading.current_thread().name)

    threads = [in_thread(f"memory-worker-{i}", work)[0] for i in range(4)]
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads)
    assert overlaps == []
