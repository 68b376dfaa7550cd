"""The file store against hostile and broken contents of a shared directory.

Each test opens a watch on the store's endpoints (a ``Rig``: a holder client with one record, a
watcher client watching), puts something hostile in the store while the watch is open, and
checks that the watch keeps delivering, ``list()`` stays right, the clients' threads live on,
nothing outside the store root is touched, nothing that is not a record is deleted, and
``shutdown()`` returns within a bound.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import resource
import shutil
import stat
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
from discovery_sync.backends.file.names import printable, record_name
from discovery_sync.tools.cli import main as cli_main

import discovery_sync as ds
from discovery_sync.clock import SYSTEM
from testrigs.helpers import assert_quiet, endpoint_spec, initial_state, model_spec, next_event
from tests.file.clocked import Steps
from tests.file.junk import (
    OLD,
    Outside,
    hand_written,
    make_device,
    make_fifo,
    make_file,
    make_huge,
    make_socket,
    our_threads,
    umask,
    within,
)
from tests.file.unprivileged import UnprivilegedClient

TTL = 2.0
RESCAN = 0.2
SWEPT = TTL + 8 * RESCAN  # a sweep has judged every file that stood still meanwhile
SHUTDOWN_BOUND = 5.0
IS_ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not IS_ROOT, reason="needs root (CI runs as root): mknod, chown, mount")


def url(store: Path, **options: object) -> str:
    # every client of these stores uses TTL: hand-written records die after it (docs/design.md §6)
    query = {"ttl": TTL, "rescan_interval": RESCAN, "uniform_ttl": "true", **options}
    return f"file://{store}?" + "&".join(f"{key}={value}" for key, value in query.items())


def shut_down(client: ds.Discovery) -> None:
    within(SHUTDOWN_BOUND, client.shutdown)


class Rig:
    """A holder with one record and a watcher watching every endpoint of the store; with ``steps``,
    both on its manual clock, which :meth:`let_sweeps_run` moves."""

    def __init__(self, store: Path, steps: Steps | None = None, **options: object) -> None:
        self.store = store
        self.steps = steps
        clock = SYSTEM if steps is None else steps.clock
        self.holder = ds.connect(url(store, **options), clock=clock)
        self.watcher = ds.connect(url(store, **options), clock=clock)
        self.kept = self.holder.register(endpoint_spec(endpoint="kept"))
        self.watch = self.watcher.list_and_watch(ds.Query.endpoints())
        assert initial_state(self.watch)[1].instances == (self.kept,)
        self.threads = our_threads()
        self.probes = 0

    def bucket(self, kind: ds.RecordKind = ds.RecordKind.ENDPOINT) -> Path:
        return self.store / kind.bucket

    def assert_working(self, *also_listed: ds.DiscoveryInstance) -> None:
        """The watch delivers a registration and its removal, list() holds exactly the live
        records, and every thread the clients started is alive."""
        self.probes += 1
        probe = self.holder.register(endpoint_spec(endpoint=f"probe{self.probes}"))
        assert next_event(self.watch) == ds.Added(probe)
        assert set(self.watcher.list(ds.Query.endpoints())) == {self.kept, probe, *also_listed}
        self.holder.unregister(probe)
        assert next_event(self.watch) == ds.Removed(probe.id())
        assert [t for t in self.threads if not t.is_alive()] == []

    @contextlib.contextmanager
    def holder_paused(self) -> Iterator[None]:
        """Meanwhile the holder writes nothing back (its API lock is held: fault injection). Its
        rescans would otherwise, now and then, write a replaced record back before the watcher
        has read what replaced it, and the watcher would see nothing happen at all."""
        with self.holder._api_lock:
            yield

    def let_sweeps_run(self) -> None:
        """Let the sweepers judge everything that stands still; the junk produces no event."""
        if self.steps is None:
            assert_quiet(self.watch, SWEPT)
            return
        self.steps.run(SWEPT, step=RESCAN)
        assert_quiet(self.watch, 0)

    def close(self) -> None:
        shut_down(self.watcher)
        shut_down(self.holder)


@pytest.fixture
def rig(store: Path) -> Iterator[Rig]:
    made = Rig(store)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def clocked_rig(store: Path, steps: Steps) -> Iterator[Rig]:
    """``rig``, on the manual clock ``steps`` moves."""
    made = Rig(store, steps)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def outside(tmp_path: Path) -> Outside:
    return Outside(tmp_path / "outside")


def doctor(store: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    """``discovery-sync doctor`` on the store: its exit code and its problems."""
    code = cli_main(["--url", f"file://{store}", "doctor", "-o", "json"])
    report = orjson.loads(capsys.readouterr().out)
    return code, report["problems"]


def mentions(problems: list[str], name: str) -> int:
    return sum(f"/{printable(name)} " in f"{problem} " or f"/{printable(name)}:" in problem for problem in problems)


# -- 1. symlinks below the root ----------------------------------------------------------------


@pytest.mark.parametrize(
    "relative", ["v1", "v1/instances", "v1/mdc", "v1/event_channels", "v1/event_sources", ".locks"]
)
def test_a_symlinked_directory_below_the_root_is_refused(store, outside, capsys, relative):
    link = store / relative
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside.path, target_is_directory=True)
    with pytest.raises(ds.BackendUnavailable, match="is a symlink"):
        ds.connect(url(store))
    code, problems = doctor(store, capsys)
    assert code == 1 and any("is a symlink" in p and relative in p for p in problems)
    outside.assert_untouched()


def test_the_root_itself_may_be_a_symlink_the_user_chose(tmp_path):
    real, link = tmp_path / "real", tmp_path / "link"
    real.mkdir()
    link.symlink_to(real, target_is_directory=True)
    client = ds.connect(url(link))
    try:
        endpoint = client.register(endpoint_spec())
        assert client.list(ds.Query.endpoints()) == [endpoint]
        assert (real / "v1" / "instances" / record_name(endpoint.id())).exists()
    finally:
        shut_down(client)


def test_a_bucket_swapped_for_a_symlink_after_connect_redirects_nothing(store, rig, outside):
    models = rig.watcher.list_and_watch(ds.Query.models())
    initial_state(models)
    bucket = rig.bucket(ds.RecordKind.MODEL)
    os.rename(bucket, bucket.with_name("mdc.moved"))
    bucket.symlink_to(outside.path, target_is_directory=True)
    with pytest.raises(ds.WatchFailed, match="is a symlink"):
        next_event(models, timeout=SWEPT)
    with pytest.raises(ds.BackendUnavailable, match="is a symlink"):
        rig.watcher.list(ds.Query.models())
    with pytest.raises(ds.BackendUnavailable, match="is a symlink"):
        rig.holder.register(model_spec())
    rig.let_sweeps_run()  # the outside files have record names and old mtimes: bait for a sweep
    rig.assert_working()  # the other buckets are not concerned
    outside.assert_untouched()


def test_concurrent_listings_of_one_bucket_each_see_all_of_it(store):
    """Listings share the bucket's descriptor, not its read position (on sshfs a list() racing
    a rescan used to see part of the bucket)."""
    client = ds.connect(url(store, ttl=3600))
    try:
        for index in range(300):
            hand_written(store, f"e{index}", index + 1)
        counts: list[int] = []

        def list_repeatedly() -> None:
            for _ in range(20):
                counts.append(len(client.list(ds.Query.endpoints())))
                client.rescan()

        threads = [threading.Thread(target=list_repeatedly, name=f"test-lister-{i}") for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert counts == [300] * 80
    finally:
        shut_down(client)


# -- 2. only records are deleted ---------------------------------------------------------------


FOREIGN_FILES = {
    "thesis.tex": b"\\documentclass{article}",
    "README": b"notes",  # letters only: could be a record name, is not one
    "ns%2fbackend%2fgenerate%2f5": b"",  # a record name in lower case: not the canonical name
    "ns%2Fbackend%2F%2F5": b"{}",  # decodes to an identity with an empty endpoint
    ".keep-me": b"",
}


def test_only_records_and_leftovers_are_ever_deleted(store, rig, outside, warnings, capsys):
    bucket = rig.bucket()
    dead, dead_path = hand_written(store, "dead", 9)
    assert next_event(rig.watch) == ds.Added(dead)
    os.utime(dead_path, (OLD, OLD))
    make_file(bucket / ".tmp_00000000000000aa", b"{half")
    for name, content in FOREIGN_FILES.items():
        make_file(bucket / name, content or ds.instance_to_json(dead))
    (bucket / "subdir").mkdir()
    make_file(bucket / "subdir" / "ns%2Fbackend%2Fx%2F1", ds.instance_to_json(dead))
    make_fifo(bucket / ".tmp_00000000000000bb")  # a leftover's name, but not a regular file
    (bucket / "ns%2Fbackend%2Flink%2F6").symlink_to(outside.path / "thesis.tex")  # a record name
    os.utime(bucket / "ns%2Fbackend%2Flink%2F6", (OLD, OLD), follow_symlinks=False)

    assert next_event(rig.watch, timeout=SWEPT) == ds.Removed(dead.id())
    rig.let_sweeps_run()
    assert not dead_path.exists() and not (bucket / ".tmp_00000000000000aa").exists()
    for name in [*FOREIGN_FILES, "subdir", ".tmp_00000000000000bb", "ns%2Fbackend%2Flink%2F6"]:
        assert os.path.lexists(bucket / name), name
    assert (bucket / "subdir" / "ns%2Fbackend%2Fx%2F1").exists()
    outside.assert_untouched()
    rig.assert_working()
    for name in ["thesis.tex", ".keep-me", "subdir", ".tmp_00000000000000bb", "ns%2Fbackend%2Flink%2F6"]:
        assert warnings.count(f"ignoring {name} ", 2) == 2, name  # once per client (holder, watcher)
    _, problems = doctor(store, capsys)
    for name in [*FOREIGN_FILES, "subdir", ".tmp_00000000000000bb", "ns%2Fbackend%2Flink%2F6"]:
        assert mentions(problems, name) == 1, (name, problems)


# -- 3. names that are not percent-encoding ----------------------------------------------------


BAD_NAMES = [
    b"x%ZZ",
    b"abc%FF",
    b"%",
    b"ns%2Fbackend%2Fgenerate%2F%",
    b"ns%2F\xff\xfe",
    b"\xff",
    b"ns%2Fbackend%2F%ED%A0%80",
]


def test_names_that_are_not_percent_encoding_cost_one_warning_and_nothing_else(store, clocked_rig, warnings, capsys):
    rig = clocked_rig
    bucket = rig.bucket()
    forged = ds.Endpoint("ns", "backend", "forged", 3, ds.Transport.tcp("127.0.0.1:1"))
    for name in BAD_NAMES:
        make_file(os.fsencode(bucket) + b"/" + name, ds.instance_to_json(forged))
    rig.let_sweeps_run()  # the sweep that used to kill the rescan thread
    rig.let_sweeps_run()
    rig.assert_working()
    assert sorted(os.listdir(os.fsencode(bucket))) == sorted([*BAD_NAMES, os.fsencode(record_name(rig.kept.id()))])
    code, problems = doctor(store, capsys)
    assert code == 1
    for name in BAD_NAMES:
        assert mentions(problems, os.fsdecode(name)) == 1, (name, problems)
    orjson.dumps(rig.watcher.diagnose())  # JSON-ready whatever the names


@pytest.mark.parametrize("text", ["x%ZZ", "abc%FF", "a\udcff", "%E6%97", "\ud800", "%"])
def test_decoding_refuses_every_bad_name_with_a_validation_error(text):
    with pytest.raises(ds.ValidationError):
        ds.id_from_path(ds.RecordKind.EVENT_CHANNEL, f"namespace/ns/topic/{text}/1")
    from discovery_sync.pathcodec import decode

    with pytest.raises(ds.ValidationError):
        decode(text)


# -- 4. FIFOs, sockets, devices ----------------------------------------------------------------


SPECIAL_FILES = {
    "fifo": make_fifo,
    "socket": make_socket,
    "device": pytest.param(make_device, marks=needs_root),
}


@pytest.mark.parametrize("make", SPECIAL_FILES.values(), ids=SPECIAL_FILES.keys())
def test_special_files_anywhere_block_no_thread(store, rig, outside, warnings, capsys, make: Callable[[Path], None]):
    bucket, models = rig.bucket(), rig.bucket(ds.RecordKind.MODEL)
    names = ["ns%2Fbackend%2Fspecial%2F7", ".tmp_00000000000000bb", "special"]
    for name in names:
        make(bucket / name)
        make(models / name)
    # the exact paths of the records the holder is about to register
    make(bucket / f"ns%2Fbackend%2Fnext%2F{rig.holder.instance_id:x}")
    make(models / f"ns%2Fbackend%2Fgenerate%2F{rig.holder.instance_id:x}")
    with pytest.raises(ds.DiscoveryError, match="not a regular file"):
        within(5, lambda: rig.holder.register(endpoint_spec(endpoint="next")))
    with pytest.raises(ds.DiscoveryError, match="not a regular file"):
        within(5, lambda: rig.holder.register(model_spec()))
    # the bucket lock was released: another model registers at once
    within(5, lambda: rig.watcher.register(model_spec(endpoint="other")))
    rig.let_sweeps_run()
    rig.assert_working()
    assert all(os.path.lexists(bucket / name) and os.path.lexists(models / name) for name in names)
    outside.assert_untouched()
    _, problems = doctor(store, capsys)
    assert mentions(problems, "special") == 2  # once per bucket


def test_a_fifo_as_soft_lock_marker_is_broken_once_stale_not_waited_on(store):
    client = ds.connect(url(store, lock="soft", lock_stale=0.5, lock_timeout=5))
    try:
        make_fifo(store / ".locks" / "v1%2Fmdc.lock")
        model = within(5, lambda: client.register(model_spec()))
        assert client.list(ds.Query.models()) == [model]
    finally:
        shut_down(client)


# -- 5. unreadable files ------------------------------------------------------------------------


def test_unreadable_files_are_skipped_with_one_warning(store, tmp_path):
    holder = ds.connect(url(store))
    reader = None
    try:
        kept = holder.register(endpoint_spec(endpoint="kept"))
        reader = UnprivilegedClient(url(store), tmp_path / "reader.log")
        reader.call("watch")
        assert [reader.call("next"), reader.call("next")] == [
            {"type": "Added", "key": kept.id().to_path()},
            {"type": "Resync", "keys": [kept.id().to_path()]},
        ]
        _, path = hand_written(store, "secret", 5, mode=0)  # never readable, not even for an instant
        with touched(path):  # alive: only unreadable
            with pytest.raises(RuntimeError, match="WatchTimeout"):
                reader.call("next", timeout=6 * RESCAN + 1)  # more than the three rescans that used to fail it
            assert reader.call("list") == [kept.id().to_path()]
            probe = holder.register(endpoint_spec(endpoint="probe"))
            assert reader.call("next") == {"type": "Added", "key": probe.id().to_path()}
            report = reader.call("diagnose")
            assert any("secret" in p and "cannot be read" in p for p in report["problems"])
            assert len(reader.call("wait_log", text="skipping the file ns%2Fbackend%2Fsecret")) == 1
    finally:
        if reader is not None:
            reader.close()
        shut_down(holder)


@contextlib.contextmanager
def touched(*paths: Path) -> Iterator[None]:
    """Keep the files' mtimes moving, as a live writer's heartbeat would, for the body of the ``with``."""
    stop = threading.Event()

    def touch() -> None:
        while not stop.wait(TTL / 4):
            for path in paths:
                with contextlib.suppress(FileNotFoundError):
                    os.utime(path)

    toucher = threading.Thread(target=touch, name="test-toucher")
    toucher.start()
    try:
        yield
    finally:
        stop.set()
        toucher.join()


def test_an_io_error_on_one_file_skips_that_file(store, rig, monkeypatch, warnings):
    """EIO cannot be made for one file on demand: injected at the view's open."""
    from discovery_sync.backends.file import view as view_module

    failing_name = "ns%2Fbackend%2Fbroken%2F8"
    original = view_module.read_regular

    def read_regular(dir_fd: int | None, name: str, limit: int) -> tuple[os.stat_result, bytes] | None:
        if name == failing_name:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return original(dir_fd, name, limit)

    monkeypatch.setattr(view_module, "read_regular", read_regular)
    _, path = hand_written(rig.store, "broken", 8)
    with touched(path):
        assert_quiet(rig.watch, 6 * RESCAN + 1)
        rig.assert_working()
    assert warnings.count(f"skipping the file {failing_name}", 2) == 2  # once per client


