"""Training-step throughput against this machine's matmul peak.

Measures in one process, interleaved so that load from other processes hits
every configuration alike:
  * the matmul peak for float32 and bfloat16 (a large tf.matmul in a
    tf.function, median GFLOP/s);
  * tokens/s of a full training step (the trainer's own `train_step`:
    forward, backward, clipping, optimizer, memory threaded from step to
    step, host sync of the step's numbers) and the achieved FLOP/s
    (3 x the forward FLOPs of model/transformer_xl/flops.py) as a fraction of the peak of
    its precision, for
      - wt2_base in soft search, hard search (with --hard_gradient=all, the
        default, and chosen), three derived fixed architectures
        (transformer_xl "afafaf", a PAR-like "aafaff" and "aaafaf", what the
        default 20-epoch search derived) and a soft-search supernet with
        every block frozen to "aaafaf" (progressive freezing,
        docs/freezing.md: it should step as fast as the fixed network),
        float32 and mixed_bfloat16;
      - a compute-bound model: wt2_large's vocabulary and cutoffs with
        d_model 512, 8 heads, d_ffn 2048, 8 blocks, seq_len = mem_len = 128,
        batch 16, fixed transformer_xl (sizes are flags), float32 and
        mixed_bfloat16.
Targets: hard search >= 1.6x soft tokens/s; compute-bound >= 50% of peak.

Token ids are drawn from a Zipf law over the vocabulary (ids are ranked by
frequency, so this is how real data reaches the adaptive softmax tails). The
architecture logits are frozen (as during `arch_warmup_steps`) so that hard
search samples uniformly and its cost matches the expected FLOPs; their
gradients are still computed.

CPU threading (one process per setting: TensorFlow fixes its thread pools at
start-up): --intra_op_threads / --inter_op_threads set
`tf.config.threading` (0: TensorFlow's default), --num_cpu_replicas N runs
the trainer cases under a MirroredStrategy of N logical CPU replicas
(train.py --strategy=mirrored --num_cpu_replicas=N).

Usage (from the project root):
    python -m bench.bench_train            # full run, about 6 minutes
    python -m bench.bench_train --quick    # smoke check: 3 small cases
    python -m bench.bench_train --only "hard search,soft search" --rounds 9
Results: bench/results/bench_train.json and a Markdown table on stdout.
"""

import argparse
import functools
import os
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from bench import common  # noqa: E402
from model.transformer_xl import flops  # noqa: E402

# Cases of a supernet whose blocks are frozen (label -> pattern: a letter per
# frozen block, "?" for a block still searching); --frozen adds more.
FROZEN = {"supernet frozen aaafaf": "aaafaf"}
# The strategy of the trainer cases (main sets it from --num_cpu_replicas).
_STRATEGY = None
# ------------------------------------------------------------------ matmul peak


def make_matmul(n, dtype, chain=4):
    """A tf.function doing `chain` dependent [n, n] matmuls; returns (fn, flops)."""
    rng = np.random.default_rng(0)
    a = tf.constant(rng.standard_normal((n, n)) / np.sqrt(n), dtype=dtype)
    b = tf.constant(rng.standard_normal((n, n)) / np.sqrt(n), dtype=dtype)

    @tf.function
    def run():
        x = a
        for _ in range(chain):
            x = tf.matmul(x, b)
        return tf.reduce_sum(tf.cast(x[:1, :1], tf.float32))

    run().numpy()  # trace and warm up
    return run, 2.0 * n**3 * chain


# -------------------------------------------------------------- configurations


def zipf_ids(rng, vocab_size, shape):
    """Ids with p(r) proportional to 1 / (r + 1): ids are frequency ranks."""
    p = 1.0 / np.arange(1, vocab_size + 1)
    return rng.choice(vocab_size, size=shape, p=p / p.sum()).astype(np.int32)


def cluster_mass(config):
    """Zipf probability mass of each adaptive-softmax tail (for flops.py)."""
    if not config.cutoffs:
        return None
    p = 1.0 / np.arange(1, config.vocab_size + 1)
    p /= p.sum()
    bounds = list(config.cutoffs) + [config.vocab_size]
    return [float(p[lo:hi].sum()) for lo, hi in zip(bounds, bounds[1:])]


