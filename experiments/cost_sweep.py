"""Cost-aware search sweep: the quality/speed knob of PAR.

For each cost coefficient C of --coefs (README, "Cost-aware search"), one stage
after another:
  1. search: a HARD supernet search, `./base_model.sh --search_mode=hard
     --search_cost_coef=C --max_steps=<--search_steps>`, into
     <runs_dir>/search_hard_c<C>, which derives an architecture (argmax per
     block, architecture.json);
  2. retrain: that architecture from scratch with the same recipe,
     `./base_model.sh --architecture=<derived> --max_steps=<--retrain_steps>`,
     into <runs_dir>/retrain_<architecture>, evaluated on the whole valid and
     test splits. Coefficients deriving the same architecture share its
     retrain (same flags, same seed: the same experiment).
Plus one SOFT search at C = 0 with the same budget (search_soft_c0) and the
retrain of its architecture, to see whether soft and hard search agree, and,
with --retrain_reference, the Transformer-XL of the same depth trained with
the same budget (retrain_afaf...), PAR's comparison: derived network against
Transformer-XL, perplexity and tokens/s side by side.
  3. throughput: training tokens/s of every retrained network and of the
     Transformer-XL of the same depth (the reference), measured in this
     process by bench/bench_train.py's Case (the trainer's own train_step on
     Zipf-distributed ids: no input pipeline, no evaluation) sampled round
     by round (sample_interleaved), so load from other processes hits every
     network alike; the median per network and the median of the per-round
     ratios to the reference. Cached in <runs_dir>/throughput.json.
One row per coefficient (architecture, attention:total, FLOPs relative to
Transformer-XL, valid perplexity and word perplexity of the retrained network,
tokens/s, on the Pareto front or not) and the soft/hard comparison go to
bench/results/cost_sweep.json and, as Markdown, to stdout; the figure (valid
perplexity against tokens/s, one point per coefficient labelled with its
architecture, the Pareto front) to docs/cost_sweep.png.

Every run is base_model.sh's recipe (wt2_base, Adam with cosine decay, tau
1.0 -> 0.1, architecture Adam at lr 1e-2 after a warm-up capped at 20% of the
run), whose flags the sweep's override; each stage's command is in its
sweep_plan.json.

Size of the cost term (training/plugins/par_search/plugin.py; the one FLOPs model of
model/transformer_xl/flops.py, counted for the training batch): at wt2_base size (T 32,
M 16, B 32) an attention block costs 0.103 and a dense block 0.133 of a
Transformer-XL's forward FLOPs per token, identity 0, embedding and adaptive
softmax 0.294 (`cost_per_block` in the results). So the knob trades whole
blocks for identity rather than attention for dense, and making a block
identity lowers the loss by C * 0.10 (attention) to C * 0.13 (dense) nats per
token, against a token NLL of about 4-5. The default coefficients bracket what
one block of a briefly trained 6-block model is worth (a few hundredths of a
nat): 0 (off), 0.05 (0.005-0.007 nats per block dropped: only useless blocks
go), 0.2 (0.02-0.03: about break-even) and 1.0 (0.10-0.13: most blocks go).
The rows' FLOPs (each search's derivation report), the networks' FLOPs in the
throughput and `cost_per_block` are the same model, counted again when a
cached throughput is read.

Resumable: a stage whose run finished (metrics.json at the planned step) is
read, not rerun; an unfinished one resumes from its last checkpoint with the
command of its plan (train.py resumes a run found in its model_dir); the
throughput is measured again only when the networks or its settings change.
To start over, remove <runs_dir> or pass another.

Usage (from the project root):
    ./create_tfrecords.sh                              # data/wikitext2 (12k sentencepiece)
    python -m experiments.cost_sweep --quick           # smoke test: tiny model, ~20 s a stage
    python -m experiments.cost_sweep                   # 2,000 + 2,000 steps a coefficient
    python -m experiments.cost_sweep --coefs=0,0.1,0.5 --search_steps=5000 --retrain_steps=5000
    python -m experiments.cost_sweep --coefs=0 --no_soft --retrain_reference \
        --train_flags=--num_blocks=12 --runs_dir=runs/par_claim_12   # PAR's claim, 12 blocks
Results: bench/results/cost_sweep.json, docs/cost_sweep.png, a table on stdout.
"""