# -- 6. read-only stores ------------------------------------------------------------------------


@pytest.fixture
def read_only(tmp_path: Path, store: Path) -> Iterator[Path]:
    """The store bind-mounted read-only at another path."""
    view = tmp_path / "read-only"
    view.mkdir()
    setup = ds.connect(url(store))  # the store's directories exist before the mount
    shut_down(setup)
    subprocess.run(["mount", "--bind", str(store), str(view)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(view)], check=True)
        yield view
    finally:
        subprocess.run(["umount", str(view)], check=True)


@pytest.mark.slow
@needs_root
def test_a_read_only_store_serves_readers_and_reports_what_it_cannot_sweep(store, read_only, warnings, capsys):
    holder = ds.connect(url(store, rescan_interval=3600))  # heartbeats, but sweeps nothing in this test
    reader = None
    try:
        kept = holder.register(endpoint_spec(endpoint="kept"))
        dead, dead_path = hand_written(store, "dead", 9)
        os.utime(dead_path, (OLD, OLD))
        reader = ds.connect(url(read_only))
        reader.check_connection()
        with reader.list_and_watch(ds.Query.endpoints()) as watch:
            assert set(initial_state(watch)[1].instances) == {kept, dead}
            assert next_event(watch, timeout=SWEPT) == ds.Removed(dead.id())  # dead, though it stays
            assert reader.list(ds.Query.endpoints()) == [kept]
            probe = holder.register(endpoint_spec(endpoint="probe"))
            assert next_event(watch) == ds.Added(probe)
            assert_quiet(watch, 6 * RESCAN)  # failed deletions are no scan errors
        assert dead_path.exists()
        assert warnings.count("ns%2Fbackend%2Fdead%2F9 has had no heartbeat", 1) == 1
        garbage = reader.collect_garbage()
        assert list(garbage) == []
        assert garbage.not_removed == {"v1/instances/ns/backend/dead/9": "cannot delete it: Read-only file system"}
        with pytest.raises(ds.BackendUnavailable, match="Read-only file system"):
            reader.register(endpoint_spec(endpoint="mine"))
        assert any("cannot write" in p for p in reader.diagnose()["problems"])
        assert cli_main(["--url", url(read_only), "gc", "-o", "json"]) == 1
        assert '"not_removed":"v1/instances/ns/backend/dead/9"' in capsys.readouterr().out
    finally:
        if reader is not None:
            shut_down(reader)
        shut_down(holder)


