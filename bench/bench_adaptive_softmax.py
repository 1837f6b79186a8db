"""Benchmark: adaptive softmax vs full softmax, forward + backward tokens/s.

For each vocabulary size V and width D, times one training step of the loss
layer inside `tf.function` (loss, gradients to the layer's weights and to the
hidden states, as in a real step) for

- `AdaptiveSoftmax.nll` with the given or optimal cutoffs, and
- a full softmax: `keras.layers.Dense(V)` + `tf.nn.sparse_softmax_cross_entropy_with_logits`,

on B*T = --tokens random hidden states whose targets are sampled from a
unigram distribution: the real WikiText-2 word ranking for V = 33,278
(whitespace words plus one <eos> per line of wiki.train.tokens), a Zipf law
(or --counts_file) otherwise. The two steps are interleaved (alternating which
goes first) after a warm-up, and medians over --repeats are reported together
with the ratio measured in the same run and the speed-up the cost model of
the plain multiply-add model predicts, `d*V / (d*(c_0+K) + sum_i P_i (d*d_i + d_i*|C_i|))`.

That model counts matmul multiply-adds only. On CPU every logit also pays for
the bias, the softmax (exp, sums, gradient) and memory traffic, which matters
when `d_i` is tiny, so a second column adds `s = --logit_cost` multiply-add
equivalents per logit: `(d+s)*V / ((d+s)*(c_0+K) + sum_i P_i (d*d_i +
(d_i+s)*|C_i|))`. The default s = 60 is a rough fit to measurements on the
development machine (several cutoff sets, V = 33,278, D = 128).

Without --cutoffs the cutoffs are `optimal_cuts.optimal_cutoffs(...,
logit_cost=--solver_logit_cost)`, i.e. the minimisers of that same model with
s = --solver_logit_cost (default 60; 0 gives the plain multiply-add model's cutoffs). The two
flags are the same quantity but kept apart on purpose: --solver_logit_cost
picks the cutoffs, --logit_cost only scores them, so cutoffs chosen with s = 0
and s = 60 can be compared under one prediction.

Usage (from the repository root):
    python -m bench.bench_adaptive_softmax [--vocab_sizes=33278,12000]
        [--d_models=128,256] [--tokens=4096] [--num_tails=3]
        [--cutoffs=2000,10000] [--solver_logit_cost=60] [--repeats=10]
        [--dtype_policy=float32]
"""

import argparse
import os
import statistics

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from bench import common  # noqa: E402

WIKITEXT2_TYPES = 33_278


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vocab_sizes", type=common.int_list, default=[33278, 12000],
                        help="Vocabulary sizes V (comma-separated).")
    parser.add_argument("--d_models", type=common.int_list, default=[128, 256],
                        help="Hidden widths D (comma-separated).")
    parser.add_argument("--tokens", type=int, default=4096, help="Tokens per step (B*T).")
    parser.add_argument("--num_tails", type=int, default=3,
                        help="Tail clusters K for the optimal cutoffs.")
    parser.add_argument("--proj_factor", type=float, default=4.0,
                        help="Tail i has width D // proj_factor**i.")
    parser.add_argument("--cutoffs", type=common.int_list, default=[],
                        help="Explicit cutoffs (V excluded) for every V; default: "
                        "optimal_cuts.optimal_cutoffs, else a fixed default.")
    parser.add_argument("--data_dir",
                        default=str(common.WIKITEXT2_DIR),
                        help="Directory holding wiki.train.tokens (for V = 33278); the copy "
                        "in datasets/ when it has none.")
    parser.add_argument("--counts_file", default=None,
                        help="Counts (one per line, or `token count`) used instead of Zipf "
                        "for the V equal to their number.")
    parser.add_argument("--zipf_exponent", type=float, default=1.0,
                        help="Exponent of the synthetic Zipf law.")
    parser.add_argument("--warmup", type=int, default=3,
                        help="Untimed steps of each kind after tracing.")
    parser.add_argument("--repeats", type=int, default=10,
                        help="Timed steps of each kind (median shown).")
    parser.add_argument("--dtype_policy", default="float32",
                        help="Keras dtype policy, e.g. mixed_bfloat16.")
    parser.add_argument("--logit_cost", type=float, default=60.0,
                        help="Per-logit cost s (multiply-add units) of the second predicted "
                        "column; 0 is the plain multiply-add model.")
    parser.add_argument("--solver_logit_cost", type=float, default=60.0,
                        help="Per-logit cost s passed to optimal_cuts.optimal_cutoffs when "
                        "--cutoffs is not given; 0 is the plain multiply-add model.")
    parser.add_argument("--seed", type=int, default=0,
                        help="Seed of the hidden states and targets.")
    args = parser.parse_args(argv)
    if args.solver_logit_cost < 0:
        parser.error(f"--solver_logit_cost={args.solver_logit_cost:g} must be >= 0")
    return args


