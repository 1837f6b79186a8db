"""Where a training step goes: op time by category from the TF profiler.

For wt2_base (d_model 128, 6 blocks, seq_len 32, mem_len 16, batch 32, 12k
vocabulary, adaptive softmax 1000,3845) in soft search, hard search and the
fixed Transformer-XL `afafaf`, float32, the trainer's real step
(`training.run.trainer.Trainer.train_step`, built by bench_train.Case as
bench/bench_train.py builds it, Zipf token ids) runs warm-up steps, a timed
run without the profiler, then `--steps` steps under
`tf.profiler.experimental`, each wrapped in a `profile_step` trace marker.
The written `*.xplane.pb` is read here with `xplane_pb2`:

  * op events (on the executor threads of the host plane, named
    "<node name>:<op type>") give each op's self time (its duration minus
    op events nested in it on the same thread; in TF 2.21 none nest);
  * their sum per step is the "op time" the categories split (it is summed
    over the 2 executor threads, so it can exceed the wall time);
  * the step's wall time (the marker) is split into: at least one op
    running; inside the graph run (`KernelAndDeviceFunc::Run`) with no op
    running (executor scheduling, waits); inside the tf.function call but not
    its graph run (dispatch); the rest (Python in train_step, copying the
    step's numbers to the host). The batches are pre-built tensors, so no
    input pipeline runs.

Categories come from the op's name scope (bench/op_categories.py); backward ops
carry their forward scope under "gradient_tape/...", so each layer's forward
and backward land together. The loss (AdaptiveSoftmax.nll, called outside the
layer's __call__) has no scope: everything at the top of the forward/backward
function is the adaptive softmax, except the tape's unscoped gradient sums
(AddN, UnsortedSegmentSum), which inherit the category of their inputs read
from the step's traced graph (`GradientSums`).

`--cases compute-bound` profiles bench_train.py's compute-bound configuration
(wt2_large's vocabulary, d_model 512, 8 blocks, seq_len = mem_len 128, batch
16); `--precision mixed_bfloat16` any case under that policy. `--cases adaptive_span_small`
profiles that preset's step (byte vocabulary, 4 layers, learned key positions, its
Adagrad with the per-tensor throttle; batch 16 x 128, spans from their initial 0, so
each layer attends over a 32-slot window) as docs/results/adaptive_span_fidelity.md
trains it.

Usage (from the project root):
    python -m bench.profile_step                 # 3 cases, 1-2 minutes
    python -m bench.profile_step --quick         # smoke check: 3 profiled steps
    python -m bench.profile_step --cases "hard search" --steps 40
    python -m bench.profile_step --cases compute-bound --precision mixed_bfloat16 --steps 6
    python -m bench.profile_step --cases adaptive_span_small --steps 20 \
        --out bench/results/profile_step_span.json
Results: bench/results/profile_step.json and Markdown tables on stdout.
"""

import argparse
import bisect
import collections
import os
import pathlib
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.tsl.profiler.protobuf import xplane_pb2  # noqa: E402

from bench import bench_train, common  # noqa: E402
from bench.op_categories import (  # noqa: E402
    CATEGORIES,
    CLIPPING,
    OPTIMIZER,
    OTHER,
    GradientSums,
    classify,
    short_name,
)

STEP_MARKER = "profile_step"
GRAPH_RUN = "KernelAndDeviceFunc::Run"  # a tf.function's graph executing
PRESET, BATCH_SIZE, SEQ_LEN = "wt2_base", 32, 32
COMPUTE_BOUND = "compute-bound"
# docs/results/adaptive_span_fidelity.md's configuration: the preset's model and
# training defaults (its Adagrad with the per-tensor throttle), 16 x 128 bytes.
SPAN_SMALL = "adaptive_span_small"