import json
import math
import os
import pathlib
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from bench import common  # no TensorFlow, nor the two imports below
from experiments.compare_families import built_meta, close_killed_attempts, run_status, tail
from model.transformer_xl.config import transformer_xl_architecture
from runstore import run_dir as names
from training.plugins.par_search.derive import ARCHITECTURE_JSON

ROOT = common.ROOT
BASE_MODEL = ROOT / "base_model.sh"
PLAN_FILE = "sweep_plan.json"
LOG_FILE = "train.log"
THROUGHPUT_FILE = "throughput.json"
DEFAULT_COEFS = "0,0.05,0.2,1.0"
# --quick: a tiny model (the data's vocabulary, full softmax), evaluations on a few records.
QUICK_FLAGS = ("--preset=tiny", "--cutoffs=none", "--eval_max_records=4")


class SweepError(RuntimeError):
    """A user-fixable problem (missing data, foreign run directory, failed run)."""


# ----------------------------------------------------------------- pure parts


def parse_coefs(text):
    """Cost coefficients from a comma list: finite, >= 0, distinct, in the given order.

    Raises:
        ValueError: naming --coefs and the bad entry.
    """
    coefs = []
    for item in (part.strip() for part in str(text).split(",")):
        if not item:
            continue
        try:
            value = float(item)
        except ValueError:
            raise ValueError(f"--coefs={text}: {item!r} is not a number") from None
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"--coefs={text}: {item} must be a finite number >= 0")
        if value in coefs:
            raise ValueError(f"--coefs={text}: {item} is given twice")
        coefs.append(value)
    if not coefs:
        raise ValueError(f"--coefs={text!r}: give at least one coefficient, e.g. {DEFAULT_COEFS}")
    return coefs


def stage_name(mode, coef):
    """Run directory name of a search: search_hard_c0.05."""
    return f"search_{mode}_c{coef:g}"


def attention_ratio(architecture):
    """Attention blocks against the blocks that compute (attention + dense).

    Identity blocks are no layer at all, so PAR's total:attention ratio
    (about 5:1 for its searched networks) counts only a and f.

    Returns:
        dict: attention, total (a + f), num_blocks, ratio ("2:5") and
        fraction (attention / total; None when no block computes).
    """
    attention = architecture.count("a")
    total = attention + architecture.count("f")
    return dict(attention=attention, total=total, num_blocks=len(architecture),
                ratio=f"{attention}:{total}", fraction=attention / total if total else None)


def pareto_front(points):
    """Indices of the points no other point beats: (tokens/s higher, perplexity lower).

    A point is dominated when another is at least as fast and at least as
    good, and strictly better in one; equal points do not dominate each other.

    Args:
        points: list of (tokens_per_sec, perplexity).

    Returns:
        Sorted list of indices on the front.
    """
    front = []
    for i, (speed, ppl) in enumerate(points):
        if not any(s >= speed and p <= ppl and (s > speed or p < ppl)
                   for j, (s, p) in enumerate(points) if j != i):
            front.append(i)
    return front


def last_logged(path):
    """The fields of the last line of a training_log.log, or {} (train.py's k=v format)."""
    path = pathlib.Path(path)
    if not path.exists():
        return {}
    lines = path.read_text(encoding="utf-8").split("\n")
    line = next((x for x in reversed(lines) if x.strip()), "")
    return dict(item.split("=", 1) for item in line.split() if "=" in item)


# ------------------------------------------------------------------- stages


def stage_command(run_dir, max_steps, stage_flags, args):
    """base_model.sh with the sweep's flags; later flags win over the script's."""
    return [
        "bash", str(BASE_MODEL), f"--data_dir={args.data_dir}", f"--model_dir={run_dir}",
        f"--logdir={pathlib.Path(args.logs_dir) / run_dir.name}", f"--max_steps={max_steps}",
        "--eval_interval=0", f"--checkpoint_interval={max(1, min(500, max_steps // 4))}",
        f"--log_interval={max(1, min(100, max_steps // 20))}", "--sample_tokens=0",
        f"--precision={args.precision}", *stage_flags,
        *(QUICK_FLAGS if args.quick else ()), *shlex.split(args.train_flags)]