def forward_flops(config, seq_len, batch_size, frozen=None):
    """Forward FLOPs per token of one step of `config` (model/transformer_xl/flops.py).

    Hard search computes one candidate per block; its cost is the expectation
    over a uniform choice (attention, dense, identity), which is what the
    sampler draws while the architecture logits stay at their zero start. A
    soft supernet with frozen blocks (`frozen`: a letter per frozen block,
    "?" for searching) computes every candidate of the searching blocks and
    the frozen letter of the others.
    """
    kwargs = dict(batch_size=batch_size, cluster_mass=cluster_mass(config))
    if frozen is not None:
        per_block = [flops.forward_flops_per_token(
            config.replace(num_blocks=1, architecture="supernet" if letter == "?" else letter),
            None, seq_len, config.mem_len, **kwargs)["blocks"] for letter in frozen]
        rest = flops.forward_flops_per_token(config, "i" * config.num_blocks, seq_len,
                                             config.mem_len, **kwargs)["total"]
        return rest + sum(per_block)
    total = flops.forward_flops_per_token(config, None, seq_len, config.mem_len, **kwargs)
    if config.architecture == "supernet" and config.search_mode == "hard":
        return total["total"] - 2.0 / 3.0 * total["blocks"]
    return total["total"]


class Case:
    """One benchmarked configuration: model, optimizers, data and a step.

    Args:
        name: row label.
        config: ModelConfig.
        batch_size, seq_len: global batch [B, T].
        precision: "float32" or "mixed_bfloat16".
        workdir: scratch directory (the trainer wants a model_dir).
        use_trainer: use training.run.trainer.Trainer.train_step (the real step);
            False: the local step below.
        xla: compile the trainer's step with XLA (train.py --xla).
        train_settings: TrainConfig fields of the trainer besides the model, batch and
            precision; None: a 100-step warm-up and architecture logits frozen for good
            (a Transformer-XL supernet's hard search then samples uniformly).
    """

    def __init__(self, name, config, batch_size, seq_len, precision, workdir, use_trainer,
                 xla=False, train_settings=None):
        self.name, self.config, self.xla = name, config, xla
        self.batch_size, self.seq_len, self.precision = batch_size, seq_len, precision
        self.tokens = batch_size * seq_len
        if train_settings is None:
            # Frozen logits keep the hard-search sampler uniform, so its cost
            # matches the expected FLOPs; their gradient is still computed.
            train_settings = dict(warmup_steps=100, search={"arch_warmup_steps": 10**6})
        self.train_settings = train_settings
        self.frozen = next((arch for label, arch in FROZEN.items() if label in name), None)
        rng = np.random.default_rng(len(name))
        ids = zipf_ids(rng, config.vocab_size, (4, batch_size, seq_len + 1))
        self.batches = [(tf.constant(b[:, :-1]), tf.constant(b[:, 1:])) for b in ids]
        self.calls = 0
        self.trainer = None  # the Trainer behind step_fn (use_trainer=True)
        keras.mixed_precision.set_global_policy(precision)
        try:
            if use_trainer:
                self.step_fn = self._trainer_step(workdir)
                self.step_kind = "training.run.trainer.Trainer.train_step"
            else:
                self.step_fn = self._local_step()
                self.step_kind = "bench-local step"
        finally:
            keras.mixed_precision.set_global_policy("float32")

    def _trainer_step(self, workdir):
        from training.run.trainer import Trainer
        from training.setup.config import TrainConfig

        train_config = TrainConfig(
            data_dir="unused", model_dir=os.path.join(workdir, self.name), model=self.config,
            batch_size=self.batch_size, seq_len=self.seq_len, precision=self.precision,
            max_steps=10**6, xla=self.xla, **self.train_settings)
        meta = {"splits": {"train": {"records": 10**6, "batch_size": self.batch_size}}}
        trainer = Trainer(train_config, meta, _STRATEGY or tf.distribute.get_strategy())
        self.trainer = trainer
        self._freeze(trainer.model)

        def step(inputs, targets):
            return trainer.train_step(inputs, targets)["loss"]

        return step

    def _local_step(self):
        """Same model API and update as the trainer: tape, gradients of weights
        and architecture logits, global-norm clipping, Adam on the weights
        (the logits stay frozen, as in the trainer case)."""
        from model.families import build_model
        from training.plugins.par_search.schedules import tau_at

        model = build_model(self.config)
        self._freeze(model)
        weights, arch = list(model.weight_variables), list(model.arch_variables)
        from training.optimizers.fused_adam import FusedAdam

        w_opt = FusedAdam(1e-3)
        w_opt.build(weights)
        step_var = tf.Variable(0, dtype=tf.int64)
        tokens = float(self.tokens)

        @tf.function
        def step(inputs, targets, mems):
            if arch:
                model.set_search_state(tau_at(step_var, 1.0, 0.1, 10**5), step_var)
            with tf.GradientTape() as tape:
                hidden, new_mems = model(inputs, mems, training=True)
                loss = tf.reduce_sum(model.token_nll(hidden, targets)) / tokens
            grads = tape.gradient(loss, weights + arch)
            w_grads, _ = tf.clip_by_global_norm(grads[: len(weights)], 0.25)
            w_opt.apply(w_grads, weights)
            step_var.assign_add(1)
            return loss, new_mems

        state = {"mems": model.initial_mems(self.batch_size)}

        def run(inputs, targets):
            loss, state["mems"] = step(inputs, targets, state["mems"])
            return float(loss)

        return run

    @functools.cached_property
    def flops(self):
        """Forward FLOPs per token (a Transformer-XL config's; `forward_flops`)."""
        return forward_flops(self.config, self.seq_len, self.batch_size, self.frozen)

    def _freeze(self, model):
        """Freezes the blocks of a frozen case's supernet to their letters ("?": searching)."""
        if self.frozen is not None:
            from model.transformer_xl import blocks

            model.set_frozen([None if letter == "?" else blocks.letters().index(letter)
                              for letter in self.frozen])

    def run(self, steps):
        """Runs `steps` steps; returns seconds per step."""
        keras.mixed_precision.set_global_policy(self.precision)
        try:
            start = time.perf_counter()
            for _ in range(steps):
                inputs, targets = self.batches[self.calls % len(self.batches)]
                loss = self.step_fn(inputs, targets)
                self.calls += 1
            elapsed = time.perf_counter() - start
        finally:
            keras.mixed_precision.set_global_policy("float32")
        if not np.isfinite(loss):
            raise RuntimeError(f"{self.name}: non-finite loss {loss}")
        return elapsed / steps


