"""bench/op_categories.py on node names seen in real traces; bench/profile_step.py --quick."""

import json

import pytest

from bench import op_categories as oc
from bench import profile_step as ps

CALL = "StatefulPartitionedCall"
TXL = f"{CALL}/transformer_xllm_1"
TAPE = f"{CALL}/gradient_tape/transformer_xllm_1"
HARD = f"{TXL}/block_0_1/switch_case/indexed_case"
HARD_TAPE = f"{TAPE}/block_2_1/switch_case/indexed_case"

# (node name, op type, category): names as the profiler reported them for the
# wt2_base step (TF 2.21), soft search, hard search and transformer_xl afafaf.
TRACE_NAMES = [
    # transformer_xl afafaf
    (f"{TAPE}/block_0_attention_1/einsum/Einsum", "_MklEinsum", oc.ATTENTION),
    (f"{TAPE}/block_0_attention_1/Pad", "Pad", oc.ATTENTION),  # rel_shift's gradient
    (f"{TXL}/block_0_attention_1/Softmax", "_MklSoftmax", oc.ATTENTION),
    (f"{TAPE}/block_1_dense_1/output_dense_1/Tensordot/MatMul/MatMul", "_MklMatMul",
     oc.FEED_FORWARD),
    (f"{TXL}/block_1_dense_1/inner_dropout_1/stateless_random_uniform",
     "StatelessRandomUniformFullIntV2", oc.DROPOUT),
    (f"{TXL}/block_0_attention_1/layer_norm_1/moments/SquaredDifference", "SquaredDifference",
     oc.LAYER_NORM),
    (f"{CALL}/SparseSoftmaxCrossEntropyWithLogits/SparseSoftmaxCrossEntropyWithLogits",
     "SparseSoftmaxCrossEntropyWithLogits", oc.SOFTMAX),
    (f"{CALL}/add_3", "_MklNativeFusedMatMul", oc.SOFTMAX),  # head logits + bias
    (f"{CALL}/gradient_tape/Tensordot/MatMul/MatMul_1", "_MklMatMul", oc.SOFTMAX),
    (f"{CALL}/gradient_tape/ParallelDynamicStitch", "ParallelDynamicStitch", oc.SOFTMAX),
    (f"{TXL}/embedding_1/GatherV2", "GatherV2", oc.EMBEDDING),
    (f"{TXL}/mul", "Mul", oc.EMBEDDING),  # * sqrt(D)
    (f"{TXL}/concat", "ConcatV2", oc.MEMORY),
    (f"{TXL}/strided_slice", "StridedSlice", oc.MEMORY),
    ("cond/then/_132/cond/adam/truediv", "RealDiv", oc.OPTIMIZER),
    ("cond/then/_132/cond/adam/WarmupCosineSchedule/Cos", "Cos", oc.OPTIMIZER),
    ("clip_by_global_norm/mul", "Mul", oc.CLIPPING),
    ("global_norm/L2Loss", "L2Loss", oc.CLIPPING),
    ("WarmupCosineSchedule/SelectV2", "SelectV2", oc.OTHER),
    ("IsFinite", "IsFinite", oc.OTHER),
    # soft search
    (f"{TXL}/block_0_1/attention_1/einsum/Einsum", "_MklEinsum", oc.ATTENTION),
    (f"{TXL}/block_0_1/attention_1/Softmax", "_MklSoftmax", oc.ATTENTION),
    (f"{TXL}/block_0_1/Softmax", "_MklSoftmax", oc.SEARCH),  # of the Gumbel logits
    (f"{TXL}/block_5_1/stateless_random_uniform_1/StatelessRandomUniformV2",
     "StatelessRandomUniformV2", oc.SEARCH),
    (f"{TXL}/block_0_1/AddN", "AddN", oc.SEARCH),  # the weighted sum of the candidates
    (f"{TAPE}/block_0_1/mul/Mul", "Mul", oc.SEARCH),
    # hard search: candidates run as inlined switch_case branch bodies
    (f"{HARD}/branch0/_688/transformer_xllm_1/block_0_1/switch_case/indexed_case/attention_1/"
     "einsum/Einsum", "_MklEinsum", oc.ATTENTION),
    (f"{HARD_TAPE}/gradient/branch1/_1169/gradient_tape/transformer_xllm_1/block_2_1/"
     "switch_case/indexed_case/gradients/AddN_1", "AddN", oc.FEED_FORWARD),
    (f"{HARD_TAPE}/gradient/branch0/_1272/gradient_tape/transformer_xllm_1/block_2_1/"
     "switch_case/indexed_case/gradients/AddN", "AddN", oc.ATTENTION),
    (f"{TXL}/block_4_1/switch_case/indexed_case/branch1/_905/transformer_xllm_1/block_4_1/"
     "switch_case/indexed_case/dense_1/inner_dropout_1/SelectV2", "SelectV2", oc.DROPOUT),
    (f"{TXL}/block_0_1/ArgMax", "ArgMax", oc.SEARCH),
    (f"{TXL}/block_0_1/mul", "Mul", oc.SEARCH),  # the straight-through factor
]


