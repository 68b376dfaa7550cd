"""What the CLI prints: tables (table, wide), JSON lines and YAML documents of records, events and reports.

Standard library only: a table formatter (column widths from the content; cut to the terminal's
width unless wide or piped), a small YAML emitter for JSON data, and one line per watch event.

Nothing a record holds reaches the terminal raw: every table cell and event line goes through
:func:`discovery_sync.validation.printable` (control characters, C1 and bidi controls shown as
escapes, as log lines show file names), JSON lines and YAML write such characters as escapes.
"""

from __future__ import annotations

import math
import re
import shutil
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any, TextIO

import orjson

import discovery_sync as ds
from discovery_sync.validation import printable

from .progress import is_terminal

FORMATS = ("table", "wide", "json", "yaml")
COLUMN_GAP = "   "
MIN_COLUMN = 4  # a column is never cut narrower than this (or its header)

KIND_LABELS = {
    ds.RecordKind.ENDPOINT: "endpoint",
    ds.RecordKind.MODEL: "model",
    ds.RecordKind.EVENT_CHANNEL: "event-channel",
    ds.RecordKind.EVENT_SOURCE: "event-source",
}
RECORD_HEADERS = ["KIND", "WHERE", "ID", "TRANSPORT"]
WIDE_HEADERS = [*RECORD_HEADERS, "MODEL", "KEY"]
EVENT_NAMES = {"Added": "ADDED", "Removed": "REMOVED", "ModelTaintsUpdated": "TAINTS", "Resync": "RESYNC"}


DEFAULT_FORMAT = "table"  # on a terminal and piped alike, as kubectl and etcdctl do: scripts ask for -o json


# -- records ---------------------------------------------------------------------------------------
def store_key(identity: ds.DiscoveryInstanceId) -> str:
    """``{bucket}/{id path}``: the record's key in the store (``v1/instances/ns/comp/ep/2a``)."""
    return f"{identity.kind.bucket}/{identity.to_path()}"


def scope_text(scope: ds.EventScope) -> str:
    """``ns``, ``ns/component`` or ``ns/component/endpoint``."""
    return "/".join(part for part in (scope.namespace, scope.component, scope.endpoint) if part is not None)


def where(instance: ds.DiscoveryInstance) -> str:
    """Where a record belongs: its endpoint (and a model card's suffix), or its scope and topic."""
    if isinstance(instance, (ds.Endpoint, ds.Model)):
        text = f"{instance.namespace}/{instance.component}/{instance.endpoint}"
        if isinstance(instance, ds.Model) and instance.model_suffix:
            text += f" ({instance.model_suffix})"
        return text
    return f"{scope_text(instance.scope)} topic={instance.topic}"


def transport_text(instance: ds.DiscoveryInstance) -> str:
    """A short human form of the record's transport (``tcp 10.0.0.7:9000/...``); ``-`` when it has none."""
    if isinstance(instance, ds.Endpoint):
        value = instance.transport.value
        shown = value if isinstance(value, str) else orjson.dumps(value).decode()
        return f"{instance.transport.kind} {shown}"
    if isinstance(instance, ds.EventChannel):
        transport = instance.transport
        if isinstance(transport, ds.ZmqBrokerTransport):
            return f"zmq-broker xsub={','.join(transport.xsub_endpoints)} xpub={','.join(transport.xpub_endpoints)}"
        return f"{transport.kind().value} {transport.address()}"
    return "-"


def model_text(instance: ds.DiscoveryInstance) -> str:
    """A model card's name (and ``model_type`` when it has one); ``-`` for other records."""
    if not isinstance(instance, ds.Model):
        return "-"
    name = instance.card_json.get("display_name")
    text = name if isinstance(name, str) else "?"
    model_type = instance.card_json.get("model_type")
    if model_type is not None:
        text += f" [{model_type if isinstance(model_type, str) else orjson.dumps(model_type).decode()}]"
    return text


