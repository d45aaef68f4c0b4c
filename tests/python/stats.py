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


def assert_halves_hypergeometric(picks: torch.Tensor, degree: int):
    """Rows of `picks` (k distinct offsets of range(degree) each, too many k-subsets to
    count): if every k-subset is equally likely, how many picks of a row fall in the first
    half of the row is hypergeometric. Per-offset counts miss picks that are marginally
    uniform but not independent (a random window of consecutive offsets piles up at 0
    and k here)."""
    from scipy.stats import hypergeom
    trials, k = picks.shape
    half = degree // 2
    low = torch.bincount((picks < half).sum(1), minlength=k + 1).double()
    expected = torch.from_numpy(hypergeom(degree, half, k).pmf(range(k + 1))) * trials
    # Neighboring values merged into bins expected 20 times or more (as assert_uniform asks).
    f_obs, f_exp, obs, exp = [], [], 0.0, 0.0
    for o, e in zip(low.tolist(), expected.tolist()):
        obs, exp = obs + o, exp + e
        if exp >= 20:
            f_obs.append(obs)
            f_exp.append(exp)
            obs, exp = 0.0, 0.0
    if f_obs:  # the last values' remainder joins the last bin
        f_obs[-1] += obs
        f_exp[-1] += exp
    assert len(f_obs) >= 2, "too few trials for a chi-square test"
    p = chisquare(f_obs, [e * trials / sum(f_exp) for e in f_exp]).pvalue  # (pmf rounding)
    assert p > P_VALUE_FLOOR, f"picks per half not hypergeometric (p = {p:.2e}): {f_obs}, {f_exp}"
