"""What each ``discovery-sync`` command does; each returns its exit status (errors: see cli.run)."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import discovery_sync as ds
from discovery_sync.validation import printable

from . import lookup
from .manifests import MANIFESTS, manifest_documents, manifest_texts
from .output import Printer, record_document, store_key
from .progress import ProgressBar, is_terminal, waiting
from .spec_files import load_specs
from .store import environment_store, open_store, queries, query, store_name

CLEAR_SCREEN = "\x1b[H\x1b[2J"
PROBLEM_EXIT = 1  # doctor found problems, get found nothing, gc left dead records behind


def _say(text: str) -> None:
    """A remark for the person at the terminal (stderr), never mixed into the data on stdout."""
    print(text, file=sys.stderr, flush=True)


def cmd_list(args: argparse.Namespace) -> int:
    printer = Printer(args.output)
    found: list[ds.DiscoveryInstance] = []
    wanted = queries(args)  # bad filters are reported before any connection is made
    with open_store(args, read_only=True) as client:
        for each in wanted:
            with waiting(f"listing {each.kind_name}"):
                instances = client.list(each)
            if printer.tabular:
                found += instances
            else:  # documents go out as each kind arrives
                printer.records(instances)
    if printer.tabular:
        if found:
            printer.records(found)
        else:
            _say(f"no records found in {store_name(args.url)}")
    return 0


def cmd_get(args: argparse.Namespace) -> int:
    target = lookup.wanted(args.key, args.kind)  # a bad key is reported before any connection is made
    printer = Printer(args.output)
    with open_store(args, read_only=True) as client, waiting(f"looking for {printable(target.text)}"):
        found = lookup.find(client, target)
    if not found:
        _say(f"discovery-sync: {target.miss(store_name(args.url))}")
        return PROBLEM_EXIT
    if len(found) > 1:
        raise ds.ValidationError(target.ambiguous(found))
    printer.records(found)
    return 0


def cmd_watch(args: argparse.Namespace) -> int:
    printer = Printer(args.output)
    watched = query(args, args.kind)
    if args.live:
        return _watch_live(args, printer, watched)
    header = printer.tabular and is_terminal(sys.stderr)  # it names the store: no other line needed
    with (
        open_store(args, read_only=True, announce=not header) as client,
        _StateLines(client, printer.state),
        client.list_and_watch(watched) as watch,
    ):
        if header:
            _say(f"watching {watched.kind_name} in {store_name(args.url)}; Ctrl-C to stop")
        for count, event in enumerate(watch.events(idle_timeout=args.idle_timeout), start=1):  # Ctrl-C: cli.run
            printer.event(event)
            if args.count is not None and count >= args.count:
                break
    return 0


class _StateLines:
    """While a watch runs, show each change of the client's connection state (SUSPENDED, LOST,
    RECONNECTED, with the reason) with ``show``, called from the client's state thread; and the
    state the client is in already when it is not CONNECTED (a listener is not told of earlier
    changes). Not the CLOSED of the command's own shutdown: it stops showing first."""

    def __init__(self, client: ds.Discovery, show: Callable[[ds.StateChange], None]) -> None:
        self._client, self._show = client, show
        self._lock = threading.Lock()
        self._showing = True

    def __enter__(self) -> _StateLines:
        self._client.add_state_listener(self)
        state = self._client.state
        if state is not ds.ConnectionState.CONNECTED:
            self(ds.StateChange(state, state, f"the client was {state} when the watch began"))
        return self

    def __call__(self, change: ds.StateChange) -> None:
        with self._lock:
            if not self._showing:
                return
            try:
                self._show(change)
            except OSError:  # stdout was closed (watch | head -1): the command's next write ends it
                self._showing = False

    def __exit__(self, *exc_info: object) -> None:
        with self._lock:
            self._showing = False
        with contextlib.suppress(ds.DiscoveryError):
            self._client.remove_state_listener(self)


