"""Does PAR pay? Its speed-perplexity frontier against Transformer-XLs of several sizes.

Every point of the table (`points`) is trained from scratch at every
seed of --seeds, with the same recipe and budget, then measured:
  1. runs: for each seed, for each point,
         ./base_model.sh --model_dir=<runs_dir>/<point>_seed<S> --architecture=<arch>
             --arch_warmup_steps=0 --seed=<S> [--recipe=R] <budget> <size flags>
             --eval_interval=<steps per epoch> --checkpoint_interval=<steps per epoch>
             --data_dir=... --logdir=<logs_dir>/<run> <--train_flags>
     (with --cpus: under `taskset -c <cpus>`), its output in <run dir>/train.log and its
     command in <run dir>/sweep_plan.json. The budget is --epochs (default 3) or
     --max_steps; the recipe is base_model.sh's seed recipe, or --recipe's
     (training/setup/recipes.py). Every command is parsed by train.py's own flags and
     checks before the first run starts, so a size that does not fit the data stops
     the driver in one line, having trained nothing.
  2. throughput: the training tokens/s of every point (and of `afafaf`, the
     reference) measured in this one process, on the same cores, interleaved round
     by round (experiments/cost_sweep.py's `sample_throughput`: bench/bench_train.py's
     Case, the trainer's own train_step on Zipf ids, no input pipeline); the median per
     point and the median per-round ratio to afafaf. Cached in
     <runs_dir>/throughput.json.
  3. report, in --results_dir (default docs/results/par_frontier/):
       summary.json   {"runs": [{"name", "kind", "architecture", "num_blocks", "d_model",
                      "d_ffn", "seed", "valid_ppl", "test_ppl", "tokens_per_s",
                      "relative_flops"}], "block_times": {...}}, one row per run: valid
                      and test perplexity of the run's best checkpoint (metrics.json
                      "best"), tokens/s its point's interleaved median, relative_flops its
                      forward FLOPs per token over afafaf's (model/transformer_xl/flops.py,
                      the one FLOPs model, at the runs' batch, segment and memory);
                      block_times: the least-squares attention, dense and fixed time per
                      token of the measured points of afafaf's width, relative to
                      afafaf's, next to the FLOPs model's (experiments/block_times.py);
       <run>/         config.json, metrics.json, training_log.log, console.log (train.log)
                      and STATUS.md of each run (tools/collect_run.py);
       throughput.json  a copy of the measurement;
       frontier.png   test perplexity against tokens/s, one marker per point (mean over
                      seeds, error bars one standard deviation), Transformer-XL's and
                      PAR's Pareto fronts as step lines;
     and a per-point Markdown table on stdout (mean +- sample std over seeds of test
     perplexity, tokens/s, ratios to afafaf of tokens/s, FLOPs and perplexity, on its
     kind's front), then the block times.

Points (`points`): Transformer-XLs `afafaf` (3 layers, the wt2_base preset's 6 blocks),
`afaf` (2 layers), `af` (1 layer), `afafaf_ffn256` (--d_ffn=256) and `afafaf_d96`
(--d_model=96, so d_head 24 with the preset's 4 heads); PAR's derived networks, one per
--par_archs string (default: the three pipeline seeds' picks and the cost-aware
picks), `paper_rule` (`paper_rule(6)`: the PAR paper's placement at this depth) and
`sandwich` (aaafff). --points chooses a subset; an unset d_model/d_ffn is the preset's.

Resumable: a run that finished (metrics.json at its planned step) is read, not rerun;
an unfinished one resumes from its last checkpoint with the command of its plan; the
throughput is measured again only when the networks or its settings change. To start
over, remove <runs_dir> or pass another.

Usage (from the project root):
    ./create_tfrecords.sh                                  # data/wikitext2
    python -m experiments.frontier                         # every point, seeds 0,1,2, 3 epochs
    python -m experiments.frontier --recipe=fast --epochs=9 --cpus=0
    python -m experiments.frontier --points=afafaf,af,aaafaf --seeds=0,1 --max_steps=3000
"""

import argparse
import dataclasses
import json
import os
import pathlib
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from bench import common  # no TensorFlow
from experiments import block_times, cost_sweep
from experiments.compare_families import built_meta
import pardata.quiet  # noqa: F401  (TensorFlow start-up noise; before TF is imported)

