r"""Exact optimal cutoffs for the adaptive softmax (Grave et al. 2017).

Convention (shared with `model/layers/adaptive_softmax.py`): token ids are frequency
ranks, `cutoffs = (c_0, ..., c_{K-1})` is strictly increasing with every
`c_j` in `[1, N)` and the vocabulary size `N` is NOT listed. The head predicts
ranks `[0, c_0)` plus one logit per tail; tail `i = 1..K` predicts ranks
`[c_{i-1}, c_i)` (`c_K = N`) through a projection to `d_i` dims, see
`model.config_base.tail_dims` (the layers' formula, used here too). `K = 0`
(`cutoffs = ()`) is a full softmax.

Cost model (expected multiply-adds per token, arXiv 1609.04309 sec. 4):

    cost = g(c_0 + K) * (d + s) + o
           + sum_i P_i * (d * g(d_i) + (d_i + s) * g(|C_i|) + 2 o)

with `P_i` the probability mass of tail `i`, `|C_i| = c_i - c_{i-1}`,
`g(k) = max(k, min_matmul_cols)`, `o = matmul_overhead` and `s = logit_cost`.
With the defaults (all three options 0) this is exactly the plain multiply-add model
`d*(c_0 + K) + sum_i P_i * (d*d_i + d_i*|C_i|)`. `s` charges every computed
logit a constant beyond its multiply-adds (bias, exp, softmax gradient, memory
traffic); s ~ 60 fits the real layer on CPU (bench/bench_adaptive_softmax.py)
and picks much faster cutoffs there than s = 0. The GPU options model a
device where a product with `k < k0` output columns costs as much as one with
`k0` columns (logit work included), plus a fixed launch cost `o` per product,
counted with the probability that the product runs (1 for the head, `P_i` for
each of tail `i`'s two products). The full softmax computes N logits and
costs `(d + s) * g(N) + o` under the same model.

Algorithm: an exact dynamic program over the sorted counts. Every option
above keeps the quadrangle inequality (proof in `_layer_divide_and_conquer`),
so each layer's minimiser is monotone and divide and conquer solves a layer in
O(N log N); `method="quadratic"` runs the plain O(K N^2) DP as a cross-check.

Its command line is optimal_cuts.py at the repository's root:
    python optimal_cuts.py --data_dir=data/wikitext2 --num_tails=3
    python optimal_cuts.py --counts_file=counts.txt --format=flags
"""

import dataclasses
import functools
import json
import math
import numbers
import os
import time

from absl import logging
import numpy as np

from model.config_base import tail_dims

METHODS = ("auto", "divide_and_conquer", "quadratic")


class CutoffArgumentError(ValueError):
    """A bad argument; `argument` is its name, identical to the CLI flag."""

    def __init__(self, argument, message):
        super().__init__(f"{argument}{message}")
        self.argument = argument


def _check_int(name, value, lower):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise CutoffArgumentError(name, f" must be an integer, got {value!r}")
    if value < lower:
        raise CutoffArgumentError(name, f"={value} must be >= {lower}")
    return int(value)


def _check_real(name, value, lower):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise CutoffArgumentError(name, f" must be a number, got {value!r}")
    if not (math.isfinite(value) and value >= lower):
        raise CutoffArgumentError(name, f"={value} must be finite and >= {lower}")
    return float(value)


def _checked_tail_dims(d_model, num_tails, proj_factor, proj_dims):
    """`model.config_base.tail_dims` (the formula the layers build with), its arguments
    checked first with this module's errors (`CutoffArgumentError`, named after the flags).

    Returns:
        Tuple of K ints, `d_i = max(1, int(d_model // proj_factor ** i))` for
        `i = 1..K` unless `proj_dims` (K integers >= 1) is given.
    """
    d_model = _check_int("d_model", d_model, 1)
    num_tails = _check_int("num_tails", num_tails, 0)
    proj_factor = _check_real("proj_factor", proj_factor, 1.0)
    proj_dims = tuple(proj_dims or ())
    if proj_dims:
        if len(proj_dims) != num_tails:
            raise CutoffArgumentError(
                "proj_dims", f" has {len(proj_dims)} entries for num_tails="
                f"{num_tails}; give one dim per tail or none")
        proj_dims = tuple(_check_int("proj_dims", dim, 1) for dim in proj_dims)
    return tail_dims(d_model, num_tails, proj_factor, proj_dims)