# label -> ModelConfig overrides of the preset (labels as in bench_train.py);
# the compute-bound case is bench_train.compute_bound_case with its default flags.
CASES = {
    "soft search": dict(architecture="supernet", search_mode="soft"),
    "hard search": dict(architecture="supernet", search_mode="hard"),
    "transformer_xl afafaf": dict(architecture="transformer_xl"),
    "derived aaafaf": dict(architecture="aaafaf"),
    # Every block frozen (docs/freezing.md): bench_train.Case freezes it by its label.
    "supernet frozen aaafaf": dict(architecture="supernet", search_mode="soft"),
    COMPUTE_BOUND: None,
    SPAN_SMALL: None,
}
DEFAULT_CASES = ("soft search", "hard search", "transformer_xl afafaf")


# ------------------------------------------------------------------ trace reading


def union(intervals):
    merged = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def covered(intervals, window):
    """Length of the union of intervals clipped to window (start, end)."""
    lo, hi = window
    return sum(end - start for start, end in
               union((max(s, lo), min(e, hi)) for s, e in intervals if s < hi and e > lo))


def read_host_plane(logdir):
    """The "/host:CPU" plane of the newest *.xplane.pb under logdir."""
    paths = sorted(pathlib.Path(logdir).rglob("*.xplane.pb"), key=lambda p: p.stat().st_mtime)
    if not paths:
        raise RuntimeError(f"the profiler wrote no *.xplane.pb under {logdir}")
    space = xplane_pb2.XSpace()
    space.ParseFromString(paths[-1].read_bytes())
    for plane in space.planes:
        if plane.name == "/host:CPU":
            return plane
    raise RuntimeError(f"{paths[-1]} has no /host:CPU plane")


def trace_events(plane):
    """Op events (with self time), step markers and host spans of a host plane.

    Returns:
        (ops: list of (name, type, start_ps, end_ps, self_ps),
         markers: sorted list of (start_ps, end_ps),
         spans: dict "run" (graph executions) / "call" (tf.function calls) ->
         list of (start_ps, end_ps)).
    """
    call_stat = {k for k, m in plane.stat_metadata.items() if m.name == "tf_function_call"}
    ops, markers, spans = [], [], dict(run=[], call=[])
    for line in plane.lines:
        base = line.timestamp_ns * 1000
        line_ops = []
        for event in line.events:
            meta = plane.event_metadata[event.metadata_id]
            start = base + event.offset_ps
            end = start + event.duration_ps
            if meta.display_name and ":" in meta.name:
                name, op_type = meta.name.rsplit(":", 1)
                line_ops.append([name, op_type, start, end, event.duration_ps])
            elif meta.name == STEP_MARKER:
                markers.append((start, end))
            elif meta.name == GRAPH_RUN:
                spans["run"].append((start, end))
            elif any(stat.metadata_id in call_stat for stat in event.stats):
                spans["call"].append((start, end))
        line_ops.sort(key=lambda o: (o[2], -o[3]))
        stack = []  # enclosing op events: subtract nested ones from their self time
        for op in line_ops:
            while stack and stack[-1][3] <= op[2]:
                stack.pop()
            if stack:
                stack[-1][4] -= op[3] - op[2]
            stack.append(op)
        ops += [tuple(o) for o in line_ops]
    return ops, sorted(markers), spans


def step_of(markers):
    """`index(start_ps)`: the step (index into the sorted `markers`) whose window holds an op
    starting at start_ps, or None for an op outside every step."""
    starts = [m[0] for m in markers]

    def index(start):
        k = bisect.bisect_right(starts, start) - 1
        return k if k >= 0 and start < markers[k][1] else None

    return index


