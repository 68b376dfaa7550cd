"""What each ``discovery-sync`` command does; each returns its exit status (errors: see cli.run)."""

from __future__ import annotations

import argparse
import importlib.resources
import signal
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

import discovery_sync as ds

from .output import Printer, store_key
from .progress import ProgressBar, waiting
from .spec_files import load_specs
from .store import open_store, parse_key, queries, query, store_name

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
    identity = parse_key(args.key, args.kind)
    printer = Printer(args.output)
    with open_store(args, read_only=True) as client, waiting(f"reading {store_key(identity)}"):
        instance = client.get(identity)
    if instance is None:
        _say(f"discovery-sync: no record {store_key(identity)} in {store_name(args.url)}")
        return PROBLEM_EXIT
    printer.records([instance])
    return 0


def cmd_watch(args: argparse.Namespace) -> int:
    printer = Printer(args.output)
    watched = query(args, args.kind)
    if args.live:
        return _watch_live(args, printer, watched)
    with open_store(args, read_only=True) as client, client.list_and_watch(watched) as watch:
        if printer.tabular and sys.stderr.isatty():
            _say(f"watching {watched.kind_name} in {store_name(args.url)}; Ctrl-C to stop")
        for count, event in enumerate(watch.events(idle_timeout=args.idle_timeout), start=1):  # Ctrl-C: cli.run
            printer.event(event)
            if args.count is not None and count >= args.count:
                break
    return 0


def _watch_live(args: argparse.Namespace, printer: Printer, watched: ds.Query) -> int:
    """Redraw the records of a live view on every change (documents when not a table)."""
    redraw = printer.tabular and printer.stream.isatty()
    with open_store(args, read_only=True) as client, client.live_view(watched, key=lambda i: i.id()) as view:
        shown = 0
        while True:
            version = view.version
            instances = sorted(view.snapshot().values(), key=lambda i: store_key(i.id()))
            _draw(printer, instances, version, redraw=redraw, title=f"{watched.kind_name} in {store_name(args.url)}")
            shown += 1
            if args.count is not None and shown >= args.count:
                return 0
            try:
                view.wait_changed(version, timeout=args.idle_timeout)
            except ds.WatchTimeout:
                return 0


def _draw(printer: Printer, instances: list[ds.DiscoveryInstance], version: int, *, redraw: bool, title: str) -> None:
    if not printer.tabular:
        printer.document({"version": version, "instances": [i.to_dict() for i in instances]})
        return
    count = len(instances)
    heading = f"{title} at {time.strftime('%H:%M:%S')}: {count} record{'' if count == 1 else 's'}"
    if redraw:
        heading += " (Ctrl-C to stop)"
    lines = [heading, ""]
    if instances:
        lines += printer.table_lines(printer.record_headers(), printer.record_rows(instances))
    printer.write((CLEAR_SCREEN if redraw else "") + "".join(line + "\n" for line in lines) + ("" if redraw else "\n"))


def _stop_on_signal() -> threading.Event:
    """An event set by SIGINT or SIGTERM from now on (installed before saying "press Ctrl-C")."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def cmd_register(args: argparse.Namespace) -> int:
    specs = load_specs(args.spec)
    printer = Printer(args.output)
    with open_store(args, read_only=False) as client:
        registered = []
        for spec in specs:
            with waiting("registering"):
                instance = client.register(spec)
            registered.append(instance)
            if not printer.tabular:
                printer.records([instance])
        if printer.tabular:
            printer.records(registered)
        if args.hold:
            stop = _stop_on_signal()
            _say("holding the registration; press Ctrl-C to remove it")
            stop.wait()
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    printer = Printer(args.output)
    try:
        client = open_store(args, read_only=True)
    except ds.BackendUnavailable as exc:  # a store no client may use (a symlinked bucket, say) is a finding too
        report: dict[str, Any] = {"url": store_name(args.url), "problems": [str(exc)]}
    else:
        with client, waiting("checking the store"):
            report = client.diagnose()
    problems = report.get("problems") or []
    if printer.tabular:
        printer.lines(doctor_lines(report, store_name(args.url)))
    else:
        printer.document(report)
        for problem in problems:
            _say(f"problem: {problem}")
    return PROBLEM_EXIT if problems else 0


# the parts of a report that are not findings of their own
_REPORT_PLUMBING = {"backend", "instance_id", "problems", "url", "buckets"}


def doctor_lines(report: Mapping[str, Any], store: str) -> list[str]:
    """The human form of a diagnose() report: one line per check, ``ok`` or ``PROBLEM``, then what to do."""
    problems: list[str] = list(report.get("problems") or [])
    backend = report.get("backend")
    lines = [f"store    {store}" + (f" ({backend} backend)" if backend else "")]
    reached = backend is not None and not (problems and set(report) <= _REPORT_PLUMBING)
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


MANIFESTS = {"crd": "crd.yaml", "rbac": "rbac.yaml"}


def manifest_texts(names: list[str]) -> list[str]:
    """The texts of the named manifests (``crd``, ``rbac``), as the package ships them."""
    # discovery_sync.backends, not .kube: reading a file must not import the Kubernetes client
    folder = importlib.resources.files("discovery_sync.backends").joinpath("kube", "manifests")
    return [folder.joinpath(MANIFESTS[name]).read_text(encoding="utf-8") for name in names]


def cmd_manifests(args: argparse.Namespace) -> int:
    names = [name for name in MANIFESTS if getattr(args, name)] or list(MANIFESTS)
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
