"""The file store's failover lock: a marker file in ``root/.locks/`` kept fresh by its holder.

:class:`FileFailoverLock` implements :class:`discovery_sync.failover.FailoverLock` with the
store's soft-lock markers (:mod:`.softlock`): the lock ``name`` is held by whoever made the
marker ``root/.locks/failover.{name}.lock`` (never in a bucket). A marker is written whole to a
file of the acquisition's own and hard-linked to its name (``link(2)`` fails on an existing
name, atomically on local, NFS and SFTP filesystems), so at most one holder makes it; it names
its holder (host, pid, time, a token unique to the acquisition) and is 256 bytes long.

Keeping it. The holder's thread (``discovery-sync-failover-lock``) rewrites the marker every
``stale_after / 4`` seconds, *in place*: it checks that the name still holds its own marker and
overwrites its bytes (a refresh counter moves). A refresh never creates a name, so a holder that
wakes up late can never overwrite the marker of the waiter that broke its own: its write lands
in the file it held, which is no longer the lock. Being in place, a refresh also works on a full
disk.

Waiters poll the marker every 20 to 50 ms (a marker on another host gives no notice) and break it
(rename it aside, check that it is what they judged, delete it; :func:`.softlock.set_aside`),
with a warning naming the holder, when:

- its bytes have not changed for ``stale_after`` seconds of the waiter's own monotonic clock (a
  dead, frozen or stalled holder; clocks of other hosts are never compared). An empty or
  unreadable marker, a FIFO or a symlink, as other tools leave, counts as an unknown holder and
  is broken the same way; nothing planted there blocks a thread.
- ``hard`` mode only (local filesystems): the holder's process is gone. A hard holder keeps
  ``flock(LOCK_EX)`` on its marker's file for as long as it holds the lock, taken on the file
  before it is linked into place (refreshes keep the same file), and its marker says so along
  with the kernel (boot id) and device it was taken on. A waiter on the same kernel that can
  ``flock(LOCK_EX | LOCK_NB)`` the file still named by the marker knows that no process holds
  it: the kernel dropped the lock when its holder died (kill -9 included), so the marker is
  broken at once, without waiting ``stale_after``.

``soft`` mode (network filesystems: NFS, SFTP/sshfs, where flock is not shared between hosts or
not at all) never takes nor trusts flock: a dead holder's marker is broken once stale only, and a
hard waiter trusts only markers whose flock was taken on its own kernel and device.

Losing it. A holder frozen (SIGSTOP, a paused VM, a hung mount) for ``stale_after`` may be
broken by a waiter. When its next refresh finds that the name no longer holds its marker (broken,
or removed), or when no refresh succeeded for ``stale_after`` (waiters may have broken it), the
lock is lost: :attr:`held` turns False, :meth:`wait_lost` returns True, the refresher stops, the
``on_lost`` callbacks run once on its thread, a warning is logged, and :meth:`release` removes
nothing. A release that finds the marker is not its own anymore leaves it too: the marker is
renamed aside and checked before it is deleted, and put back if it changed hands.

Errors: an acquisition the store refuses (a full disk, a read-only filesystem, ...) is a
BackendUnavailable from :func:`.oserrors.storage_error` and leaves nothing behind; a failed
release is logged (waiters break the marker once stale, or at once in hard mode, the flock being
dropped); a failed refresh is logged and retried.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import logging
import math
import os
import secrets
import threading
from collections.abc import Callable
from pathlib import Path
from stat import S_ISREG

import orjson

from discovery_sync.clock import SYSTEM, Clock
from discovery_sync.errors import ClientClosed, DiscoveryError, ValidationError
from discovery_sync.failover import LOCK_THREAD, FailoverLock
from discovery_sync.retry import Retry
from discovery_sync.threads import log_retry, start_thread

from .directory import StoreDirectory
from .oserrors import storage_error
from .softlock import (
    MARKER_SIZE,
    MAX_REFUSALS,
    _own_file,
    _read,
    _token_of,
    _where,
    describe_holder,
    marker_bytes,
    overwrite_marker,
    set_aside,
)
from .wire import stat_entry

log = logging.getLogger("discovery_sync.backends.file")

MODES = ("hard", "soft")
POLL_START, POLL_MAX = 0.02, 0.05  # seconds between a waiter's attempts: 20 ms, growing to 50 ms
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY
_NOT_A_FILE = (errno.ELOOP, errno.ENXIO, errno.ENODEV, errno.EOPNOTSUPP, errno.ENOTDIR, errno.EISDIR)


def marker_name(name: str) -> str:
    """The file name of the marker of the failover lock ``name`` (in the store's lock directory)."""
    return f"failover.{name}.lock"


@functools.cache
def kernel_id() -> str | None:
    """This kernel's boot id (shortened), shared by every process and container it runs; None
    when it cannot be read (then no marker claims a flock, and none is trusted)."""
    try:
        text = BOOT_ID.read_text(encoding="ascii").strip().replace("-", "")
    except (OSError, UnicodeDecodeError):
        return None
    return text[:16] or None


def _flock_claim(content: bytes | None) -> str | None:
    """The ``flock`` field of a marker: ``{kernel}:{device}`` of a holder that keeps a flock on it."""
    try:
        claim = orjson.loads(content or b"").get("flock")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return claim if isinstance(claim, str) else None


class _Hold:
    """One acquisition: its token, the marker's file (``ident``: device and inode; ``fd``: a
    descriptor holding flock on it, hard mode), the thread refreshing it."""

    def __init__(self, token: str, acquired: float, fd: int | None, ident: tuple[int, int], extra: dict[str, str]):
        self.token = token
        self.acquired = acquired
        self.fd = fd
        self.ident = ident
        self.extra = extra
        self.refreshes = 0
        self.generation = 0
        self.stop = threading.Event()
        self.wake = threading.Event()  # ends the refresher's wait (set after ``stop``)
        self.io = threading.Lock()  # one store operation at a time: a refresh, or the release
        self.lost = False
        self.thread: threading.Thread | None = None

    def close_fd(self) -> None:
        """Drop the flock (after the marker is gone or no longer this file)."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class _Seen:
    """A waiter's view of the marker: its bytes, and since when (monotonic) they have not changed."""

    def __init__(self) -> None:
        self.content: bytes | None = None
        self.since = 0.0

    def unchanged_for(self, content: bytes, now: float) -> float:
        if content != self.content:
            self.content, self.since = content, now
        return now - self.since

    def forget(self) -> None:
        self.content = None


class FileFailoverLock(FailoverLock):
    """The failover lock ``name`` of a file store (see the module docstring for how it works).

    :param lock_dir: the store's lock directory ``root/.locks``, open (the lock works through its
        descriptor: a lock directory swapped for a symlink redirects nothing).
    :param mode: ``hard`` (a local filesystem: a holder killed by any signal frees the lock at
        once, through flock) or ``soft`` (a network filesystem: flock is not trusted, a dead
        holder's marker is broken after ``stale_after`` only).
    :param stale_after: seconds (of a waiter's clock) an unchanged marker is respected; the
        holder refreshes it every quarter of that. A holder frozen for longer may lose the lock.
    :param store_root: the store's root, for messages.
    :param clock: the clock of the acquisition timeout, of the waiters' polls and staleness, of the
        refresher's interval and of the acquisition time written in the marker.

    The contract is :class:`discovery_sync.failover.FailoverLock`'s.
    """

    def __init__(
        self,
        name: str,
        lock_dir: StoreDirectory,
        *,
        mode: str,
        stale_after: float,
        store_root: Path,
        clock: Clock = SYSTEM,
    ) -> None:
        super().__init__(name, clock=clock)
        if mode not in MODES:
            raise ValidationError(f"failover lock mode {mode!r} is not valid: use one of {', '.join(MODES)}")
        if isinstance(stale_after, bool) or not isinstance(stale_after, int | float) or not 0 < stale_after < math.inf:
            raise ValidationError(
                f"failover lock stale_after {stale_after!r} is not valid: use a positive, finite number of seconds"
            )
        self.mode = mode
        self.stale_after = float(stale_after)
        self.store_root = Path(store_root)
        self._lock_dir = lock_dir
        self._marker = lock_dir.path / marker_name(self.name)
        self._hold: _Hold | None = None
        self._hold_lock = threading.Lock()
        self._wake = threading.Event()  # ends the wait of _take between polls (set by close())

    @property
    def marker(self) -> Path:
        """The marker's path (for people: the lock works through the lock directory's descriptor)."""
        return self._marker

    # -- acquiring -------------------------------------------------------------------------------------
    def _take(self, deadline: float | None) -> bool:
        token = secrets.token_hex(16)
        seen = _Seen()
        timeout = None if deadline is None else deadline - self._clock.monotonic()
        retry = Retry(POLL_START, POLL_MAX, factor=1.5, jitter=0, timeout=timeout, clock=self._clock, wake=self._wake)
        refused = 0
        while True:
            if self._closing.is_set():
                raise ClientClosed(f"the failover lock {self.name!r} was closed")
            try:
                with self._lock_dir.use() as dir_fd:
                    hold, again = self._attempt(dir_fd, token, seen)
            except PermissionError as exc:
                # sshfs answers a lost O_EXCL race with EPERM, and the winner may have released the
                # lock before we look: a refusal is taken for a permission problem only when it repeats
                refused += 1
                if refused >= MAX_REFUSALS:
                    raise self._storage_error(exc, "cannot take") from exc
                continue
            except OSError as exc:
                raise self._storage_error(exc, "cannot take") from exc
            refused = 0
            if hold is not None:
                with self._hold_lock:
                    self._hold = hold
                return True
            if again:
                continue
            if retry.expired:
                return False
            retry.wait()  # polling: a marker on another host gives no notice; close() ends it

    def _wake_waiters(self) -> None:
        self._wake.set()  # after _closing, which _take checks once woken

    def _attempt(self, dir_fd: int, token: str, seen: _Seen) -> tuple[_Hold | None, bool]:
        """One attempt: the hold when the lock was taken; else whether to try again at once (a
        marker was just broken)."""
        content = _read(self._marker, dir_fd)
        if content is None:
            hold = self._create(dir_fd, token)
            if hold is not None:
                return hold, False
            content = _read(self._marker, dir_fd)
            if content is None:
                return None, False
        if _token_of(content) == token:  # our link was made but its reply lost (NFS): ours
            return self._adopt(dir_fd, token, content), False
        if self.mode == "hard" and self._trusted_claim(content):
            dead = self._dead_holder(dir_fd)
            if dead is not None:
                fd, held_by = dead
                try:
                    ident = os.fstat(fd)
                    broken = self._break(
                        dir_fd,
                        lambda aside: _same_file(stat_entry(dir_fd, _where(aside, dir_fd)), ident),
                        held_by,
                        "its process is gone (the flock it kept on the marker was dropped by the kernel)",
                    )
                finally:
                    os.close(fd)
                if broken:
                    seen.forget()
                    return None, True
        if seen.unchanged_for(content, self._clock.monotonic()) >= self.stale_after:
            self._break(
                dir_fd,
                lambda aside: _read(aside, dir_fd) == content,
                content,
                f"its marker did not change for {self.stale_after:g} s (a dead, frozen or stalled holder)",
            )
            seen.forget()
            return None, True
        return None, False

    def _create(self, dir_fd: int, token: str) -> _Hold | None:
        """Link a complete marker into place: its hold, or None when a marker exists. In hard mode
        the marker's file is flocked before it is linked. Leaves nothing behind when it fails."""
        own = _own_file(self._marker, dir_fd, f"{token}-{secrets.token_hex(4)}")  # new each attempt
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(own, flags, 0o644, dir_fd=dir_fd)
        keep = False
        try:
            try:
                status = os.fstat(fd)
                extra = self._lock_file(fd, status.st_dev)
                acquired = self._clock.time()
                content = marker_bytes(token, 0, acquired, extra)
                written = 0
                while written < len(content):
                    written += os.pwrite(fd, content[written:], written)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(own, dir_fd=dir_fd)
                raise
            try:
                os.link(own, _where(self._marker, dir_fd), src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
            except FileExistsError:
                return None
            except PermissionError:
                if stat_entry(dir_fd, _where(self._marker, dir_fd)) is not None:
                    return None  # sshfs can answer a lost create race with EPERM instead of EEXIST
                raise
            finally:
                # a failure here must not undo a link made: the file of our own is then a mere leftover
                with contextlib.suppress(OSError):
                    os.unlink(own, dir_fd=dir_fd)
            keep = bool(extra)
            return _Hold(token, acquired, fd if keep else None, (status.st_dev, status.st_ino), extra)
        finally:
            if not keep:
                os.close(fd)

    def _lock_file(self, fd: int, device: int) -> dict[str, str]:
        """Hard mode: flock the marker's file ``fd`` and return the marker's claim of it (empty:
        no flock, in soft mode, or where flock or the kernel's id is not available)."""
        kernel = kernel_id()
        if self.mode != "hard" or kernel is None:
            return {}
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a file of our own: nobody else holds it
        except OSError as exc:
            log.debug("no flock on the failover lock %s (%s): waiters judge it by staleness only", self._marker, exc)
            return {}
        return {"flock": f"{kernel}:{device}"}

    def _adopt(self, dir_fd: int, token: str, content: bytes) -> _Hold | None:
        """The marker is ours although the link seemed to fail (a retransmitted link answered
        EEXIST): hold it as made (hard mode: flock it again), or None when that cannot be done."""
        try:
            acquired = float(orjson.loads(content)["acquired"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            acquired = self._clock.time()
        flags = os.O_RDWR | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY
        try:
            fd = os.open(_where(self._marker, dir_fd), flags, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno in _NOT_A_FILE:
                return None
            raise
        keep = False
        try:
            status = os.fstat(fd)
            if not S_ISREG(status.st_mode) or _token_of(os.pread(fd, 4 * MARKER_SIZE, 0)) != token:
                return None
            claim = _flock_claim(content)
            if claim is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    return None  # it is judged like any marker: by staleness
                keep = True
            extra = {"flock": claim} if claim is not None else {}
            return _Hold(token, acquired, fd if keep else None, (status.st_dev, status.st_ino), extra)
        finally:
            if not keep:
                os.close(fd)

    def _trusted_claim(self, content: bytes) -> bool:
        """Whether the marker says its holder keeps a flock on it on this kernel."""
        claim = _flock_claim(content)
        kernel = kernel_id()
        return claim is not None and kernel is not None and claim.partition(":")[0] == kernel

    def _dead_holder(self, dir_fd: int) -> tuple[int, bytes] | None:
        """Hard mode: a descriptor holding flock on the file the marker names, and its content,
        when no process holds the flock its marker claims (its holder is gone); else None."""
        try:
            fd = os.open(_where(self._marker, dir_fd), _READ_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno in _NOT_A_FILE:
                return None
            raise
        found = False
        try:
            status = os.fstat(fd)
            if not S_ISREG(status.st_mode):
                return None
            content = os.pread(fd, 4 * MARKER_SIZE, 0)
            if _flock_claim(content) != f"{kernel_id()}:{status.st_dev}":
                return None  # not claimed, or on another device: the flock says nothing here
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return None  # held (EWOULDBLOCK): the holder lives; or flock is unavailable here
            # the flock is free: the file's holder is gone, or replaced the file by another since
            # we opened it (a release unlinks the marker before it drops the flock)
            if not _same_file(stat_entry(dir_fd, _where(self._marker, dir_fd)), status):
                return None
            found = True
            return fd, content
        finally:
            if not found:
                os.close(fd)

    def _break(self, dir_fd: int, judged: Callable[[Path], bool], holder: bytes, why: str) -> bool:
        if not set_aside(self._marker, dir_fd, judged, "failover lock"):
            return False
        log.warning(
            "broke the failover lock %r (%s) held by %s: %s", self.name, self._marker, describe_holder(holder), why
        )
        return True

    # -- keeping ---------------------------------------------------------------------------------------
    def _keep(self, generation: int) -> None:
        with self._hold_lock:
            hold = self._hold
            if hold is None or hold.stop.is_set():
                return  # released already
            hold.generation = generation
            hold.thread = start_thread(
                LOCK_THREAD, lambda: self._refresh_loop(hold), lambda exc: self._died(hold), start=False
            )
            self._clock.enroll(hold.thread)  # it waits only through the clock between refreshes
            hold.thread.start()

    def _refresh_loop(self, hold: _Hold) -> None:
        interval = self.stale_after / 4
        last_refresh = self._clock.monotonic()
        lost: str | None = None
        while lost is None:
            self._clock.wait(hold.wake, interval)
            hold.wake.clear()  # _give_back sets it after stop, which is checked next
            if hold.stop.is_set():
                break
            with hold.io:
                if hold.stop.is_set():
                    return
                try:
                    with self._lock_dir.use() as dir_fd:
                        lost = self._refresh(dir_fd, hold)
                except (OSError, DiscoveryError) as exc:
                    error = self._storage_error(exc, "cannot refresh") if isinstance(exc, OSError) else exc
                    failing = self._clock.monotonic() - last_refresh
                    if failing < self.stale_after:
                        log_retry(f"refreshing the failover lock {self.name!r}", error, interval)
                        continue
                    lost = (
                        f"it was not refreshed for {failing:.1f} s, more than the stale bound of "
                        f"{self.stale_after:g} s ({error}): waiters may have broken it"
                    )
                if lost is None:
                    last_refresh = self._clock.monotonic()
                    continue
                hold.lost = True
                hold.close_fd()
        if lost is not None:
            log.warning("lost the failover lock %r (%s): %s", self.name, self._marker, lost)
            self._declare_lost(hold.generation)

    def _refresh(self, dir_fd: int, hold: _Hold) -> str | None:
        """Rewrite the held marker in place; None when done, else why the lock is lost."""
        hold.refreshes += 1
        content = marker_bytes(hold.token, hold.refreshes, hold.acquired, hold.extra)
        name = _where(self._marker, dir_fd)
        if hold.fd is not None:  # hard: the name must still hold the file we keep flocked
            if not _same_file(stat_entry(dir_fd, name), hold.ident):
                return self._why_lost(dir_fd)
            if _token_of(os.pread(hold.fd, 4 * MARKER_SIZE, 0)) != hold.token:
                return self._why_lost(dir_fd)
            written = 0
            while written < len(content):
                written += os.pwrite(hold.fd, content[written:], written)
            return None
        try:
            if overwrite_marker(self._marker, dir_fd, hold.token, content):
                return None
        except FileNotFoundError:
            pass
        except OSError as exc:
            if exc.errno not in _NOT_A_FILE:
                raise
        return self._why_lost(dir_fd)

    def _why_lost(self, dir_fd: int) -> str:
        content = _read(self._marker, dir_fd)
        if content is None:
            return "its marker was removed (by a waiter breaking it, or by another tool)"
        return (
            f"its marker was broken and replaced: the lock is held by {describe_holder(content)} (this process "
            f"did not refresh it for {self.stale_after:g} s: it was frozen or stalled)"
        )

    def _died(self, hold: _Hold) -> None:
        # the refresher crashed (logged by the thread wrapper): the marker is no longer kept fresh,
        # so waiters will break it; say the lock is lost rather than let the holder believe otherwise
        with hold.io:
            hold.lost = True
            hold.close_fd()
        log.warning("lost the failover lock %r (%s): its refresher thread died", self.name, self._marker)
        self._declare_lost(hold.generation)

    # -- releasing -------------------------------------------------------------------------------------
    def _give_back(self) -> None:
        with self._hold_lock:
            hold, self._hold = self._hold, None
        if hold is None:
            return
        hold.stop.set()
        hold.wake.set()
        with hold.io:  # after a refresh under way
            if not hold.lost:
                try:
                    with self._lock_dir.use() as dir_fd:
                        self._remove(dir_fd, hold)
                except (OSError, DiscoveryError) as exc:
                    error = self._storage_error(exc, "cannot remove") if isinstance(exc, OSError) else exc
                    log.error(
                        "%s on release; waiters take the lock over once it is stale (%g s)", error, self.stale_after
                    )
            hold.close_fd()  # after the removal: a waiter that gets the flock finds the marker gone
        thread = hold.thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(5)

    def _remove(self, dir_fd: int, hold: _Hold) -> None:
        def ours(marker: Path) -> bool:
            if hold.fd is not None and not _same_file(stat_entry(dir_fd, _where(marker, dir_fd)), hold.ident):
                return False
            return _token_of(_read(marker, dir_fd)) == hold.token

        if ours(self._marker) and set_aside(self._marker, dir_fd, ours, "failover lock", "released"):
            return
        content = _read(self._marker, dir_fd)
        log.warning(
            "the failover lock %r (%s) was not this process's any more at its release (%s): left as it is",
            self.name,
            self._marker,
            f"held by {describe_holder(content)}" if content is not None else "its marker is gone",
        )

    def _storage_error(self, exc: OSError, doing: str) -> DiscoveryError:
        return storage_error(
            exc, f"{doing} the failover lock {self.name!r} of the store {self.store_root} ({self._marker})"
        )


def _same_file(status: os.stat_result | None, ident: os.stat_result | tuple[int, int]) -> bool:
    """Whether ``status`` (None: missing) is the file ``ident`` (a stat, or device and inode)."""
    if status is None:
        return False
    if isinstance(ident, os.stat_result):
        ident = (ident.st_dev, ident.st_ino)
    return (status.st_dev, status.st_ino) == ident