# -- 7. huge files ------------------------------------------------------------------------------


def test_huge_files_are_never_read(store, rig, warnings):
    bucket = rig.bucket()
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    for name in ["ns%2Fbackend%2Fhuge%2Fa", ".tmp_00000000000000cc", "huge.bin"]:
        make_huge(bucket / name)
    rig.let_sweeps_run()
    rig.assert_working()
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before < 128 * 1024
    assert warnings.count("ns%2Fbackend%2Fhuge%2Fa in", 2) == 2  # too large: once per client
    assert not (bucket / "ns%2Fbackend%2Fhuge%2Fa").exists()  # a dead record all the same
    assert not (bucket / ".tmp_00000000000000cc").exists()  # a dead leftover
    assert (bucket / "huge.bin").exists()  # foreign


def test_records_larger_than_max_record_bytes_are_refused_at_registration(store):
    client = ds.connect(url(store, max_record_bytes=2048))
    try:
        with pytest.raises(ds.ValidationError, match="max_record_bytes=2048"):
            client.register(model_spec(notes="x" * 4096))
        assert client.list(ds.Query.models()) == []
        client.register(model_spec(notes="x" * 1024))
    finally:
        shut_down(client)


@pytest.mark.parametrize("value", ["abc", "0", "-1", "1.5", "1023"])
def test_max_record_bytes_is_validated(store, value):
    with pytest.raises(ds.ValidationError, match="max_record_bytes"):
        ds.connect(url(store, max_record_bytes=value))


