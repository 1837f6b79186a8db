"""Training-step tokens/s of the model families at matched parameter counts.

Measures in one process, interleaved so that load from other processes hits
every configuration alike, the tokens/s of the trainer's real step
(`training.run.trainer.Trainer.train_step`: forward, backward, clipping, the
optimizer, the state threaded from step to step, host sync) of
  * Transformer-XL (fixed `afafaf`-style architecture),
  * SHA-RNN (LSTM blocks, one single-head attention in the second-to-last
    block, Boom feed-forward), and
  * a plain LSTM LM (the sha_rnn family with attention_layers=()),
each sized to the same parameter count (within --tolerance), with the same
vocabulary and adaptive-softmax cutoffs, batch, segment length and memory
(the SHA-RNN attends over the Transformer-XL's mem_len, 16 for wt2_base,
unless --sha_rnn_mem_len says otherwise; the LSTM keeps only (h, c)), in
float32 and mixed_bfloat16. Reported: median tokens/s per configuration and the
median of the per-round ratios to Transformer-XL of the same precision.

Matching: the target is the parameter count of --target_preset built as a
fixed Transformer-XL (default wt2_base: V 12000, cutoffs (1000, 3845),
D 128, 6 blocks = 2,480,858). Each family keeps its preset's depth and shape
ratios (d_ffn / d_model, boom_dim / d_model, heads) and its width is searched
(bisection on multiples of --width_step; the count grows with the width);
when no width at that depth is within the tolerance, the other depths are
tried nearest first. Counts are the built model's trainable parameters
(for Transformer-XL checked against model/transformer_xl/flops.py's param_count).

Each family trains with its preset's recommended settings (train.py's
train_defaults: LAMB for the sha_rnn presets, Adam otherwise) unless
--optimizer names one for all. Token ids are drawn from a Zipf law over the
vocabulary (ids are frequency ranks, as real data reaches the softmax tails).

Usage (from the project root):
    python -m bench.bench_families                # full run, about 7 minutes
    python -m bench.bench_families --quick        # smoke check, tiny sizes
    python -m bench.bench_families --rounds=9 --steps=5 --sha_rnn_mem_len=512
Results: bench/results/bench_families.json and a Markdown table on stdout.
"""

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from bench import common  # noqa: E402
from bench.bench_train import Case, peak_sampler  # noqa: E402
from model import families  # noqa: E402
from model.transformer_xl import flops  # noqa: E402

PRECISIONS = ("float32", "mixed_bfloat16")
REFERENCE = "Transformer-XL"


# ------------------------------------------------------------ parameter match


def count_params(config):
    """(total, embedding + softmax) trainable parameters of the built model.

    The model is built under the float32 policy and dropped afterwards. For a
    Transformer-XL the total is checked against model/transformer_xl/flops.py.
    """
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("float32")
    try:
        model = families.build_model(config)
    finally:
        keras.mixed_precision.set_global_policy(previous)
    sizes = {v.path: int(np.prod(v.shape)) for v in model.trainable_variables}
    total = sum(sizes.values())
    io = sum(n for path, n in sizes.items() if path.startswith("softmax/") or "embedding" in path)
    if families.family_of(config).name == "transformer_xl":
        expected = flops.param_count(config)
        if expected != total:
            raise RuntimeError(f"flops.param_count={expected} but the built model has {total}")
    return total, io


def matched_count(counts, match):
    """The count that --match compares: "total", or "body" (outside embedding and softmax)."""
    total, io = counts
    return total if match == "total" else total - io


def closest_width(count, target, widths):
    """The width whose count is nearest to `target` (relative), by bisection.

    Args:
        count: width -> parameter count, increasing with the width.
        target: wanted count.
        widths: increasing candidate widths.

    Returns:
        (width, count of that width).
    """
    cache = {}

    def at(i):
        if i not in cache:
            cache[i] = count(widths[i])
        return cache[i]

    lo, hi = 0, len(widths) - 1
    while lo < hi:  # first index whose count reaches the target (or the last one)
        mid = (lo + hi) // 2
        if at(mid) < target:
            lo = mid + 1
        else:
            hi = mid
    best = min(sorted({lo, max(lo - 1, 0)}), key=lambda i: abs(np.log(at(i) / target)))
    return widths[best], at(best)