def analyse(plane, model_scope, gradient_sums=None, top=15):
    """Per-step averages of a captured run: categories, op types, wall-time split."""
    ops, markers, spans = trace_events(plane)
    steps = len(markers)
    if not steps:
        raise RuntimeError(f"no '{STEP_MARKER}' markers in the trace")
    step = step_of(markers)
    by_category, by_type, count_by_type = (collections.Counter() for _ in range(3))
    by_name = collections.defaultdict(collections.Counter)
    by_category_type = collections.defaultdict(collections.Counter)
    per_step_ops = [[] for _ in markers]
    outside = 0
    for name, op_type, start, end, self_ps in ops:
        k = step(start)
        if k is None:
            outside += 1
            continue
        category = classify(name, op_type, model_scope, gradient_sums)
        by_category[category] += self_ps
        by_type[op_type] += self_ps
        count_by_type[op_type] += 1
        by_name[category][short_name(name, model_scope, category in (OPTIMIZER, CLIPPING))] \
            += self_ps
        by_category_type[category][op_type] += self_ps
        per_step_ops[k].append((start, min(end, markers[k][1])))
    # Wall time, layer by layer: ops running; inside a graph run but no op;
    # inside the tf.function call but not its graph run; the rest of the step.
    split, step_wall = collections.Counter(), []
    for window, step_ops in zip(markers, per_step_ops):
        step_wall.append((window[1] - window[0]) * 1e-9)
        ops_ = covered(step_ops, window)
        runs = covered(step_ops + spans["run"], window)
        calls = covered(step_ops + spans["run"] + spans["call"], window)
        split.update(wall=window[1] - window[0], busy=ops_, graph_gap=runs - ops_,
                     dispatch=calls - runs, python=window[1] - window[0] - calls)
    ms = 1e-9 / steps  # ps summed over the steps -> ms per step
    op_total = sum(by_category.values())
    return dict(
        steps=steps, op_events_outside_steps=outside, op_ms=op_total * ms,
        step_wall_ms=step_wall, wall_median_ms=statistics.median(step_wall),
        **{f"{k}_ms": split[k] * ms for k in ("wall", "busy", "graph_gap", "dispatch", "python")},
        categories={c: by_category[c] * ms for c in CATEGORIES},
        top_op_types=[dict(op_type=t, ms=v * ms, per_step=count_by_type[t] / steps)
                      for t, v in by_type.most_common(top)],
        op_types={t: v * ms for t, v in by_type.most_common()},
        top_nodes=[dict(name=n, category=c, ms=v * ms) for (c, n), v in collections.Counter(
            {(c, n): v for c in by_name for n, v in by_name[c].items()}).most_common(top)],
        top_names={c: [dict(name=n, ms=v * ms) for n, v in by_name[c].most_common(8)]
                   for c in CATEGORIES if by_name[c]},
        category_op_types={c: {t: v * ms for t, v in by_category_type[c].most_common(8)}
                           for c in CATEGORIES if by_category_type[c]},
        gradient_sums=None if gradient_sums is None else gradient_sums.counts)


# ------------------------------------------------------------------- measuring