def summary(instance: ds.DiscoveryInstance) -> str:
    """One short phrase about a record, for event lines: its transport, or its model's name."""
    if isinstance(instance, ds.Model):
        return f"model {model_text(instance)}"
    if isinstance(instance, ds.EventSource):
        return f"metadata {orjson.dumps(instance.metadata).decode()}" if instance.metadata else "-"
    return transport_text(instance)


def id_text(instance_id: int) -> str:
    """An instance id as tables show it (and ``get`` takes it): lowercase hex, as store keys hold it."""
    return f"{instance_id:x}"


#: the suffix of the field that JSON and YAML documents add after a record's numeric id
ID_TEXT_SUFFIX = "_hex"


def record_document(instance: ds.DiscoveryInstance) -> dict[str, Any]:
    """``instance.to_dict()`` (the record's wire form), with its id also as text right after the
    numeric field: ``instance_id_hex`` (an event source's ``publisher_id_hex``), the id the table
    shows. Readers that take JSON numbers as doubles (jq 1.6, JavaScript) round ids above 2**53;
    the text survives them. The numeric field stays, as it was."""
    data = instance.to_dict()
    field = "publisher_id" if isinstance(instance, ds.EventSource) else "instance_id"
    document: dict[str, Any] = {}
    for key, value in data.items():
        document[key] = value
        if key == field:
            document[field + ID_TEXT_SUFFIX] = id_text(instance.instance_id)
    return document


def event_document(event: ds.DiscoveryEvent) -> dict[str, Any]:
    """``event.to_dict()`` with each record in it as :func:`record_document` gives it (a removal's
    and a taint change's ``id`` already hold the id as text, in its path)."""
    if isinstance(event, ds.Added):
        return {"event": "Added", "instance": record_document(event.instance)}
    if isinstance(event, ds.Resync):
        return {"event": "Resync", "instances": [record_document(instance) for instance in event.instances]}
    return event.to_dict()


def record_row(instance: ds.DiscoveryInstance, *, wide: bool = False) -> list[str]:
    row = [KIND_LABELS[instance.kind], where(instance), id_text(instance.instance_id), transport_text(instance)]
    if wide:
        row += [model_text(instance), store_key(instance.id())]
    return row


# -- tables ----------------------------------------------------------------------------------------
def terminal_width() -> int:
    return shutil.get_terminal_size((100, 24)).columns


def ellipsis(stream: TextIO) -> str:
    encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
    return "\u2026" if encoding == "utf8" else "~"


def table(
    headers: Sequence[str], rows: Iterable[Sequence[str]], *, width: int | None = None, cut: str = "~"
) -> list[str]:
    """Aligned lines (header first); columns are as wide as their content, the widest ones cut
    (ending in ``cut``) so that each line fits ``width`` characters (None: never cut)."""
    headers = [printable(header) for header in headers]
    rows = [[printable(cell) for cell in row] for row in rows]
    widths = [max([len(header)] + [len(row[i]) for row in rows]) for i, header in enumerate(headers)]
    if width is not None:
        floors = [max(len(header), MIN_COLUMN) for header in headers]
        excess = sum(widths) + len(COLUMN_GAP) * (len(widths) - 1) - width
        while excess > 0:
            shrinkable = [i for i, w in enumerate(widths) if w > floors[i]]
            if not shrinkable:
                break
            widest = max(shrinkable, key=lambda i: widths[i])
            widths[widest] -= 1
            excess -= 1

    def line(cells: Sequence[str]) -> str:
        shown = [
            cell if len(cell) <= w else cell[: max(w - len(cut), 0)] + cut
            for cell, w in zip(cells, widths, strict=True)
        ]
        padded = [cell.ljust(w) for cell, w in zip(shown[:-1], widths[:-1], strict=True)] + shown[-1:]
        return COLUMN_GAP.join(padded).rstrip()

    return [line(headers)] + [line(row) for row in rows]


# -- JSON ------------------------------------------------------------------------------------------
def _json_escape(char: str) -> str:
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000  # a UTF-16 surrogate pair, as JSON writes a character beyond the BMP
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def to_json(data: Any) -> str:
    """One line of JSON (orjson's), with the characters a terminal would act on escaped: orjson
    escapes C0 controls only, and writes DEL, C1 and bidi controls raw. They can only stand in
    strings there, where ``\\uXXXX`` is the same character: the data is unchanged."""
    text = orjson.dumps(data).decode()
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else _json_escape(char) for char in text)