def match_depth_width(count, target, depth, depths, widths, tolerance):
    """Searches a (depth, width) whose parameter count is within `tolerance` of target.

    The preferred `depth` comes first; the other `depths` are tried nearest
    first only when no width at the preferred one is within the tolerance.

    Args:
        count: (depth, width) -> parameter count, increasing with the width.
        target: wanted count.
        depth: preferred depth (the preset's).
        depths: other allowed depths.
        widths: increasing candidate widths.
        tolerance: allowed relative difference, e.g. 0.1.

    Returns:
        (depth, width, count, within_tolerance); when no depth is within the
        tolerance, the closest candidate seen.
    """
    order = [depth] + sorted((d for d in depths if d != depth), key=lambda d: (abs(d - depth), d))
    best = None
    for d in order:
        width, n = closest_width(lambda w: count(d, w), target, widths)
        error = abs(n / target - 1.0)
        if best is None or error < best[-1]:
            best = (d, width, n, error)
        if error <= tolerance:
            return d, width, n, True
    return best[0], best[1], best[2], False


def target_config(preset, vocab_size=None):
    """The reference: a transformer_xl preset built as a fixed Transformer-XL."""
    overrides = {} if vocab_size is None else dict(vocab_size=vocab_size)
    return families.get_family("transformer_xl").preset_config(
        preset, architecture="transformer_xl", **overrides)


def matched_configs(target_preset, sha_rnn_preset, lstm_preset, *, vocab_size=None,
                    match="total", sha_rnn_mem_len=None, width_step=8, max_width=2048,
                    tolerance=0.1):
    """Configs of the three families sized to the parameters of a Transformer-XL.

    Each family keeps its preset's depth and width ratios (d_ffn / d_model,
    boom_dim / d_model) and the target's vocabulary and cutoffs; widths are
    multiples of `width_step` (and of the Transformer-XL's head count).

    Args:
        target_preset: transformer_xl preset whose count (built as a fixed
            Transformer-XL, `target_config`) is the target.
        sha_rnn_preset, lstm_preset: sha_rnn presets to resize (the second
            without attention layers).
        vocab_size: vocabulary of every model (None: the target preset's).
        match: "total" or "body" (see `matched_count`).
        sha_rnn_mem_len: the SHA-RNN's attention memory; None keeps the preset's.
        width_step, max_width: searched widths.
        tolerance: allowed relative difference of the counts.

    Returns:
        (target count, dict label -> (family name, preset, config, (total,
        embedding + softmax) counts, within tolerance)), labels
        "Transformer-XL", "SHA-RNN", "LSTM".

    Raises:
        ValueError: unknown preset, or an LSTM preset with attention.
    """
    target = target_config(target_preset, vocab_size)
    target_count = matched_count(count_params(target), match)
    sha = families.get_family("sha_rnn")
    same_vocab = dict(vocab_size=target.vocab_size, cutoffs=target.cutoffs)
    ffn_ratio = target.d_ffn // target.d_model

    def txl_config(depth, width):
        return target.replace(d_model=width, d_ffn=ffn_ratio * width, num_blocks=depth)

    specs = [(REFERENCE, "transformer_xl", target_preset, target.num_blocks,
              range(2, 2 * target.num_blocks + 1, 2), txl_config,
              int(np.lcm(width_step, target.num_heads)))]
    for label, preset, mem_len in (("SHA-RNN", sha_rnn_preset, sha_rnn_mem_len),
                                   ("LSTM", lstm_preset, 0)):
        base = sha.preset_config(preset)
        if label == "LSTM" and base.resolved_attention_layers:
            raise ValueError(f"{preset} has attention layers: choose a plain LSTM preset "
                             "(attention_layers=()) such as lstm_wt2")
        fixed = dict(same_vocab, mem_len=base.mem_len if mem_len is None else mem_len)
        ratio = base.boom_dim // base.d_model

        def sha_config(depth, width, base=base, ratio=ratio, fixed=fixed):
            return base.replace(d_model=width, boom_dim=ratio * width, num_layers=depth, **fixed)

        specs.append((label, "sha_rnn", preset, base.num_layers,
                      range(1, 2 * base.num_layers + 1), sha_config, width_step))
    out = {}
    for label, family, preset, depth, depths, make, step in specs:
        def count(d, w, make=make):
            return matched_count(count_params(make(d, w)), match)

        widths = list(range(step, max_width + 1, step))
        d, w, _, ok = match_depth_width(count, target_count, depth, list(depths), widths,
                                        tolerance)
        config = make(d, w)
        out[label] = (family, preset, config, count_params(config), ok)
    return target_count, out


def describe(config):
    """One-line summary of a config's shape."""
    if isinstance(config, families.get_family("transformer_xl").config_class):
        return (f"D {config.d_model}, {config.num_heads} heads, d_ffn {config.d_ffn}, "
                f"{config.num_blocks} blocks ({config.architecture}), M {config.mem_len}")
    attention = config.resolved_attention_layers
    kind = f"attention in block(s) {list(attention)}" if attention else "no attention"
    memory = f", M {config.mem_len}" if attention else ""
    return (f"D {config.d_model}, {config.num_layers} LSTM blocks, boom {config.boom_dim}, "
            f"{kind}{memory}")