def profile_case(label, args, workdir):
    """Builds one case, times it, profiles it; returns its result dict."""
    from model.transformer_xl.presets import preset_config

    precision, train_settings = args.precision, None
    if label == SPAN_SMALL:
        from model.transformer_xl.presets import TRAIN_DEFAULTS

        preset, batch_size, seq_len = SPAN_SMALL, 16, 128
        config, train_settings = preset_config(SPAN_SMALL), dict(TRAIN_DEFAULTS[SPAN_SMALL])
    elif label == COMPUTE_BOUND:  # bench_train.py's, with its --quick sizes under --quick
        preset = "wt2_large"
        config, batch_size, seq_len = bench_train.compute_bound_case(
            bench_train.parse_args(["--quick"] if getattr(args, "quick", False) else []))
    else:
        preset, batch_size, seq_len = PRESET, BATCH_SIZE, SEQ_LEN
        config = preset_config(preset, **CASES[label])
    name = f"{preset} {label} {precision}"
    t0 = time.perf_counter()
    case = bench_train.Case(name, config, batch_size, seq_len, precision, workdir, True,
                            train_settings=train_settings)
    case.run(1 + args.warmup)  # trace, then warm up
    built_s = time.perf_counter() - t0
    unprofiled_ms = 1e3 * statistics.median(case.run(1) for _ in range(args.steps))
    gradient_sums = None
    try:  # the traced step, for the gradient sums' inputs
        inputs, targets = case.batches[0]
        concrete = case.trainer._step_fn.get_concrete_function(
            inputs, targets, case.trainer.model_state)
        gradient_sums = GradientSums.from_concrete_function(concrete)
    except (AttributeError, TypeError, ValueError) as error:
        print(f"{name}: no graph for the gradient sums ({error}); they count as other")
    logdir = tempfile.mkdtemp(prefix="profile_", dir=workdir)
    keras.mixed_precision.set_global_policy(precision)
    tf.profiler.experimental.start(logdir)
    try:
        for i in range(args.steps):
            inputs, targets = case.batches[i % len(case.batches)]
            with tf.profiler.experimental.Trace(STEP_MARKER, step_num=i, _r=1):
                case.step_fn(inputs, targets)
    finally:
        tf.profiler.experimental.stop()
        keras.mixed_precision.set_global_policy("float32")
    result = analyse(read_host_plane(logdir), case.trainer.model.name, gradient_sums)
    result.update(name=name, label=label, unprofiled_ms=unprofiled_ms, build_and_warmup_s=built_s,
                  batch_size=batch_size, seq_len=seq_len, precision=precision,
                  model=config.to_dict())
    print(f"{name}: built and warmed in {built_s:.0f} s, {unprofiled_ms:.1f} ms/step "
          f"unprofiled, {result['wall_ms']:.1f} profiled", flush=True)
    return result


# -------------------------------------------------------------------- reporting


def _pct(part, whole):
    return f"{100 * part / whole:.1f}%" if whole else "-"


def case_tables(r):
    """Markdown: categories and top op types of one case."""
    op_ms = r["op_ms"]
    categories = [[c, f"{v:.2f}", _pct(v, op_ms)]
                  for c, v in sorted(r["categories"].items(), key=lambda kv: -kv[1])]
    categories.append(["**total op time**", f"**{op_ms:.2f}**", "**100.0%**"])
    return "\n\n".join([
        f"#### {r['name']}",
        f"Step {r['wall_ms']:.1f} ms wall with the profiler (mean of {r['steps']}; median "
        f"{r['wall_median_ms']:.1f}, without the profiler {r['unprofiled_ms']:.1f}); op time "
        f"{op_ms:.1f} ms/step summed over the executor threads.",
        common.markdown_table(["category", "ms/step", "% of op time"], categories, "lrr"),
        common.markdown_table(
            ["op type (top 15)", "ms/step", "% of op time", "ops/step"],
            [[t["op_type"], f"{t['ms']:.2f}", _pct(t["ms"], op_ms), f"{t['per_step']:.0f}"]
             for t in r["top_op_types"]], "lrrr"),
        common.markdown_table(
            ["node (all blocks together, top 15)", "category", "ms/step", "% of op time"],
            [[f"`{n['name']}`", n["category"], f"{n['ms']:.2f}", _pct(n["ms"], op_ms)]
             for n in r["top_nodes"]], "llrr")])


