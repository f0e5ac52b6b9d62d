"""Time the naming of CSV columns (``app.processors.reports.column_names``) at 1,000, 10,000 and 100,000
columns, and show that it grows linearly.

Two headers per width: every column named "a" (the worst case: each name needs a number) and every
column named differently. Baseline in the same run: one list comprehension that builds a string per
column (the least any naming can cost). With ``--old`` it also times the previous implementation, which
looked each candidate name up in a list, at 250, 500 and 1,000 columns (it is cubic: 10,000 columns
would take hours).

No database is needed. Figures are medians of ``--runs`` runs; the last line holds ``key=value`` pairs.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.processors.reports import column_names  # noqa: E402

WIDTHS = (1_000, 10_000, 100_000)
OLD_WIDTHS = (250, 500, 1_000)


def old_column_names(header: list[str], width: int) -> list[str]:
    """The previous implementation, kept here to compare: a list scan per candidate name."""
    names: list[str] = []
    for i in range(width):
        base = (header[i].strip() if i < len(header) else "") or f"Column {i + 1}"
        name, n = base, 1
        while name in names:
            n += 1
            name = f"{base} ({n})"
        names.append(name)
    return names


def baseline(header: list[str], width: int) -> list[str]:
    return [f"{h} ({i})" for i, h in enumerate(header[:width])]


def median_secs(func: Callable[[list[str], int], list[str]], header: list[str], runs: int) -> float:
    """Median seconds of one call, each timed over enough calls to last about 0.1 s (at least one), with
    the garbage collector paused so that its passes over the many new strings do not add noise."""
    width = len(header)
    calls = max(1, 100_000 // width) if func is not old_column_names else 1
    times = []
    for _ in range(runs):
        gc.collect()
        gc.disable()
        try:
            started = time.perf_counter()
            for _ in range(calls):
                func(header, width)
            times.append((time.perf_counter() - started) / calls)
        finally:
            gc.enable()
    return statistics.median(times)


def measure(
    func: Callable[[list[str], int], list[str]], kind: str, widths: tuple[int, ...], runs: int
) -> dict[str, float]:
    """Print one table row per width; return ``{"<width>": seconds, "per_column_ratio": …}`` where the
    ratio is the time per column at the largest width over that at the smallest (linear: about 1)."""
    figures: dict[str, float] = {}
    for width in widths:
        header = ["a"] * width if kind.startswith("same") else [f"name {i}" for i in range(width)]
        secs = median_secs(func, header, runs)
        shown = f"{secs / median_secs(baseline, header, runs):.1f}" if func is column_names else ""
        print(f"{width:>9,} {kind:>9} {secs:>10.4f} {secs / width * 1e6:>10.2f} {shown:>11}")
        figures[str(width)] = secs
    first, last = widths[0], widths[-1]
    figures["per_column_ratio"] = (figures[str(last)] / last) / (figures[str(first)] / first)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--old", action="store_true", help="also time the previous, cubic implementation")
    args = parser.parse_args()
    print(f"{'columns':>9} {'header':>9} {'seconds':>10} {'µs/column':>10} {'× baseline':>11}")
    results = {kind: measure(column_names, kind, WIDTHS, args.runs) for kind in ("same", "distinct")}
    if args.old:
        results["old_same"] = measure(old_column_names, "same/old", OLD_WIDTHS, args.runs)
    print(
        f"time per column at {WIDTHS[-1]:,} columns / at {WIDTHS[0]:,}: "
        f"same names {results['same']['per_column_ratio']:.1f}, "
        f"distinct names {results['distinct']['per_column_ratio']:.1f} (linear: about 1; quadratic: 100)"
    )
    if args.old:
        print(
            f"previous implementation, time per column at {OLD_WIDTHS[-1]:,} / at {OLD_WIDTHS[0]:,}: "
            f"{results['old_same']['per_column_ratio']:.1f} (linear: about 1; quadratic: 4; cubic: 16)"
        )
    print(" ".join(f"{kind}_{k}={v:.4g}" for kind, figures in results.items() for k, v in figures.items()))


if __name__ == "__main__":
    main()