@dataclasses.dataclass(frozen=True)
class CutoffResult:
    """Cutoffs with their expected cost per token (multiply-adds).

    Attributes:
        cutoffs: `(c_0, ..., c_{K-1})`, frequency ranks, N not included.
        cost: expected cost per token of head + tails.
        full_softmax_cost: cost of a full softmax under the same cost model.
        relative_cost: `cost / full_softmax_cost` (predicted speed-up is its
            inverse, see `speedup`).
        cluster_mass: K+1 probability masses, head first.
        cluster_size: K+1 token counts, head first (the head's K cluster
            logits are not counted).
        tail_dims: the K projection dims used.
        method: how the cutoffs were found ("divide_and_conquer", "quadratic",
            "exhaustive" for K = 1, "full_softmax" for K = 0, "given" when
            evaluated by `cutoff_cost`).
    """

    cutoffs: tuple
    cost: float
    full_softmax_cost: float
    relative_cost: float
    cluster_mass: tuple
    cluster_size: tuple
    tail_dims: tuple
    method: str

    @property
    def speedup(self):
        """Predicted speed-up of head + tails over a full softmax."""
        return 1.0 / self.relative_cost


@dataclasses.dataclass(frozen=True)
class CostModel:
    """The objective in count units (costs times the total count `T`); the tests check
    its tail cost against the quadrangle inequality."""

    d_model: int
    dims: tuple
    min_matmul_cols: int
    matmul_overhead: float
    logit_cost: float = 0.0

    def logits(self, count, total):
        """A product computing `count` logits for every token (head, full)."""
        return total * ((self.d_model + self.logit_cost)
                        * np.maximum(count, self.min_matmul_cols)
                        + self.matmul_overhead)

    def head(self, c0, total):
        return self.logits(c0 + len(self.dims), total)

    def tail(self, i, prefix, a, b):
        """Cost of tail i (1-based) holding ranks [a, b); a, b broadcast."""
        dim = self.dims[i - 1]
        per_token = (self.d_model * max(dim, self.min_matmul_cols)
                     + 2.0 * self.matmul_overhead)
        return (prefix[b] - prefix[a]) * (
            per_token + (dim + self.logit_cost)
            * np.maximum(b - a, self.min_matmul_cols))