def run_train(command, run_dir, max_steps, heartbeat):
    """Runs one stage's command from the project root, its output appended to train.log.

    Prints the last logged step every `heartbeat` seconds (0: never). The
    child is stopped when this process is interrupted or terminated.

    Returns:
        (return code, wall seconds).
    """
    env = dict(os.environ, PYTHON=sys.executable,
               TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"))
    start = last = time.perf_counter()
    with open(run_dir / LOG_FILE, "a", encoding="utf-8") as log:
        log.write(f"\n$ {shlex.join(command)}\n")
        log.flush()
        child = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                 env=env)
        try:
            while True:
                try:
                    code = child.wait(timeout=2)
                    break
                except subprocess.TimeoutExpired:
                    pass
                if heartbeat and time.perf_counter() - last >= heartbeat:
                    last = time.perf_counter()
                    row = last_logged(run_dir / names.TRAINING_LOG)
                    if row:
                        print(f"    {run_dir.name}: step {row['step']}/{max_steps}, loss "
                              f"{float(row['loss']):.3f}, "
                              f"{float(row.get('tokens_per_sec', 0)):.0f} tokens/s, "
                              f"{last - start:.0f} s", flush=True)
        finally:
            if child.poll() is None:
                child.terminate()
                child.wait()
    return code, time.perf_counter() - start


def run_stage(name, max_steps, stage_flags, args, command=None, same=None):
    """Runs (or resumes, or reads) one stage; returns its run directory.

    A finished run (metrics.json at `max_steps`) is read; a planned one resumes with the
    command of its plan (PLAN_FILE); a new one is planned, then trained.

    Args:
        name: the run directory <args.runs_dir>/<name>.
        max_steps: the step at which the run is finished.
        stage_flags: flags of the stage, after the sweep's (`stage_command`).
        args: needs runs_dir and heartbeat (and `stage_command`'s fields unless
            `command` is given).
        command: the whole command to plan instead of `stage_command`'s (another
            driver's, e.g. experiments/frontier.py); `stage_flags` is then unused.
        same: optional `same(planned, command)`: True when a planned command differs
            from `command` only in where the checkout is. The run then resumes with
            `command` (this checkout's scripts), and its plan records it.

    Raises:
        SweepError: a foreign run directory, or a failed run (it resumes next time).
    """
    run_dir = pathlib.Path(args.runs_dir) / name
    status = run_status(run_dir, PLAN_FILE)
    if status == "finished":
        print(f"{name}: finished, read from {run_dir}", flush=True)
        return run_dir
    if status == "foreign":
        raise SweepError(f"{run_dir} holds a training run without {PLAN_FILE} (not started by "
                         "this script): remove it or pass another --runs_dir")
    if command is None:
        command = stage_command(run_dir, max_steps, stage_flags, args)
    if status == "new":
        plan = dict(name=name, max_steps=max_steps, command=command, attempts=[])
        run_dir.mkdir(parents=True, exist_ok=True)
    else:
        plan = common.read_json(run_dir / PLAN_FILE)
        if plan["command"] != command and same is not None and same(plan["command"], command):
            print(f"{name}: resuming with this checkout's scripts", flush=True)
            plan["command"] = command
        elif plan["command"] != command:
            print(f"{name}: resuming with the command it was planned with (the flags "
                  f"differ now; remove {run_dir} to plan it again)", flush=True)
    close_killed_attempts(plan, run_dir / LOG_FILE)
    attempt = dict(started=time.time(), seconds=None, returncode=None)
    plan["attempts"].append(attempt)
    common.write_json(run_dir / PLAN_FILE, plan)
    verb = "resuming" if status == "planned" else "training"
    print(f"{name}: {verb} {plan['max_steps']} steps in {run_dir} (log {run_dir / LOG_FILE})",
          flush=True)
    code, seconds = run_train(plan["command"], run_dir, plan["max_steps"], args.heartbeat)
    attempt.update(seconds=seconds, returncode=code)
    common.write_json(run_dir / PLAN_FILE, plan)
    if code:
        raise SweepError(f"{name}: train.py failed (exit {code}); it resumes next time. "
                         f"Last lines of {run_dir / LOG_FILE}:\n{tail(run_dir / LOG_FILE)}")
    if run_status(run_dir, PLAN_FILE) != "finished":
        raise SweepError(f"{name}: train.py exited without metrics.json at step "
                         f"{plan['max_steps']}; see {run_dir / LOG_FILE}")
    print(f"{name}: done in {seconds:.0f} s", flush=True)
    return run_dir


def search_summary(run_dir):
    """The derived architecture of a finished search and what led to it."""
    report = common.read_json(run_dir / ARCHITECTURE_JSON)
    if report is None:
        raise SweepError(f"{run_dir} finished without architecture.json (not a supernet run?)")
    expected = last_logged(run_dir / names.TRAINING_LOG).get("expected_cost")
    return dict(run_dir=str(run_dir), architecture=report["architecture"],
                untrained=report["untrained"], relative_flops=report["relative_flops"],
                probabilities=report["probabilities"],
                expected_cost_end=None if expected is None else float(expected))