@pytest.mark.parametrize("name,op_type,category", TRACE_NAMES)
def test_classifier_on_names_from_a_trace(name, op_type, category):
    assert oc.classify(name, op_type) == category


def test_unscoped_gradient_sums_follow_their_inputs():
    # Nodes of the soft-search forward/backward function (the traced graph).
    block = f"{CALL}/gradient_tape/transformer_xllm_1/block_5_1"
    inputs = {
        f"{CALL}/AddN_4": [f"{block}/attention_1/layer_norm_1/mul_2/Mul",
                           f"{block}/attention_1/layer_norm_1/moments/truediv"],
        f"{CALL}/AddN_6": [f"{block}/attention_1/einsum_2/Einsum",
                           f"{block}/attention_1/einsum_1/Einsum"],
        # Block input: identity branch, both layer norms' inputs, the [mem; x] concat.
        f"{CALL}/AddN_8": [f"{block}/mul_2/Mul_1", f"{CALL}/AddN_4", f"{CALL}/AddN_6",
                           f"{block}/attention_1/Slice_1"],
        f"{CALL}/AddN": [f"{CALL}/gradient_tape/Tensordot/MatMul/MatMul",
                         f"{CALL}/gradient_tape/Reshape_4"],
        f"{CALL}/UnsortedSegmentSum": [
            f"{CALL}/gradient_tape/transformer_xllm_1/embedding_1/Reshape",
            f"{CALL}/gradient_tape/transformer_xllm_1/embedding_1/Reshape_1",
            f"{CALL}/strided_slice"],
    }
    op_types = {name: name.rsplit("/", 1)[1].split("_")[0] for name in inputs}
    sums = oc.GradientSums(inputs, op_types)

    def category(name):
        return oc.classify(name, op_types[name], gradient_sums=sums)

    assert category(f"{CALL}/AddN_4") == oc.LAYER_NORM
    assert category(f"{CALL}/AddN_6") == oc.ATTENTION
    assert category(f"{CALL}/AddN_8") == oc.SEARCH  # mixed inputs: their common scope, block_5
    assert category(f"{CALL}/AddN") == oc.SOFTMAX
    assert category(f"{CALL}/UnsortedSegmentSum") == oc.EMBEDDING
    assert oc.classify(f"{CALL}/AddN_99", "AddN", gradient_sums=sums) == oc.OTHER
    assert oc.classify(f"{CALL}/AddN_4", "AddN") == oc.OTHER  # no graph: not attributed
    assert sums.counts == dict(attributed=5, not_in_graph=1)