def _watch_live(args: argparse.Namespace, printer: Printer, watched: ds.Query) -> int:
    """Redraw the records of a live view on every change (documents when not a table); a change
    of the connection state is a line (or document) of its own, or in the redrawn table's heading."""
    redraw = printer.tabular and is_terminal(printer.stream)  # the title names the store
    with open_store(args, read_only=True, announce=not redraw) as client:
        live = _LiveTable(printer, redraw=redraw, title=f"{watched.kind_name} in {store_name(args.url)}")
        with _StateLines(client, live.state), client.live_view(watched, key=lambda i: i.id()) as view:
            live.view = view
            shown = 0
            while True:
                version = live.draw()
                shown += 1
                if args.count is not None and shown >= args.count:
                    return 0
                try:
                    view.wait_changed(version, timeout=args.idle_timeout)
                except ds.WatchTimeout:
                    return 0


class _LiveTable:
    """What ``watch --live`` shows: the records of ``view`` (set once it is open), redrawn in
    place (``redraw``) or printed one after the other; and the connection state."""

    def __init__(self, printer: Printer, *, redraw: bool, title: str) -> None:
        self.printer, self.redraw, self.title = printer, redraw, title
        self.view: ds.LiveView[Any, ds.DiscoveryInstance] | None = None
        self.heading_state = ""  # the last state change, for the redrawn table's heading

    def state(self, change: ds.StateChange) -> None:
        """Called from the client's state thread: redraw with the state in the heading, or show it."""
        if not self.redraw:
            self.printer.state(change)
            return
        with self.printer.lock:
            self.heading_state = f"connection {change.state.value.upper()} at {time.strftime('%H:%M:%S')}: "
            self.heading_state += change.reason
            if self.view is not None:
                self.draw()

    def draw(self) -> int:
        """Draw the records (under the printer's lock: the state thread draws too); their version."""
        assert self.view is not None
        with self.printer.lock:
            version = self.view.version
            instances = sorted(self.view.snapshot().values(), key=lambda i: store_key(i.id()))
            if not self.printer.tabular:
                self.printer.document({"version": version, "instances": [record_document(i) for i in instances]})
                return version
            count = len(instances)
            heading = f"{self.title} at {time.strftime('%H:%M:%S')}: {count} record{'' if count == 1 else 's'}"
            lines = [heading + (" (Ctrl-C to stop)" if self.redraw else "")]
            lines += [self.heading_state] if self.heading_state else []
            lines = [printable(line) for line in lines] + [""]
            if instances:
                lines += self.printer.table_lines(self.printer.record_headers(), self.printer.record_rows(instances))
            end = "" if self.redraw else "\n"
            self.printer.write((CLEAR_SCREEN if self.redraw else "") + "".join(f"{line}\n" for line in lines) + end)
            return version