def retrain_summary(run_dir):
    """Valid and test metrics of the last checkpoint of a finished retrain."""
    metrics = common.read_json(run_dir / names.METRICS_FILE)
    valid, test = metrics["last"]["valid"], metrics["last"]["test"]
    return dict(run_dir=str(run_dir), steps=metrics["step"],
                valid_perplexity=valid["perplexity"],
                valid_word_perplexity=valid["word_perplexity"], valid_records=valid["records"],
                test_perplexity=test["perplexity"], test_word_perplexity=test["word_perplexity"])


def measure_throughput(retrain_dirs, args):
    """Tokens/s of each retrained network and the Transformer-XL reference, interleaved.

    Args:
        retrain_dirs: architecture -> finished retrain run directory.

    Returns:
        dict with `networks`: architecture -> {tokens_per_sec, vs_reference,
        relative_flops, samples_s, ...}, `reference` (its architecture), the settings
        and `cost_per_block`. The FLOPs (`network_flops`) are arithmetic, counted
        again on every call, also for a cached measurement.
    """
    import dataclasses

    from training.setup.config import TrainConfig

    configs = {arch: TrainConfig.load(str(d)) for arch, d in retrain_dirs.items()}
    first = next(iter(configs.values()))
    reference = transformer_xl_architecture(first.model.num_blocks)
    models = {arch: c.model for arch, c in configs.items()}
    models.setdefault(reference, dataclasses.replace(first.model, architecture=reference))
    key = json.loads(json.dumps(dict(
        models={arch: m.to_dict() for arch, m in models.items()}, rounds=args.rounds,
        sample_seconds=args.sample_seconds, batch_size=first.batch_size,
        seq_len=first.seq_len, precision=args.precision)))
    path = pathlib.Path(args.runs_dir) / THROUGHPUT_FILE
    result = cached_throughput(path, key)
    written = json.dumps(result, sort_keys=True) if result is not None else None
    if result is None:
        result = dict(key=key, reference=reference, **measured_networks(
            models, reference, first.batch_size, first.seq_len, args.precision, args.rounds,
            args.sample_seconds))
    relative, result["cost_per_block"] = network_flops(models, first)
    for arch, net in result["networks"].items():
        net["relative_flops"] = relative[arch]
    if json.dumps(result, sort_keys=True) != written:  # measured, or counted another way
        common.write_json(path, result)
    return result


def measured_networks(models, reference, batch_size, seq_len, precision, rounds,
                      sample_seconds):
    """The interleaved throughput of `models` (`sample_throughput`) as the drivers record it.

    Returns:
        dict: networks (name -> tokens_per_sec (median), vs_reference (median per-round
        ratio to `reference`), steps_per_sample, samples_s (seconds per step, one per
        round)), step (what a step is), loadavg_start and loadavg_end.
    """
    load_start = common.loadavg()
    samples, steps, step_kind = sample_throughput(models, batch_size, seq_len, precision,
                                                  rounds, sample_seconds)
    tokens = batch_size * seq_len
    networks = {name: dict(
        tokens_per_sec=tokens / statistics.median(samples[name]),
        vs_reference=common.paired_ratio(samples[reference], samples[name]),
        steps_per_sample=steps[name], samples_s=samples[name]) for name in models}
    return dict(networks=networks, step=step_kind, loadavg_start=load_start,
                loadavg_end=common.loadavg())


def network_flops(models, config):
    """Forward FLOPs per token of each network relative to the Transformer-XL of the same
    depth, and the search's cost table (`cost_per_block`): the one FLOPs model
    (model/transformer_xl/flops.py), at the runs' segment, memory and training batch, as
    the search's derivation report counts (so a row's relative FLOPs and its network's
    agree).

    Args:
        models: architecture -> ModelConfig.
        config: one run's TrainConfig (batch and segment are every run's).

    Returns:
        (architecture -> relative FLOPs, cost_per_block dict).
    """
    from model.transformer_xl import flops

    relative = {arch: flops.relative_to_transformer_xl(
        model, arch, config.seq_len, model.mem_len, batch_size=config.batch_size)["total"]
        for arch, model in models.items()}
    return relative, cost_per_block(config)


