"""Signs of life on stderr during long waits, on a terminal only (piped, nothing is written).

* :class:`ProgressBar`: ``label [#######.......]  4.2/12.0 s``, redrawn with ``\\r`` as a
  ``progress(elapsed, total)`` callback is called (``collect_garbage``'s);
* :func:`waiting`: a line ``label... 2.5 s`` that appears only once a wait took longer than
  :data:`SHOW_AFTER` seconds (connecting to a slow store, say), and is erased when it ends.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from typing import TextIO

SHOW_AFTER = 1.0  # seconds a wait may take before it shows a line
REDRAW_EVERY = 0.25
BAR_WIDTH = 24
CLEAR_LINE = "\r\x1b[K"


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal (False for anything that cannot tell)."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class ProgressBar:
    """A ``progress(elapsed, total)`` callback drawing a bar on ``stream`` (stderr) when it is a terminal."""

    def __init__(self, label: str, stream: TextIO | None = None) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = is_terminal(self.stream)
        self._drawn = False
        self._lock = threading.Lock()

    def __call__(self, elapsed: float, total: float) -> None:
        if not self.enabled:
            return
        fraction = min(max(elapsed / total, 0.0), 1.0) if total > 0 else 1.0
        filled = round(fraction * BAR_WIDTH)
        bar = "#" * filled + "." * (BAR_WIDTH - filled)
        with self._lock:
            self.stream.write(f"{CLEAR_LINE}{self.label} [{bar}] {elapsed:4.1f}/{total:.1f} s")
            self.stream.flush()
            self._drawn = True

    def clear(self) -> None:
        """Erase the bar (before the command prints its result or an error)."""
        with self._lock:
            if self._drawn:
                self.stream.write(CLEAR_LINE)
                self.stream.flush()
                self._drawn = False

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.clear()


@contextlib.contextmanager
def waiting(label: str, stream: TextIO | None = None, show_after: float = SHOW_AFTER) -> Iterator[None]:
    """Show ``label... N.N s`` on a terminal while the block runs longer than ``show_after`` seconds."""
    out = stream if stream is not None else sys.stderr
    if not is_terminal(out):
        yield
        return
    done = threading.Event()
    drawn = threading.Event()
    lock = threading.Lock()
    start = time.monotonic()

    def draw() -> None:
        if done.wait(show_after):
            return
        while True:
            with lock:
                if done.is_set():
                    return
                out.write(f"{CLEAR_LINE}{label}... {time.monotonic() - start:.1f} s")
                out.flush()
                drawn.set()
            if done.wait(REDRAW_EVERY):
                return

    thread = threading.Thread(target=draw, name="discovery-sync-cli-waiting", daemon=True)
    thread.start()
    try:
        yield
    finally:
        with lock:
            done.set()
            if drawn.is_set():
                out.write(CLEAR_LINE)
                out.flush()