def _sorted_counts(counts):
    """Counts as float64 sorted by descending frequency; validated."""
    try:
        values = np.asarray(counts, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise CutoffArgumentError(
            "counts", f" must be numbers ({error})") from None
    if values.ndim != 1 or values.size == 0:
        raise CutoffArgumentError(
            "counts", f" must be a non-empty 1-D sequence, got shape "
            f"{values.shape}")
    if not np.all(np.isfinite(values)) or np.any(values < 0):
        bad = int(np.flatnonzero(~(np.isfinite(values) & (values >= 0)))[0])
        raise CutoffArgumentError(
            "counts", f" must be finite and >= 0; entry {bad} is {values[bad]}")
    if not values.sum() > 0:
        raise CutoffArgumentError("counts", " are all zero; nothing to model")
    return np.sort(values)[::-1]


def _setup(counts, num_tails, d_model, proj_factor, proj_dims,
           min_matmul_cols, matmul_overhead, logit_cost):
    values = _sorted_counts(counts)
    num_tails = _check_int("num_tails", num_tails, 0)
    if num_tails >= values.size:
        raise CutoffArgumentError(
            "num_tails", f"={num_tails} must be smaller than the vocabulary "
            f"size {values.size} (every cluster needs a token); use fewer tails")
    model = CostModel(
        d_model=_check_int("d_model", d_model, 1),
        dims=_checked_tail_dims(d_model, num_tails, proj_factor, proj_dims),
        min_matmul_cols=_check_int("min_matmul_cols", min_matmul_cols, 0),
        matmul_overhead=_check_real("matmul_overhead", matmul_overhead, 0.0),
        logit_cost=_check_real("logit_cost", logit_cost, 0.0))
    prefix = np.concatenate([[0.0], np.cumsum(values)])
    return values, prefix, model


def _evaluate(values, prefix, model, cutoffs, method):
    """Builds the CutoffResult of `cutoffs` (already validated)."""
    total = prefix[-1]
    size = values.size
    bounds = (0,) + tuple(cutoffs) + (size,)
    head_end = bounds[1]
    cost = float(model.head(head_end, total))
    for i in range(1, len(bounds) - 1):
        cost += float(model.tail(i, prefix, bounds[i], bounds[i + 1]))
    full = float(model.logits(size, total))
    masses = tuple(float((prefix[b] - prefix[a]) / total)
                   for a, b in zip(bounds, bounds[1:]))
    return CutoffResult(
        cutoffs=tuple(int(c) for c in cutoffs),
        cost=float(cost / total),
        full_softmax_cost=float(full / total),
        relative_cost=float(cost / full),
        cluster_mass=masses,
        cluster_size=tuple(b - a for a, b in zip(bounds, bounds[1:])),
        tail_dims=model.dims,
        method=method)


def cutoff_cost(counts, cutoffs, d_model, proj_factor=4.0, proj_dims=(),
                min_matmul_cols=0, matmul_overhead=0.0, logit_cost=0.0):
    """Evaluates the cost model for given cutoffs.

    Args:
        counts: unigram counts, any order (sorted descending internally:
            cutoffs refer to frequency ranks).
        cutoffs: strictly increasing ints in `[1, N)`; `()` is a full softmax.
        d_model, proj_factor, proj_dims, min_matmul_cols, matmul_overhead,
        logit_cost: as in `optimal_cutoffs`.

    Returns:
        CutoffResult with method "given".

    Raises:
        ValueError: bad counts, cutoffs or options.
    """
    cutoffs = tuple(cutoffs or ())
    values, prefix, model = _setup(counts, len(cutoffs), d_model, proj_factor,
                                   proj_dims, min_matmul_cols, matmul_overhead,
                                   logit_cost)
    for c in cutoffs:
        _check_int("cutoffs", c, 1)
    if any(c >= values.size for c in cutoffs) or any(
            b <= a for a, b in zip(cutoffs, cutoffs[1:])):
        raise CutoffArgumentError(
            "cutoffs", f"={cutoffs} must be strictly increasing and < "
            f"vocabulary size {values.size} (which is not listed)")
    return _evaluate(values, prefix, model, cutoffs, "given")


def _layer_quadratic(f_next, lo, hi, weight):
    """`f[a] = min_{a < b <= hi+1} weight(a, b) + f_next[b]` for a in [lo, hi].

    Plain O(N^2) reference; the first (smallest) minimising b is kept.
    """
    f = np.full(f_next.size, np.inf)
    arg = np.zeros(f_next.size, dtype=np.int64)
    for a in range(lo, hi + 1):
        b = np.arange(a + 1, hi + 2)
        values = weight(a, b) + f_next[b]
        j = int(np.argmin(values))
        f[a], arg[a] = values[j], b[j]
    return f, arg


def _layer_divide_and_conquer(f_next, lo, hi, weight):
    r"""Same result as `_layer_quadratic` in O(N log N), exact.

    Why it is exact. Write `w(a, b) = (S_b - S_a) * h(b - a)` for a tail
    holding ranks `[a, b)`, `S` the prefix counts and
    `h(x) = e + (d_i + s) * max(x, k0)` (`e = d*max(d_i, k0) + 2o`, `s` the
    logit cost): since `d_i + s >= 0` (`s >= 0` is enforced), `h` is a
    non-negative multiple of a maximum of affine functions plus a constant,
    hence non-decreasing and convex for every `k0, o, s >= 0`. (The head term
    depends on `c_0` alone and never enters a layer.) For
    `a <= b <= c <= e'` split `[a, e')` into `A = [a, b)`, `B = [b, c)`,
    `C = [c, e')` with masses `m_A, m_B, m_C >= 0`. Then
        w(a, e') + w(b, c) - w(a, c) - w(b, e')
          = m_A (h(e'-a) - h(c-a)) + m_C (h(e'-a) - h(e'-b))
            + m_B (h(e'-a) + h(c-b) - h(c-a) - h(e'-b)) >= 0,
    the first two terms by monotonicity, the last by convexity
    (`e'-a = (c-b) + (b-a) + (e'-c)`, and a convex `h` has
    `h(x + y + z) + h(y) >= h(x + y) + h(y + z)` for `x, y, z >= 0`). This
    quadrangle (Monge) inequality holds for every option of the cost model,
    `logit_cost` included, so divide and conquer stays exact; with
    `k0 = o = 0` it reads "`(S_b - S_a)(b - a)` is the mass of the square
    `[a,b)^2` and `(S_b - S_a)` times a constant telescopes".

    Consequence: let `opt(a)` be the smallest minimiser b. If `a < a'` had
    `b' = opt(a) > b = opt(a')`, then b is strictly worse than b' for a
    (b' is the smallest minimiser), and adding the inequality for
    `a < a' < b < b'` makes b' strictly better than b for a', a
    contradiction. So `opt` is non-decreasing, and solving the middle row
    first bounds the search of the rows above and below it. Each level of
    the recursion scans O(N) candidates in one vectorised pass.
    """
    f = np.full(f_next.size, np.inf)
    arg = np.zeros(f_next.size, dtype=np.int64)
    # Pending rows [row_lo, row_hi] whose minimiser lies in [opt_lo, opt_hi].
    row_lo, row_hi = np.array([lo]), np.array([hi])
    opt_lo, opt_hi = np.array([lo + 1]), np.array([hi + 1])
    while row_lo.size:
        mid = (row_lo + row_hi) // 2
        first = np.maximum(mid + 1, opt_lo)
        length = opt_hi - first + 1
        seg = np.zeros(length.size, dtype=np.int64)
        np.cumsum(length[:-1], out=seg[1:])
        b = np.arange(seg[-1] + length[-1]) + np.repeat(first - seg, length)
        values = weight(np.repeat(mid, length), b) + f_next[b]
        best = np.minimum.reduceat(values, seg)
        hits = np.flatnonzero(values == np.repeat(best, length))
        best_b = b[hits[np.searchsorted(hits, seg)]]
        f[mid], arg[mid] = best, best_b
        left, right = row_lo < mid, mid < row_hi
        row_lo, row_hi, opt_lo, opt_hi = (
            np.concatenate(pair) for pair in (
                (row_lo[left], mid[right] + 1), (mid[left] - 1, row_hi[right]),
                (opt_lo[left], best_b[right]), (best_b[left], opt_hi[right])))
    return f, arg


def _dynamic_program(model, prefix, num_tails, min_head, layer):
    """The cutoffs of `optimal_cutoffs`' dynamic program, each layer solved by `layer`."""
    size = prefix.size - 1
    # f[a]: cost of tails i..K when tail i starts at rank a (count units).
    # Tail i can start anywhere in [min_head + i - 1, size - K + i - 1].
    f = np.full(size + 1, np.inf)
    last = np.arange(min_head + num_tails - 1, size)
    f[last] = model.tail(num_tails, prefix, last, size)
    argmins = {}
    for i in range(num_tails - 1, 0, -1):
        f, argmins[i] = layer(f, min_head + i - 1, size - num_tails + i - 1,
                              functools.partial(model.tail, i, prefix))
    heads = np.arange(min_head, size - num_tails + 1)
    totals = model.head(heads, prefix[-1]) + f[heads]
    cutoffs = [int(heads[np.argmin(totals)])]
    for i in range(1, num_tails):
        cutoffs.append(int(argmins[i][cutoffs[-1]]))
    return cutoffs


def optimal_cutoffs(counts, num_tails, d_model, proj_factor=4.0, proj_dims=(),
                    min_head=1, min_matmul_cols=0, matmul_overhead=0.0,
                    logit_cost=0.0, method="auto"):
    """Cutoffs minimising the expected adaptive-softmax cost per token.

    Exact dynamic program over the frequency-sorted counts, from the last tail
    backwards: `F_K(a) = w_K(a, N)`, `F_i(a) = min_{b > a} w_i(a, b) +
    F_{i+1}(b)`, answer `min_{c_0 >= min_head} head(c_0) + F_1(c_0)`. Each
    layer's minimiser is monotone (proof in `_layer_divide_and_conquer`, valid
    for every option), so the default solver takes O(K N log N) (timings:
    bench/README.md#optimal-cutoffs). Among equal costs the lexicographically smallest
    cutoffs win (exactly when every cost times the total count is an integer
    below 2**53, e.g. integer counts with `total * d * N` well below 9e15;
    otherwise up to float64 round-off).

    Args:
        counts: unigram counts (non-negative, not all zero), any order.
        num_tails: number of tail clusters K, 0 <= K < N. K = 0 returns
            `cutoffs=()` (full softmax, relative cost 1).
        d_model: model width d, >= 1.
        proj_factor: tail i projects to `max(1, d // proj_factor**i)`, >= 1.
        proj_dims: explicit tail dims (K ints); overrides `proj_factor`.
        min_head: smallest allowed head size `c_0` (>= 1).
        min_matmul_cols: GPU model, products with fewer output columns cost
            as much as this many (0 disables).
        matmul_overhead: GPU model, fixed cost per product (in multiply-adds),
            weighted by the probability that the product runs.
        logit_cost: extra cost `s >= 0` of every computed logit, in
            multiply-add equivalents (bias, exp, softmax gradient, memory
            traffic). 0 is the plain multiply-add model; ~60 fits the
            layer on CPU (bench/bench_adaptive_softmax.py).
        method: "auto" (= "divide_and_conquer") or "quadratic" (plain O(K N^2)
            DP, for verification).

    Returns:
        CutoffResult.

    Raises:
        ValueError: bad counts or options, or an infeasible `min_head`.
    """
    values, prefix, model = _setup(counts, num_tails, d_model, proj_factor,
                                   proj_dims, min_matmul_cols, matmul_overhead,
                                   logit_cost)
    size, num_tails = values.size, len(model.dims)
    min_head = _check_int("min_head", min_head, 1)
    if min_head + num_tails > size:
        raise CutoffArgumentError(
            "min_head", f"={min_head} leaves no room for {num_tails} tails in "
            f"{size} tokens; need min_head + num_tails <= {size}")
    if method not in METHODS:
        raise CutoffArgumentError(
            "method", f"={method!r} is not one of {', '.join(METHODS)}")
    if num_tails == 0:
        return _evaluate(values, prefix, model, (), "full_softmax")
    if num_tails == 1:
        method = "exhaustive"
    elif method == "auto":
        method = "divide_and_conquer"
    layer = (_layer_quadratic if method == "quadratic"
             else _layer_divide_and_conquer)
    start = time.perf_counter()
    cutoffs = _dynamic_program(model, prefix, num_tails, min_head, layer)
    result = _evaluate(values, prefix, model, cutoffs, method)
    logging.info("optimal_cutoffs: N=%d K=%d logit_cost=%g method=%s "
                 "cutoffs=%s relative cost %.4f in %.3f s", size, num_tails,
                 model.logit_cost, method, result.cutoffs,
                 result.relative_cost, time.perf_counter() - start)
    return result


def read_counts_file(path):
    """Reads one `count` or `token count` (count last) per line.

    Args:
        path: text file; line i gives the count of the token with id i.

    Returns:
        float64 array of the counts in file order.

    Raises:
        ValueError: naming the file (and line): unreadable, empty, or a count
            that is not a number >= 0.
    """
    try:
        with open(path, encoding="utf-8") as stream:
            lines = stream.read().splitlines()
    except OSError as error:
        raise ValueError(f"cannot read counts file {path}: {error.strerror}; "
                         "check the path") from None
    except UnicodeDecodeError:
        raise ValueError(f"counts file {path} is not UTF-8 text") from None
    counts = []
    for number, line in enumerate(lines, start=1):
        fields = line.split()
        try:
            value = float(fields[-1]) if fields else math.nan
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(
                f"{path}:{number}: expected `count` or `token count` with a "
                f"count >= 0, got {line.strip()!r}; fix or remove that line")
        counts.append(value)
    if not counts:
        raise ValueError(f"counts file {path} is empty; write one count (or "
                         "`token count`) per line")
    return np.asarray(counts, dtype=np.float64)


def read_data_dir_counts(data_dir):
    """Unigram counts by id of a built dataset (meta.json, no TensorFlow).

    Args:
        data_dir: directory with `meta.json` holding `unigram_counts_file`
            (relative to `data_dir`) or an inline `unigram_counts` list.

    Returns:
        float64 array, entry i = count of id i.

    Raises:
        ValueError: missing or incomplete meta.json, bad counts, or a count
            list whose length is not `vocab_size`.
    """
    meta_path = os.path.join(data_dir, "meta.json")
    try:
        with open(meta_path, encoding="utf-8") as stream:
            meta = json.load(stream)
    except OSError:
        raise ValueError(f"no readable {meta_path}; build the dataset first "
                         "(build_data.py) or pass --counts_file") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{meta_path} is not valid JSON ({error}); rebuild "
                         "the dataset") from None
    if meta.get("unigram_counts_file"):
        counts = read_counts_file(
            os.path.join(data_dir, meta["unigram_counts_file"]))
    elif "unigram_counts" in meta:
        counts = meta["unigram_counts"]
        if not (isinstance(counts, list) and all(
                isinstance(c, (int, float)) and not isinstance(c, bool)
                and math.isfinite(c) and c >= 0 for c in counts)):
            raise ValueError(f"{meta_path}: unigram_counts must be a list of "
                             "numbers >= 0; rebuild the dataset")
        counts = np.asarray(counts, dtype=np.float64)
    else:
        raise ValueError(f"{meta_path} has neither unigram_counts_file nor "
                         "unigram_counts; rebuild the dataset or pass "
                         "--counts_file")
    vocab_size = meta.get("vocab_size")
    if vocab_size is not None and vocab_size != counts.size:
        raise ValueError(f"{meta_path}: vocab_size={vocab_size} but the "
                         f"unigram counts list {counts.size} ids; rebuild the "
                         "dataset")
    if np.any(np.diff(counts) > 0):
        logging.warning("%s: ids are not in descending frequency order; the "
                        "cutoffs below refer to frequency ranks, not ids",
                        data_dir)
    return counts