def cached_throughput(path, key):
    """The measurement cached at `path` if it was made with `key` (what was measured),
    else None."""
    cached = common.read_json(path)
    if cached is not None and cached["key"] == key:
        print(f"throughput: read from {path}", flush=True)
        return cached
    return None


def sample_throughput(models, batch_size, seq_len, precision, rounds, sample_seconds):
    """Seconds per training step of several networks, sampled round by round in this process.

    Each network is bench/bench_train.py's Case (the trainer's own train_step on
    Zipf-distributed ids: no input pipeline, no evaluation), traced, warmed up and
    calibrated to about `sample_seconds` a sample (`warm_up`); then every round samples
    every network once, in order (`sample_interleaved`), so load from other processes
    hits all of them alike and the rounds pair the samples (common.paired_ratio).
    Imports TensorFlow (the drivers call it after their training runs).

    Args:
        models: name -> model config; the name labels its samples.
        batch_size, seq_len: the global batch [B, T] of every network.
        precision: train.py's --precision of the step.
        rounds: number of interleaved rounds.
        sample_seconds: length of one sample.

    Returns:
        (samples: name -> seconds per step, one per round; steps: name -> steps per
        sample; the step that was timed, e.g. "training.run.trainer.Trainer.train_step").
    """
    from bench import bench_train  # TensorFlow is imported here
    import pardata.quiet  # noqa: F401  (TensorFlow start-up noise)

    print(f"throughput: {len(models)} networks ({', '.join(models)}), {rounds} "
          f"interleaved rounds of ~{sample_seconds:g} s each", flush=True)
    with tempfile.TemporaryDirectory(prefix="cost_sweep_") as workdir:
        cases = [bench_train.Case(name, model, batch_size, seq_len, precision, workdir,
                                  use_trainer=True) for name, model in models.items()]
        steps = bench_train.warm_up(cases, sample_seconds)
        samples = bench_train.sample_interleaved(cases, steps, rounds)
    return samples, steps, cases[0].step_kind


def cost_per_block(config):
    """The search's cost table (par_search.candidate_costs) for the results."""
    from training.plugins.par_search.plugin import candidate_costs

    costs, fixed = candidate_costs(config.model, config.seq_len, config.model.mem_len,
                                   config.batch_size)
    return dict(attention=float(costs[0]), dense=float(costs[1]), identity=float(costs[2]),
                embedding_and_softmax=float(fixed))


# ------------------------------------------------------------------ results


def result_rows(searches, retrains, throughput, reference=None):
    """One row per search (mode, coef), with its retrain and throughput; Pareto over hard.

    With `reference` (the Transformer-XL's architecture, retrained), a last row
    of mode "transformer_xl" (coef None) holds it.
    """
    rows = []
    for (mode, coef), search in searches.items():
        arch = search["architecture"]
        net = throughput["networks"].get(arch, {}) if throughput else {}
        rows.append(dict(
            mode=mode, coef=coef, architecture=arch, attention=attention_ratio(arch),
            relative_flops=search["relative_flops"], untrained=search["untrained"],
            expected_cost_end=search["expected_cost_end"], search=search,
            retrain=retrains.get(arch), tokens_per_sec=net.get("tokens_per_sec"),
            tokens_per_sec_vs_transformer_xl=net.get("vs_reference"), pareto=False))
    if reference is not None:
        net = throughput["networks"].get(reference, {}) if throughput else {}
        rows.append(dict(
            mode="transformer_xl", coef=None, architecture=reference,
            attention=attention_ratio(reference), relative_flops=1.0, untrained=False,
            expected_cost_end=None, search=None, retrain=retrains.get(reference),
            tokens_per_sec=net.get("tokens_per_sec"),
            tokens_per_sec_vs_transformer_xl=net.get("vs_reference"), pareto=False))
    hard = [r for r in rows if r["mode"] == "hard" and r["retrain"] and r["tokens_per_sec"]]
    for i in pareto_front([(r["tokens_per_sec"], r["retrain"]["valid_perplexity"])
                           for r in hard]):
        hard[i]["pareto"] = True
    return rows


def soft_vs_hard(rows):
    """Whether soft and hard search at C = 0 derive the same architecture, and their ppl."""
    by = {(r["mode"], r["coef"]): r for r in rows}
    hard, soft = by.get(("hard", 0.0)), by.get(("soft", 0.0))
    if not (hard and soft):
        return None
    ppl = {name: r["retrain"]["valid_perplexity"] if r["retrain"] else None
           for name, r in (("hard", hard), ("soft", soft))}
    return dict(same_architecture=hard["architecture"] == soft["architecture"],
                hard_architecture=hard["architecture"], soft_architecture=soft["architecture"],
                hard_valid_perplexity=ppl["hard"], soft_valid_perplexity=ppl["soft"])


