"""What the CLI prints: tables (table, wide), JSON lines and YAML documents of records, events and reports.

Standard library only: a table formatter (column widths from the content; cut to the terminal's
width unless wide), a small YAML emitter for JSON data, and one line per watch event.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any, TextIO

import orjson

import discovery_sync as ds

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


def default_format(stream: TextIO) -> str:
    """``table`` on a terminal, ``json`` otherwise (scripts get today's JSON lines)."""
    return "table" if _isatty(stream) else "json"


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


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


def record_row(instance: ds.DiscoveryInstance, *, wide: bool = False) -> list[str]:
    row = [KIND_LABELS[instance.kind], where(instance), f"{instance.instance_id:x}", transport_text(instance)]
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
    rows = [list(row) for row in rows]
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


# -- YAML ------------------------------------------------------------------------------------------
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_YAML_WORDS = {"true", "false", "null", "yes", "no", "on", "off", "y", "n"}


def _key(key: Any) -> str:
    """A mapping key: plain when YAML reads it back as the same string, else double-quoted."""
    text = str(key)
    if _PLAIN_KEY.fullmatch(text) and text.lower() not in _YAML_WORDS:
        return text
    return _scalar(text)


def _scalar(value: Any) -> str:
    """JSON's form of a scalar, which is valid YAML too (strings double-quoted, escapes ASCII-only)."""
    return json.dumps(value, ensure_ascii=True)


def _yaml_lines(value: Any, indent: int) -> list[str]:
    pad = " " * indent
    if isinstance(value, dict) and value:
        lines = []
        for key, item in value.items():
            if isinstance(item, (dict, list)) and item:
                lines.append(f"{pad}{_key(key)}:")
                lines += _yaml_lines(item, indent + 2)
            else:
                lines.append(f"{pad}{_key(key)}: {_inline(item)}")
        return lines
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
    """A JSON value as a block-style YAML document (without the ``---``)."""
    return "\n".join(_yaml_lines(data, 0)) + "\n"


# -- the printer -----------------------------------------------------------------------------------
class Printer:
    """Writes records, events and documents to ``stream`` in one format (``table``, ``wide``, ``json``, ``yaml``)."""

    def __init__(self, fmt: str | None, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.format = fmt or default_format(self.stream)
        self._documents = 0

    @property
    def tabular(self) -> bool:
        return self.format in ("table", "wide")

    def write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()

    def lines(self, lines: Iterable[str]) -> None:
        self.write("".join(line + "\n" for line in lines))

    def document(self, data: Any) -> None:
        """One JSON line, or one YAML document (``---`` between documents)."""
        if self.format == "yaml":
            separator = "---\n" if self._documents else ""
            self.write(separator + to_yaml(data))
        else:
            self.write(orjson.dumps(data).decode() + "\n")
        self._documents += 1

    def table_lines(self, headers: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
        width = None if self.format == "wide" else terminal_width()
        return table(headers, rows, width=width, cut=ellipsis(self.stream))

    def table(self, headers: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
        self.lines(self.table_lines(headers, rows))

    def records(self, instances: Sequence[ds.DiscoveryInstance]) -> None:
        """A table of records, or one document per record (``instance.to_dict()``)."""
        if self.tabular:
            self.table(self.record_headers(), self.record_rows(instances))
        else:
            for instance in instances:
                self.document(instance.to_dict())

    def record_headers(self) -> list[str]:
        return WIDE_HEADERS if self.format == "wide" else RECORD_HEADERS

    def record_rows(self, instances: Iterable[ds.DiscoveryInstance]) -> list[list[str]]:
        return [record_row(instance, wide=self.format == "wide") for instance in instances]

    def event(self, event: ds.DiscoveryEvent, now: float | None = None) -> None:
        """A readable line per event (tables), or the event's document (``event.to_dict()``)."""
        if self.tabular:
            self.write(event_line(event, time.time() if now is None else now) + "\n")
        else:
            self.document(event.to_dict())


def event_line(event: ds.DiscoveryEvent, now: float) -> str:
    """``HH:MM:SS.mmm  EVENT    key  summary``."""
    stamp = time.strftime("%H:%M:%S", time.localtime(now)) + f".{int(now * 1000) % 1000:03d}"
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
    return f"{stamp}  {name:<7}  {key}  {text}".rstrip()