def read_counts(path):
    """Descending counts from a file of `count` or `token count` lines."""
    with open(path, encoding="utf-8") as stream:
        counts = [float(line.split()[-1]) for line in stream if line.strip()]
    return np.sort(np.array(counts))[::-1]


def zipf_counts(size, exponent):
    return 1e9 / np.arange(1, size + 1) ** exponent


def counts_for(vocab_size, file_counts, args):
    if file_counts is not None and len(file_counts) == vocab_size:
        return file_counts, "counts file"
    if vocab_size == WIKITEXT2_TYPES:
        counts = np.sort(common.wikitext2_train_counts(args.data_dir))[::-1]
        if len(counts) == vocab_size:
            return counts, "WikiText-2 train ranking"
    return zipf_counts(vocab_size, args.zipf_exponent), f"Zipf s={args.zipf_exponent}"


def choose_cutoffs(counts, d_model, args):
    """(cutoffs, source): --cutoffs, optimal_cuts if importable, or a default."""
    vocab_size = len(counts)
    if args.cutoffs:
        cutoffs = tuple(args.cutoffs)
        if cutoffs[-1] >= vocab_size:
            raise SystemExit(f"error: --cutoffs={','.join(map(str, cutoffs))} must be below "
                             f"V={vocab_size}")
        return cutoffs, "given"
    try:
        from pardata import cutoffs as optimal_cuts  # pylint: disable=import-outside-toplevel
    except ImportError:
        # Roughly Grave et al.'s choice: a head of ~6% of the types.
        cutoffs = tuple(c for c in (vocab_size // 16, vocab_size // 4) if c >= 1)
        return cutoffs, "fixed default (optimal_cuts not importable)"
    result = optimal_cuts.optimal_cutoffs(
        counts, args.num_tails, d_model, proj_factor=args.proj_factor,
        logit_cost=args.solver_logit_cost,
    )
    return tuple(result.cutoffs), (
        f"optimal_cuts, K={args.num_tails}, s={args.solver_logit_cost:g}")


def predicted_speedup(counts, cutoffs, d_model, dims, logit_cost=0.0):
    """Full-softmax cost over the adaptive one; logit_cost=0 is the plain multiply-add model's."""
    probs = np.asarray(counts, np.float64) / np.sum(counts)
    bounds = (0,) + tuple(cutoffs) + (len(counts),)
    cost = (d_model + logit_cost) * (bounds[1] + len(cutoffs))
    for dim, lo, hi in zip(dims, bounds[1:], bounds[2:]):
        cost += probs[lo:hi].sum() * (d_model * dim + (dim + logit_cost) * (hi - lo))
    return (d_model + logit_cost) * len(counts) / cost


def make_steps(vocab_size, d_model, cutoffs, proj_factor):
    """Compiled (adaptive_step, full_step), each (hidden, targets) -> loss."""
    import keras  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    from model.layers.adaptive_softmax import AdaptiveSoftmax  # pylint: disable=import-outside-toplevel

    adaptive = AdaptiveSoftmax(
        vocab_size, d_model, cutoffs=cutoffs, proj_factor=proj_factor
    )
    dense = keras.layers.Dense(vocab_size, name="full_softmax")
    dense.build((None, d_model))

    def step_of(loss_fn, variables):
        @tf.function
        def step(hidden, targets):
            with tf.GradientTape() as tape:
                tape.watch(hidden)
                loss = tf.reduce_mean(loss_fn(hidden, targets))
            # Returning the gradients keeps them from being pruned.
            return loss, tape.gradient(loss, [hidden] + list(variables))

        return step

    def full_nll(hidden, targets):
        logits = tf.cast(dense(hidden), tf.float32)  # [N, V]
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets, logits=logits)

    return (
        step_of(adaptive.nll, adaptive.trainable_variables),
        step_of(full_nll, dense.trainable_variables),
        adaptive.tail_dims,
    )


def time_pair(steps, inputs, warmup, repeats):
    """Median seconds of each step: `warmup` + 1 untimed calls each (the first traces), then
    `repeats` rounds timing every step once, alternating which goes first."""
    runs = {}
    for k, step in enumerate(steps):
        def call(step=step):
            step(*inputs)[0].numpy()

        for _ in range(warmup + 1):
            call()
        runs[k] = lambda call=call: common.time_call(call)
    samples = common.interleaved_rounds(runs, repeats, order="alternate", progress=False)
    return [statistics.median(samples[k]) for k in runs]


def main(argv=None):
    args, _ = common.start("bench.bench_adaptive_softmax", parse_args, argv)
    import keras  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    keras.mixed_precision.set_global_policy(args.dtype_policy)
    file_counts = read_counts(args.counts_file) if args.counts_file else None
    rng = np.random.default_rng(args.seed)
    print(f"tf {tf.__version__}, keras {keras.__version__}, policy {args.dtype_policy}, "
          f"{args.tokens} tokens/step, warm-up {args.warmup}, median of {args.repeats}")
    if args.cutoffs:
        print(f"cutoffs: given (--cutoffs={','.join(map(str, args.cutoffs))}); the solver is "
              "not used")
    else:
        print(f"cutoffs: optimal_cuts with solver logit cost s={args.solver_logit_cost:g} "
              "(--solver_logit_cost; 0 = plain multiply-add model)")
    print()
    print(common.markdown_table(
        ["V", "D", "targets", "cutoffs (source)", "tail dims", "adaptive tok/s", "full tok/s",
         "measured speed-up", "predicted", f"predicted, s={args.logit_cost:g}"], [],
        "llllllllll"))
    for vocab_size in args.vocab_sizes:
        counts, counts_source = counts_for(vocab_size, file_counts, args)
        probs = np.asarray(counts, np.float64) / np.sum(counts)
        targets = tf.constant(rng.choice(vocab_size, size=args.tokens, p=probs), tf.int32)
        for d_model in args.d_models:
            cutoffs, cut_source = choose_cutoffs(counts, d_model, args)
            hidden = tf.constant(rng.normal(size=(args.tokens, d_model)), tf.float32)
            adaptive_step, full_step, dims = make_steps(vocab_size, d_model, cutoffs,
                                                        args.proj_factor)
            adaptive_s, full_s = time_pair((adaptive_step, full_step), (hidden, targets),
                                           args.warmup, args.repeats)
            predicted = predicted_speedup(counts, cutoffs, d_model, dims)
            with_logits = predicted_speedup(counts, cutoffs, d_model, dims, args.logit_cost)
            print(common.markdown_row([
                vocab_size, d_model, counts_source,
                f"{','.join(map(str, cutoffs))} ({cut_source})", ",".join(map(str, dims)),
                f"{args.tokens / adaptive_s:,.0f}", f"{args.tokens / full_s:,.0f}",
                f"{full_s / adaptive_s:.2f}x", f"{predicted:.2f}x", f"{with_logits:.2f}x"]),
                flush=True)


if __name__ == "__main__":
    main()