ROOT = common.ROOT
BASE_MODEL = cost_sweep.BASE_MODEL
THROUGHPUT_FILE = cost_sweep.THROUGHPUT_FILE
SUMMARY_FILE = "summary.json"
FIGURE_FILE = "frontier.png"
KINDS = ("transformer_xl", "par")
REFERENCE = "afafaf"  # tokens/s and perplexity ratios are to this point
DEPTH = 6  # blocks of the PAR points: the wt2_base preset's, afafaf's
DEFAULT_SEEDS = "0,1,2"
# The three pipeline seeds' picks, then the cost-aware picks (docs/results/cost_sweep.md).
DEFAULT_PAR_ARCHS = "aaafaf,aaaaff,aaaaaf,aaiiia,iaiiii"
# train.py flags that make a point, its seed or the budget: the driver's, never --train_flags'.
DRIVER_FLAGS = ("model_dir", "architecture", "arch_warmup_steps", "seed", "recipe", "epochs",
                "max_steps", "num_blocks", "d_model", "d_ffn", "data_dir", "logdir",
                "quick", "pipeline")


class UsageError(ValueError):
    """Bad input, found before any work: one line naming the flag and the fix."""


# ------------------------------------------------------------------- points


@dataclasses.dataclass(frozen=True)
class Point:
    """One network of the frontier, trained at every seed.

    Attributes:
        name: its runs are <runs_dir>/<name>_seed<S>.
        kind: "transformer_xl" or "par" (which front it belongs to).
        architecture: a/f/i string, one letter per block.
        num_blocks: blocks (--num_blocks); must be len(architecture).
        d_model, d_ffn: --d_model / --d_ffn, or None for the preset's.
    """

    name: str
    kind: str
    architecture: str
    num_blocks: int
    d_model: int | None = None
    d_ffn: int | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"point {self.name}: kind {self.kind!r} is not one of {KINDS}")
        if not self.architecture or set(self.architecture) - set("afi"):
            raise ValueError(f"point {self.name}: architecture {self.architecture!r} must be "
                             "letters a (attention), f (dense), i (identity)")
        if len(self.architecture) != self.num_blocks:
            raise ValueError(f"point {self.name}: architecture {self.architecture} has "
                             f"{len(self.architecture)} blocks but num_blocks is "
                             f"{self.num_blocks}: give {self.num_blocks} letters")

    def size_flags(self):
        """--num_blocks always; --d_model / --d_ffn where the point sets them."""
        return [f"--num_blocks={self.num_blocks}"] + [
            f"--{name}={getattr(self, name)}" for name in ("d_model", "d_ffn")
            if getattr(self, name) is not None]