def markdown_table(rows, comparison, command):
    def num(value, fmt):
        return "" if value is None else format(value, fmt)

    cells = []
    for r in rows:
        retrain = r["retrain"] or {}
        cells.append([
            r["mode"], "" if r["coef"] is None else f"{r['coef']:g}",
            f"`{r['architecture']}`" + (" (untrained)" if r["untrained"] else ""),
            r["attention"]["ratio"], num(r["relative_flops"], ".3f"),
            num(retrain.get("valid_perplexity"), ".2f"),
            num(retrain.get("valid_word_perplexity"), ".2f"), num(r["tokens_per_sec"], ",.0f"),
            num(r["tokens_per_sec_vs_transformer_xl"], ".2f"), "yes" if r["pareto"] else ""])
    lines = [common.markdown_table(
        ["search", "C", "architecture", "attention:total", "FLOPs vs TXL", "valid ppl",
         "valid word ppl", "tokens/s", "vs TXL", "Pareto"], cells, "lrlrrrrrrl")]
    if comparison:
        lines += [
            "",
            "Soft and hard search at C = 0 derive "
            + ("the same architecture" if comparison["same_architecture"]
               else "different architectures")
            +             f" (`{comparison['hard_architecture']}` hard, "
            f"`{comparison['soft_architecture']}` soft).",
        ]
    lines += ["", "Valid perplexity of the retrained network (last checkpoint, whole valid "
              "split; 4 records with --quick); attention:total counts attention against attention "
              "+ dense blocks; "
              "FLOPs vs TXL: forward FLOPs per token relative to the Transformer-XL of the "
              "same depth (model/transformer_xl/flops.py, for the training batch); tokens/s: "
              "median training-step "
              "throughput, the "
              "networks interleaved in one process; vs TXL: median per-round ratio to the "
              f"Transformer-XL's tokens/s. Command: `{command}`"]
    return "\n".join(lines)


