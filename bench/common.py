"""What the benchmarks and experiments share: timing rounds, paired ratios, machine
information, results JSON, Markdown tables, child processes and argument helpers.

Imports no TensorFlow (the experiment drivers use it before their training runs start):
`machine_info` reads TensorFlow's and Keras's versions and thread settings from the
modules when they are imported, from the installed packages otherwise.
"""

import argparse
import importlib.metadata
import json
import os
import pathlib
import platform
import shlex
import statistics
import subprocess
import sys
import time

from runstore import run_dir

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Where ./create_tfrecords.sh unpacks WikiText-2 (from the copy in datasets/).
WIKITEXT2_DIR = ROOT / "data" / "raw" / "wikitext-2"
RESULTS = ROOT / "bench" / "results"
RESULT_PREFIX = "RESULT "  # the line a child process reports its measurement on


# ------------------------------------------------------------------ commands


def command_line(module, argv):
    """`python -m <module> <argv>` quoted: the command that reproduces a run from the root."""
    return "python -m " + shlex.join([module, *map(str, argv)])


def start(module, parse_args, argv=None):
    """(args, command) of a run of `module`: argv (default sys.argv[1:]) parsed with
    parse_args, and the command that reproduces it, printed."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    command = command_line(module, argv)
    print(f"command: {command}", flush=True)
    return args, command


# TensorFlow's CPU allocator keeps the statistics the memory benchmarks read
# (tf.config.experimental.get_memory_info("CPU:0")) only when it is a BFC allocator: with
# oneDNN, which TensorFlow turns on by itself on CPUs with AVX-512 VNNI, bfloat16 or AMX,
# or with this variable, read when TensorFlow starts. On an AVX2-only CPU neither holds
# unless the variable is set; it changes where tensors are allocated, not what is computed.
CPU_ALLOCATOR_STATS = ("TF_CPU_ALLOCATOR_USE_BFC", "true")


def keep_cpu_allocator_stats():
    """Asks for the CPU allocator's statistics; call it before TensorFlow is imported."""
    os.environ.setdefault(*CPU_ALLOCATOR_STATS)


def cpu_peak_bytes(tf, run):
    """The CPU allocator's peak bytes while `run()` runs.

    Raises:
        RuntimeError: TensorFlow keeps no statistics in this process (it started without
            CPU_ALLOCATOR_STATS), with the fix.
    """
    try:
        tf.config.experimental.reset_memory_stats("CPU:0")
    except ValueError as error:
        raise RuntimeError(
            f"TensorFlow keeps no CPU allocator statistics in this process ({error}): start "
            f"it with {'='.join(CPU_ALLOCATOR_STATS)} in the environment (the memory "
            "benchmarks set it themselves unless TensorFlow was imported before them)"
        ) from None
    run()
    return int(tf.config.experimental.get_memory_info("CPU:0")["peak"])


