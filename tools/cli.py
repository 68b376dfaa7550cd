"""The ``discovery-sync`` command: its parser, and how a failure becomes one line and an exit status.

The commands are in :mod:`.commands`, their words in :mod:`.help_text`, output formats in
:mod:`.output`. Nothing here is imported by ``import discovery_sync``.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import platform
import sys
import traceback
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn

import discovery_sync as ds
from discovery_sync.validation import printable

from . import commands, help_text
from .output import FORMATS
from .store import DEFAULT_TIMEOUT, environment_store, kind_name
from .top import cmd_top

PROG = help_text.PROG
EXIT_STORE_ERROR = 1  # the store failed or refused (every DiscoveryError but ValidationError), or a bug
EXIT_USAGE_ERROR = 2  # bad arguments, an unreadable or invalid spec, bad JSON, an invalid URL or option
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
EXIT_BROKEN_PIPE = 141  # stdout closed early, as in ``discovery-sync list | head -1`` (128 + SIGPIPE)
DEBUG_ENV = "DISCOVERY_SYNC_DEBUG"


class _Parser(argparse.ArgumentParser):
    """An argument parser that reports a bad command line in one line on stderr (exit 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE_ERROR, f"{PROG}: error: {printable(_one_line(message))}; see '{self.prog} --help'\n")


EPILOG = f"""\
exit status: 0 success; {EXIT_STORE_ERROR} the store failed or refused (or doctor found problems, gc left
records behind); {EXIT_USAGE_ERROR} bad arguments, spec file, JSON, URL or option; {EXIT_INTERRUPTED} Ctrl-C;
{EXIT_BROKEN_PIPE} stdout closed early.
Errors are one line on stderr; set {DEBUG_ENV}=1 to print their traceback as well.
"""


def _seconds(text: str) -> float:
    """``--timeout``: a positive number of seconds."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return value


def _global_options(*, in_command: bool) -> _Parser:
    """--url, --timeout and -o, for the main parser and (``in_command``) for every command, so that
    they may come before or after it. A command's copies default to SUPPRESS: a value given before
    the command is not overwritten by a default after it."""

    def default(value: object) -> object:
        return argparse.SUPPRESS if in_command else value

    options = _Parser(add_help=False)
    group = options.add_argument_group("global options (before or after the command)")
    group.add_argument("--url", default=default(None), help=help_text.URL_HELP)
    group.add_argument(
        "--timeout",
        type=_seconds,
        default=default(DEFAULT_TIMEOUT),
        metavar="SECONDS",
        help=help_text.TIMEOUT_HELP % {"default": f"{DEFAULT_TIMEOUT:g}"},
    )
    group.add_argument(
        "-o", "--output", choices=FORMATS, default=default(None), metavar="FORMAT", help=help_text.OUTPUT_HELP
    )
    group.add_argument(
        "-v", "--verbose", action="count", default=default(0), help="show the library's warnings (-vv: also info)"
    )
    return options


class _LogLine(logging.Formatter):
    """``discovery-sync: warning: message`` (the traceback of a logged exception only with -vvv)."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{PROG}: {record.levelname.lower()}: {printable(record.getMessage())}"
        if record.exc_info and logging.getLogger("discovery_sync").level <= logging.DEBUG:
            line += "\n" + self.formatException(record.exc_info)
        return line


@contextlib.contextmanager
def _library_log_on_stderr(verbosity: int) -> Iterator[None]:
    """While a command runs, the library's log goes to stderr, one line per record: errors always,
    warnings with -v, info with -vv (retries while connecting, skipped junk files: the final error
    line says what matters). The logger is restored afterwards: a program (or a test) that calls
    ``main()`` keeps its own logging."""
    level = {0: logging.ERROR, 1: logging.WARNING, 2: logging.INFO}.get(verbosity, logging.DEBUG)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_LogLine())
    logger = logging.getLogger("discovery_sync")
    saved = (logger.handlers[:], logger.level, logger.propagate)
    logger.handlers[:] = [handler]
    logger.setLevel(level)
    logger.propagate = False
    try:
        yield
    finally:
        logger.handlers[:] = saved[0]
        logger.setLevel(saved[1])  # setLevel, not an assignment: it clears the loggers' level cache
        logger.propagate = saved[2]


def _kind(*, allow_all: bool) -> Callable[[str], str]:
    def parse(text: str) -> str:
        return kind_name(text, allow_all=allow_all)

    parse.__name__ = "kind"  # argparse names the type in some messages
    return parse


def _add_filters(command: argparse.ArgumentParser) -> None:
    filters = command.add_argument_group("filters")
    filters.add_argument("--namespace", help="endpoints and models of this namespace")
    filters.add_argument("--component", help="... of this component (needs --namespace)")
    filters.add_argument("--endpoint", help="... of this endpoint (needs --component)")
    filters.add_argument("--scope", help=help_text.SCOPE_HELP)
    filters.add_argument("--topic", help="event channels and sources of this topic")


class _CommandAdder:
    """Adds one subcommand with its help texts, the global options and the function that runs it."""

    def __init__(self, subcommands: argparse._SubParsersAction[Any], in_command: argparse.ArgumentParser) -> None:
        self.subcommands = subcommands
        self.in_command = in_command

    def __call__(
        self, name: str, summary: str, description: str, examples: str, func: Callable[[argparse.Namespace], int]
    ) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = self.subcommands.add_parser(
            name,
            help=summary,
            description=description,
            epilog=examples,
            formatter_class=argparse.RawDescriptionHelpFormatter,
            parents=[self.in_command],
        )
        sub.set_defaults(func=func)
        return sub


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description=help_text.MAIN,
        epilog=help_text.MAIN_EXAMPLES + "\n\n" + EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[_global_options(in_command=False)],
    )
    python = f"Python {platform.python_version()}"
    parser.add_argument("--version", action="version", version=f"{PROG} {ds.__version__} ({python})")
    subcommands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    command = _CommandAdder(subcommands, _global_options(in_command=True))
    _add_reading_commands(command)
    _add_writing_commands(command)
    _add_tool_commands(command)
    return parser


