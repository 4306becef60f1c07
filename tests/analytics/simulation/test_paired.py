"""The exact Wilcoxon signed-rank test the placement benchmark's comparisons use."""

from __future__ import annotations

from pathlib import Path

import pytest

from analytics.simulation.paired import compare, main, read_benchmark_output, signed_rank_p


def test_darwin_example_matches_scipy() -> None:
    # scipy.stats.wilcoxon's documented example (Darwin's paired plant heights, via Fisher): statistic 24,
    # exact two-sided p = 0.041259765625.
    d = [6, 8, 14, 16, 23, 24, 28, 29, 41, -48, 49, 56, 60, -67, 75]
    assert signed_rank_p(d) == pytest.approx(0.041259765625, abs=1e-12)


def test_all_one_sign_over_ten_seeds_is_two_in_1024() -> None:
    assert signed_rank_p([-0.1 * (i + 1) for i in range(10)]) == 2 / 1024
    assert signed_rank_p([0.05] * 10) == 2 / 1024  # ties share a rank; every flip is less extreme


def test_zeros_are_dropped_and_no_difference_is_not_significant() -> None:
    assert signed_rank_p([0, 0, -1, -2, -3]) == signed_rank_p([-1, -2, -3]) == 2 / 8
    assert signed_rank_p([0.0, 0.0]) == 1.0


def test_symmetric_differences_give_p_one() -> None:
    assert signed_rank_p([1, -1, 2, -2]) == 1.0


def test_compare_pairs_common_seeds(tmp_path: Path) -> None:
    a = tmp_path / "a.txt"
    b = tmp_path / "b.txt"
    a.write_text(
        "seed 42: unallocated@100% 4.57  tasks 1\nseed 43: unallocated@100% 4.66\nunallocated@100%: x\n"
    )
    b.write_text(
        "seed 42: unallocated@100% 4.61\nseed 43: unallocated@100% 4.65\nseed 44: unallocated@100% 1.0\n"
    )
    r = compare(read_benchmark_output(a), read_benchmark_output(b))
    assert r.seeds == (42, 43) and r.diffs == (0.04, -0.01) and r.b_lower == 1
    assert main([str(a), str(b)]) == 0


def test_bad_input_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("nothing\n")
    assert main([str(empty), str(empty)]) == 2
    assert "no 'seed N: unallocated@100% X' line" in capsys.readouterr().err
    with pytest.raises(ValueError, match="no seed in common"):
        compare({1: 1.0}, {2: 1.0})
