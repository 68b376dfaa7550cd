"""``discovery-sync top``: a read-only client watches the chosen records and shows its own metrics
(:meth:`discovery_sync.Discovery.metrics`) every ``--interval`` seconds.

On a terminal the screen is redrawn; piped, each round is a block of plain lines (a table),
separated by a blank line; ``-o json``/``yaml``: one document per round, the metrics mapping
itself (a histogram's buckets keyed by their upper bound, ``+Inf`` last). ``--count N`` stops
after N rounds; Ctrl-C ends it (exit 130, as every command).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import discovery_sync as ds
from discovery_sync.metrics import METRICS, DurationFigures, Metric, Metrics, samples
from discovery_sync.validation import printable

from .output import Printer
from .progress import is_terminal
from .store import open_store, query, store_name

CLEAR_SCREEN = "\x1b[H\x1b[2J"


def cmd_top(args: argparse.Namespace) -> int:
    printer = Printer(args.output)
    watched = query(args, args.kind)
    redraw = printer.tabular and is_terminal(printer.stream)
    with (
        open_store(args, read_only=True, announce=not redraw) as client,
        client.list_and_watch(watched) as watch,
    ):
        title = f"metrics of a client watching {watched.kind_name} in {store_name(args.url)}"
        _initial_state(watch, args.timeout)
        rounds = 0
        while True:
            if rounds:
                _take_events(watch, time.monotonic() + args.interval)
            figures = client.metrics()
            if printer.tabular:
                _draw(printer, figures, title, interval=args.interval, redraw=redraw)
            else:
                printer.document(plain(figures))
            rounds += 1
            if args.count is not None and rounds >= args.count:
                return 0


def _initial_state(watch: ds.Watch, timeout: float) -> None:
    """Take the watch's initial events, up to its first Resync (at most ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        try:
            if isinstance(watch.get(timeout=left), ds.Resync):
                return
        except ds.WatchTimeout:
            return


def _take_events(watch: ds.Watch, deadline: float) -> None:
    """Consume the watch's events until ``deadline`` (what the metrics count); none are shown."""
    while (left := deadline - time.monotonic()) > 0:
        try:
            watch.get(timeout=left)
        except ds.WatchTimeout:
            return


def _draw(printer: Printer, figures: Metrics, title: str, *, interval: float, redraw: bool) -> None:
    about = f"{figures['backend']} backend, worker_id {figures['worker_id'] or 'none yet'}"
    heading = f"{title} ({about}) at {time.strftime('%H:%M:%S')}, every {interval:g} s"
    if redraw:
        heading += " (Ctrl-C to stop)"
    rows = [[metric.key.replace("_", " "), value_text(metric, figures)] for metric in METRICS]
    lines = [printable(heading), "", *printer.table_lines(["METRIC", "VALUE"], rows)]
    printer.write((CLEAR_SCREEN if redraw else "") + "".join(line + "\n" for line in lines) + ("" if redraw else "\n"))


def value_text(metric: Metric, figures: Metrics) -> str:
    """One metric's value on one line: a number, ``label=value`` pairs, or a histogram's summary."""
    if metric.key == "state":
        return figures["state"]
    found = list(samples(metric, figures))
    if not found:
        return "-"
    if not metric.labels:
        return _number(found[0][1])
    return ", ".join(f"{'/'.join(labels)}={_number(value)}" for labels, value in found)


def _number(value: Any) -> str:
    if isinstance(value, dict):  # a histogram
        return _durations(value)  # type: ignore[arg-type]
    return f"{value:g}" if isinstance(value, float) else str(value)


def _durations(figures: DurationFigures) -> str:
    count = figures["count"]
    if not count:
        return "0"
    mean = figures["sum"] / count
    return f"{count} (mean {_seconds(mean)}, max {_seconds(figures['max'])})"


def _seconds(value: float) -> str:
    return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"


def plain(figures: Metrics) -> dict[str, Any]:
    """``figures`` as a JSON- and YAML-ready mapping: each histogram's buckets as ``{bound: count}``."""
    data: dict[str, Any] = dict(figures)
    if figures["heartbeat"] is not None:
        data["heartbeat"] = _plain_durations(figures["heartbeat"])
    data["rescans"] = {scan: _plain_durations(d) for scan, d in figures["rescans"].items()}
    return data


def _plain_durations(figures: DurationFigures) -> dict[str, Any]:
    buckets = {("+Inf" if bound == float("inf") else f"{bound:g}"): count for bound, count in figures["buckets"]}
    return {**figures, "buckets": buckets}