def summary_tables(results):
    """Markdown: categories side by side, and the split of the step's wall time."""
    labels, align = [r["label"] for r in results], "l" + "r" * len(results)
    order = sorted(CATEGORIES, key=lambda c: -max(r["categories"][c] / r["op_ms"] for r in results))
    categories = [[c] + [f"{r['categories'][c]:.1f} ({_pct(r['categories'][c], r['op_ms'])})"
                         for r in results] for c in order]
    categories.append(["**op time**"] + [f"**{r['op_ms']:.1f}**" for r in results])
    rows = [("step wall time, profiled (mean)", "wall_ms"),
            ("step wall time, profiled (median)", "wall_median_ms"),
            ("step wall time, no profiler (median)", "unprofiled_ms"),
            ("at least one op running", "busy_ms"),
            ("in the graph run, no op running (executor, idle)", "graph_gap_ms"),
            ("tf.function call outside its graph run (dispatch)", "dispatch_ms"),
            ("rest of train_step (Python, host sync; input is pre-built)", "python_ms")]
    wall = [[label] + [f"{r[key]:.1f}" + ("" if key in ("wall_ms", "wall_median_ms",
                                                         "unprofiled_ms")
                                          else f" ({_pct(r[key], r['wall_ms'])})")
                       for r in results] for label, key in rows]
    wall.append(["op time / time with an op running (ops running at once)"]
                + [f"{r['op_ms'] / r['busy_ms']:.2f}" for r in results])
    shares = [{t: v / r["op_ms"] for t, v in r["op_types"].items()} for r in results]
    types = sorted({t for s in shares for t in list(s)[:8]}, key=lambda t: -max(
        s.get(t, 0) for s in shares))
    op_types = [[t] + [f"{100 * s.get(t, 0):.1f}%" for s in shares] for t in types]
    return "\n\n".join([
        common.markdown_table(["category (ms/step, % of op time)"] + labels, categories, align),
        common.markdown_table(["step wall time (ms/step, % of profiled wall)"] + labels, wall,
                              align),
        common.markdown_table(["op type, largest 8 of each (% of op time)"] + labels, op_types,
                              align)])


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="smoke check: 1 warm-up and 3 profiled steps per case")
    parser.add_argument("--cases", default="",
                        help="comma-separated substrings of " + ", ".join(CASES) +
                        " (default: the three wt2_base cases)")
    parser.add_argument("--precision", default="float32", choices=["float32", "mixed_bfloat16"],
                        help="Keras dtype policy of every case")
    parser.add_argument("--steps", type=int, default=None,
                        help="profiled (and unprofiled timed) steps per case (default 20, quick 3)")
    parser.add_argument("--warmup", type=int, default=None,
                        help="warm-up steps after the tracing step (default 5, quick 1)")
    parser.add_argument("--out", default=str(common.results_path("profile_step")))
    args = parser.parse_args(argv)
    args.steps = args.steps or (3 if args.quick else 20)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.quick else 5)
    if args.steps < 1 or args.warmup < 0:
        parser.error("--steps must be >= 1 and --warmup >= 0")
    keep = [k.strip() for k in args.cases.split(",") if k.strip()]
    args.labels = [label for label in CASES
                   if (label in DEFAULT_CASES if not keep else any(k in label for k in keep))]
    if not args.labels:
        parser.error(f"--cases={args.cases!r} matches none of {', '.join(CASES)}")
    return args


def main(argv=None):
    args, command = common.start("bench.profile_step", parse_args, argv)
    load_start = common.loadavg()
    with tempfile.TemporaryDirectory() as workdir:
        results = [profile_case(label, args, workdir) for label in args.labels]
    load_end = common.loadavg()
    markdown = summary_tables(results) + "\n\n" + "\n\n".join(case_tables(r) for r in results)
    print("\n" + markdown)
    for r in results:
        others = r["top_names"].get(OTHER, [])
        if others:
            print(f"\n{r['label']}: largest 'other' ops: " + ", ".join(
                f"{o['name']} {o['ms']:.2f} ms" for o in others))
    result = dict(steps=args.steps, warmup=args.warmup,
                  machine=common.machine_info(load_start, load_end),
                  categories=CATEGORIES, cases=results, markdown=markdown)
    out = common.write_results(args.out, command, result)
    print(f"\nresults written to {out} (load average {load_start[0]:.1f} at the start, "
          f"{load_end[0]:.1f} at the end)")
    return dict(command=command, **result)


if __name__ == "__main__":
    main()