# -- 8. identity bound to the file name --------------------------------------------------------


def test_records_under_a_name_that_is_not_their_own_are_never_published(store, rig, warnings):
    bucket = rig.bucket()
    own = bucket / record_name(rig.kept.id())
    copy = bucket / f"ns%2Fbackend%2Fkept%2F{rig.kept.instance_id ^ 1:x}"  # a record name of another id
    shutil.copy(own, copy)
    forged = dataclasses.replace(rig.kept, transport=ds.Transport.tcp("10.6.6.6:1"))
    shadow = bucket / "ns%2Fbackend%2Fshadow%2F1"  # planted to shadow the kept record
    shadow.write_bytes(ds.instance_to_json(forged))
    model_in_wrong_bucket = bucket / f"ns%2Fbackend%2Fgenerate%2F{rig.kept.instance_id:x}"
    model_in_wrong_bucket.write_bytes(ds.instance_to_json(ds.Model("ns", "backend", "generate", 1, {})))
    with touched(copy, shadow):  # kept alive, as copies a live writer touches
        assert_quiet(rig.watch, 6 * RESCAN + 1)  # no second Added, no forged value
        assert warnings.count(f"skipping the file {copy.name}", 2) == 2  # once per client
        assert warnings.count(f"skipping the file {shadow.name}", 2) == 2
        copy.unlink()
        shadow.unlink()
        assert_quiet(rig.watch, 6 * RESCAN)  # no Removed for a record that is still stored
    rig.assert_working()


