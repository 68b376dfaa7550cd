"""The ``discovery-sync`` command: list, watch, register, doctor, gc, demo, bench."""

from __future__ import annotations

import argparse
import errno
import os
import signal
import sys
import threading
import traceback
from collections.abc import Sequence
from typing import Any, NoReturn

import orjson

import discovery_sync as ds
from discovery_sync.specs import DiscoverySpec

PROG = "discovery-sync"
EXIT_STORE_ERROR = 1  # the store failed or refused (every DiscoveryError but ValidationError), or a bug
EXIT_USAGE_ERROR = 2  # bad arguments, an unreadable or invalid spec, bad JSON, an invalid URL or option
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
EXIT_BROKEN_PIPE = 141  # stdout closed early, as in ``discovery-sync list | head -1`` (128 + SIGPIPE)
DEBUG_ENV = "DISCOVERY_SYNC_DEBUG"
MAX_SPEC_BYTES = 64 << 20  # far above any spec list; reading stops there (register /dev/zero)
SCOPE_EXAMPLE = """--scope '{"kind": "namespace", "name": "ns"}'"""
_OPEN_ERRORS = {
    errno.ENOENT: "it does not exist",
    errno.EISDIR: "it is a directory",
    errno.EACCES: "permission denied",
    errno.ENOTDIR: "a part of its path is not a directory",
}


def _print_json(data: Any) -> None:
    sys.stdout.write(orjson.dumps(data).decode() + "\n")
    sys.stdout.flush()


def _query(args: argparse.Namespace) -> ds.Query:
    data: dict[str, Any] = {"kind": args.kind}
    for field in ("namespace", "component", "endpoint", "topic"):
        if getattr(args, field, None) is not None:
            data[field] = getattr(args, field)
    if args.scope is not None:
        data["scope"] = _parse_scope(args.scope)
    return ds.Query.from_dict(data)


def _parse_scope(text: str) -> dict[str, Any]:
    """The ``--scope`` argument as a JSON object; anything else is a ValidationError with an example."""
    try:
        scope = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ds.ValidationError(f"--scope is not valid JSON: {exc}; example: {SCOPE_EXAMPLE}") from None
    if not isinstance(scope, dict):
        raise ds.ValidationError(f"--scope must be a JSON object, got {type(scope).__name__}; example: {SCOPE_EXAMPLE}")
    return scope


def _read_spec_source(path: str) -> bytes:
    """The bytes of the spec file (``-``: stdin); an unreadable or oversized file (``/dev/zero``)
    is a ValidationError saying why."""
    try:
        if path == "-":
            data = sys.stdin.buffer.read(MAX_SPEC_BYTES + 1)
        else:
            with open(path, "rb") as file:
                data = file.read(MAX_SPEC_BYTES + 1)
    except OSError as exc:
        reason = _OPEN_ERRORS.get(exc.errno or 0, exc.strerror or str(exc))
        raise ds.ValidationError(
            f"cannot read the spec file {path}: {reason}; give the path of a JSON spec file, or - for stdin"
        ) from None
    if len(data) > MAX_SPEC_BYTES:
        raise ds.ValidationError(f"the spec file {path} is larger than {MAX_SPEC_BYTES >> 20} MiB: it cannot be a spec")
    return data


def _load_specs(path: str) -> list[DiscoverySpec]:
    """Read and check the spec(s) of ``register``: one JSON object, or a non-empty list of them."""
    where = "the spec on stdin" if path == "-" else f"the spec file {path}"
    source = _read_spec_source(path)
    if not source.strip():
        raise ds.ValidationError(f"{where} is empty; it must hold a spec as a JSON object (or a list of them)")
    try:
        data = orjson.loads(source)
    except orjson.JSONDecodeError as exc:
        raise ds.ValidationError(f"{where} is not valid JSON: {exc}") from None
    if isinstance(data, list):
        if not data:
            raise ds.ValidationError(f"{where} holds an empty list: there is nothing to register")
        return [_spec(item, f"{where}, item {index}") for index, item in enumerate(data)]
    return [_spec(data, where)]