def run_child(module, args, env=None):
    """Runs `python -m <module> <args>` from the project root; returns its RESULT line's JSON.

    Raises:
        RuntimeError: the child failed or reported no result (with the end of its stderr).
    """
    proc = subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if proc.returncode or not lines:
        raise RuntimeError(f"python -m {module} {shlex.join(map(str, args))} failed "
                           f"(exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1][len(RESULT_PREFIX):])


def report_to_parent(result):
    """Prints the RESULT line that `run_child` reads."""
    print(RESULT_PREFIX + json.dumps(result), flush=True)


# -------------------------------------------------------------------- timing


def time_call(fn, timer=time.perf_counter):
    """Seconds one call of fn() takes on `timer`."""
    start = timer()
    fn()
    return timer() - start


def timed_rounds(fn, rounds, warmup=0, timer=time.perf_counter):
    """Calls fn() `warmup` times untimed, then `rounds` times timed; returns those seconds."""
    for _ in range(warmup):
        fn()
    return [time_call(fn, timer) for _ in range(rounds)]


def median_time(fn, rounds, warmup=0, timer=time.perf_counter):
    """Median seconds of fn() over `rounds` timed calls after `warmup` untimed ones."""
    return statistics.median(timed_rounds(fn, rounds, warmup, timer))


def round_order(items, r, order="same"):
    """The items in the order of round r: "same" every round, "alternate" (reversed in odd
    rounds: A B, B A, ...) or "rotate" (round r starts at item r mod n)."""
    items = list(items)
    if order == "same":
        return items
    if order == "alternate":
        return items if r % 2 == 0 else items[::-1]
    if order == "rotate":
        shift = r % len(items) if items else 0
        return items[shift:] + items[:shift]
    raise ValueError(f"order={order!r}: expected same, alternate or rotate")


def interleaved_rounds(runs, rounds, order="same", before_round=None, progress=True):
    """Samples every run once per round, so that load from other processes hits all alike.

    Args:
        runs: name -> callable() returning one sample (e.g. seconds per step).
        rounds: number of rounds.
        order: `round_order`'s order of the runs within a round.
        before_round: optional callable(round index) called at the start of each round.
        progress: print "round i/n done" after each round.

    Returns:
        name -> list of samples, one per round (for `paired_ratios`).
    """
    samples = {name: [] for name in runs}
    for r in range(rounds):
        if before_round is not None:
            before_round(r)
        for name in round_order(runs, r, order):
            samples[name].append(runs[name]())
        if progress:
            print(f"round {r + 1}/{rounds} done", flush=True)
    return samples


def paired_ratios(numerators, denominators):
    """Per-round ratios a_i / b_i of two runs sampled in the same rounds."""
    numerators, denominators = list(numerators), list(denominators)
    if len(numerators) != len(denominators):
        raise ValueError(f"paired samples differ in length: {len(numerators)} and "
                         f"{len(denominators)}")
    return [a / b for a, b in zip(numerators, denominators)]


def paired_ratio(numerators, denominators):
    """Median of the per-round ratios: far less sensitive to load from other processes than
    a ratio of two medians, as both samples of a round saw the same load. With seconds,
    paired_ratio(reference, candidate) > 1 means the candidate is faster."""
    return statistics.median(paired_ratios(numerators, denominators))


def paired_medians(a, b):
    """A/B samples of the same rounds: both medians, the paired ratio a / b and its range."""
    ratios = paired_ratios(a, b)
    return dict(median_a=statistics.median(a), median_b=statistics.median(b),
                ratio=statistics.median(ratios), ratio_range=[min(ratios), max(ratios)])


# ------------------------------------------------------------------- machine


def loadavg():
    """The 1, 5 and 15 minute load averages (NaN where the system has none)."""
    return os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3


def cpu_model():
    """The CPU's model name (/proc/cpuinfo; platform.processor() elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def package_version(name):
    """Version of an imported module, else of the installed package, else None."""
    module = sys.modules.get(name)
    if getattr(module, "__version__", None):
        return module.__version__
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def thread_settings():
    """Environment variables that set thread counts, and TensorFlow's pools when imported
    (0: TensorFlow's default, one thread per usable core)."""
    names = ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS",
             "TF_ENABLE_ONEDNN_OPTS")
    settings = {name: os.environ[name] for name in names if name in os.environ}
    tf = sys.modules.get("tensorflow")
    if tf is not None and hasattr(tf, "config"):
        settings.update(intra_op=tf.config.threading.get_intra_op_parallelism_threads(),
                        inter_op=tf.config.threading.get_inter_op_parallelism_threads())
    return settings


def machine_info(load_start=None, load_end=None):
    """What the figures were measured on, with the load averages around the run if given."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    info = dict(platform=platform.platform(), cpu_model=cpu_model(), cpus=os.cpu_count(),
                cpus_usable=usable, python=platform.python_version(),
                tensorflow=package_version("tensorflow"), keras=package_version("keras"),
                numpy=package_version("numpy"), threads=thread_settings())
    if load_start is not None:
        info.update(loadavg_start=load_start, loadavg_end=load_end)
    return info


def load_warning(what, values, load_start, load_end, unit="GFLOP/s", spread=1.25):
    """A warning when a load indicator sampled each round (e.g. a matmul's GFLOP/s) varied
    by more than `spread` (max / min); None when it did not."""
    if max(values) <= spread * min(values):
        return None
    return (f"WARNING: the {what} ranged from {min(values):.0f} to {max(values):.0f} {unit} "
            f"across rounds (load average {load_start[0]:.1f} at start, {load_end[0]:.1f} at "
            "the end): other processes competed for the CPU, so the figures are noisy")


# ------------------------------------------------------------------- results


def results_path(name):
    """bench/results/<name>.json."""
    return RESULTS / f"{name}.json"


def read_json(path):
    """The JSON value in `path`, or None when there is no such file."""
    path = pathlib.Path(path)
    if not path.exists():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def write_json(path, value):
    """Writes `value` as indented JSON atomically (parents created): the text goes to a
    temporary file beside `path`, renamed over it when complete (`run_dir.atomic_write`),
    so a reader or a failure never sees half a file; a failed write raises
    `run_dir.WriteError` and leaves the old file. Returns the Path."""
    path = pathlib.Path(path)
    text = json.dumps(value, indent=2) + "\n"  # an unserialisable value fails before any write
    path.parent.mkdir(parents=True, exist_ok=True)
    run_dir.atomic_write(path, text)
    return path


def write_results(path, command, result):
    """Writes a run's results (the exact command first, then `result`) with `write_json`."""
    return write_json(path, {"command": command, **result})


# -------------------------------------------------------------------- tables


def markdown_row(cells):
    """One row of a Markdown table (str() of each cell)."""
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def markdown_table(header, rows, align):
    """A Markdown table: header cells, rows of cells, align "l" or "r" per column (a
    table printed row by row starts with markdown_table(header, [], align))."""
    rule = {"l": "---", "r": "---:"}
    return "\n".join([markdown_row(header), "|" + "|".join(rule[a] for a in align) + "|",
                      *map(markdown_row, rows)])


# ----------------------------------------------------------------- arguments


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line and exit status 1, like the other user
    errors of the scripts that use it."""

    def error(self, message):
        self.exit(1, f"error: {message} (see --help)\n")


def int_list(text):
    """"1, 2,,3" -> [1, 2, 3]: an argparse type (absl's DEFINE_list splits alike)."""
    return [int(item) for item in str(text).split(",") if item.strip()]


def fill_defaults(args, quick, **defaults):
    """Sets every flag left at None from name=(value with --quick, value without)."""
    for name, (small, full) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, small if quick else full)
    return args


def wikitext2_train_counts(data_dir=WIKITEXT2_DIR):
    """Word counts of WikiText-2's wiki.train.tokens (whitespace tokens + one <eos> per line).

    Reads `data_dir/wiki.train.tokens`; when that file is absent, the copy the
    project ships (datasets/wikitext-2/wiki.train.tokens.xz). Returns int64
    counts in first-seen order.
    """
    import collections
    import lzma

    import numpy as np

    path = pathlib.Path(data_dir) / "wiki.train.tokens"
    if path.exists():
        text = path.read_text(encoding="utf-8")
    else:
        shipped = ROOT / "datasets" / "wikitext-2" / "wiki.train.tokens.xz"
        text = lzma.decompress(shipped.read_bytes()).decode("utf-8")
    counter = collections.Counter()
    for line in text.splitlines():
        counter.update(line.split())
        counter["<eos>"] += 1
    return np.array(list(counter.values()), dtype=np.int64)
