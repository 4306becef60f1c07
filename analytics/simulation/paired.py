"""Paired comparison of two placement policies over the same seeds: the exact Wilcoxon signed-rank test.

Both policies see the same arrival sequence and node order for a seed, so seed by seed differences are
paired. With 10 seeds the exact null distribution (all 2^n sign assignments of the ranked differences) is
cheap, so no normal approximation is needed; tied absolute differences take their average rank and zero
differences are dropped (Wilcoxon's rule), as ``scipy.stats.wilcoxon(..., method="exact")`` does when there
are no ties.

Command line: ``python3 -m analytics.simulation.paired A.txt B.txt`` reads two ``placement-benchmark``
outputs (their ``seed N: unallocated@100% X`` lines) and prints the per-seed differences B − A, the
medians, the seeds where B is lower, and the two-sided p-value.
"""

from __future__ import annotations

import re
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import product
from pathlib import Path

__all__ = ["PairedResult", "compare", "read_benchmark_output", "signed_rank_p"]

_LINE = re.compile(r"^seed (\d+): unallocated@100% ([0-9.]+)")
MAX_EXACT = 20  # 2^20 sign assignments; more pairs than this is not what the benchmark runs


def _twice_ranks(values: Sequence[float]) -> list[int]:
    """Twice the ranks 1..n of `values` (ties share their average rank, so twice it is an integer)."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = i + j + 2
        i = j + 1
    return ranks


def signed_rank_p(diffs: Sequence[float]) -> float:
    """Two-sided exact p-value of the Wilcoxon signed-rank test for paired differences `diffs`.

    The statistic is ``W+`` (sum of the ranks of positive differences); the p-value is the share of the
    ``2^n`` equally likely sign assignments whose ``W+`` is at least as far from its mean ``n(n+1)/4`` as
    the observed one. Zeros are dropped; no difference left gives 1.0.
    """
    nonzero = [d for d in diffs if d != 0]
    n = len(nonzero)
    if n == 0:
        return 1.0
    if n > MAX_EXACT:
        raise ValueError(f"{n} paired differences: the exact test enumerates at most {MAX_EXACT}")
    ranks = _twice_ranks([abs(d) for d in nonzero])
    total = sum(ranks)  # 2 W+ and 2 W- add up to this; |2 W+ - total / 2| compares as |4 W+ - total|
    observed = abs(4 * sum(r for r, d in zip(ranks, nonzero, strict=True) if d > 0) - 2 * total)
    extreme = 0
    for signs in product((0, 1), repeat=n):
        w = sum(r for r, s in zip(ranks, signs, strict=True) if s)
        if abs(4 * w - 2 * total) >= observed:
            extreme += 1
    return float(extreme) / float(2**n)


@dataclass(frozen=True)
class PairedResult:
    """B against A over their common seeds (lower is better)."""

    seeds: tuple[int, ...]
    a: tuple[float, ...]
    b: tuple[float, ...]
    p: float

    @property
    def diffs(self) -> tuple[float, ...]:
        """B − A per seed."""
        return tuple(round(y - x, 10) for x, y in zip(self.a, self.b, strict=True))

    @property
    def b_lower(self) -> int:
        """Seeds where B is strictly lower."""
        return sum(1 for d in self.diffs if d < 0)


def compare(a: Mapping[int, float], b: Mapping[int, float]) -> PairedResult:
    """Pair two policies' per-seed values on the seeds both have."""
    seeds = tuple(sorted(set(a) & set(b)))
    if not seeds:
        raise ValueError("the two results have no seed in common")
    av = tuple(a[s] for s in seeds)
    bv = tuple(b[s] for s in seeds)
    return PairedResult(seeds, av, bv, signed_rank_p([y - x for x, y in zip(av, bv, strict=True)]))


def read_benchmark_output(path: Path | str) -> dict[int, float]:
    """Seed -> unallocated % at 100 % arrived, from a ``placement-benchmark`` output file."""
    out: dict[int, float] = {}
    for line in Path(path).read_text().splitlines():
        m = _LINE.match(line)
        if m:
            out[int(m.group(1))] = float(m.group(2))
    if not out:
        raise ValueError(f"{path}: no 'seed N: unallocated@100% X' line")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """``python3 -m analytics.simulation.paired A.txt B.txt``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print("usage: python3 -m analytics.simulation.paired A.txt B.txt", file=sys.stderr)
        return 2
    try:
        r = compare(read_benchmark_output(args[0]), read_benchmark_output(args[1]))
    except (OSError, ValueError) as err:
        print(f"paired: {err}", file=sys.stderr)
        return 2
    print("seed  " + "  ".join(f"{s:>6}" for s in r.seeds))
    print("B-A   " + "  ".join(f"{d:+6.2f}" for d in r.diffs))
    print(
        f"median A {statistics.median(r.a):.2f}  B {statistics.median(r.b):.2f}  mean B-A "
        f"{statistics.fmean(r.diffs):+.3f}  B lower on {r.b_lower}/{len(r.seeds)}  "
        f"Wilcoxon signed-rank exact p = {r.p:.4f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