# ----------------------------------------------------------------------- step


def family_case(label, family, preset, config, batch_size, seq_len, precision, workdir,
                optimizer):
    """One benchmarked configuration: bench_train's Case with the family's trainer settings.

    Args:
        label: family label ("Transformer-XL", "SHA-RNN", "LSTM").
        family, preset: registry name and the preset the config started from.
        config: the family's config.
        batch_size, seq_len: global batch [B, T].
        precision: "float32" or "mixed_bfloat16".
        workdir: scratch directory (the trainer wants a model_dir).
        optimizer: "preset" (the preset's train defaults) or an optimizer name.

    Returns:
        The Case (named "<label> <precision>"), with label, optimizer and params set.
    """
    settings = dict(families.get_family(family).train_defaults.get(preset, {}))
    if optimizer != "preset":
        settings = dict(optimizer=optimizer)
    case = Case(f"{label} {precision}", config, batch_size, seq_len, precision, workdir,
                use_trainer=True, train_settings=dict(model_family=family, preset=preset,
                                                      **settings))
    case.label, case.optimizer = label, settings.get("optimizer", "adam")
    case.params = sum(int(np.prod(v.shape)) for v in case.trainer.model.trainable_variables)
    return case


def measure(args, matched):
    """Builds every case and samples them round-robin (rotating the order).

    Returns:
        (cases, samples: name -> per-round seconds per step, and for "float32"
        / "bfloat16" the per-round matmul GFLOP/s, a load indicator).
    """
    samples, sample_peaks = peak_sampler(args.matmul_n)
    with tempfile.TemporaryDirectory() as workdir:
        t0 = time.perf_counter()
        cases = [family_case(label, family, preset, config, args.batch_size, args.seq_len,
                             precision, workdir, args.optimizer)
                 for precision in PRECISIONS
                 for label, (family, preset, config, _, _) in matched.items()]
        for case in cases:  # trace and warm up
            case.run(2)
        print(f"built and warmed {len(cases)} cases in {time.perf_counter() - t0:.0f} s",
              flush=True)
        runs = {case.name: (lambda case=case: case.run(args.steps)) for case in cases}
        samples.update(common.interleaved_rounds(runs, args.rounds, order="rotate",
                                                 before_round=sample_peaks))
    return cases, samples


def summarize(cases, samples):
    """Rows of the table; ratios to Transformer-XL are medians of per-round ratios."""
    rows = []
    for case in cases:
        times = samples[case.name]
        step_s = statistics.median(times)
        rows.append(dict(
            name=case.name, label=case.label, precision=case.precision, params=case.params,
            optimizer=case.optimizer, config=describe(case.config), step_s=step_s,
            tokens_per_sec=case.tokens / step_s,
            vs_transformer_xl=common.paired_ratio(samples[f"{REFERENCE} {case.precision}"],
                                                  times),
            samples_s=times, model=case.config.to_dict()))
    return rows


