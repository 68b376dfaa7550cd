"""One directory mounted twice through sshfs over a loopback-only sshd: two "hosts" of a shared
network filesystem on one machine (docs/design.md §9).

``SshfsRig`` makes a temporary directory holding a fresh host key, a client key pair, an
``authorized_keys`` and a minimal ``sshd_config``; starts ``/usr/sbin/sshd -D -e`` on a free port of
127.0.0.1; and mounts the export directory twice:

* ``mount_a``: caches off (``dir_cache=no,attr_timeout=0,entry_timeout=0``, about NFS ``noac``);
* ``mount_b``: sshfs defaults (its caches keep attributes and listings for up to 20 s, about NFS
  ``actimeo``).

``close()`` always unmounts both mounts, stops sshd and every process of the rig, removes the
temporary directory, and checks ``/proc/self/mounts``; it is safe after a failed or partial
``start()`` and may be called any number of times.

Debian packages: ``sshfs`` (brings ``fuse3`` and ``openssh-client``) and ``openssh-server``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from testrigs.net import free_port

SSHD = "/usr/sbin/sshd"
DEBIAN_PACKAGES = ("sshfs", "openssh-server")
CACHE_OFF = "dir_cache=no,attr_timeout=0,entry_timeout=0"


def missing_tools() -> list[str]:
    """What this machine lacks to run the rig (empty when it can)."""
    missing = [tool for tool in ("sshfs", "ssh", "ssh-keygen") if shutil.which(tool) is None]
    if not os.access(SSHD, os.X_OK):
        missing.append(SSHD)
    if shutil.which("fusermount3") is None and shutil.which("fusermount") is None:
        missing.append("fusermount3")
    if not os.path.exists("/dev/fuse"):
        missing.append("/dev/fuse")
    return missing


def _unescape(field: str) -> str:
    """A /proc/self/mounts field: spaces, tabs, newlines and backslashes are octal escapes."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def sshfs_mounts() -> list[tuple[str, str]]:
    """(source, mount point) of every ``fuse.sshfs`` mount in /proc/self/mounts."""
    found = []
    with open("/proc/self/mounts") as mounts:
        for line in mounts:
            fields = line.split()
            if len(fields) >= 3 and fields[2] == "fuse.sshfs":
                found.append((_unescape(fields[0]), _unescape(fields[1])))
    return found


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not: PID 1 here may never reap the re-parented)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            state = stat.read().rpartition(")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def _processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every process."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                ppid = int(stat.read().rpartition(")")[2].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                command = cmdline.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue
        table[int(entry)] = (ppid, command)
    return table


def _list_then_set(directory: Path, done: threading.Event) -> None:
    os.listdir(directory)
    done.set()


class SshfsRigError(RuntimeError):
    pass


class SshfsRig:
    """``start()``/``close()`` or ``with SshfsRig() as rig:``; then ``rig.export_dir`` is the
    directory on the "server", ``rig.mount_a`` and ``rig.mount_b`` its two sshfs mounts."""

    def __init__(self, start_timeout: float = 20.0) -> None:
        self.start_timeout = start_timeout
        self.dir: Path | None = None
        self.port: int | None = None
        self.sshd: subprocess.Popen[bytes] | None = None
        self._server_pids: set[int] = set()  # the sshd listener and its per-connection children
        self._closed = False

    # -- paths (valid once start() has made the directory) -------------------------------------
    @property
    def export_dir(self) -> Path:
        return self._path("export")

    @property
    def mount_a(self) -> Path:
        return self._path("mnt-a")

    @property
    def mount_b(self) -> Path:
        return self._path("mnt-b")

    @property
    def client_key(self) -> Path:
        return self._path("client_key")

    def _path(self, name: str) -> Path:
        if self.dir is None:
            raise SshfsRigError("the rig is not started")
        return self.dir / name

    # -- start ----------------------------------------------------------------------------------
    def __enter__(self) -> SshfsRig:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self) -> None:
        if self.dir is not None or self._closed:
            raise SshfsRigError("a rig starts once")
        missing = missing_tools()
        if missing:
            raise SshfsRigError(
                f"sshfs rig needs Debian packages {' and '.join(DEBIAN_PACKAGES)} "
                f"(apt-get install -y {' '.join(DEBIAN_PACKAGES)}); missing: {', '.join(missing)}"
            )
        self.dir = Path(tempfile.mkdtemp(prefix="netfs-sshfs-")).resolve()
        try:
            deadline = time.monotonic() + self.start_timeout
            self._make_keys()
            self._start_sshd(deadline)
            self.export_dir.mkdir()
            self._mount(self.mount_a, CACHE_OFF, deadline)
            self._mount(self.mount_b, None, deadline)
        except BaseException:
            with contextlib.suppress(Exception):
                self.close()
            raise

    def _run(self, command: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=max(timeout, 1.0)
        )

    def _make_keys(self) -> None:
        assert self.dir is not None
        for key in (self.dir / "host_key", self.client_key):
            result = self._run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "netfs-rig", "-f", str(key)], 30)
            if result.returncode != 0:
                raise SshfsRigError(f"ssh-keygen failed: {result.stderr.strip()}")
        shutil.copyfile(f"{self.client_key}.pub", self.dir / "authorized_keys")

    def _write_sshd_config(self) -> Path:
        assert self.dir is not None and self.port is not None
        config = self.dir / "sshd_config"
        config.write_text(
            "\n".join(
                [
                    f"ListenAddress 127.0.0.1:{self.port}",
                    f"PidFile {self.dir / 'sshd.pid'}",
                    f"HostKey {self.dir / 'host_key'}",
                    f"AuthorizedKeysFile {self.dir / 'authorized_keys'}",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "PermitRootLogin prohibit-password",
                    "StrictModes no",
                    "UsePAM no",
                    "X11Forwarding no",
                    "AllowTcpForwarding no",
                    "Subsystem sftp internal-sftp",
                    "LogLevel INFO",
                    "",
                ]
            )
        )
        return config

    def _start_sshd(self, deadline: float) -> None:
        assert self.dir is not None
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation directory
        for _ in range(3):  # the free port may be taken between free_port() and sshd's bind
            self.port = free_port()
            config = self._write_sshd_config()
            with open(self.dir / "sshd.log", "ab") as log:
                self.sshd = subprocess.Popen(
                    [SSHD, "-D", "-e", "-f", str(config)], stdin=subprocess.DEVNULL, stdout=log, stderr=log
                )
            self._server_pids.add(self.sshd.pid)
            if self._wait_for_banner(deadline):
                return
            if self.sshd.poll() is None:
                break  # running but not answering: no point in another port
            self.sshd = None
        raise SshfsRigError(f"sshd did not start on 127.0.0.1:{self.port}: {self._log_tail('sshd.log')}")

    def _wait_for_banner(self, deadline: float) -> bool:
        assert self.sshd is not None and self.port is not None
        while time.monotonic() < deadline:
            if self.sshd.poll() is not None:
                return False
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                    if sock.recv(64).startswith(b"SSH-"):
                        return True
            except OSError:
                pass
            time.sleep(0.02)  # polling the port of a starting server
        return False

    def _mount(self, mount_point: Path, cache_options: str | None, deadline: float) -> None:
        assert self.dir is not None
        mount_point.mkdir()
        options = [
            f"IdentityFile={self.client_key}",
            "IdentitiesOnly=yes",
            "StrictHostKeyChecking=no",
            "UserKnownHostsFile=/dev/null",
            "BatchMode=yes",
            "LogLevel=ERROR",
            "ConnectTimeout=10",
            f"port={self.port}",
        ]
        if cache_options:
            options.append(cache_options)
        command = ["sshfs", f"root@127.0.0.1:{self.export_dir}", str(mount_point), "-o", ",".join(options)]
        # sshfs daemonizes once mounted, but its ssh child keeps the stderr it was given: a file,
        # never a pipe (reading a pipe to its end would wait for the ssh connection to close)
        with open(self.dir / f"{mount_point.name}.log", "ab") as log:
            try:
                result = subprocess.run(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    timeout=max(deadline - time.monotonic(), 1.0),
                )
            except subprocess.TimeoutExpired as exc:
                raise SshfsRigError(
                    f"sshfs {mount_point.name} timed out: {self._log_tail(mount_point.name + '.log')}"
                ) from exc
        if result.returncode != 0 or not self._mounted(mount_point):
            raise SshfsRigError(
                f"sshfs {mount_point.name} failed ({result.returncode}): {self._log_tail(mount_point.name + '.log')}"
            )

    def _log_tail(self, name: str) -> str:
        assert self.dir is not None
        try:
            return (self.dir / name).read_text(errors="replace")[-2000:].strip()
        except OSError:
            return "(no log)"

    # -- state ----------------------------------------------------------------------------------
    def mounts(self) -> list[tuple[str, str]]:
        """The ``fuse.sshfs`` mounts of this rig still in /proc/self/mounts."""
        if self.dir is None:
            return []
        prefix = str(self.dir) + os.sep
        return [(src, point) for src, point in sshfs_mounts() if point.startswith(prefix) or prefix in src + os.sep]

    def _mounted(self, mount_point: Path) -> bool:
        return any(point == str(mount_point) for _, point in self.mounts())

    def processes(self) -> list[int]:
        """Live processes of this rig: sshd (listener and connection children), sshfs and its ssh."""
        if self.dir is None:
            return []
        table = _processes()
        mine = {pid for pid, (_, command) in table.items() if str(self.dir) in command}
        # a noted sshd pid counts while it is still an sshd (not a reused pid)
        mine |= {pid for pid in self._server_pids if pid in table and "sshd" in table[pid][1]}
        changed = True
        while changed:  # and their descendants (sshd's connection children re-exec as "sshd: root@notty")
            more = {pid for pid, (ppid, _) in table.items() if ppid in mine} - mine
            changed = bool(more)
            mine |= more
        self._server_pids |= {pid for pid in mine if "sshd" in table[pid][1]}
        mine.discard(os.getpid())
        return sorted(pid for pid in mine if _alive(pid))

    def server_sessions(self) -> list[int]:
        """The sshd processes serving the mounts' connections (their SFTP servers: internal-sftp
        runs inside them); not the listener."""
        table = _processes()
        listener = self.sshd.pid if self.sshd is not None else None
        return [pid for pid in self.processes() if pid != listener and "sshd" in table.get(pid, (0, ""))[1]]

    def session_of_mount_a(self) -> int:
        """The sshd session that serves mount A (caches off: every call on it needs the server),
        found by freezing each session in turn until a listing of mount A waits for one."""
        for pid in self.server_sessions():
            listed = threading.Event()
            os.kill(pid, signal.SIGSTOP)
            try:
                threading.Thread(target=_list_then_set, args=(self.mount_a, listed), daemon=True).start()
                if not listed.wait(1.0):
                    return pid
            finally:
                os.kill(pid, signal.SIGCONT)
        raise SshfsRigError("no sshd session serves mount A")

    @contextlib.contextmanager
    def frozen(self, *, first: int | None = None, stagger: float = 0.0) -> Iterator[list[int]]:
        """The file server stops answering (SIGSTOP of every session serving the mounts) while the
        block runs, as a hung NFS server or a stalled link would: every call on the mounts that
        needs the server waits meanwhile. Then it answers again (SIGCONT): session ``first``
        first, the others ``stagger`` seconds later (connections recover one by one)."""
        sessions = self.server_sessions()
        if not sessions:
            raise SshfsRigError("no sshd session serves the mounts: nothing to freeze")
        for pid in sessions:
            os.kill(pid, signal.SIGSTOP)
        try:
            yield sessions
        finally:
            ordered = sorted(sessions, key=lambda pid: pid != first)
            for index, pid in enumerate(ordered):
                if index == 1 and stagger:
                    time.sleep(stagger)  # the fault itself: the other connections answer later
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)

    # -- close ----------------------------------------------------------------------------------
    def close(self, timeout: float = 10.0) -> None:
        """Unmount both mounts, stop sshd and every process of the rig, remove the temporary
        directory. Always does all of it, whatever state the rig is in; idempotent. Raises
        ``SshfsRigError`` if a mount or process of the rig is left after all that."""
        self._closed = True
        if self.dir is None:
            return
        problems: list[str] = []
        self.processes()  # note sshd's connection children while the listener is their parent
        lazy = False  # a lazily detached mount keeps its sshfs running while it is busy
        for mount_point in (self.mount_a, self.mount_b):
            try:
                lazy |= self._unmount(mount_point, timeout)
            except Exception as exc:
                problems.append(f"unmount {mount_point}: {exc!r}")
        try:
            self._stop_processes(timeout, grace=not lazy)
        except Exception as exc:
            problems.append(f"stop processes: {exc!r}")
        left_mounts = self.mounts()
        left_processes = self.processes()
        if left_mounts:
            problems.append(f"mounts left: {left_mounts}")
        if left_processes:
            problems.append(f"processes left: {left_processes}")
        if not left_mounts and self.dir.exists():
            # only with nothing mounted inside: rmtree must not walk into a mount's files
            shutil.rmtree(self.dir, ignore_errors=True)
        if problems:
            raise SshfsRigError("; ".join(problems))

    def _unmount(self, mount_point: Path, timeout: float) -> bool:
        """Unmount, by force if need be; True if only a lazy unmount got it off."""
        commands = [[tool, "-u", str(mount_point)] for tool in ("fusermount3", "fusermount") if shutil.which(tool)]
        commands.append(["umount", "-l", str(mount_point)])  # lazy: detaches even while busy
        if not self._mounted(mount_point):
            return False
        errors = []
        for command in commands:
            try:
                result = self._run(command, timeout)
            except (OSError, subprocess.TimeoutExpired) as exc:
                errors.append(f"{command[0]}: {exc!r}")
                continue
            if not self._mounted(mount_point):
                return command[0] == "umount"
            errors.append(f"{command[0]}: {result.stderr.strip() or f'exit {result.returncode}'}")
        raise SshfsRigError("; ".join(errors))

    def _stop_processes(self, timeout: float, grace: bool = True) -> None:
        deadline = time.monotonic() + timeout
        # an unmounted sshfs ends by itself, and its ssh with it: a moment for that, then signals
        grace_end = time.monotonic() + (min(timeout / 4, 3.0) if grace else 0.0)
        while time.monotonic() < grace_end and any(pid not in self._server_pids for pid in self.processes()):
            time.sleep(0.02)  # polling process exit
        for sig, share in ((signal.SIGTERM, 0.5), (signal.SIGKILL, 1.0)):
            for pid in self.processes():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
            stop_at = time.monotonic() + max((deadline - time.monotonic()) * share, 1.0)
            if self.sshd is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.sshd.wait(max(stop_at - time.monotonic(), 0.1))  # reaps our child
            while time.monotonic() < stop_at and self.processes():
                time.sleep(0.02)  # polling process exit
            if not self.processes():
                break
        if self.sshd is not None and self.sshd.poll() is not None:
            self.sshd = None
