"""bench/common.py: timing and paired ratios on fake clocks, results JSON, tables, children."""

import json
import os

import pytest

from bench import common
from runstore import run_dir


def fake_clock(*readings):
    """A timer returning the given readings one after another (seconds)."""
    readings = iter(readings)
    return lambda: next(readings)


def test_timed_rounds_warm_up_untimed_then_time_each_call():
    calls = []
    # Calls 1-2 are the warm-up (the clock is not read); then 3 calls of 1, 3 and 2 s.
    seconds = common.timed_rounds(lambda: calls.append(1), rounds=3, warmup=2,
                                  timer=fake_clock(10.0, 11.0, 11.0, 14.0, 20.0, 22.0))
    assert seconds == [1.0, 3.0, 2.0]
    assert len(calls) == 5
    assert common.median_time(lambda: None, rounds=3,
                              timer=fake_clock(0.0, 1.0, 1.0, 4.0, 4.0, 6.0)) == 2.0
    assert common.median_time(lambda: None, rounds=4,  # even count: mean of the middle two
                              timer=fake_clock(0, 1, 0, 5, 0, 2, 0, 9)) == 3.5


def test_round_orders():
    items = ["a", "b", "c"]
    assert [common.round_order(items, r) for r in range(2)] == [items, items]
    assert [common.round_order(items, r, "alternate") for r in range(3)] == [
        ["a", "b", "c"], ["c", "b", "a"], ["a", "b", "c"]]
    assert [common.round_order(items, r, "rotate") for r in range(4)] == [
        ["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]
    assert common.round_order([], 3, "rotate") == []
    with pytest.raises(ValueError, match="order='random'"):
        common.round_order(items, 0, "random")


def test_interleaved_rounds_sample_every_run_once_per_round(capsys):
    log = []

    def run(name, values):
        values = iter(values)

        def sample():
            log.append(name)
            return next(values)

        return sample

    runs = {"A": run("A", [2.0, 2.0, 2.0]), "B": run("B", [1.0, 4.0, 1.0])}
    samples = common.interleaved_rounds(runs, 3, order="alternate",
                                        before_round=lambda r: log.append(f"round {r}"))
    assert samples == {"A": [2.0, 2.0, 2.0], "B": [1.0, 4.0, 1.0]}
    assert log == ["round 0", "A", "B", "round 1", "B", "A", "round 2", "A", "B"]
    assert capsys.readouterr().out == "round 1/3 done\nround 2/3 done\nround 3/3 done\n"


def test_paired_ratios_are_medians_of_per_round_ratios():
    # A takes 2 s a step every round; B 1 s, then 4 s in a loaded round, then 1 s.
    a, b = [2.0, 2.0, 2.0], [1.0, 4.0, 1.0]
    assert common.paired_ratios(a, b) == [2.0, 0.5, 2.0]
    assert common.paired_ratio(a, b) == 2.0  # B twice as fast; the loaded round is outvoted
    # (the ratio of the medians would say the same here, but not below)
    assert common.paired_ratio([2.0, 3.0, 4.0], [1.0, 1.0, 4.0]) == 2.0  # median of 2, 3, 1
    assert common.paired_ratio([10.0, 20.0], [5.0, 5.0]) == 3.0  # even count: mean of 2 and 4
    assert common.paired_medians(a, b) == dict(median_a=2.0, median_b=1.0, ratio=2.0,
                                               ratio_range=[0.5, 2.0])
    with pytest.raises(ValueError, match="differ in length: 2 and 3"):
        common.paired_ratio([1.0, 2.0], [1.0, 2.0, 3.0])


def test_load_warning_only_when_the_indicator_spreads():
    assert common.load_warning("float32 matmul", [100.0, 110.0, 125.0], (1.0,), (2.0,)) is None
    warning = common.load_warning("float32 matmul", [100.0, 126.0], (1.04,), (2.26,))
    assert warning.startswith("WARNING: the float32 matmul ranged from 100 to 126 GFLOP/s")
    assert "load average 1.0 at start, 2.3 at the end" in warning


def test_command_line_is_the_module_form_quoted():
    assert common.command_line("bench.bench_train", ["--only", "hard search,soft search",
                                                     "--rounds", 9]) == \
        "python -m bench.bench_train --only 'hard search,soft search' --rounds 9"
    assert common.command_line("experiments.cost_sweep", []) == \
        "python -m experiments.cost_sweep"


def test_start_parses_and_prints_the_command(capsys):
    args, command = common.start("bench.x", lambda argv: {"parsed": argv}, ["--a=1", "b c"])
    assert args == {"parsed": ["--a=1", "b c"]}
    assert command == "python -m bench.x --a=1 'b c'"
    assert capsys.readouterr().out == f"command: {command}\n"


def test_results_are_written_atomically_with_the_command(tmp_path):
    out = tmp_path / "new" / "bench_x.json"
    path = common.write_results(out, "python -m bench.bench_x --quick", {"rows": [1, 2.5]})
    assert path == out
    assert list(json.loads(out.read_text())) == ["command", "rows"]
    assert json.loads(out.read_text()) == {"command": "python -m bench.bench_x --quick",
                                           "rows": [1, 2.5]}
    before = out.read_text()
    with pytest.raises(TypeError):  # not serialisable: the old file stays whole
        common.write_results(out, "python -m bench.bench_x", {"rows": object()})
    assert out.read_text() == before
    assert sorted(p.name for p in out.parent.iterdir()) == ["bench_x.json"]


def test_a_failed_rename_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    out = tmp_path / "r.json"
    common.write_json(out, {"a": 1})

    def fail(src, dst):
        assert json.loads(open(src, encoding="utf-8").read()) == {"a": 2}  # complete before
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(run_dir.WriteError, match=f"cannot write {out}: disk gone"):
        common.write_json(out, {"a": 2})
    assert common.read_json(out) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]
    assert common.read_json(tmp_path / "missing.json") is None


def test_results_path():
    assert common.results_path("bench_train") == common.ROOT / "bench" / "results" / \
        "bench_train.json"


def test_machine_info_without_tensorflow_imported():
    info = common.machine_info((0.5, 0.4, 0.3), (1.5, 1.4, 1.3))
    assert info["cpus"] == os.cpu_count() and 1 <= info["cpus_usable"] <= info["cpus"]
    assert info["loadavg_start"] == (0.5, 0.4, 0.3) and info["loadavg_end"] == (1.5, 1.4, 1.3)
    assert info["tensorflow"].split(".")[0] == "2" and info["keras"].split(".")[0] == "3"
    assert info["python"].count(".") == 2 and isinstance(info["threads"], dict)
    assert "loadavg_start" not in common.machine_info()


def test_thread_settings_name_the_environment(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv("TF_NUM_INTRAOP_THREADS", raising=False)
    threads = common.thread_settings()
    assert threads["OMP_NUM_THREADS"] == "1" and "TF_NUM_INTRAOP_THREADS" not in threads


def test_markdown_table():
    table = common.markdown_table(["name", "tokens/s", "note"],
                                  [["soft", "1,024", ""], ["hard", 2048, "x"]], "lrl")
    assert table == ("| name | tokens/s | note |\n|---|---:|---|\n| soft | 1,024 |  |\n"
                     "| hard | 2048 | x |")
    assert common.markdown_table(["a"], [], "r") == "| a |\n|---:|"


def test_argument_helpers(capsys):
    assert common.int_list("33278, 12000,,") == [33278, 12000]
    parser = common.Parser()
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--steps", type=int, default=None)
    args = common.fill_defaults(parser.parse_args(["--steps=3"]), True, rounds=(2, 9),
                                steps=(2, 16))
    assert (args.rounds, args.steps) == (2, 3)
    args = common.fill_defaults(parser.parse_args([]), False, rounds=(2, 9), steps=(2, 16))
    assert (args.rounds, args.steps) == (9, 16)
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["--rounds=x"])
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("error: argument --rounds: invalid int value") and err.count("\n") == 1


CHILD = """
import sys
from bench import common
from runstore import run_dir

print("noise before the result")
if sys.argv[1:] == ["fail"]:
    sys.exit("child went wrong")
common.report_to_parent({"args": sys.argv[1:], "value": 1.5})
"""


def test_run_child_runs_a_module_from_the_root_and_reads_its_result(tmp_path):
    (tmp_path / "fake_bench_child.py").write_text(CHILD)
    env = dict(os.environ, PYTHONPATH=str(tmp_path))  # the root comes first: `-m` from it
    assert common.run_child("fake_bench_child", ["--k=2", 3], env=env) == {
        "args": ["--k=2", "3"], "value": 1.5}
    with pytest.raises(RuntimeError, match="(?s)exit 1.*child went wrong"):
        common.run_child("fake_bench_child", ["fail"], env=env)


def test_cpu_peak_bytes_reads_the_allocator_or_names_the_fix():
    import tensorflow as tf

    # The session asks for the statistics (tests/conftest.py): a step's peak is counted.
    size = 1 << 20
    peak = common.cpu_peak_bytes(tf, lambda: tf.reduce_sum(tf.ones([size])).numpy())
    assert peak >= 4 * size

    class NoStats:  # TensorFlow as it is on an AVX2-only CPU started without the variable
        class config:  # noqa: N801
            class experimental:  # noqa: N801
                @staticmethod
                def reset_memory_stats(device):
                    raise ValueError(f"Cannot reset memory stats for device '{device}'")

    with pytest.raises(RuntimeError, match="TF_CPU_ALLOCATOR_USE_BFC=true in the environment"):
        common.cpu_peak_bytes(NoStats, lambda: None)