def test_short_names_merge_blocks_and_keep_ops_apart():
    assert oc.short_name(f"{TAPE}/block_0_attention_1/einsum_5/Einsum_1") == \
        "gradient_tape/transformer_xllm/block_*_attention/einsum_5/Einsum_1"
    assert oc.short_name(f"{TXL}/block_3_1/attention_1/layer_norm_1/mul") == \
        "transformer_xllm/block_*/attention/layer_norm/mul"
    assert oc.short_name(f"{CALL}/transformer_xllm_2/mul_1", "transformer_xllm_2") == \
        "transformer_xllm/mul_1"
    assert oc.short_name("cond/then/_132/cond/adam/truediv_191", per_variable=True) == \
        "cond/adam/truediv"
    assert oc.short_name(f"{HARD_TAPE}/gradient/branch1/_1169/gradient_tape/transformer_xllm_1/"
                         "block_2_1/switch_case/indexed_case/gradients/AddN_1") == \
        "gradient_tape/block_*/switch_case/gradients/AddN_1"


def test_interval_helpers():
    assert ps.union([(5, 7), (0, 2), (1, 3), (6, 9)]) == [[0, 3], [5, 9]]
    intervals = [(5, 7), (0, 2), (1, 3), (6, 9), (12, 15)]
    assert ps.covered(intervals, (0, 20)) == 3 + 4 + 3
    assert ps.covered(intervals, (2, 13)) == 1 + 4 + 1


def _plane(events):
    """A host plane with (line, metadata name, display name, start ms, end ms, call?) events."""
    plane = ps.xplane_pb2.XPlane(name="/host:CPU")
    plane.stat_metadata[1].name = "tf_function_call"
    lines, ids = {}, {}
    for line_name, name, display, start, end, call in events:
        if line_name not in lines:
            lines[line_name] = plane.lines.add(name=line_name, timestamp_ns=0)
        if name not in ids:
            ids[name] = len(ids) + 1
            plane.event_metadata[ids[name]].name = name
            plane.event_metadata[ids[name]].display_name = display
        event = lines[line_name].events.add(metadata_id=ids[name], offset_ps=int(start * 1e9),
                                            duration_ps=int((end - start) * 1e9))
        if call:
            event.stats.add(metadata_id=1, int64_value=1)
    return plane


def test_analyse_takes_self_time_and_splits_the_wall_time():
    attention = f"{TXL}/block_0_attention_1/einsum/Einsum"
    plane = _plane([
        ("python", ps.STEP_MARKER, "", 0, 100, False),
        ("python", "_step", "", 10, 90, True),
        ("python", ps.GRAPH_RUN, "", 20, 85, False),
        ("tf_Compute/1", f"{attention}:_MklEinsum", "_MklEinsum", 30, 60, False),
        ("tf_Compute/1", f"{TXL}/block_1_dense_1/inner_dense_1/Relu:Relu", "Relu", 40, 50, False),
        ("tf_Compute/2", "cond/then/_1/cond/adam/Sqrt:Sqrt", "Sqrt", 55, 80, False),
        ("tf_Compute/2", "cond/then/_1/cond/adam/Sqrt:Sqrt", "Sqrt", 120, 130, False),  # no step
    ])
    r = ps.analyse(plane, "transformer_xllm")
    assert r["steps"] == 1 and r["op_events_outside_steps"] == 1
    assert r["categories"][oc.ATTENTION] == pytest.approx(20)  # 30 minus the nested Relu
    assert r["categories"][oc.FEED_FORWARD] == pytest.approx(10)
    assert r["categories"][oc.OPTIMIZER] == pytest.approx(25)
    assert r["op_ms"] == pytest.approx(55)
    assert r["wall_ms"] == pytest.approx(100)
    assert r["busy_ms"] == pytest.approx(50)  # [30, 80]
    assert r["graph_gap_ms"] == pytest.approx(15)  # rest of the run [20, 85]
    assert r["dispatch_ms"] == pytest.approx(15)  # rest of the call [10, 90]
    assert r["python_ms"] == pytest.approx(20)
    assert r["top_op_types"][0] == dict(op_type="Sqrt", ms=pytest.approx(25), per_step=1)