class _Stop:
    """Set by SIGINT or SIGTERM once installed (before saying "press Ctrl-C"); remembers which."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signal = 0
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: object) -> None:
        self.signal = signum
        self.event.set()


def cmd_register(args: argparse.Namespace) -> int:
    specs = load_specs(args.spec)
    printer = Printer(args.output)
    with open_store(args, read_only=False, must_exist=False) as client:
        registered = []
        for spec in specs:
            with waiting("registering"):
                instance = client.register(spec)
            registered.append(instance)
            if not printer.tabular:
                printer.records([instance])
        if printer.tabular:
            printer.records(registered)
        stop = _Stop() if args.hold else None
        if stop is not None:
            _say("holding the registration; press Ctrl-C to remove it")
            stop.event.wait()
    if stop is not None and stop.signal == signal.SIGINT:
        raise KeyboardInterrupt  # the records are removed: exit 130 as for any Ctrl-C (SIGTERM: 0)
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    printer = Printer(args.output)
    try:
        client = open_store(args, read_only=True, announce=not printer.tabular, must_exist=False)  # says so itself
    except ds.BackendUnavailable as exc:  # a store no client may use (a symlinked bucket, say) is a finding too
        report: dict[str, Any] = {"url": store_name(args.url), "problems": [str(exc)]}
    else:
        with client, waiting("checking the store"):
            report = client.diagnose()
    problems = report.get("problems") or []
    if printer.tabular:
        where, source = (args.url, None) if args.url is not None else environment_store()
        printer.lines(doctor_lines(report, where, source))
    else:
        printer.document(report)
        for problem in problems:
            _say(f"problem: {problem}")
    return PROBLEM_EXIT if problems else 0


# the parts of a report that are not findings of their own
_REPORT_PLUMBING = {"backend", "instance_id", "problems", "url", "buckets"}
# findings a backend reports also when the store cannot be used (the Kubernetes permissions may say why)
_CHECKED_EVEN_UNREACHED = {"permissions"}


def doctor_lines(report: Mapping[str, Any], store: str, source: str | None = None) -> list[str]:
    """The human form of a diagnose() report: one line per check, ``ok`` or ``PROBLEM``, then what
    to do. The first names the store, and ``source``: the variables it came from."""
    problems: list[str] = list(report.get("problems") or [])
    backend = report.get("backend")
    about = [f"{backend} backend"] if backend else []
    about += [source] if source else []
    lines = [f"store    {store}" + (f" ({', '.join(about)})" if about else "")]
    reached = backend is not None and not (problems and set(report) <= _REPORT_PLUMBING | _CHECKED_EVEN_UNREACHED)
    lines.append("ok       the store answers" if reached else "PROBLEM  the store cannot be used (see below)")
    settings = {k: v for k, v in report.items() if k not in _REPORT_PLUMBING and not isinstance(v, (dict, list))}
    if settings:
        lines.append("info     " + ", ".join(f"{k}={v}" for k, v in settings.items()))
    for name, details in report.items():
        if isinstance(details, dict) and name not in _REPORT_PLUMBING and isinstance(details.get("meaning"), str):
            lines.append(f"info     {name}: {details['meaning']}")
    for bucket, counts in (report.get("buckets") or {}).items():
        if not isinstance(counts, dict):
            continue
        records = counts.get("records", 0)
        others = {k: v for k, v in counts.items() if k != "records" and v}
        text = f"{bucket}: {records} record{'' if records == 1 else 's'}"
        if others:  # what they mean and what to do is in the problems below, or is gc's job
            text += ", " + ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in others.items())
            if others.get("not_touched_within_ttl"):
                text += " (their owners may be dead: 'discovery-sync gc' removes such records)"
        lines.append(f"{'info' if others else 'ok':<7}  {text}")
    lines += [f"PROBLEM  {problem}" for problem in problems]
    if problems:
        count = len(problems)
        lines.append(
            f"{count} problem{'' if count == 1 else 's'}: see above for what to do; -o json for the full report"
        )
    else:
        lines.append("no problems found")
    return lines


def cmd_gc(args: argparse.Namespace) -> int:
    printer = Printer(args.output)
    action = "would remove" if args.dry_run else "removed"
    bar = ProgressBar("waiting for the heartbeats of dead owners to lapse")
    with open_store(args, read_only=args.dry_run) as client, bar:
        garbage = client.collect_garbage(dry_run=args.dry_run, progress=bar)
    not_removed = garbage.not_removed
    if printer.tabular:
        rows = [[action, key] for key in garbage] + [["not removed", k, r] for k, r in not_removed.items()]
        if rows:
            headers = ["RESULT", "KEY"] + (["REASON"] if not_removed else [])
            printer.table(headers, [row + [""] * (len(headers) - len(row)) for row in rows])
        else:
            _say("no records of dead owners found")
    else:
        label = "would_remove" if args.dry_run else "removed"
        for key in garbage:
            printer.document({label: key})
        for key, reason in not_removed.items():
            printer.document({"not_removed": key, "reason": reason})
    return PROBLEM_EXIT if not_removed else 0


def cmd_manifests(args: argparse.Namespace) -> int:
    """The manifests as the package ships them (YAML, comments included), or -o json: one JSON
    line per Kubernetes object (kubectl apply -f - takes either)."""
    names = [name for name in MANIFESTS if getattr(args, name)] or list(MANIFESTS)
    if args.output == "json":
        printer = Printer("json")
        for document in manifest_documents(names):
            printer.document(document)
        return 0
    texts = [text if text.endswith("\n") else text + "\n" for text in manifest_texts(names)]
    sys.stdout.write("---\n".join(texts))
    sys.stdout.flush()
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(args.url)


# ``bench`` options that moved to a benchmark of the repository checkout (they need its test rigs)
MOVED_BENCHMARKS = {"etcd": "benchmarks.etcd", "interop": "benchmarks.interop"}


def cmd_bench(args: argparse.Namespace) -> int:
    for option, module in MOVED_BENCHMARKS.items():
        if getattr(args, option):
            _say(
                f"discovery-sync: error: bench --{option} needs the test rigs of a repository checkout: "
                f"run `python -m {module}` from the repository root"
            )
            return 2
    from .bench import run_bench

    Printer("json").document(run_bench(args))
    return 0
