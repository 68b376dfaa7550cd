"""The recorded answers of a real kube-apiserver (``tests/fixtures/kube-apiserver-1.28/``).

Each file is one scenario: ``{"scenario", "server", "notes"?, "steps": [{"request": {...},
"response": {...}, "note"?, "library_raised"?}]}`` (the folder's README.md says what each shows).
The replay tests (``test_transcripts_*.py``) send the recorded requests to the fake and compare
status codes and stored shapes; :data:`REPLAYED` lists the files each of them covers, and
``test_transcripts_replayed.py`` checks that together they cover all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "kube-apiserver-1.28"


@dataclass(frozen=True)
class Step:
    """One recorded request and the real server's answer to it."""

    request: dict[str, Any]
    response: dict[str, Any]
    note: str
    library_raised: Any = None

    @property
    def method(self) -> str:
        return str(self.request["method"])

    @property
    def path(self) -> str:
        return str(self.request["path"])

    @property
    def status(self) -> int | None:
        status = self.response.get("status")
        return int(status) if status is not None else None


@dataclass(frozen=True)
class Transcript:
    name: str
    scenario: str
    notes: Any
    steps: list[Step]

    def find(self, text: str) -> list[Step]:
        """The steps whose note contains ``text``."""
        return [step for step in self.steps if text in step.note]


def names() -> list[str]:
    """Every transcript file's name without ``.json``."""
    return sorted(path.stem for path in FIXTURES.glob("*.json"))


def load(name: str) -> Transcript:
    raw = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    steps = [
        Step(step["request"], step["response"], step.get("note") or "", step.get("library_raised"))
        for step in raw["steps"]
    ]
    return Transcript(name, raw.get("scenario", name), raw.get("notes"), steps)