# -- 9. short TTLs repair lost notifications -----------------------------------------------------


def test_a_lost_change_is_delivered_within_the_grace_and_three_rescans_at_short_ttls(store, steps):
    writer = ds.connect(f"file://{store}?ttl=2", clock=steps.clock)  # heartbeats every 0.67 s
    # a polling observer that never polls: every change is lost, only rescans find it
    watcher = ds.connect(
        f"file://{store}?ttl=2&observer=polling&poll_interval=3600&rescan_interval=0.5", clock=steps.clock
    )
    # the polling observer's grace (3 polls, at most 3 s) from the end of the rescan that found it,
    # which came within a rescan of the change, then the rescan that finds it due and the next; slack
    grace = 3.0
    bound = 3 * 0.5 + grace + 2.0

    def found(watch: ds.Watch) -> ds.DiscoveryEvent:
        changed_at = steps.clock.monotonic()
        event, at = steps.until_event(watch, step=0.1, limit=bound)
        assert grace <= at - changed_at <= bound  # of the clock
        return event

    try:
        with watcher.list_and_watch(ds.Query.models()) as watch:
            assert next_event(watch) == ds.Resync(())
            model = writer.register(model_spec())
            assert found(watch) == ds.Added(model)
            assert next_event(watch) == ds.Resync((model,))
            writer.update_model_taints(model.id(), ["drain"])
            assert found(watch) == ds.ModelTaintsUpdated(model.id(), ("drain",))
    finally:
        shut_down(watcher)
        shut_down(writer)