def plot_pareto(rows, reference_tokens_per_sec, path, title, dpi=120):
    """Valid perplexity against tokens/s: one point per architecture, the Pareto front.

    Hard-search points are labelled with their coefficients and architecture
    (filled when on the front); the soft search at C = 0 is a hollow circle;
    the Transformer-XL reference's tokens/s is a dotted line. Drawn on the Agg
    canvas (no pyplot) and written via a temporary name.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 4.8), dpi=dpi)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    points = {}  # architecture -> [tokens/s, ppl, coefs, on front]
    for r in rows:
        if r["mode"] == "hard" and r["retrain"] and r["tokens_per_sec"]:
            point = points.setdefault(r["architecture"], [
                r["tokens_per_sec"], r["retrain"]["valid_perplexity"], [], r["pareto"]])
            point[2].append(f"{r['coef']:g}")
    front = sorted((x, y) for x, y, _, on in points.values() if on)
    if front:
        ax.plot(*zip(*front), color="C0", linestyle="--", linewidth=1, label="Pareto front")
    for arch, (x, y, coefs, on) in points.items():
        ax.scatter([x], [y], color="C0" if on else "0.55", zorder=3)
        ax.annotate(f"C={', '.join(coefs)}: {arch}", (x, y), xytext=(6, 5),
                    textcoords="offset points", fontsize=9)
    for r in rows:
        if r["mode"] == "transformer_xl" and r["retrain"] and r["tokens_per_sec"]:
            x, y = r["tokens_per_sec"], r["retrain"]["valid_perplexity"]
            ax.scatter([x], [y], marker="s", color="0.1", zorder=4, label="Transformer-XL")
            ax.annotate(f"Transformer-XL: {r['architecture']}", (x, y), xytext=(6, -12),
                        textcoords="offset points", fontsize=9)
        if r["mode"] == "soft" and r["retrain"] and r["tokens_per_sec"]:
            x, y = r["tokens_per_sec"], r["retrain"]["valid_perplexity"]
            ax.scatter([x], [y], s=110, facecolors="none", edgecolors="C3", zorder=4,
                       label="soft search, C=0")
            ax.annotate(f"soft: {r['architecture']}", (x, y), xytext=(6, -12),
                        textcoords="offset points", fontsize=9, color="C3")
    if reference_tokens_per_sec:
        ax.axvline(reference_tokens_per_sec, color="0.4", linestyle=":", linewidth=1,
                   label="Transformer-XL tokens/s")
    ax.set_xlabel("training tokens/s (interleaved in one process)")
    ax.set_ylabel("valid perplexity (retrained)")
    ax.set_title(title, fontsize=10)
    ax.margins(x=0.2, y=0.12)  # room for the labels
    ax.grid(alpha=0.3)
    ax.legend(loc="best", frameon=False, fontsize=9)
    fig.tight_layout()
    with names.atomic_output(path, suffix=".png") as partial:  # savefig wants the suffix
        fig.savefig(partial, dpi=dpi)


# ---------------------------------------------------------------------- main


def parse_args(argv):
    parser = common.Parser(description=__doc__.split("\n")[0])
    parser.add_argument("--coefs", default=DEFAULT_COEFS,
                        help="comma-separated cost coefficients (--search_cost_coef), >= 0")
    parser.add_argument("--search_steps", type=int, default=None,
                        help="steps of each search (default 2000, quick 20)")
    parser.add_argument("--retrain_steps", type=int, default=None,
                        help="steps of each retrain (default 2000, quick 20)")
    parser.add_argument("--data_dir", default=str(ROOT / "data" / "wikitext2"),
                        help="built dataset (default: data/wikitext2 of ./create_tfrecords.sh)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: the tiny preset, few steps, evaluations on 4 records")
    parser.add_argument("--no_soft", action="store_true",
                        help="skip the soft search at C=0 (and its comparison with hard)")
    parser.add_argument("--retrain_reference", action="store_true",
                        help="also train the Transformer-XL of the same depth with the "
                        "retrain budget (PAR's comparison)")
    parser.add_argument("--search_eval_records", type=int, default=40,
                        help="valid/test records evaluated at the end of a search (0: all); "
                        "retrains are evaluated on whole splits")
    parser.add_argument("--rounds", type=int, default=None,
                        help="interleaved throughput rounds (default 7, quick 2)")
    parser.add_argument("--sample_seconds", type=float, default=None,
                        help="length of one throughput sample (default 2, quick 0.2)")
    parser.add_argument("--precision", default="float32",
                        choices=("float32", "mixed_bfloat16", "mixed_float16"))
    parser.add_argument("--train_flags", default="",
                        help="more train.py flags for every run (they win), e.g. '--seed=1'")
    parser.add_argument("--heartbeat", type=float, default=60.0,
                        help="seconds between progress lines of a running stage (0: none)")
    parser.add_argument("--runs_dir", default=None,
                        help="runs go to <runs_dir>/<stage> (default runs/cost_sweep, quick "
                        "runs/cost_sweep_quick)")
    parser.add_argument("--logs_dir", default=None,
                        help="TensorBoard directories (default logs/<runs_dir name>)")
    parser.add_argument("--out", default=None, help="results JSON (default "
                        "bench/results/cost_sweep.json, quick .../cost_sweep_quick.json)")
    parser.add_argument("--figure", default=None, help="Pareto figure (default "
                        "docs/cost_sweep.png, quick <runs_dir>/cost_sweep.png)")
    args = parser.parse_args(argv)
    try:
        args.coefs = parse_coefs(args.coefs)
    except ValueError as error:
        parser.error(str(error))
    common.fill_defaults(args, args.quick, search_steps=(20, 2000), retrain_steps=(20, 2000),
                         rounds=(2, 7), sample_seconds=(0.2, 2.0))
    for name in ("search_steps", "retrain_steps", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}={getattr(args, name)} must be >= 1")
    if args.sample_seconds <= 0 or args.search_eval_records < 0 or args.heartbeat < 0:
        parser.error("--sample_seconds must be > 0, --search_eval_records and --heartbeat >= 0")
    suffix = "_quick" if args.quick else ""
    args.runs_dir = args.runs_dir or str(ROOT / "runs" / f"cost_sweep{suffix}")
    args.logs_dir = args.logs_dir or str(ROOT / "logs" / pathlib.Path(args.runs_dir).name)
    args.out = args.out or str(common.results_path(f"cost_sweep{suffix}"))
    args.figure = args.figure or (str(pathlib.Path(args.runs_dir) / "cost_sweep.png")
                                  if args.quick
                                  else str(ROOT / "docs" / "cost_sweep.png"))
    for name in ("data_dir", "runs_dir", "logs_dir", "out", "figure"):
        setattr(args, name, os.path.abspath(getattr(args, name)))
    return args


def run_sweep(args):
    """Searches, retrains, throughput; returns (rows, throughput, failures)."""
    plan = [("hard", c) for c in args.coefs] + ([] if args.no_soft else [("soft", 0.0)])
    searches, retrains, failures = {}, {}, []
    for mode, coef in plan:
        name = stage_name(mode, coef)
        try:
            run_dir = run_stage(name, args.search_steps, [
                "--architecture=supernet", f"--search_mode={mode}",
                f"--search_cost_coef={coef:g}",
                f"--eval_max_records={args.search_eval_records}"], args)
            search = searches[(mode, coef)] = search_summary(run_dir)
            arch = search["architecture"]
            print(f"{name}: derived {arch} (attention:total {attention_ratio(arch)['ratio']}, "
                  f"{search['relative_flops']:.3f} of Transformer-XL FLOPs)"
                  + ("  WARNING: untrained logits, not a search result"
                     if search["untrained"] else ""), flush=True)
            retrain(arch, retrains, args)
        except SweepError as error:
            failures.append(f"error: {error}")
            print(failures[-1], file=sys.stderr, flush=True)
    reference = None
    if args.retrain_reference and searches:
        num_blocks = len(next(iter(searches.values()))["architecture"])
        try:
            reference = transformer_xl_architecture(num_blocks)
            retrain(reference, retrains, args)
        except (SweepError, ValueError) as error:
            reference = None
            failures.append(f"error: {error}")
            print(failures[-1], file=sys.stderr, flush=True)
    throughput = None
    if retrains:
        throughput = measure_throughput(
            {arch: pathlib.Path(r["run_dir"]) for arch, r in retrains.items()}, args)
        for arch, net in throughput["networks"].items():
            print(f"  {arch}: {net['tokens_per_sec']:,.0f} tokens/s, "
                  f"{net['vs_reference']:.2f}x Transformer-XL", flush=True)
    return result_rows(searches, retrains, throughput, reference), throughput, failures


def retrain(arch, retrains, args):
    """Trains `arch` from scratch once (retrain_<arch>); its summary into `retrains`."""
    if arch in retrains:
        return
    retrain_dir = run_stage(f"retrain_{arch}", args.retrain_steps, [
        f"--architecture={arch}", "--arch_warmup_steps=0"], args)
    retrains[arch] = retrain_summary(retrain_dir)
    print(f"retrain_{arch}: valid ppl {retrains[arch]['valid_perplexity']:.2f} "
          f"(word {retrains[arch]['valid_word_perplexity']:.2f})", flush=True)


def _terminate(signum, frame):
    raise SystemExit(128 + signum)  # unwinds through run_train, which stops its child


def main(argv=None):
    args, command = common.start("experiments.cost_sweep", parse_args, argv)
    meta = built_meta(args.data_dir)
    if meta is None:
        return 1
    signal.signal(signal.SIGTERM, _terminate)
    print(f"coefficients {', '.join(f'{c:g}' for c in args.coefs)}: searches of "
          f"{args.search_steps} steps, retrains of {args.retrain_steps}, runs in "
          f"{args.runs_dir}", flush=True)
    started = time.time()
    rows, throughput, failures = run_sweep(args)
    if not rows:
        return 1
    comparison = soft_vs_hard(rows)
    table = markdown_table(rows, comparison, command)
    print(f"\n{table}\n", flush=True)
    reference = throughput["reference"] if throughput else None
    out = common.write_results(args.out, command, dict(
        data_dir=args.data_dir, quick=args.quick, coefs=args.coefs,
        search_steps=args.search_steps, retrain_steps=args.retrain_steps,
        machine=common.machine_info(), wall_s_this_invocation=time.time() - started, rows=rows,
        soft_vs_hard=comparison, throughput=throughput, failures=failures, markdown=table))
    if throughput:
        pathlib.Path(args.figure).parent.mkdir(parents=True, exist_ok=True)
        plot_pareto(rows, throughput["networks"][reference]["tokens_per_sec"], args.figure,
                    f"Cost-aware hard search ({args.search_steps} steps) + retrain "
                    f"({args.retrain_steps} steps), "
                    f"{meta.get('dataset') or pathlib.Path(args.data_dir).name}")
        print(f"figure written to {args.figure}")
    print(f"results written to {out}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