class Peak:
    """Matmul peak of one dtype, sampled like a Case."""

    def __init__(self, dtype, n):
        self.name = f"matmul peak {dtype.name} (n={n})"
        self.fn, self.flops = make_matmul(n, dtype)

    def run(self, calls):
        """Median seconds of one matmul chain (the result copied to the host) over `calls`."""
        return common.median_time(lambda: self.fn().numpy(), calls)


def peak_sampler(n, dtypes=(tf.float32, tf.bfloat16)):
    """(samples, sample_round): dtype name -> per-round matmul GFLOP/s (median of 3 calls),
    a load indicator, and the `before_round` of common.interleaved_rounds that adds a round."""
    peaks = {dtype.name: Peak(dtype, n) for dtype in dtypes}
    samples = {name: [] for name in peaks}

    def sample_round(_):
        for name, peak in peaks.items():
            samples[name].append(peak.flops / peak.run(3) / 1e9)

    return samples, sample_round


def trainer_available():
    try:
        from training.run.trainer import Trainer  # noqa: F401
    except ImportError:
        return False
    return True


def compute_bound_case(args):
    """(ModelConfig, batch_size, seq_len) of the compute-bound case, from the --big_* flags
    (bench/profile_step.py profiles the same case)."""
    from model.transformer_xl.presets import preset_config

    big = dict(architecture="transformer_xl", d_model=args.big_d_model, num_heads=args.big_heads,
               d_ffn=4 * args.big_d_model, num_blocks=args.big_blocks, mem_len=args.big_seq_len)
    if args.big_dropout is not None:
        big["dropout"] = args.big_dropout
    return preset_config("wt2_large", **big), args.big_batch, args.big_seq_len