# -- 10. ownership and modes ----------------------------------------------------------------------


def test_what_a_client_creates_has_its_documented_modes_whatever_the_umask(tmp_path):
    store = tmp_path / "store"
    with umask(0o077):
        client = ds.connect(url(store))
        try:
            endpoint = client.register(endpoint_spec())
            record = store / "v1" / "instances" / record_name(endpoint.id())
            assert stat.S_IMODE(os.stat(record).st_mode) == 0o644
        finally:
            shut_down(client)
    for relative in ["", "v1", "v1/instances", "v1/mdc", "v1/event_channels", "v1/event_sources", ".locks"]:
        assert stat.S_IMODE(os.stat(store / relative).st_mode) == 0o755, relative


def test_below_a_deliberately_shared_root_new_directories_keep_its_mode(tmp_path, warnings):
    store = tmp_path / "shared"
    store.mkdir()
    os.chmod(store, 0o3777)  # world-writable with the sticky bit (and setgid), as /tmp
    client = ds.connect(url(store))
    shut_down(client)
    for relative in ["v1", "v1/instances", ".locks"]:
        assert stat.S_IMODE(os.stat(store / relative).st_mode) == 0o3777, relative
    assert warnings.matching("not safe") == []


UNSAFE = {
    "world-writable": (0o777, None, "world-writable without the sticky bit"),
    "group-writable": (0o775, None, "group-writable without the sticky bit"),
    "another owner": (0o755, 65534, "is owned by"),
}