def paper_rule(num_blocks, p=5):
    """The PAR paper's rule (Mandava et al. 2020, arXiv 2009.04534) at `num_blocks` blocks.

    Attention only in the first two thirds of the network, one attention block for
    every p blocks (total:attention ratio p); every other block dense:
      - attention blocks n = max(1, floor(num_blocks / p + 1/2)): num_blocks / p rounded
        half up, at least one;
      - region r = max(n, floor(2 * num_blocks / 3)): the first two thirds, in blocks;
      - attention at blocks floor(k * r / n), k = 0 .. n - 1 (numbered from 0): spread
        evenly over the region, the first block always attention.
    6 blocks: n 1, r 4 -> afffff; 12: n 2, r 8, blocks 0 and 4; 32: n 6 (6.4), r 21,
    blocks 0, 3, 7, 10, 14, 17.

    Args:
        num_blocks: depth, >= 1.
        p: total:attention ratio, an integer >= 1 (the paper's 5).

    Returns:
        The a/f string, num_blocks letters.
    """
    if int(num_blocks) != num_blocks or num_blocks < 1 or int(p) != p or p < 1:
        raise ValueError(f"paper_rule needs integers num_blocks >= 1 and p >= 1, got "
                         f"num_blocks={num_blocks}, p={p}")
    attention = max(1, (2 * num_blocks + p) // (2 * p))
    region = max(attention, 2 * num_blocks // 3)
    where = {k * region // attention for k in range(attention)}
    return "".join("a" if b in where else "f" for b in range(num_blocks))


# The Transformer-XL sizes. A new point is one more entry here (or in `points`).
TRANSFORMER_XL = (
    Point("afafaf", "transformer_xl", "afafaf", 6),
    Point("afaf", "transformer_xl", "afaf", 4),
    Point("af", "transformer_xl", "af", 2),
    Point("afafaf_ffn256", "transformer_xl", "afafaf", 6, d_ffn=256),
    Point("afafaf_d96", "transformer_xl", "afafaf", 6, d_model=96),
)


def points(par_archs=DEFAULT_PAR_ARCHS.split(",")):
    """The table: name -> Point, Transformer-XLs first, then PAR's networks.

    Args:
        par_archs: PAR's derived architectures, each a point named after itself.

    Raises:
        ValueError: a bad architecture, or two points of one name.
    """
    par = [Point(arch, "par", arch, len(arch)) for arch in par_archs]
    par += [Point("paper_rule", "par", paper_rule(DEPTH), DEPTH),
            Point("sandwich", "par", "aaafff", DEPTH)]
    table = {}
    for point in (*TRANSFORMER_XL, *par):
        if point.name in table:
            raise ValueError(f"two points are called {point.name}")
        table[point.name] = point
    return table


# ----------------------------------------------------------- pure helpers


def parse_seeds(text):
    """Seeds from a comma list: integers >= 0, distinct, at least two (for a spread)."""
    try:
        seeds = [int(item) for item in str(text).split(",") if item.strip()]
    except ValueError:
        raise UsageError(f"--seeds={text}: give integers, e.g. --seeds={DEFAULT_SEEDS}") from None
    if len(seeds) != len(set(seeds)) or any(s < 0 for s in seeds):
        raise UsageError(f"--seeds={text}: give distinct integers >= 0, e.g. "
                         f"--seeds={DEFAULT_SEEDS}")
    if len(seeds) < 2:
        raise UsageError(f"--seeds={text}: a frontier needs at least 2 seeds per point for its "
                         f"spread: give --seeds={DEFAULT_SEEDS}")
    return seeds


def parse_par_archs(text):
    """PAR's architectures from a comma list: DEPTH letters of a/f/i each."""
    archs = [item.strip() for item in str(text).split(",") if item.strip()]
    for arch in archs:
        if set(arch) - set("afi") or len(arch) != DEPTH:
            raise UsageError(
                f"--par_archs={text}: {arch!r} must be {DEPTH} letters of a/f/i (the PAR points "
                f"have afafaf's {DEPTH} blocks), e.g. --par_archs=aaafaf")
    return archs


def select_points(table, text):
    """The points named in a comma list (all when empty), in the table's order."""
    names = [item.strip() for item in str(text or "").split(",") if item.strip()]
    unknown = [name for name in names if name not in table]
    if unknown:
        raise UsageError(f"--points: unknown point {unknown[0]!r}; choose from "
                         f"{','.join(table)} (or add it to experiments/frontier.py's table)")
    return [point for name, point in table.items() if not names or name in names]


def parse_cpus(text):
    """The CPUs of a taskset -c list ("0", "0,1", "0-1") that this process may use."""
    cpus = set()
    try:
        for item in filter(None, (part.strip() for part in text.split(","))):
            lo, _, hi = item.partition("-")
            cpus.update(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise UsageError(f"--cpus={text}: give a taskset -c list such as 0 or 0,1") from None
    allowed = os.sched_getaffinity(0)
    if not cpus or not cpus <= allowed:
        raise UsageError(f"--cpus={text}: this process may use CPUs "
                         f"{','.join(map(str, sorted(allowed)))} only: choose among them")
    return cpus


def run_name(point, seed):
    return f"{point.name}_seed{seed}"


def run_flags(point, seed, args, steps_per_epoch):
    """base_model.sh flags of one run; --train_flags last (base_model.sh: later flags win)."""
    budget = [f"--max_steps={args.max_steps}"] if args.max_steps else [f"--epochs={args.epochs}"]
    name = run_name(point, seed)
    return [f"--model_dir={pathlib.Path(args.runs_dir) / name}",
            f"--architecture={point.architecture}", "--arch_warmup_steps=0", f"--seed={seed}",
            *([f"--recipe={args.recipe}"] if args.recipe else []), *budget,
            *point.size_flags(), f"--eval_interval={steps_per_epoch}",
            f"--checkpoint_interval={steps_per_epoch}", f"--data_dir={args.data_dir}",
            f"--logdir={pathlib.Path(args.logs_dir) / name}", *shlex.split(args.train_flags)]


def run_command(flags, cpus):
    """The command that trains a run (pinned with taskset when `cpus` is given)."""
    return (["taskset", "-c", cpus] if cpus else []) + ["bash", str(BASE_MODEL), *flags]


def train_configs(flags_by_run):
    """The TrainConfig each run's base_model.sh would train, before any training.

    base_model.sh runs with PYTHON set to a stub that prints the train.py arguments it
    receives; they go through train.py's `define_flags` and `config_from_flags` (its
    flag parsing and every config check, against the data's meta.json).

    Args:
        flags_by_run: run name -> base_model.sh flags.

    Raises:
        UsageError: naming the run and train.py's reason.
    """
    from absl import flags

    import data_utils
    import train as train_cli
    from training.setup.config import ConfigError

    configs = {}
    with tempfile.TemporaryDirectory(prefix="frontier_check_") as scratch:
        stub = pathlib.Path(scratch) / "python"
        stub.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n', encoding="utf-8")
        stub.chmod(0o755)
        for name, run_flags_ in flags_by_run.items():
            done = subprocess.run(["bash", str(BASE_MODEL), *run_flags_], cwd=ROOT,
                                  env=dict(os.environ, PYTHON=str(stub)),
                                  capture_output=True, text=True)
            problem = " ".join(done.stderr.split()) if done.returncode else None
            if problem is None:
                fv = train_cli.define_flags(flags.FlagValues())
                try:
                    fv(done.stdout.splitlines())
                    configs[name] = train_cli.config_from_flags(fv)[0]
                except (flags.Error, ConfigError, data_utils.DataError, ValueError) as error:
                    problem = " ".join(str(error).split())
            if problem:
                raise UsageError(f"run {name} does not fit: {problem} (fix the point in "
                                 "experiments/frontier.py, --train_flags or --data_dir)")
    return configs


# train.py flags naming directories (compared by where they resolve to).
PATH_FLAGS = ("--model_dir", "--data_dir", "--logdir")


def checkout_free(command):
    """`command` without where the checkout is: the script by name, the directories by
    the place they resolve to, the pinning (taskset) dropped."""
    script, *rest = command[command.index("bash") + 1:] or [""]
    resolved = []
    for flag in rest:
        name, sep, value = flag.partition("=")
        if sep and name in PATH_FLAGS:
            flag = f"{name}={os.path.realpath(value)}"
        resolved.append(flag)
    return ["bash", os.path.basename(script), *resolved]


def same_run(planned, command):
    """True when two commands train the same run, from any checkout (`checkout_free`)."""
    return checkout_free(planned) == checkout_free(command)


def check_plans(commands, runs_dir):
    """Refuses a run directory planned with other train.py flags than `commands` now give.

    A finished run is read, not rerun: one of another budget, recipe or size would
    enter the frontier silently. Only the pinning (taskset) and where the checkout is
    may differ (`checkout_free`): a second checkout whose runs/, data/ and logs/ link to
    the first's resumes its runs, with its own scripts.

    Args:
        commands: run name -> its command (`run_command`).

    Raises:
        UsageError: naming the run directory, the flags that differ and the fix.
    """
    for name, command in commands.items():
        plan = common.read_json(pathlib.Path(runs_dir) / name / cost_sweep.PLAN_FILE)
        if plan is not None and not same_run(plan["command"], command):
            old, new = checkout_free(plan["command"]), checkout_free(command)
            differ = [f for f in old if f not in new] + [f for f in new if f not in old]
            raise UsageError(
                f"{pathlib.Path(runs_dir) / name} was planned with other flags "
                f"({' '.join(differ)}); the frontier compares runs of one recipe and budget: "
                "remove that directory, or pass another --runs_dir")


def spread(values):
    """(mean, sample standard deviation; 0 for one value)."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def point_stats(rows, throughput, reference=REFERENCE):
    """One entry per point of the summary rows: mean and std over seeds, tokens/s, ratios.

    Args:
        rows: summary.json rows.
        throughput: the measurement (`measure_throughput`): networks -> tokens_per_sec,
            vs_reference.

    Returns:
        List in the rows' point order of dicts: name, kind, architecture, num_blocks,
        d_model, d_ffn, relative_flops (the rows'; None when they have none), seeds,
        test (mean, std), valid (mean, std), tokens_per_s, tokens_vs_reference (median
        per-round ratio), test_vs_reference (ratio of the means; None without the
        reference's runs), front (on its kind's Pareto front).
    """
    stats = {}
    for row in rows:
        entry = stats.setdefault(row["name"], dict(
            {k: row[k] for k in ("name", "kind", "architecture", "num_blocks", "d_model",
                                 "d_ffn")}, relative_flops=row.get("relative_flops"),
            seeds=[], test_runs=[], valid_runs=[]))
        entry["seeds"].append(row["seed"])
        entry["test_runs"].append(row["test_ppl"])
        entry["valid_runs"].append(row["valid_ppl"])
    for entry in stats.values():
        entry["test"], entry["valid"] = spread(entry["test_runs"]), spread(entry["valid_runs"])
        net = throughput["networks"][entry["name"]]
        entry["tokens_per_s"], entry["tokens_vs_reference"] = (net["tokens_per_sec"],
                                                               net["vs_reference"])
    base = stats.get(reference)
    for entry in stats.values():
        entry["test_vs_reference"] = entry["test"][0] / base["test"][0] if base else None
        entry["front"] = False
    for kind in KINDS:
        same = [e for e in stats.values() if e["kind"] == kind]
        for i in cost_sweep.pareto_front([(e["tokens_per_s"], e["test"][0]) for e in same]):
            same[i]["front"] = True
    return list(stats.values())


def markdown_table(stats, command):
    def num(value, fmt):
        return "" if value is None else format(value, fmt)

    cells = []
    for e in stats:
        cells.append([
            e["name"], e["kind"], f"`{e['architecture']}`", e["num_blocks"], e["d_model"],
            e["d_ffn"], len(e["seeds"]), f"{e['test'][0]:.2f} ± {e['test'][1]:.2f}",
            f"{e['valid'][0]:.2f} ± {e['valid'][1]:.2f}", f"{e['tokens_per_s']:,.0f}",
            f"{e['tokens_vs_reference']:.2f}", num(e.get("relative_flops"), ".3f"),
            num(e["test_vs_reference"], ".3f"), "yes" if e["front"] else ""])
    return "\n".join([common.markdown_table(
        ["point", "kind", "architecture", "blocks", "d_model", "d_ffn", "seeds", "test ppl",
         "valid ppl", "tokens/s", f"tokens/s vs {REFERENCE}", f"FLOPs vs {REFERENCE}",
         f"test ppl vs {REFERENCE}", "front"], cells, "lllrrrrrrrrrrl"), "",
        "Perplexities of each run's best checkpoint (lowest valid), mean ± sample std over "
        "seeds; tokens/s: median training-step throughput, every point interleaved in one "
        f"process; tokens/s vs {REFERENCE}: median of the per-round ratios; FLOPs vs "
        f"{REFERENCE}: forward FLOPs per token over {REFERENCE}'s (model/transformer_xl/"
        "flops.py at the runs' batch, segment and memory; if time followed FLOPs, tokens/s "
        "vs the reference would be its inverse); front: on its kind's Pareto front (mean "
        f"test ppl, tokens/s). Command: `{command}`"])


def plot_frontier(stats, path, title, dpi=120):
    """Test perplexity against tokens/s: a marker per point (error bar: std over seeds), and
    each kind's Pareto front as a step line (best perplexity at least that fast). Agg
    canvas, written via a temporary name."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from runstore import run_dir

    fig = Figure(figsize=(8, 5), dpi=dpi)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    styles = {"transformer_xl": ("C0", "s", "Transformer-XL"), "par": ("C3", "o", "PAR")}
    for kind, (color, marker, label) in styles.items():
        same = [e for e in stats if e["kind"] == kind]
        if not same:
            continue
        ax.errorbar([e["tokens_per_s"] for e in same], [e["test"][0] for e in same],
                    yerr=[e["test"][1] for e in same], fmt=marker, color=color, capsize=3,
                    label=label, zorder=3)
        front = sorted((e["tokens_per_s"], e["test"][0]) for e in same if e["front"])
        ax.step(*zip(*front), where="pre", color=color, linewidth=1, linestyle="--",
                label=f"{label} front")
        for e in same:
            text = e["name"] if e["name"] == e["architecture"] else (
                f"{e['name']} ({e['architecture']})")
            ax.annotate(text, (e["tokens_per_s"], e["test"][0]), xytext=(5, 4),
                        textcoords="offset points", fontsize=8)
    ax.set_xlabel("training tokens/s (interleaved in one process)")
    ax.set_ylabel("test perplexity (best checkpoint; mean ± std over seeds)")
    ax.set_title(title, fontsize=10)
    ax.margins(x=0.15, y=0.12)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", frameon=False, fontsize=8)
    fig.tight_layout()
    with run_dir.atomic_output(path, suffix=".png") as partial:  # savefig wants the suffix
        fig.savefig(partial, dpi=dpi)


# ------------------------------------------------------------ measurement


def measure_throughput(models, config, args):
    """Training tokens/s of every point, interleaved round by round in this process; cached.

    Args:
        models: point name -> model config (its first seed's; measured with seed 0, which
            changes no cost), the reference among them.
        config: one run's TrainConfig (batch, segment and precision are every run's).

    Returns:
        dict: key (what was measured), reference, order (of the networks in a round),
        rounds, pid (of the measuring process), cpus, step, loadavg_start/end and
        networks: name -> tokens_per_sec (median), vs_reference (median per-round ratio),
        steps_per_sample, samples_s (seconds per step, one per round).
    """
    models = {name: model.replace(seed=0) for name, model in models.items()}
    key = json.loads(json.dumps(dict(
        models={name: model.to_dict() for name, model in models.items()}, reference=REFERENCE,
        rounds=args.rounds, sample_seconds=args.sample_seconds, batch_size=config.batch_size,
        seq_len=config.seq_len, precision=config.precision, cpus=args.cpus)))
    path = pathlib.Path(args.runs_dir) / THROUGHPUT_FILE
    cached = cost_sweep.cached_throughput(path, key)
    if cached is not None:
        return cached
    result = dict(key=key, reference=REFERENCE, order=list(models), rounds=args.rounds,
                  pid=os.getpid(), cpus=sorted(os.sched_getaffinity(0)),
                  **cost_sweep.measured_networks(models, REFERENCE, config.batch_size,
                                                 config.seq_len, config.precision, args.rounds,
                                                 args.sample_seconds))
    common.write_json(path, result)
    return result


def summary_rows(plan, runs_dir, throughput, flops):
    """summary.json's rows, one per run: its config.json's sizes and seed, its
    metrics.json's best checkpoint, its point's tokens/s and relative FLOPs (`flops`:
    point name -> forward FLOPs per token over the reference's, block_times.relative_flops)."""
    from runstore import run_dir as names

    rows = []
    for point, seed in plan:
        run_dir = pathlib.Path(runs_dir) / run_name(point, seed)
        model = common.read_json(run_dir / names.CONFIG_FILE)["model"]
        best = common.read_json(run_dir / names.METRICS_FILE)["best"]
        rows.append(dict(
            name=point.name, kind=point.kind, architecture=model["architecture"],
            num_blocks=model["num_blocks"], d_model=model["d_model"], d_ffn=model["d_ffn"],
            seed=model["seed"], valid_ppl=best["valid"]["perplexity"],
            test_ppl=best["test"]["perplexity"],
            tokens_per_s=throughput["networks"][point.name]["tokens_per_sec"],
            relative_flops=flops[point.name]))
    return rows


def measured_block_costs(table, throughput, flops):
    """block_times.block_costs over the measured points of the reference's width (those
    that set neither d_model nor d_ffn)."""
    networks = {name: (table[name].architecture, net["tokens_per_sec"], flops[name])
                for name, net in throughput["networks"].items()
                if table[name].d_model is None and table[name].d_ffn is None}
    return block_times.block_costs(networks, REFERENCE)


def write_report(plan, rows, throughput, flops, args, command, title):
    """Run artefacts, summary.json, throughput.json and frontier.png into --results_dir;
    the table and the block times on stdout. `flops`: point name -> relative FLOPs
    (block_times.relative_flops) of every measured point."""
    from tools import collect_run

    results = pathlib.Path(args.results_dir)
    for point, seed in plan:
        run_dir = pathlib.Path(args.runs_dir) / run_name(point, seed)
        collect_run.collect(run_dir, results, console_log=run_dir / cost_sweep.LOG_FILE)
    costs = measured_block_costs(args.table, throughput, flops)
    common.write_json(results / SUMMARY_FILE, {"runs": rows, "block_times": costs})
    shutil.copy2(pathlib.Path(args.runs_dir) / THROUGHPUT_FILE, results / THROUGHPUT_FILE)
    stats = point_stats(rows, throughput)
    plot_frontier(stats, results / FIGURE_FILE, title)
    print(f"\n{markdown_table(stats, command)}\n\n{block_times.describe(costs, REFERENCE)}"
          f"\n\nresults written to {results}", flush=True)
    return stats


# ---------------------------------------------------------------------- main


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


# The flags --train_flags may not set, and where they come from instead.
_SET_BY = {"seed": "--seeds", "recipe": "--recipe", "epochs": "--epochs or --max_steps",
           "max_steps": "--epochs or --max_steps", "data_dir": "--data_dir",
           "model_dir": "--runs_dir", "logdir": "--logs_dir",
           "arch_warmup_steps": "the retraining of a fixed architecture, 0",
           "quick": "base_model.sh's default mode", "pipeline": "base_model.sh's default mode"}


def parse_args(argv):
    """Parsed and checked flags (paths absolute); UsageError naming the flag otherwise."""
    from training.setup.recipes import RECIPES

    parser = _Parser(description=__doc__.split("\n")[0])
    parser.add_argument("--points", default="",
                        help="comma-separated point names (default: every point)")
    parser.add_argument("--seeds", default=DEFAULT_SEEDS,
                        help="seeds of every point (--seed), at least 2")
    parser.add_argument("--par_archs", default=DEFAULT_PAR_ARCHS,
                        help=f"PAR's derived architectures, {DEPTH} a/f/i letters each")
    parser.add_argument("--recipe", default=None, choices=sorted(RECIPES),
                        help="train.py's --recipe of every run (default: base_model.sh's "
                        "seed recipe)")
    parser.add_argument("--epochs", type=int, default=None,
                        help="budget of every run in epochs (default 3)")
    parser.add_argument("--max_steps", type=int, default=0,
                        help="budget of every run in steps, instead of --epochs")
    parser.add_argument("--data_dir", default=str(ROOT / "data" / "wikitext2"))
    parser.add_argument("--runs_dir", default=str(ROOT / "runs" / "par_frontier"))
    parser.add_argument("--logs_dir", default=None,
                        help="TensorBoard directories (default logs/<runs_dir name>)")
    parser.add_argument("--results_dir", default=str(ROOT / "docs" / "results" / "par_frontier"))
    parser.add_argument("--train_flags", default="",
                        help="more train.py flags for every run (they win), e.g. "
                        "'--eval_max_records=40'")
    parser.add_argument("--cpus", default="",
                        help="taskset -c list for the runs and the throughput (default: none)")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved throughput rounds")
    parser.add_argument("--sample_seconds", type=float, default=2.0,
                        help="length of one throughput sample")
    parser.add_argument("--heartbeat", type=float, default=60.0,
                        help="seconds between progress lines of a running run (0: none)")
    args = parser.parse_args(argv)
    args.seeds = parse_seeds(args.seeds)
    args.par_archs = parse_par_archs(args.par_archs)
    try:
        args.table = points(args.par_archs)
    except ValueError as error:
        raise UsageError(f"--par_archs={','.join(args.par_archs)}: {error}: give each "
                         "architecture once, and none that is already a point") from None
    args.points = select_points(args.table, args.points)
    if args.epochs is not None and args.max_steps:
        raise UsageError("--epochs and --max_steps are two budgets: give one of them")
    args.epochs = 3 if args.epochs is None else args.epochs
    if args.epochs < 1 or args.max_steps < 0:
        raise UsageError("--epochs must be >= 1 and --max_steps >= 0")
    if args.rounds < 1 or not args.sample_seconds > 0 or args.heartbeat < 0:
        raise UsageError("--rounds must be >= 1, --sample_seconds > 0, --heartbeat >= 0")
    try:
        train_flags = shlex.split(args.train_flags)
    except ValueError as error:
        raise UsageError(f"--train_flags={args.train_flags}: {error}") from None
    for flag in train_flags:
        name = flag.lstrip("-").split("=", 1)[0]
        if flag.startswith("--") and name in DRIVER_FLAGS:
            where = _SET_BY.get(name, "the points table, experiments/frontier.py")
            raise UsageError(f"--train_flags={args.train_flags}: --{name} is the frontier's "
                             f"to set for every run (from {where}): drop it there")
    args.cpu_set = parse_cpus(args.cpus) if args.cpus else None
    args.logs_dir = args.logs_dir or str(ROOT / "logs" / pathlib.Path(args.runs_dir).name)
    for name in ("data_dir", "runs_dir", "logs_dir", "results_dir"):
        setattr(args, name, os.path.abspath(getattr(args, name)))
    return args


def _terminate(signum, frame):
    raise SystemExit(128 + signum)  # unwinds through run_train, which stops its child


def main(argv=None):
    """Exit status: 0 done, 1 a run failed (it resumes next time), 2 bad input (nothing
    done)."""
    from training.setup.plan import total_steps

    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = parse_args(argv)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    meta = built_meta(args.data_dir)
    if meta is None:
        return 2
    records = meta["splits"]["train"]["records"]
    plan = [(point, seed) for seed in args.seeds for point in args.points]
    flags = {run_name(p, s): run_flags(p, s, args, records) for p, s in plan}
    # The reference is measured even when it is not trained: its first seed's config.
    reference_run = run_name(args.table[REFERENCE], args.seeds[0])
    flags.setdefault(reference_run, run_flags(args.table[REFERENCE], args.seeds[0], args,
                                              records))
    try:
        configs = train_configs(flags)
        check_plans({name: run_command(flags[name], args.cpus) for name in flags},
                    args.runs_dir)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    command = common.command_line("experiments.frontier", argv)
    print(f"command: {command}\n{len(args.points)} points x seeds "
          f"{','.join(map(str, args.seeds))}: {len(plan)} runs of "
          f"{total_steps(configs[reference_run], records)} steps in {args.runs_dir}", flush=True)
    affinity, handler = os.sched_getaffinity(0), signal.signal(signal.SIGTERM, _terminate)
    try:
        if args.cpu_set:  # the throughput is measured here, on the runs' cores
            os.sched_setaffinity(0, args.cpu_set)
        return _run(args, plan, flags, configs, records, command, meta, reference_run)
    finally:
        os.sched_setaffinity(0, affinity)
        signal.signal(signal.SIGTERM, handler)


def _run(args, plan, flags, configs, records, command, meta, reference_run):
    from training.setup.plan import total_steps

    started, failures = time.time(), []
    for point, seed in plan:
        name = run_name(point, seed)
        try:
            cost_sweep.run_stage(name, total_steps(configs[name], records), [], args,
                                 command=run_command(flags[name], args.cpus), same=same_run)
        except cost_sweep.SweepError as error:
            failures.append(name)
            print(f"error: {error}", file=sys.stderr, flush=True)
    if failures:
        print(f"error: {len(failures)} of {len(plan)} runs failed ({', '.join(failures)}): "
              "run the same command again to resume them", file=sys.stderr)
        return 1
    measured = [p for p in args.table.values() if p in args.points or p.name == REFERENCE]
    models = {p.name: configs[run_name(p, args.seeds[0])].model for p in measured}
    reference = configs[reference_run]  # batch, segment and precision are every run's
    throughput = measure_throughput(models, reference, args)
    flops = block_times.relative_flops(models, reference.seq_len, reference.batch_size, REFERENCE)
    rows = summary_rows(plan, args.runs_dir, throughput, flops)
    budget = (f"{args.max_steps} steps" if args.max_steps else f"{args.epochs} epochs")
    data = meta.get("dataset") or pathlib.Path(args.data_dir).name
    write_report(plan, rows, throughput, flops, args, command,
                 f"{data}, {budget}, {args.recipe or 'seed'} recipe, seeds "
                 f"{','.join(map(str, args.seeds))}")
    print(f"{time.time() - started:.0f} s this invocation", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