def case_specs(args):
    """(name, ModelConfig, batch_size, seq_len, precision) of every case to run."""
    from model.transformer_xl.presets import preset_config

    archs = [("soft search", dict(architecture="supernet", search_mode="soft")),
             ("hard search", dict(architecture="supernet", search_mode="hard")),
             ("hard search chosen-only", dict(architecture="supernet", search_mode="hard",
                                              hard_gradient="chosen")),
             ("transformer_xl afafaf", dict(architecture="transformer_xl")),
             ("derived aafaff", dict(architecture="aafaff")),
             ("derived aaafaf", dict(architecture="aaafaf")),
             *[(label, dict(architecture="supernet", search_mode="soft")) for label in FROZEN
               if len(FROZEN[label]) == 6]]
    precisions = ["float32", "mixed_bfloat16"]
    specs = [(f"wt2_base {label} {precision}", preset_config("wt2_base", **overrides), 32, 32,
              precision) for precision in precisions for label, overrides in archs]
    big = compute_bound_case(args)
    specs += [(f"compute-bound {precision}",) + big + (precision,) for precision in precisions]
    specs = [spec + (False,) for spec in specs]
    if args.xla:  # each case again, compiled with XLA (--xla of train.py)
        specs = [twin for spec in specs
                 for twin in (spec, (spec[0] + " xla",) + spec[1:-1] + (True,))]
    if args.only:
        keep = [s.strip() for s in args.only.split(",") if s.strip()]
        specs = [spec for spec in specs if any(k in spec[0] for k in keep)]
        if not specs:
            raise SystemExit(f"--only={args.only!r} matches no case")
    return specs


def calibrate(case, target_s):
    """Steps per sample so that one sample lasts about target_s."""
    per_step = case.run(1)
    return max(1, int(round(target_s / per_step)))


def markdown_table(rows, peaks, command, step_kind, rounds):
    table = common.markdown_table(
        ["configuration", "tokens/s", "ms/step", "fwd MFLOP/token", "achieved GFLOP/s",
         "% of peak", "% of best peak", "vs soft"],
        [[r["name"], f"{r['tokens_per_sec']:.0f}", f"{1e3 * r['step_s']:.1f}",
          f"{r['forward_flops_per_token'] / 1e6:.2f}", f"{r['achieved_gflops']:.1f}",
          f"{100 * r['fraction_of_peak']:.1f}%", f"{100 * r['fraction_of_best_peak']:.1f}%",
          f"{r['vs_soft']:.2f}x" if r.get("vs_soft") else ""] for r in rows],
        "lrrrrrrr")
    return table + "\n\n" + (
        "Matmul peak (same run, median / best round): "
        + ", ".join(f"{k} {statistics.median(v):.0f} / {max(v):.0f} GFLOP/s"
                    for k, v in peaks.items())
        + f". Step: `{step_kind}`; {rounds} interleaved rounds; tokens/s and ms/step are "
        "medians; achieved = 3 x forward FLOPs of model/transformer_xl/flops.py x tokens/s; "
        "% of peak is the median of per-round ratios to the matmul peak of the precision "
        "measured in the same round, % of best peak divides by the best round's peak instead "
        "(conservative when other processes load the CPU); vs soft is the median of per-round "
        "ratios. "
        f"Command: `{command}`"
    )


def _peak_key(precision):
    return "float32" if precision == "float32" else "bfloat16"