@pytest.mark.parametrize(("mode", "owner", "expected"), UNSAFE.values(), ids=UNSAFE.keys())
def test_a_store_other_users_can_change_is_warned_about_or_refused(tmp_path, warnings, capsys, mode, owner, expected):
    if owner is not None and not IS_ROOT:
        pytest.skip("chown needs root (CI runs as root)")
    store = tmp_path / "store"
    store.mkdir()
    os.chmod(store, mode)
    if owner is not None:
        os.chown(store, owner, owner)
    client = ds.connect(url(store))
    shut_down(client)
    assert len(warnings.matching(expected)) == 1
    assert "add, replace or delete" in warnings.matching(expected)[0]
    code, problems = doctor(store, capsys)
    assert code == 1 and any(expected in p for p in problems)
    with pytest.raises(ds.BackendUnavailable, match=expected):
        ds.connect(url(store, permissions="refuse"))


def test_an_owner_writes_back_its_record_when_another_writer_replaced_it(store, rig, warnings):
    own = rig.bucket() / record_name(rig.kept.id())
    forged = dataclasses.replace(rig.kept, transport=ds.Transport.tcp("10.6.6.6:1"))
    planted = rig.bucket() / "planted"
    planted.write_bytes(ds.instance_to_json(forged))
    with rig.holder_paused():
        os.rename(planted, own)  # as a user who can write to the bucket would
        assert next_event(rig.watch) == ds.Added(forged)  # readers see it until the owner notices
    assert next_event(rig.watch, timeout=3 * RESCAN + 2) == ds.Added(rig.kept)
    assert own.read_bytes() == ds.instance_to_json(rig.kept)
    assert len(warnings.wait_for("replaced by another writer")) == 1  # logged right after the write
    rig.assert_working()


@pytest.mark.parametrize("make", [make_fifo, lambda path: path.symlink_to("/etc/hostname")], ids=["fifo", "symlink"])
def test_an_owner_writes_back_its_record_when_junk_took_its_place(store, rig, warnings, make):
    own = rig.bucket() / record_name(rig.kept.id())
    planted = rig.bucket() / "planted"
    make(planted)
    with rig.holder_paused():
        os.rename(planted, own)
        assert next_event(rig.watch) == ds.Removed(rig.kept.id())  # readers see it gone until the owner notices
    assert next_event(rig.watch, timeout=3 * RESCAN + 2) == ds.Added(rig.kept)
    assert own.read_bytes() == ds.instance_to_json(rig.kept) and own.is_file() and not own.is_symlink()
    assert warnings.count("replaced by another writer", 1) == 1
    rig.assert_working()


@needs_root
def test_an_owner_that_cannot_write_its_record_back_says_so(tmp_path):
    """In a sticky bucket owned by another user, that user can replace a record; its owner,
    without the privilege to replace another user's file there, says it cannot write it back."""
    store = tmp_path / "store"
    shut_down(ds.connect(url(store)))
    bucket = store / "v1" / "instances"
    os.chmod(bucket, 0o1777)
    os.chown(bucket, 65534, 65534)
    holder = UnprivilegedClient(url(store), tmp_path / "holder.log")
    try:
        key = holder.call("register", endpoint="kept")
        own = bucket / key.replace("/", "%2F")
        stored = ds.instance_from_json(own.read_bytes())
        forged = dataclasses.replace(stored, transport=ds.Transport.tcp("10.6.6.6:1"))
        planted = bucket / "planted"
        planted.write_bytes(ds.instance_to_json(forged))
        os.chown(planted, 65534, 65534)
        os.rename(planted, own)
        messages = holder.call("wait_log", text="cannot be written back", timeout=10)
        assert len(messages) == 1 and "uid 65534" in messages[0]
        assert own.read_bytes() == ds.instance_to_json(forged)
    finally:
        holder.close()