@pytest.mark.slow
def test_quick_run_splits_the_step(tmp_path):
    out = tmp_path / "profile_step.json"
    ps.main(["--quick", "--cases", "transformer_xl", f"--out={out}"])
    result = json.loads(out.read_text())
    (case,) = result["cases"]
    assert case["label"] == "transformer_xl afafaf" and case["steps"] == 3
    categories = case["categories"]
    assert set(categories) == set(oc.CATEGORIES)
    assert sum(categories.values()) == pytest.approx(case["op_ms"], rel=1e-9)
    for main in (oc.ATTENTION, oc.FEED_FORWARD, oc.SOFTMAX, oc.OPTIMIZER, oc.DROPOUT,
                 oc.LAYER_NORM, oc.CLIPPING):
        assert categories[main] > 0, main
    assert categories[oc.SEARCH] == 0  # a fixed architecture has no search ops
    assert categories[oc.OTHER] < 0.05 * case["op_ms"]  # the classifier covers the trace
    assert case["gradient_sums"]["attributed"] > 0 and case["gradient_sums"]["not_in_graph"] == 0
    # The wall time splits into ops running, graph gaps, dispatch and the rest, each >= 0.
    parts = [case[k] for k in ("busy_ms", "graph_gap_ms", "dispatch_ms", "python_ms")]
    assert min(parts) >= 0 and case["busy_ms"] > 0.5 * case["wall_ms"]
    assert sum(parts) == pytest.approx(case["wall_ms"], rel=1e-9)
    assert case["op_ms"] >= case["busy_ms"] * 0.99  # summed over threads
    assert case["top_op_types"][0]["ms"] >= case["top_op_types"][-1]["ms"] > 0
    assert "| attention |" in result["markdown"]


def test_case_selection_and_precision():
    assert ps.parse_args([]).labels == list(ps.DEFAULT_CASES)
    args = ps.parse_args(["--cases", "compute-bound", "--precision", "mixed_bfloat16"])
    assert args.labels == ["compute-bound"] and args.precision == "mixed_bfloat16"
    assert ps.parse_args(["--cases", "search"]).labels == ["soft search", "hard search"]
    assert ps.parse_args(["--cases", "adaptive_span"]).labels == ["adaptive_span_small"]
    with pytest.raises(SystemExit):
        ps.parse_args(["--cases", "nothing"])


@pytest.mark.slow
def test_quick_run_under_bfloat16(tmp_path):
    out = tmp_path / "profile_step.json"
    ps.main(["--quick", "--cases", "transformer_xl", "--precision", "mixed_bfloat16",
             f"--out={out}"])
    (case,) = json.loads(out.read_text())["cases"]
    assert case["precision"] == "mixed_bfloat16" and case["name"].endswith("mixed_bfloat16")
    assert "Cast" in case["op_types"]  # the policy's casts ran


@pytest.mark.slow
def test_quick_run_of_the_adaptive_span_preset(tmp_path):
    """The preset's own step: its model and its optimizer (Adagrad with the per-tensor
    throttle), batch 16 x 128."""
    out = tmp_path / "profile_step.json"
    ps.main(["--quick", "--cases", "adaptive_span_small", f"--out={out}"])
    (case,) = json.loads(out.read_text())["cases"]
    assert case["name"] == "adaptive_span_small adaptive_span_small float32"
    assert (case["batch_size"], case["seq_len"]) == (16, 128)
    assert case["model"]["attention"] == "adaptive_span"
    assert case["model"]["span_positions"] == "learned"
    categories = case["categories"]
    assert categories[oc.ATTENTION] > categories[oc.FEED_FORWARD] > 0
    assert categories[oc.OPTIMIZER] > 0 and categories[oc.OTHER] < 0.05 * case["op_ms"]
    assert "ResourceApplyAdam" not in case["op_types"]  # the preset's Adagrad, not Adam