def summarize(cases, samples, steps):
    """Rows of the table and the target checks.

    Ratios are paired: computed within each round (the same minute of machine
    load) and then their median is taken, which is far less sensitive to other
    processes' load than a ratio of two medians.
    """
    rows = []
    for case in cases:
        times = samples[case.name]
        step_s = statistics.median(times)
        peaks = samples[_peak_key(case.precision)]
        achieved = [3.0 * case.flops * case.tokens / t / 1e9 for t in times]  # GFLOP/s
        rows.append(dict(
            name=case.name, precision=case.precision, step_s=step_s,
            tokens_per_sec=case.tokens / step_s, forward_flops_per_token=case.flops,
            achieved_gflops=3.0 * case.flops * case.tokens / step_s / 1e9,
            fraction_of_peak=common.paired_ratio(achieved, peaks),
            fraction_of_best_peak=3.0 * case.flops * case.tokens / step_s / 1e9 / max(peaks),
            steps_per_sample=steps[case.name],
            samples_s=times, batch_size=case.batch_size, seq_len=case.seq_len,
            model=case.config.to_dict()))
    by_name = {r["name"]: r for r in rows}
    checks = []
    for r in rows:  # XLA twins: paired ratio to the plain case
        plain = r["name"][: -len(" xla")] if r["name"].endswith(" xla") else None
        if plain in samples:
            r["xla_speedup"] = common.paired_ratio(samples[plain], samples[r["name"]])
            checks.append(f"{r['name']}: {r['xla_speedup']:.2f}x the tokens/s without XLA")
    for precision in ("float32", "mixed_bfloat16"):
        soft = f"wt2_base soft search {precision}"
        for r in rows:
            if soft in samples and r["name"].startswith("wt2_base") and r["precision"] == precision:
                r["vs_soft"] = common.paired_ratio(samples[soft], samples[r["name"]])
        hard = by_name.get(f"wt2_base hard search {precision}")
        if hard and "vs_soft" in hard:
            ratio = hard["vs_soft"]
            checks.append(f"hard/soft tokens/s {precision}: {ratio:.2f}x (target >= 1.6x) "
                          f"{'PASS' if ratio >= 1.6 else 'MISS'}")
        big = by_name.get(f"compute-bound {precision}")
        if big:
            frac = big["fraction_of_peak"]
            checks.append(f"compute-bound {precision}: {100 * frac:.1f}% of matmul peak "
                          f"(target >= 50%) {'PASS' if frac >= 0.5 else 'MISS'}")
    return rows, checks


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke check: 3 small cases, 2 rounds")
    parser.add_argument("--rounds", type=int, default=None,
                        help="interleaved rounds (default 15, quick 2)")
    parser.add_argument("--sample_seconds", type=float, default=None,
                        help="length of one timed sample per case (default 0.5, quick 0.2)")
    parser.add_argument("--matmul_n", type=int, default=2048, help="size of the peak matmuls")
    parser.add_argument("--local_step", action="store_true",
                        help="use the bench's own step even when "
                        "training.run.trainer.Trainer exists")
    parser.add_argument("--big_d_model", type=int, default=512, help="compute-bound d_model")
    parser.add_argument("--big_heads", type=int, default=8, help="compute-bound num_heads")
    parser.add_argument("--big_blocks", type=int, default=None,
                        help="compute-bound num_blocks (default 8, quick 2)")
    parser.add_argument("--big_seq_len", type=int, default=128,
                        help="compute-bound seq_len (= mem_len)")
    parser.add_argument("--big_batch", type=int, default=None,
                        help="compute-bound batch size (default 16, quick 4)")
    parser.add_argument("--big_dropout", type=float, default=None,
                        help="compute-bound dropout (default: the wt2_large preset's 0.2)")
    parser.add_argument("--xla", action="store_true",
                        help="also run every case compiled with XLA (train.py --xla), "
                        "reporting the XLA/plain tokens/s ratio of each")
    parser.add_argument("--intra_op_threads", type=int, default=0,
                        help="tf.config.threading intra-op threads (0: TensorFlow's default)")
    parser.add_argument("--inter_op_threads", type=int, default=0,
                        help="tf.config.threading inter-op threads (0: TensorFlow's default)")
    parser.add_argument("--num_cpu_replicas", type=int, default=0,
                        help="run the trainer cases on a MirroredStrategy of this many CPU "
                        "replicas (0: the default strategy)")
    parser.add_argument("--frozen", default="",
                        help="comma-separated wt2_base soft-search freezing patterns to add as "
                        "cases, a letter per frozen block and ? per searching block (a????f)")
    parser.add_argument("--only", default="",
                        help="comma-separated substrings: run only the cases whose name has one")
    parser.add_argument("--out", default=str(common.results_path("bench_train")))
    args = parser.parse_args(argv)
    for pattern in filter(None, (p.strip() for p in args.frozen.split(","))):
        FROZEN[f"supernet frozen {pattern}"] = pattern
    args.rounds = args.rounds or (2 if args.quick else 15)
    args.sample_seconds = args.sample_seconds or (0.2 if args.quick else 0.5)
    args.big_blocks = args.big_blocks or (2 if args.quick else 8)
    args.big_batch = args.big_batch or (4 if args.quick else 16)
    if args.quick and not args.only:
        args.only = ("wt2_base soft search float32,wt2_base hard search float32,"
                     "compute-bound mixed_bfloat16")
    return args


