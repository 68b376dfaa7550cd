"""The statistics every benchmark reports (``discovery-sync bench`` and ``python -m benchmarks.*``)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def percentile(values: list[float], fraction: float) -> float:
    """The sample at ``fraction`` (0..1) of the sorted values, nearest rank (no interpolation)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def summary(values_ms: list[float]) -> dict[str, float]:
    """Count, p50, p99 and max of latencies in milliseconds."""
    return {
        "count": len(values_ms),
        "p50_ms": round(percentile(values_ms, 0.50), 3),
        "p99_ms": round(percentile(values_ms, 0.99), 3),
        "max_ms": round(max(values_ms), 3),
    }


def timed(action: Callable[[], object]) -> float:
    """Milliseconds one call of ``action`` takes."""
    start = time.perf_counter()
    action()
    return (time.perf_counter() - start) * 1000


def median_timed(action: Callable[[], object], repeat: int = 5) -> float:
    """The median of ``repeat`` :func:`timed` calls of ``action`` (a warm timing)."""
    return statistics.median(timed(action) for _ in range(repeat))