def format_table(result, logit_cost=0.0):
    """Human-readable report of a CutoffResult (a multi-line string).

    `logit_cost` only labels the cost unit; pass the value the result used.
    """
    size = sum(result.cluster_size)
    unit = (f"multiply-add equivalents with {logit_cost:g} per logit"
            if logit_cost else "multiply-adds")
    lines = [
        f"cutoffs: {','.join(map(str, result.cutoffs)) or '(none: full softmax)'}",
        f"expected cost per token: {result.cost:,.1f} {unit} "
        f"(full softmax {result.full_softmax_cost:,.1f})",
        f"relative cost: {result.relative_cost:.4f}   predicted speed-up: "
        f"{result.speedup:.2f}x   ({result.method}, N={size:,})",
        "",
        f"{'cluster':<8} {'ranks':>19} {'size':>9} {'mass':>8} {'dim':>6}",
    ]
    bounds = (0,) + result.cutoffs + (size,)
    dims = ("d_model",) + result.tail_dims
    for j, (mass, count) in enumerate(zip(result.cluster_mass,
                                          result.cluster_size)):
        name = "head" if j == 0 else f"tail {j}"
        ranks = f"[{bounds[j]:,}, {bounds[j + 1]:,})"
        lines.append(f"{name:<8} {ranks:>19} {count:>9,} {mass:>8.4f} "
                     f"{dims[j]:>6}")
    return "\n".join(lines)