# -- YAML ------------------------------------------------------------------------------------------
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_YAML_WORDS = {"true", "false", "null", "yes", "no", "on", "off", "y", "n"}
MAX_SIMPLE_KEY = 1000  # YAML readers refuse an implicit key over 1,024 characters: longer ones are explicit (?)
_YAML_ESCAPES = {'"': '\\"', "\\": "\\\\"}


def _yaml_escape(char: str) -> str:
    if char in _YAML_ESCAPES:
        return _YAML_ESCAPES[char]
    if char.isprintable():  # every printable character is printable in YAML as well
        return char
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _quoted(text: str) -> str:
    """A double-quoted YAML scalar: printable characters as they are (UTF-8, emoji included),
    others as YAML escapes (``\\x1b``, ``\\u202e``, ``\\U0001f600``: never a surrogate pair)."""
    if text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'
    return '"' + "".join(_yaml_escape(char) for char in text) + '"'


def _float(value: float) -> str:
    """A float as YAML 1.1 reads it back as a float: a dot in the mantissa (``1.0e-05``, not
    ``1e-05``, which is a string there), ``.inf``/``.nan`` for what JSON cannot hold."""
    if math.isnan(value):
        return ".nan"
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    mantissa, e, exponent = repr(value).partition("e")  # repr's exponent always has its sign
    if "." not in mantissa:
        mantissa += ".0"
    return mantissa + e + exponent


def _scalar(value: Any) -> str:
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _float(value)
    return _quoted(value if isinstance(value, str) else str(value))


def _key(key: Any) -> str:
    """A mapping key: plain when YAML reads it back as the same string, else double-quoted."""
    text = str(key)
    if _PLAIN_KEY.fullmatch(text) and text.lower() not in _YAML_WORDS:
        return text
    return _quoted(text)


def _entry(pad: str, key: Any, item: Any, indent: int) -> list[str]:
    """The lines of one ``key: item`` of a block mapping; an explicit ``? key`` when it is long."""
    shown, nested = _key(key), isinstance(item, (dict, list)) and item
    if len(shown) <= MAX_SIMPLE_KEY:
        if nested:
            return [f"{pad}{shown}:", *_yaml_lines(item, indent + 2)]
        return [f"{pad}{shown}: {_inline(item)}"]
    if nested:
        return [f"{pad}? {shown}", f"{pad}:", *_yaml_lines(item, indent + 2)]
    return [f"{pad}? {shown}", f"{pad}: {_inline(item)}"]


def _yaml_lines(value: Any, indent: int) -> list[str]:
    pad = " " * indent
    if isinstance(value, dict) and value:
        return [line for key, item in value.items() for line in _entry(pad, key, item, indent)]
    if isinstance(value, list) and value:
        lines = []
        for item in value:
            if isinstance(item, (dict, list)) and item:
                nested = _yaml_lines(item, indent + 2)
                lines.append(f"{pad}- {nested[0][indent + 2 :]}")
                lines += nested[1:]
            else:
                lines.append(f"{pad}- {_inline(item)}")
        return lines
    return [pad + _inline(value)]


def _inline(value: Any) -> str:
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, (list, tuple)):
        return "[]"
    return _scalar(value)


def to_yaml(data: Any) -> str:
    """A JSON value as a block-style YAML document (without the ``---``) that YAML 1.1 readers
    (PyYAML's pure and libyaml loaders) read back as the same value."""
    return "\n".join(_yaml_lines(data, 0)) + "\n"