def warm_up(cases, sample_seconds):
    """Traces and warms up every case; returns steps per sample of each (calibrated)."""
    steps = {}
    for case in cases:
        case.run(2)
        steps[case.name] = calibrate(case, sample_seconds)
    return steps


def sample_interleaved(cases, steps, rounds, before_round=None):
    """Samples the cases round-robin: each round runs every case once, in order.

    Interleaving makes load from other processes hit every case alike, and
    rounds pair the samples for per-round ratios (`summarize`).

    Args:
        cases: warmed-up Cases.
        steps: case name -> steps per sample (`warm_up`).
        rounds: number of rounds.
        before_round: optional callable(round index) run at the start of each
            round (e.g. sampling the matmul peaks).

    Returns:
        name -> list of seconds per step, one per round.
    """
    runs = {case.name: (lambda case=case: case.run(steps[case.name])) for case in cases}
    return common.interleaved_rounds(runs, rounds, before_round=before_round)


def measure(args, use_trainer):
    """Builds the cases and samples them round-robin with the matmul peaks.

    Returns:
        (cases, samples: name -> list per round (seconds per step for cases,
        GFLOP/s for "float32"/"bfloat16" peaks), steps per sample).
    """
    samples, sample_peaks = peak_sampler(args.matmul_n)
    with tempfile.TemporaryDirectory() as workdir:
        t0 = time.perf_counter()
        cases = [Case(*spec[:-1], workdir, use_trainer, xla=spec[-1])
                 for spec in case_specs(args)]
        steps = warm_up(cases, args.sample_seconds)
        print(f"built and warmed {len(cases)} cases in {time.perf_counter() - t0:.0f} s "
              f"using {cases[0].step_kind}", flush=True)
        samples.update(sample_interleaved(cases, steps, args.rounds, before_round=sample_peaks))
    return cases, samples, steps


def main(argv=None):
    args, command = common.start("bench.bench_train", parse_args, argv)
    global _STRATEGY
    if args.intra_op_threads:  # before any TensorFlow op
        tf.config.threading.set_intra_op_parallelism_threads(args.intra_op_threads)
    if args.inter_op_threads:
        tf.config.threading.set_inter_op_parallelism_threads(args.inter_op_threads)
    if args.num_cpu_replicas:
        from training.run import strategy as strategy_lib

        _STRATEGY = strategy_lib.make_strategy("mirrored", args.num_cpu_replicas)
    use_trainer = trainer_available() and not args.local_step
    load_start = common.loadavg()
    cases, samples, steps = measure(args, use_trainer)
    load_end = common.loadavg()
    peaks = {k: samples[k] for k in ("float32", "bfloat16")}
    rows, checks = summarize(cases, samples, steps)
    table = markdown_table(rows, peaks, command, cases[0].step_kind, args.rounds)
    if args.quick:
        checks = [f"(smoke check, too few steps to measure) {c}" for c in checks]
    checks += [w for dtype, values in peaks.items()
               if (w := common.load_warning(f"{dtype} matmul peak", values, load_start, load_end))]
    print(f"\n{table}\n\n" + "\n".join(checks))
    result = dict(step=cases[0].step_kind, rounds=args.rounds,
                  machine=common.machine_info(load_start, load_end),
                  threads=dict(intra_op=tf.config.threading.get_intra_op_parallelism_threads(),
                               inter_op=tf.config.threading.get_inter_op_parallelism_threads(),
                               cpu_replicas=args.num_cpu_replicas or 1,
                               affinity=sorted(os.sched_getaffinity(0))),
                  peak_gflops={k: statistics.median(v) for k, v in peaks.items()},
                  peak_samples=peaks, rows=rows, checks=checks, markdown=table)
    out = common.write_results(args.out, command, result)
    print(f"\nresults written to {out}")
    return dict(command=command, **result)


if __name__ == "__main__":
    main()
