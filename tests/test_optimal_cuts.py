"""Tests for the cutoff solver (pardata/cutoffs.py) and its command line (optimal_cuts.py)
against brute force and a plain forward DP.

The references below re-derive the cost from the spec in integer "count
units" (cost times the total count), so they share no code with the solver
and, with integer inputs, compare exactly.
"""

import collections
import dataclasses
import itertools
import json
import subprocess
import sys

import numpy as np
import pytest

from pardata import cutoffs as oc


def ref_dims(d_model, num_tails, proj_factor):
    return tuple(max(1, int(d_model // proj_factor**i))
                 for i in range(1, num_tails + 1))


def ref_costs(counts, cuts, d_model, dims, k0=0, overhead=0, logit=0):
    """Cost in count units of each row of `cuts` [R, K] (int64 if ints).

    `logit` is the per-logit cost s: every logit product costs d + s (head)
    or d_i + s (tail) per output column.
    """
    sorted_counts = np.sort(np.asarray(counts))[::-1]
    size = sorted_counts.size
    prefix = np.concatenate([[0], np.cumsum(sorted_counts)])
    cuts = np.asarray(cuts, dtype=np.int64).reshape(len(cuts), len(dims))
    edges = np.concatenate([np.zeros((len(cuts), 1), np.int64), cuts,
                            np.full((len(cuts), 1), size)], axis=1)
    cost = prefix[-1] * ((d_model + logit)
                         * np.maximum(edges[:, 1] + len(dims), k0) + overhead)
    for i, dim in enumerate(dims, start=1):
        a, b = edges[:, i], edges[:, i + 1]
        cost = cost + (prefix[b] - prefix[a]) * (
            d_model * max(dim, k0) + 2 * overhead
            + (dim + logit) * np.maximum(b - a, k0))
    return cost, prefix[-1]


def brute_force(counts, d_model, dims, min_head=1, k0=0, overhead=0, logit=0):
    """(cost per token, lexicographically smallest optimal cutoffs)."""
    size = len(counts)
    cuts = np.array(list(itertools.combinations(range(min_head, size),
                                                len(dims))), dtype=np.int64)
    cost, total = ref_costs(counts, cuts, d_model, dims, k0, overhead, logit)
    best = int(np.argmin(cost))  # First minimum: combinations are sorted.
    return cost[best] / total, tuple(int(c) for c in cuts[best])


def plain_dp(counts, d_model, dims, min_head=1, k0=0, overhead=0.0,
             logit=0.0):
    """Minimal cost per token by the plain O(K N^2) DP, run forwards."""
    sorted_counts = np.sort(np.asarray(counts, dtype=np.float64))[::-1]
    size = sorted_counts.size
    prefix = np.concatenate([[0.0], np.cumsum(sorted_counts)])
    # best[b]: head plus tails 1..j with the last of them ending at rank b.
    best = np.full(size + 1, np.inf)
    ends = np.arange(min_head, size + 1)
    best[ends] = prefix[-1] * ((d_model + logit)
                               * np.maximum(ends + len(dims), k0) + overhead)
    for dim in dims:
        new = np.full(size + 1, np.inf)
        for b in range(1, size + 1):
            a = np.arange(b)
            new[b] = np.min(best[a] + (prefix[b] - prefix[a]) * (
                d_model * max(dim, k0) + 2 * overhead
                + (dim + logit) * np.maximum(b - a, k0)))
        best = new
    return best[size] / prefix[-1]


def zipf_counts(rng, size, zeros=True):
    """Random Zipf-like integer counts, shuffled, with ties and zeros."""
    exponent = rng.uniform(0.3, 2.0)
    counts = np.floor(rng.uniform(50, 3000) / np.arange(1, size + 1)**exponent
                      * rng.uniform(0.5, 1.5, size))
    if zeros and rng.random() < 0.5:
        counts[rng.random(size) < 0.2] = 0
    counts[0] = max(counts[0], 1)
    return rng.permutation(counts.astype(np.int64))


def test_tail_dims_formula_and_override():
    assert oc.tail_dims(128, 3) == (32, 8, 2)
    assert oc.tail_dims(10, 3, proj_factor=4.0) == (2, 1, 1)
    assert oc.tail_dims(512, 2, proj_factor=2.0) == (256, 128)
    assert oc.tail_dims(64, 0) == ()
    assert oc.tail_dims(64, 2, proj_dims=(7, 3)) == (7, 3)
    assert oc.tail_dims(64, 2, proj_dims=None) == (16, 4)


def test_hand_computed_cost():
    # Sorted counts 4,3,2,1 (T=10); head [0,1), tails [1,3), [3,4); dims 4, 2.
    result = oc.cutoff_cost([2, 4, 1, 3], (1, 3), d_model=8, proj_factor=2.0)
    assert result.cost == pytest.approx(8 * 3 + 0.5 * (8 * 4 + 4 * 2)
                                        + 0.1 * (8 * 2 + 2 * 1))  # 45.8
    assert result.full_softmax_cost == 32
    assert result.relative_cost == pytest.approx(45.8 / 32)
    assert result.cluster_mass == pytest.approx((0.4, 0.5, 0.1))
    assert result.cluster_size == (1, 2, 1)
    gpu = oc.cutoff_cost([2, 4, 1, 3], (1, 3), d_model=8, proj_factor=2.0,
                         min_matmul_cols=4, matmul_overhead=1.0)
    assert gpu.cost == pytest.approx(
        (8 * 4 + 1) + 0.5 * (8 * 4 + 4 * 4 + 2) + 0.1 * (8 * 4 + 2 * 4 + 2))
    assert gpu.full_softmax_cost == 33
    # Logit cost s = 60: every logit costs d + s (head) or d_i + s (tails).
    cpu = oc.cutoff_cost([2, 4, 1, 3], (1, 3), d_model=8, proj_factor=2.0,
                         logit_cost=60)
    assert cpu.cost == pytest.approx((8 + 60) * 3 + 0.5 * (8 * 4 + 64 * 2)
                                     + 0.1 * (8 * 2 + 62 * 1))  # 291.8
    assert cpu.full_softmax_cost == 8 * 4 + 60 * 4  # d*V + s*V
    assert cpu.relative_cost == pytest.approx(291.8 / 272)
    both = oc.cutoff_cost([2, 4, 1, 3], (1, 3), d_model=8, proj_factor=2.0,
                          min_matmul_cols=4, matmul_overhead=1.0,
                          logit_cost=60)
    assert both.cost == pytest.approx(
        (68 * 4 + 1) + 0.5 * (8 * 4 + 64 * 4 + 2) + 0.1 * (8 * 4 + 62 * 4 + 2))
    assert both.full_softmax_cost == 68 * 4 + 1
    assert oc.cutoff_cost([2, 4, 1, 3], (1, 3), 8, 2.0,
                          logit_cost=0.0) == result


@pytest.mark.parametrize("num_tails", [1, 2, 3])
def test_matches_brute_force(num_tails):
    rng = np.random.default_rng(num_tails)
    for _ in range(60):
        size = int(rng.integers(num_tails + 1, 41))
        counts = zipf_counts(rng, size)
        d_model = int(rng.choice([1, 3, 16, 64]))
        proj_factor = float(rng.choice([1.0, 2.0, 4.0]))
        dims = ref_dims(d_model, num_tails, proj_factor)
        result = oc.optimal_cutoffs(counts, num_tails, d_model, proj_factor)
        cost, cutoffs = brute_force(counts, d_model, dims)
        assert result.cutoffs == cutoffs, (counts, d_model, proj_factor)
        assert result.cost == pytest.approx(cost, rel=1e-12)
        assert result.tail_dims == dims


def test_options_match_brute_force():
    rng = np.random.default_rng(7)
    for trial in range(120):
        num_tails = 1 + trial % 3
        size = int(rng.integers(num_tails + 2, 36))
        counts = zipf_counts(rng, size)
        d_model = int(rng.choice([4, 16, 48]))
        dims = tuple(int(x) for x in rng.integers(1, 40, num_tails))
        min_head = int(rng.integers(1, size - num_tails + 1))
        k0 = int(rng.choice([0, 2, 8, 20]))
        overhead = int(rng.choice([0, 5, 300]))
        result = oc.optimal_cutoffs(
            counts, num_tails, d_model, proj_dims=dims, min_head=min_head,
            min_matmul_cols=k0, matmul_overhead=overhead)
        cost, cutoffs = brute_force(counts, d_model, dims, min_head, k0,
                                    overhead)
        assert result.cutoffs == cutoffs, (counts, dims, min_head, k0)
        assert result.cost == pytest.approx(cost, rel=1e-12)
        assert result.cutoffs[0] >= min_head


@pytest.mark.parametrize("num_tails", [1, 2, 3])
def test_logit_cost_matches_brute_force(num_tails):
    rng = np.random.default_rng(100 + num_tails)
    for trial in range(80):
        size = int(rng.integers(num_tails + 1, 41))
        counts = zipf_counts(rng, size)
        d_model = int(rng.choice([1, 3, 16, 64, 128]))
        # Multiples of 0.5 keep the count-unit costs exact in float64.
        logit = float(rng.choice([0.5, 7, 60, 60, 250, 2000]))
        if trial % 2:  # Combined with every other option.
            dims = tuple(int(x) for x in rng.integers(1, 40, num_tails))
            min_head = int(rng.integers(1, size - num_tails + 1))
            k0 = int(rng.choice([0, 2, 8, 20]))
            overhead = int(rng.choice([0, 5, 300]))
        else:
            dims = ref_dims(d_model, num_tails, 4.0)
            min_head, k0, overhead = 1, 0, 0
        result = oc.optimal_cutoffs(
            counts, num_tails, d_model, proj_dims=dims, min_head=min_head,
            min_matmul_cols=k0, matmul_overhead=overhead, logit_cost=logit)
        cost, cutoffs = brute_force(counts, d_model, dims, min_head, k0,
                                    overhead, logit)
        assert result.cutoffs == cutoffs, (counts, d_model, dims, logit, k0)
        assert result.cost == pytest.approx(cost, rel=1e-12)
        full = (d_model + logit) * max(size, k0) + overhead
        assert result.full_softmax_cost == pytest.approx(full, rel=1e-12)


def monge_violation(weights):
    """Largest w(a,c) + w(b,e) - w(a,e) - w(b,c) over a <= b <= c <= e."""
    n = weights.shape[0]
    a, b, c, e = np.meshgrid(*[np.arange(n)] * 4, indexing="ij", sparse=True)
    gap = (weights[a, c] + weights[b, e] - weights[a, e] - weights[b, c])
    ordered = (a <= b) & (b <= c) & (c <= e)
    return float(np.max(np.where(ordered, gap, -np.inf)))


def test_tail_cost_satisfies_quadrangle_inequality():
    rng = np.random.default_rng(3)
    for trial in range(30):
        counts = np.sort(zipf_counts(rng, 22))[::-1].astype(np.float64)
        prefix = np.concatenate([[0.0], np.cumsum(counts)])
        model = oc.CostModel(d_model=int(rng.integers(1, 64)),
                             dims=(int(rng.integers(1, 40)),),
                             min_matmul_cols=int(rng.choice([0, 3, 10, 30])),
                             matmul_overhead=float(rng.choice([0, 7.5])),
                             logit_cost=float(rng.choice([0, 1.5, 60])))
        a, b = np.meshgrid(np.arange(23), np.arange(23), indexing="ij")
        # Entries below the diagonal are never read by the inequality.
        weights = np.where(a <= b, model.tail(1, prefix, a, np.maximum(a, b)),
                           0.0)
        assert monge_violation(weights) <= 1e-9 * np.max(weights)
    # The check can fail: one heavy middle token with a concave size term.
    prefix = (np.arange(23) > 10).astype(np.float64)
    concave = np.where(a <= b, (prefix[np.maximum(a, b)] - prefix[a])
                       * np.sqrt(np.abs(b - a)), 0.0)
    assert monge_violation(concave) > 0.1


def test_matches_plain_dp_and_quadratic_method():
    rng = np.random.default_rng(11)
    cases = [dict(num_tails=2, d_model=128), dict(num_tails=3, d_model=64),
             dict(num_tails=3, d_model=32, min_head=50, min_matmul_cols=64,
                  matmul_overhead=100.0),
             dict(num_tails=4, d_model=512, proj_factor=2.0),
             dict(num_tails=3, d_model=128, logit_cost=60.0),
             dict(num_tails=2, d_model=32, min_head=20, min_matmul_cols=16,
                  matmul_overhead=50.0, logit_cost=12.5)]
    for case in cases:
        counts = zipf_counts(rng, int(rng.integers(1800, 2200)), zeros=False)
        dims = ref_dims(case["d_model"], case["num_tails"],
                        case.get("proj_factor", 4.0))
        options = {k: case[k] for k in ("min_head", "min_matmul_cols",
                                        "matmul_overhead", "logit_cost")
                   if k in case}
        fast = oc.optimal_cutoffs(counts, **case)
        slow = oc.optimal_cutoffs(counts, method="quadratic", **case)
        assert (fast.method, slow.method) == ("divide_and_conquer", "quadratic")
        assert fast == dataclasses.replace(slow, method=fast.method)
        reference = plain_dp(counts, case["d_model"], dims,
                             options.get("min_head", 1),
                             options.get("min_matmul_cols", 0),
                             options.get("matmul_overhead", 0.0),
                             options.get("logit_cost", 0.0))
        assert fast.cost == pytest.approx(reference, rel=1e-12)
        own, total = ref_costs(counts, [fast.cutoffs], case["d_model"], dims,
                               options.get("min_matmul_cols", 0),
                               options.get("matmul_overhead", 0.0),
                               options.get("logit_cost", 0.0))
        assert own[0] / total == pytest.approx(reference, rel=1e-12)


def test_invariant_to_input_order():
    rng = np.random.default_rng(5)
    counts = zipf_counts(rng, 3000)
    expected = oc.optimal_cutoffs(counts, 3, 96, min_matmul_cols=8)
    for _ in range(3):
        shuffled = oc.optimal_cutoffs(rng.permutation(counts), 3, 96,
                                      min_matmul_cols=8)
        assert shuffled == expected
    assert oc.optimal_cutoffs(list(np.sort(counts)), 3, 96,
                              min_matmul_cols=8) == expected


def test_no_tails_is_the_full_softmax():
    result = oc.optimal_cutoffs([5, 0, 3, 3, 1], 0, d_model=16)
    assert result.cutoffs == () and result.method == "full_softmax"
    assert result.cost == result.full_softmax_cost == 16 * 5
    assert result.relative_cost == 1.0
    assert result.cluster_mass == (1.0,) and result.cluster_size == (5,)
    gpu = oc.optimal_cutoffs([5, 3], 0, 16, min_matmul_cols=64,
                             matmul_overhead=10.0)
    assert gpu.cost == 16 * 64 + 10 and gpu.relative_cost == 1.0
    assert oc.cutoff_cost([5, 3], (), 16).cost == 32
    cpu = oc.optimal_cutoffs([5, 0, 3, 3, 1], 0, 16, logit_cost=60.0)
    assert cpu.cost == cpu.full_softmax_cost == (16 + 60) * 5


def test_small_vocabularies_ties_and_zero_counts():
    assert oc.optimal_cutoffs([7], 0, 8).cutoffs == ()
    assert oc.optimal_cutoffs([1, 9], 1, 8).cutoffs == (1,)
    assert oc.optimal_cutoffs([3, 1, 2], 2, 8).cutoffs == (1, 2)
    # All equal counts and zero-mass tails: exact ties, smallest cutoffs win.
    for counts in ([4] * 12, [9, 0, 0, 0, 0, 0], [0, 0, 5, 0, 1, 0, 0]):
        for num_tails in (1, 2, 3):
            dims = ref_dims(32, num_tails, 4.0)
            cost, cutoffs = brute_force(counts, 32, dims)
            result = oc.optimal_cutoffs(counts, num_tails, 32)
            assert result.cutoffs == cutoffs
            assert result.cost == pytest.approx(cost, rel=1e-12)
    # Probabilities work as well as counts.
    counts = np.array([50, 20, 10, 10, 5, 3, 1, 1])
    assert (oc.optimal_cutoffs(counts / counts.sum(), 2, 16).cutoffs
            == oc.optimal_cutoffs(counts, 2, 16).cutoffs)


@pytest.mark.parametrize("call, match", [
    (lambda: oc.optimal_cutoffs([], 1, 8), "non-empty"),
    (lambda: oc.optimal_cutoffs([[1, 2], [3, 4]], 1, 8), "1-D"),
    (lambda: oc.optimal_cutoffs([3, -1, 2], 1, 8), "entry 1 is -1"),
    (lambda: oc.optimal_cutoffs([3, np.nan], 1, 8), "finite"),
    (lambda: oc.optimal_cutoffs(["a", "b"], 1, 8), "numbers"),
    (lambda: oc.optimal_cutoffs([0, 0, 0], 1, 8), "all zero"),
    (lambda: oc.optimal_cutoffs([3, 2, 1], 3, 8), "num_tails=3 must be smaller"),
    (lambda: oc.optimal_cutoffs([3, 2, 1], -1, 8), "num_tails=-1"),
    (lambda: oc.optimal_cutoffs([3, 2, 1], 1.5, 8), "num_tails must be an int"),
    (lambda: oc.optimal_cutoffs([3, 2, 1], 1, 0), "d_model=0"),
    (lambda: oc.optimal_cutoffs([3, 2, 1], 1, 8, proj_factor=0.5),
     "proj_factor=0.5"),
    (lambda: oc.optimal_cutoffs([3, 2, 1], 2, 8, proj_dims=(4,)), "proj_dims"),
    (lambda: oc.optimal_cutoffs([3, 2, 1], 1, 8, proj_dims=(0,)), "proj_dims"),
    (lambda: oc.optimal_cutoffs([3, 2, 1], 1, 8, min_head=0), "min_head=0"),
    (lambda: oc.optimal_cutoffs([3, 2, 1], 2, 8, min_head=2), "no room"),
    (lambda: oc.optimal_cutoffs([3, 2, 1], 1, 8, min_matmul_cols=-1),
     "min_matmul_cols"),
    (lambda: oc.optimal_cutoffs([3, 2, 1], 1, 8, matmul_overhead=-1.0),
     "matmul_overhead"),
    (lambda: oc.optimal_cutoffs([3, 2, 1], 1, 8, logit_cost=-1.0),
     "logit_cost=-1.0 must be finite and >= 0"),
    (lambda: oc.optimal_cutoffs([3, 2, 1], 1, 8, logit_cost=np.inf),
     "logit_cost"),
    (lambda: oc.optimal_cutoffs([3, 2, 1], 1, 8, logit_cost="60"),
     "logit_cost must be a number"),
    (lambda: oc.cutoff_cost([3, 2, 1], (1,), 8, logit_cost=-0.5),
     "logit_cost"),
    (lambda: oc.optimal_cutoffs([3, 2, 1], 1, 8, method="smawk"), "method"),
    (lambda: oc.cutoff_cost([3, 2, 1], (2, 1), 8), "strictly increasing"),
    (lambda: oc.cutoff_cost([3, 2, 1], (1, 3), 8), "strictly increasing"),
    (lambda: oc.cutoff_cost([3, 2, 1], (0,), 8), "cutoffs=0"),
])
def test_bad_arguments_raise_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_readers(tmp_path):
    (tmp_path / "a.txt").write_text("the 12\n1990 7\n<eos> 3.5\n")
    assert list(oc.read_counts_file(tmp_path / "a.txt")) == [12, 7, 3.5]
    (tmp_path / "b.txt").write_text("12\n\n3\n")
    with pytest.raises(ValueError, match="b.txt:2"):
        oc.read_counts_file(tmp_path / "b.txt")
    meta = {"vocab_size": 3, "unigram_counts": [5, 9, 1]}
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    assert list(oc.read_data_dir_counts(tmp_path)) == [5, 9, 1]
    for bad, match in (({"vocab_size": 4, "unigram_counts": [5, 9, 1]},
                        "vocab_size=4"),
                       ({"unigram_counts": [5, "x"]}, "unigram_counts must"),
                       ({"vocab_size": 3}, "neither")):
        (tmp_path / "meta.json").write_text(json.dumps(bad))
        with pytest.raises(ValueError, match=match):
            oc.read_data_dir_counts(tmp_path)
    (tmp_path / "meta.json").write_text("{")
    with pytest.raises(ValueError, match="not valid JSON"):
        oc.read_data_dir_counts(tmp_path)


def run_cli(*args, cwd):
    return subprocess.run([sys.executable, str(cwd / "optimal_cuts.py"), *args],
                          capture_output=True, text=True, timeout=60,
                          cwd=cwd)


def test_cli_outputs_match_library(tmp_path, project_root):
    rng = np.random.default_rng(2)
    counts = zipf_counts(rng, 400, zeros=False)
    expected = oc.optimal_cutoffs(counts, 3, 64)
    (tmp_path / "counts.txt").write_text(
        "".join(f"tok{i} {c}\n" for i, c in enumerate(counts)))
    flags = run_cli(f"--counts_file={tmp_path / 'counts.txt'}",
                    "--num_tails=3", "--d_model=64", "--format=flags",
                    cwd=project_root)
    assert flags.returncode == 0, flags.stderr
    assert flags.stdout == "--cutoffs=" + ",".join(
        map(str, expected.cutoffs)) + "\n"
    # A built data directory: meta.json pointing at one count per line.
    (tmp_path / "unigram_counts.txt").write_text(
        "\n".join(map(str, np.sort(counts)[::-1])) + "\n")
    (tmp_path / "meta.json").write_text(json.dumps(
        {"vocab_size": 400, "unigram_counts_file": "unigram_counts.txt"}))
    report = run_cli(f"--data_dir={tmp_path}", "--num_tails=3", "--d_model=64",
                     "--format=json", cwd=project_root)
    assert report.returncode == 0, report.stderr
    data = json.loads(report.stdout)
    assert tuple(data["cutoffs"]) == expected.cutoffs
    assert data["relative_cost"] == pytest.approx(expected.relative_cost)
    assert data["speedup"] == pytest.approx(1 / expected.relative_cost)
    table = run_cli(f"--data_dir={tmp_path}", "--num_tails=3", "--d_model=64",
                    cwd=project_root)
    assert table.returncode == 0, table.stderr
    assert f"cutoffs: {','.join(map(str, expected.cutoffs))}" in table.stdout
    assert "predicted speed-up" in table.stdout and "tail 3" in table.stdout
    assert "multiply-adds (full softmax" in table.stdout
    # --logit_cost reaches the solver, the table and the JSON report.
    cpu = oc.optimal_cutoffs(counts, 3, 64, logit_cost=60)
    assert cpu.cutoffs != expected.cutoffs
    flags = run_cli(f"--data_dir={tmp_path}", "--num_tails=3", "--d_model=64",
                    "--logit_cost=60", "--format=flags", cwd=project_root)
    assert flags.returncode == 0, flags.stderr
    assert flags.stdout == "--cutoffs=" + ",".join(map(str, cpu.cutoffs)) + "\n"
    table = run_cli(f"--data_dir={tmp_path}", "--num_tails=3", "--d_model=64",
                    "--logit_cost=60", cwd=project_root)
    assert table.returncode == 0, table.stderr
    assert f"cutoffs: {','.join(map(str, cpu.cutoffs))}" in table.stdout
    assert ("multiply-add equivalents with 60 per logit (full softmax"
            in table.stdout)
    report = run_cli(f"--data_dir={tmp_path}", "--num_tails=3", "--d_model=64",
                     "--logit_cost=60", "--format=json", cwd=project_root)
    assert report.returncode == 0, report.stderr
    data = json.loads(report.stdout)
    assert data["logit_cost"] == 60 and tuple(data["cutoffs"]) == cpu.cutoffs
    assert data["full_softmax_cost"] == pytest.approx(cpu.full_softmax_cost)
    help_text = " ".join(run_cli("--help", cwd=project_root).stdout.split())
    assert ("--logit_cost: Extra cost per computed logit" in help_text
            and "0 = the plain multiply-add model; ~60 fits this CPU"
            in help_text.replace("multiply- add", "multiply-add"))


@pytest.mark.parametrize("content, args, needle", [
    ("", (), "is empty"),
    ("10\n5\nmany\n", (), "counts.txt:3"),
    ("the 10\nof -5\n", (), "counts.txt:2"),
    ("10\n5\n", ("--num_tails=2",), "--num_tails=2"),
    ("10\n5\n", ("--d_model=0",), "--d_model=0"),
    ("10\n5\n", ("--proj_factor=0.5",), "--proj_factor"),
    ("10\n5\n", ("--logit_cost=-1",), "--logit_cost=-1.0 must be"),
    ("10\n5\n", ("--logit_cost=nan",), "--logit_cost=nan"),
    (None, (), "meta.json"),
])
def test_cli_errors_are_one_line(tmp_path, project_root, content, args, needle):
    if content is None:
        source = f"--data_dir={tmp_path}"
    else:
        (tmp_path / "counts.txt").write_text(content)
        source = f"--counts_file={tmp_path / 'counts.txt'}"
    proc = run_cli(source, "--num_tails=1", *args, cwd=project_root)
    assert proc.returncode == 1
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert needle in lines[0]


def test_import_does_not_load_tensorflow(project_root):
    code = ("import sys, optimal_cuts, pardata.cutoffs; "
            "sys.exit('tensorflow' in sys.modules or 'keras' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=project_root,
                          capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


@pytest.fixture(scope="module")
def wikitext2_counts(wikitext2_root):
    """WikiText-2 train word counts: whitespace tokens plus <eos> per line."""
    counter = collections.Counter()
    with open(wikitext2_root / "wikitext-2" / "wiki.train.tokens",
              encoding="utf-8") as stream:
        for line in stream:
            counter.update(line.split())
            counter["<eos>"] += 1
    return np.array(list(counter.values()), dtype=np.int64)


def test_wikitext2_words(wikitext2_counts):
    counts = wikitext2_counts
    assert counts.size == 33278
    # K = 1 against exhaustive enumeration of the head size.
    heads = np.arange(1, counts.size)[:, None]
    cost, total = ref_costs(counts, heads, 128, (32,))
    one = oc.optimal_cutoffs(counts, 1, 128)
    assert one.cutoffs == (int(heads[np.argmin(cost), 0]),)
    assert one.cost == pytest.approx(cost.min() / total, rel=1e-12)
    # K = 3: no single or paired move of the cutoffs is cheaper.
    result = oc.optimal_cutoffs(counts, 3, 128)
    base = ref_costs(counts, [result.cutoffs], 128, (32, 8, 2))[0][0]
    moves = [np.array(m) for m in itertools.product(range(-3, 4), repeat=3)]
    neighbours = [np.array(result.cutoffs) + m for m in moves if any(m)]
    neighbours = [c for c in neighbours
                  if c[0] >= 1 and c[-1] < counts.size and np.all(np.diff(c) > 0)]
    assert np.all(ref_costs(counts, neighbours, 128, (32, 8, 2))[0] >= base)
    # Sensible: balanced clusters, tails growing, a large predicted gain.
    assert result.cluster_mass[0] > 0.2
    assert all(m > 0.1 for m in result.cluster_mass)
    assert list(result.cluster_size[1:]) == sorted(result.cluster_size[1:])
    assert result.relative_cost < one.relative_cost < 0.2
    given = oc.cutoff_cost(counts, result.cutoffs, 128)
    assert given == dataclasses.replace(result, method="given")
    # Logit cost s = 60 (CPU fit): a bigger head and tails, still a local
    # optimum of the reference cost, and cheaper than the s = 0 cutoffs.
    cpu = oc.optimal_cutoffs(counts, 3, 128, logit_cost=60)
    base = ref_costs(counts, [cpu.cutoffs], 128, (32, 8, 2), logit=60)[0][0]
    neighbours = [np.array(cpu.cutoffs) + m for m in moves if any(m)]
    assert np.all(ref_costs(counts, neighbours, 128, (32, 8, 2),
                            logit=60)[0] >= base)
    assert all(a > b for a, b in zip(cpu.cutoffs, result.cutoffs))
    old = oc.cutoff_cost(counts, result.cutoffs, 128, logit_cost=60)
    assert cpu.speedup > 1.5 * old.speedup
    assert cpu.full_softmax_cost == (128 + 60) * counts.size
