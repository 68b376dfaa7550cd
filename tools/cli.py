"""The ``discovery-sync`` command: list, watch, register, doctor, gc, demo, bench."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

import orjson

import discovery_sync as ds


def _print_json(data: Any) -> None:
    sys.stdout.write(orjson.dumps(data).decode() + "\n")
    sys.stdout.flush()


def _query(args: argparse.Namespace) -> ds.Query:
    data: dict[str, Any] = {"kind": args.kind}
    for field in ("namespace", "component", "endpoint", "topic"):
        if getattr(args, field, None) is not None:
            data[field] = getattr(args, field)
    if args.scope is not None:
        data["scope"] = orjson.loads(args.scope)
    return ds.Query.from_dict(data)


def _wait_for_signal() -> None:
    """Block until SIGINT or SIGTERM."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()


def cmd_list(args: argparse.Namespace) -> int:
    with ds.connect(args.url) as client:
        for instance in client.list(_query(args)):
            _print_json(instance.to_dict())
    return 0


def cmd_watch(args: argparse.Namespace) -> int:
    with ds.connect(args.url) as client, client.list_and_watch(_query(args)) as watch:
        count = 0
        try:
            for event in watch.events(idle_timeout=args.idle_timeout):
                _print_json(event.to_dict())
                count += 1
                if args.count is not None and count >= args.count:
                    break
        except KeyboardInterrupt:
            pass
    return 0


def cmd_register(args: argparse.Namespace) -> int:
    source = sys.stdin.buffer.read() if args.spec == "-" else open(args.spec, "rb").read()  # noqa: SIM115
    try:
        data = orjson.loads(source)
    except orjson.JSONDecodeError as exc:
        raise ds.ValidationError(f"the spec is not valid JSON: {exc}") from None
    specs = [ds.spec_from_dict(item) for item in (data if isinstance(data, list) else [data])]
    with ds.connect(args.url) as client:
        for spec in specs:
            _print_json(client.register(spec).to_dict())
        if args.hold:
            print("holding the registration; press Ctrl-C to remove it", file=sys.stderr)
            _wait_for_signal()
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    try:
        client = ds.connect(args.url)
    except ds.BackendUnavailable as exc:  # a store no client may use (a symlinked bucket, say) is a finding too
        report: dict[str, Any] = {"url": args.url or ds.default_url(), "problems": [str(exc)]}
    else:
        with client:
            report = client.diagnose()
    _print_json(report)
    for problem in report.get("problems", []):
        print(f"problem: {problem}", file=sys.stderr)
    return 1 if report.get("problems") else 0


def cmd_gc(args: argparse.Namespace) -> int:
    with ds.connect(args.url) as client:
        garbage = client.collect_garbage()
    for removed in garbage:
        _print_json({"removed": removed})
    for key, reason in garbage.not_removed.items():
        _print_json({"not_removed": key, "reason": reason})
    return 1 if garbage.not_removed else 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(args.url)


def cmd_bench(args: argparse.Namespace) -> int:
    from .bench import run_bench

    _print_json(run_bench(args))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="discovery-sync", description=__doc__)
    parser.add_argument("--url", help="store URL (default: from DYN_DISCOVERY_BACKEND / DYN_FILE_KV / ETCD_ENDPOINTS)")
    commands = parser.add_subparsers(dest="command", required=True)

    def with_query(sub: argparse.ArgumentParser) -> argparse.ArgumentParser:
        sub.add_argument("--kind", default="endpoints", help="endpoints, models, event_channels or event_sources")
        sub.add_argument("--namespace")
        sub.add_argument("--component")
        sub.add_argument("--endpoint")
        sub.add_argument("--scope", help='event scope as JSON, e.g. \'{"kind":"namespace","name":"ns"}\'')
        sub.add_argument("--topic")
        return sub

    with_query(commands.add_parser("list", help="print matching records as JSON lines")).set_defaults(func=cmd_list)
    watch = with_query(commands.add_parser("watch", help="print watch events as JSON lines"))
    watch.add_argument("--count", type=int, help="stop after this many events")
    watch.add_argument("--idle-timeout", type=float, help="stop after this many seconds without an event")
    watch.set_defaults(func=cmd_watch)
    register = commands.add_parser("register", help="register spec(s) from a JSON file (or - for stdin)")
    register.add_argument("spec")
    register.add_argument("--no-hold", dest="hold", action="store_false", help="remove the records again at once")
    register.set_defaults(func=cmd_register)
    commands.add_parser("doctor", help="check the store and say what is wrong").set_defaults(func=cmd_doctor)
    commands.add_parser("gc", help="remove records whose owners died").set_defaults(func=cmd_gc)
    commands.add_parser("demo", help="a live demo on the file backend").set_defaults(func=cmd_demo)
    bench = commands.add_parser("bench", help="measure the file backend and print JSON")
    bench.add_argument("--events", type=int, default=1000, help="register->watch deliveries to time")
    bench.add_argument("--records", type=int, default=10000, help="records for the list and rescan timings")
    bench.add_argument("--dir", help="directory for the benchmark stores (default: a temporary one)")
    bench.add_argument("--interop", action="store_true", help="measure against reference-runtime workers instead")
    bench.add_argument("--etcd", action="store_true", help="measure the etcd backend (--url, else a local etcd)")
    bench.set_defaults(func=cmd_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ds.DiscoveryError as exc:
        print(f"discovery-sync: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