def markdown_table(rows, args, command):
    table = common.markdown_table(
        ["model", "precision", "params", "shape", "optimizer", "tokens/s", "ms/step",
         "vs Transformer-XL"],
        [[r["label"], r["precision"], f"{r['params']:,}", r["config"], r["optimizer"],
          f"{r['tokens_per_sec']:,.0f}", f"{1e3 * r['step_s']:.1f}",
          f"{r['vs_transformer_xl']:.2f}x"] for r in rows],
        "llrllrrr")
    return table + "\n\n" + (
        f"Batch {args.batch_size} x {args.seq_len} tokens, Zipf ids; step "
        f"`training.run.trainer.Trainer.train_step`; {args.rounds} interleaved rounds of "
        f"{args.steps} steps; tokens/s and ms/step are medians, vs Transformer-XL is the "
        "median of per-round tokens/s ratios within the same precision. "
        f"Command: `{command}`")


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="smoke check: tiny presets, batch 4 x 8, 2 rounds of 2 steps")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 15)")
    parser.add_argument("--steps", type=int, default=None,
                        help="training steps per case per round (default 10)")
    parser.add_argument("--batch_size", type=int, default=None, help="batch B (default 32)")
    parser.add_argument("--seq_len", type=int, default=None, help="segment length T (default 32)")
    parser.add_argument("--target_preset", default=None,
                        help="transformer_xl preset whose parameter count is the target "
                             "(default wt2_base; quick: tiny)")
    parser.add_argument("--sha_rnn_preset", default=None,
                        help="SHA-RNN preset to resize (default sha_rnn_wt2; quick: sha_rnn_tiny)")
    parser.add_argument("--lstm_preset", default=None,
                        help="plain LSTM preset to resize (default lstm_wt2; quick: lstm_tiny)")
    parser.add_argument("--sha_rnn_mem_len", type=int, default=None,
                        help="SHA-RNN attention memory (default: the target's mem_len)")
    parser.add_argument("--match", choices=("total", "body"), default="total",
                        help="match all trainable parameters, or those outside the embedding "
                             "and softmax")
    parser.add_argument("--tolerance", type=float, default=0.1,
                        help="allowed relative difference of the parameter counts")
    parser.add_argument("--width_step", type=int, default=None,
                        help="searched widths are multiples of this (default 8; quick 4)")
    parser.add_argument("--max_width", type=int, default=2048, help="largest searched width")
    parser.add_argument("--optimizer", default="preset",
                        help="'preset': each preset's train.py defaults; or one optimizer for all")
    parser.add_argument("--matmul_n", type=int, default=2048,
                        help="size of the matmul timed each round as a load indicator")
    parser.add_argument("--out", default=str(common.results_path("bench_families")))
    args = parser.parse_args(argv)
    common.fill_defaults(args, args.quick, rounds=(2, 15), steps=(2, 10), batch_size=(4, 32),
                         seq_len=(8, 32), target_preset=("tiny", "wt2_base"),
                         sha_rnn_preset=("sha_rnn_tiny", "sha_rnn_wt2"),
                         lstm_preset=("lstm_tiny", "lstm_wt2"), width_step=(4, 8))
    if args.quick and args.matmul_n == 2048:
        args.matmul_n = 512
    return args


def main(argv=None):
    args, command = common.start("bench.bench_families", parse_args, argv)
    t0 = time.perf_counter()
    if args.sha_rnn_mem_len is None:
        args.sha_rnn_mem_len = target_config(args.target_preset).mem_len
    try:
        target_count, matched = matched_configs(
            args.target_preset, args.sha_rnn_preset, args.lstm_preset, match=args.match,
            sha_rnn_mem_len=args.sha_rnn_mem_len, width_step=args.width_step,
            max_width=args.max_width, tolerance=args.tolerance)
    except ValueError as error:
        raise SystemExit(f"error: {error}") from None
    print(f"target: {args.target_preset} as transformer_xl, {args.match} parameters "
          f"{target_count:,}")
    warnings = []
    for label, (family, preset, config, (total, io), ok) in matched.items():
        n = matched_count((total, io), args.match)
        print(f"  {label:15s} {family}/{preset}: {describe(config)}: {n:,} "
              f"({100 * (n / target_count - 1):+.1f}%; total {total:,}, embedding + softmax "
              f"{io:,})")
        if not ok:
            warnings.append(f"WARNING: no {label} width/depth within {args.tolerance:.0%} of the "
                            f"target; using the closest, {n:,}")
    load_start = common.loadavg()
    cases, samples = measure(args, matched)
    load_end = common.loadavg()
    rows = summarize(cases, samples)
    table = markdown_table(rows, args, command)
    peaks = {k: samples[k] for k in ("float32", "bfloat16")}
    warnings += [w for dtype, values in peaks.items()
                 if (w := common.load_warning(f"{dtype} matmul", values, load_start, load_end))]
    if args.quick:
        warnings.append("(smoke check: tiny sizes and too few steps to measure anything)")
    print(f"\n{table}\n\n" + "\n".join(warnings))
    result = dict(
        step="training.run.trainer.Trainer.train_step", rounds=args.rounds,
        steps_per_sample=args.steps, batch_size=args.batch_size, seq_len=args.seq_len,
        match=args.match, tolerance=args.tolerance,
        target=dict(preset=args.target_preset, architecture="transformer_xl",
                    params=target_count),
        matched={label: dict(family=family, preset=preset, params_total=total,
                             params_embedding_softmax=io, within_tolerance=ok,
                             shape=describe(config), config=config.to_dict())
                 for label, (family, preset, config, (total, io), ok) in matched.items()},
        sha_rnn_mem_len=args.sha_rnn_mem_len,
        machine=common.machine_info(load_start, load_end),
        matmul_gflops_samples=peaks, rows=rows, warnings=warnings, markdown=table,
        elapsed_s=time.perf_counter() - t0)
    out = common.write_results(args.out, command, result)
    print(f"\nresults written to {out}")
    return dict(command=command, **result)


if __name__ == "__main__":
    main()
