"""Goodness-of-fit helpers for the sampling tests (seeded, so they cannot flake)."""
import itertools

import torch
from scipy.stats import chisquare

P_VALUE_FLOOR = 1e-4


def star_graph(degree: int, dtype=torch.int64):
    """Node 0 with `degree` neighbors 1..degree; the other nodes have none."""
    indptr = torch.tensor([0] + [degree] * (degree + 1), dtype=torch.long)
    indices = torch.arange(1, degree + 1, dtype=dtype)
    return indptr, indices


def assert_uniform(counts: torch.Tensor):
    expected = counts.sum().item() / counts.numel()
    assert expected >= 20, "too few trials for a chi-square test"
    p = chisquare(counts.double().numpy()).pvalue
    assert p > P_VALUE_FLOOR, f"not uniform (p = {p:.2e}): {counts.tolist()}"


def subset_counts(picks: torch.Tensor, degree: int, k: int) -> torch.Tensor:
    """How often each k-subset of range(degree) appears among rows of `picks`."""
    index = {s: i for i, s in enumerate(itertools.combinations(range(degree), k))}
    counts = torch.zeros(len(index), dtype=torch.long)
    for row in picks.tolist():
        counts[index[tuple(sorted(row))]] += 1
    return counts