# -- the printer -----------------------------------------------------------------------------------
class Printer:
    """Writes records, events and documents to ``stream`` in one format (``table``, ``wide``, ``json``, ``yaml``)."""

    def __init__(self, fmt: str | None, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.format = fmt or DEFAULT_FORMAT
        self._documents = 0
        # a watch's connection-state lines come from the client's state thread: whole lines only
        self.lock = threading.RLock()

    @property
    def tabular(self) -> bool:
        return self.format in ("table", "wide")

    def write(self, text: str) -> None:
        with self.lock:
            self.stream.write(text)
            self.stream.flush()

    def lines(self, lines: Iterable[str]) -> None:
        """Lines of text, each shown escaped (:func:`printable`) if it holds a control character."""
        self.write("".join(printable(line) + "\n" for line in lines))

    def document(self, data: Any) -> None:
        """One JSON line, or one YAML document (``---`` between documents)."""
        text = to_yaml(data) if self.format == "yaml" else to_json(data) + "\n"
        with self.lock:
            separator = "---\n" if self.format == "yaml" and self._documents else ""
            self.write(separator + text)
            self._documents += 1

    def table_lines(self, headers: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
        width = terminal_width() if self.format == "table" and is_terminal(self.stream) else None  # piped: never cut
        return table(headers, rows, width=width, cut=ellipsis(self.stream))

    def table(self, headers: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
        self.lines(self.table_lines(headers, rows))

    def records(self, instances: Sequence[ds.DiscoveryInstance]) -> None:
        """A table of records, or one document per record (:func:`record_document`)."""
        if self.tabular:
            self.table(self.record_headers(), self.record_rows(instances))
        else:
            for instance in instances:
                self.document(record_document(instance))

    def record_headers(self) -> list[str]:
        return WIDE_HEADERS if self.format == "wide" else RECORD_HEADERS

    def record_rows(self, instances: Iterable[ds.DiscoveryInstance]) -> list[list[str]]:
        return [record_row(instance, wide=self.format == "wide") for instance in instances]

    def event(self, event: ds.DiscoveryEvent, now: float | None = None) -> None:
        """A readable line per event (tables), or the event's document (:func:`event_document`)."""
        if self.tabular:
            self.write(event_line(event, time.time() if now is None else now) + "\n")
        else:
            self.document(event_document(event))

    def state(self, change: ds.StateChange, now: float | None = None) -> None:
        """A line of its own per change of the client's connection state (tables), or its
        document (:func:`state_document`), between the events."""
        if self.tabular:
            self.write(state_line(change, time.time() if now is None else now) + "\n")
        else:
            self.document(state_document(change))


def clock_time(now: float) -> str:
    """``HH:MM:SS.mmm``, local time."""
    return time.strftime("%H:%M:%S", time.localtime(now)) + f".{int(now * 1000) % 1000:03d}"


def state_line(change: ds.StateChange, now: float) -> str:
    """``HH:MM:SS.mmm  SUSPENDED  reason``: the state in capitals, as no event is named."""
    text = change.reason
    if change.rewritten:
        count = len(change.rewritten)
        text += f" (wrote back {count} record{'' if count == 1 else 's'})"
    return f"{clock_time(now)}  {change.state.value.upper():<7}  {printable(text)}".rstrip()


def state_document(change: ds.StateChange) -> dict[str, Any]:
    """A state change as a document of its own shape: ``state`` where an event has ``event``."""
    return {
        "state": change.state.value,
        "previous": change.previous.value,
        "reason": change.reason,
        "rewritten": list(change.rewritten),
    }


def event_line(event: ds.DiscoveryEvent, now: float) -> str:
    """``HH:MM:SS.mmm  EVENT    key  summary``."""
    stamp = clock_time(now)
    name = EVENT_NAMES[type(event).__name__]
    if isinstance(event, ds.Added):
        key, text = store_key(event.instance.id()), summary(event.instance)
    elif isinstance(event, ds.Removed):
        key, text = store_key(event.id), ""
    elif isinstance(event, ds.ModelTaintsUpdated):
        key, text = store_key(event.id), "taints " + (", ".join(event.taints) or "(none)")
    else:
        count = len(event.instances)
        key, text = f"{count} record{'' if count == 1 else 's'}", "the complete current set"
    return f"{stamp}  {name:<7}  {printable(key)}  {printable(text)}".rstrip()