def _add_reading_commands(command: _CommandAdder) -> None:
    listing = command(
        "list", "print the records that match", help_text.LIST, help_text.LIST_EXAMPLES, commands.cmd_list
    )
    listing.add_argument(
        "--kind", type=_kind(allow_all=True), default="all", help=help_text.KIND_HELP + " (default: all)"
    )
    _add_filters(listing)

    get = command(
        "get", "print one record, by the id list shows", help_text.GET, help_text.GET_EXAMPLES, commands.cmd_get
    )
    get.add_argument(
        "key",
        metavar="KEY",
        help="the ID list shows (or a unique prefix of it), ns/component/endpoint/ID, or a store key",
    )
    get.add_argument("--kind", type=_kind(allow_all=False), help="look among records of this kind only")

    watch = command(
        "watch", "follow changes as they happen", help_text.WATCH, help_text.WATCH_EXAMPLES, commands.cmd_watch
    )
    watch.add_argument(
        "--kind",
        type=_kind(allow_all=False),
        default="endpoints",
        help="endpoints (default), models, event_channels or event_sources",
    )
    _add_filters(watch)
    watch.add_argument("--live", action="store_true", help="redraw a table of the current records on every change")
    watch.add_argument("--count", type=_count, help="stop after this many events (--live: this many tables)")
    watch.add_argument("--idle-timeout", type=_seconds, metavar="SECONDS", help="stop after this long without a change")
    _add_top(command)


def _add_top(command: _CommandAdder) -> None:
    top = command("top", "show a watching client's metrics, live", help_text.TOP, help_text.TOP_EXAMPLES, cmd_top)
    top.add_argument(
        "--kind",
        type=_kind(allow_all=False),
        default="endpoints",
        help="the records to watch: endpoints (default), models, event_channels or event_sources",
    )
    _add_filters(top)
    top.add_argument(
        "--interval", type=_seconds, default=2.0, metavar="SECONDS", help="seconds between two redraws (default: 2)"
    )
    top.add_argument("--count", type=_count, help="stop after this many redraws")


def _add_writing_commands(command: _CommandAdder) -> None:
    register = command(
        "register",
        "register records from a JSON spec file",
        help_text.REGISTER,
        help_text.REGISTER_EXAMPLES,
        commands.cmd_register,
    )
    register.add_argument("spec", metavar="SPEC", help="a JSON spec file (see above), or - for stdin")
    register.add_argument("--no-hold", dest="hold", action="store_false", help="remove the records again at once")

    command(
        "doctor",
        "check the store and say what is wrong",
        help_text.DOCTOR,
        help_text.DOCTOR_EXAMPLES,
        commands.cmd_doctor,
    )

    gc = command("gc", "remove records whose owners died", help_text.GC, help_text.GC_EXAMPLES, commands.cmd_gc)
    gc.add_argument("--dry-run", action="store_true", help="list what would be removed; remove nothing")


def _add_tool_commands(command: _CommandAdder) -> None:
    manifests = command(
        "manifests",
        "print the Kubernetes CRD and RBAC manifests",
        help_text.MANIFESTS,
        help_text.MANIFESTS_EXAMPLES,
        commands.cmd_manifests,
    )
    manifests.add_argument("--crd", action="store_true", help="only the CustomResourceDefinition")
    manifests.add_argument("--rbac", action="store_true", help="only the Role and RoleBinding")

    command("demo", "a live demo on a temporary file store", help_text.DEMO, help_text.DEMO_EXAMPLES, commands.cmd_demo)

    bench = command(
        "bench",
        "measure the file backend and print JSON",
        help_text.BENCH,
        help_text.BENCH_EXAMPLES,
        commands.cmd_bench,
    )
    bench.add_argument("--events", type=int, default=1000, help="register->watch deliveries to time")
    bench.add_argument("--records", type=int, default=10000, help="records for the list and rescan timings")
    bench.add_argument("--sizes", default="1000,2000,4000,8000", help="records for the initial-sync timings")
    bench.add_argument("--dir", help="directory for the benchmark stores (default: a temporary one)")
    bench.add_argument(
        "--interop", action="store_true", help="moved: python -m benchmarks.interop (repository checkout)"
    )
    bench.add_argument("--etcd", action="store_true", help="moved: python -m benchmarks.etcd (repository checkout)")


def _naming_the_store(message: str, url: str | None) -> str:
    """A store error's message, with the store added unless it names its host or path already
    (``url`` None: the store the environment chose, and the variables that chose it)."""
    where, source = (url, "") if url is not None else environment_store()
    try:
        parts = urllib.parse.urlsplit(where)
    except ValueError:
        return message
    named = [part for part in (parts.netloc, parts.path) if part and part != "/"]
    if any(part in message for part in named):
        return message
    return f"{message} (store: {where}{', ' + source if source else ''})"


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
    print(f"{PROG}: error: {printable(_one_line(message)) or type(exc).__name__}", file=sys.stderr)


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
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        with _library_log_on_stderr(getattr(args, "verbose", 0) or 0):
            return func(args)
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
        _report(exc, _naming_the_store(str(exc), getattr(args, "url", None)))
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