def _spec(data: Any, where: str) -> DiscoverySpec:
    """One spec parsed from JSON data; a ValidationError names where the bad spec came from."""
    try:
        return ds.spec_from_dict(data)
    except ds.ValidationError as exc:
        raise ds.ValidationError(f"{where} is not a valid spec: {exc}") from None


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
        for count, event in enumerate(watch.events(idle_timeout=args.idle_timeout), start=1):  # Ctrl-C: run()
            _print_json(event.to_dict())
            if args.count is not None and count >= args.count:
                break
    return 0


def cmd_register(args: argparse.Namespace) -> int:
    specs = _load_specs(args.spec)
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


# ``bench`` options that moved to a benchmark of the repository checkout (they need its test rigs)
MOVED_BENCHMARKS = {"etcd": "benchmarks.etcd", "interop": "benchmarks.interop"}


def cmd_bench(args: argparse.Namespace) -> int:
    for option, module in MOVED_BENCHMARKS.items():
        if getattr(args, option):
            print(
                f"{PROG}: error: bench --{option} needs the test rigs of a repository checkout: "
                f"run `python -m {module}` from the repository root",
                file=sys.stderr,
            )
            return EXIT_USAGE_ERROR
    from .bench import run_bench

    _print_json(run_bench(args))
    return 0


class _Parser(argparse.ArgumentParser):
    """An argument parser that reports a bad command line in one line on stderr (exit 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE_ERROR, f"{PROG}: error: {_one_line(message)}; see '{self.prog} --help'\n")


EPILOG = f"""\
exit status: 0 success; {EXIT_STORE_ERROR} the store failed or refused (or doctor found problems, gc left
records behind); {EXIT_USAGE_ERROR} bad arguments, spec file, JSON, URL or option; {EXIT_INTERRUPTED} Ctrl-C;
{EXIT_BROKEN_PIPE} stdout closed early.
Errors are one line on stderr; set {DEBUG_ENV}=1 to print their traceback as well.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG, description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
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
    bench.add_argument("--sizes", default="1000,2000,4000,8000", help="records for the initial-sync timings")
    bench.add_argument("--dir", help="directory for the benchmark stores (default: a temporary one)")
    bench.add_argument(
        "--interop", action="store_true", help="moved: python -m benchmarks.interop (repository checkout)"
    )
    bench.add_argument("--etcd", action="store_true", help="moved: python -m benchmarks.etcd (repository checkout)")
    bench.set_defaults(func=cmd_bench)
    return parser


def _one_line(text: str) -> str:
    """``text`` on one line: its non-blank lines joined by "; "."""
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


def _debug() -> bool:
    """Whether DISCOVERY_SYNC_DEBUG asks for tracebacks."""
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no", "off")


def _report(exc: BaseException, message: str) -> None:
    """Print ``message`` as one error line on stderr, after the traceback of ``exc`` in debug mode."""
    if _debug():
        traceback.print_exception(exc, file=sys.stderr)
    print(f"{PROG}: error: {_one_line(message) or type(exc).__name__}", file=sys.stderr)


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that flushing it at exit after a broken pipe fails no more."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (captured by a test, say)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def run(args: argparse.Namespace) -> int:
    """Run the parsed command; every exception becomes one line on stderr and an exit code."""
    try:
        return args.func(args)
    except KeyboardInterrupt:
        if _debug():
            traceback.print_exc(file=sys.stderr)
        newline = "\n" if sys.stderr.isatty() else ""  # after the terminal's ^C
        print(f"{newline}{PROG}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except ds.ValidationError as exc:
        _report(exc, str(exc))
        return EXIT_USAGE_ERROR
    except ds.DiscoveryError as exc:
        _report(exc, str(exc))
        return EXIT_STORE_ERROR
    except Exception as exc:  # a bug: still one line, the traceback only on request
        hint = f"set {DEBUG_ENV}=1 for the traceback" if not _debug() else "the traceback is above"
        _report(exc, f"unexpected {type(exc).__name__}: {exc} (a bug; please report it, {hint})")
        return EXIT_STORE_ERROR


def main(argv: Sequence[str] | None = None) -> int:
    """The ``discovery-sync`` command; returns its exit status (a bad command line raises SystemExit(2))."""
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
