"""experiments/cost_sweep.py: its pure parts against hand-computed values, its argument checks, and
the whole pipeline in --quick mode on a tiny build (search, retrain, throughput, results,
figure, then a second invocation that only reads)."""

import json
import math

import pytest

from bench import common
from experiments import cost_sweep as cs


def test_parse_coefs_keeps_the_order_and_refuses_bad_entries():
    assert cs.parse_coefs("0, 0.05,0.2,1") == [0.0, 0.05, 0.2, 1.0]
    assert cs.parse_coefs("1,0,") == [1.0, 0.0]
    assert cs.parse_coefs(cs.DEFAULT_COEFS) == [0.0, 0.05, 0.2, 1.0]
    for text, reason in (("", "at least one"), (" , ", "at least one"),
                         ("0,x", "'x' is not a number"), ("0,-1", "-1 must be"),
                         ("nan", "must be a finite"), ("inf", "must be a finite"),
                         ("0,0.0", "0.0 is given twice")):
        with pytest.raises(ValueError, match="--coefs") as error:
            cs.parse_coefs(text)
        assert reason in str(error.value), text


def test_stage_names():
    assert cs.stage_name("hard", 0.05) == "search_hard_c0.05"
    assert cs.stage_name("hard", 1.0) == "search_hard_c1"
    assert cs.stage_name("soft", 0.0) == "search_soft_c0"


def test_attention_ratio_counts_attention_against_computing_blocks():
    assert cs.attention_ratio("aafiff") == dict(attention=2, total=5, num_blocks=6, ratio="2:5",
                                                fraction=0.4)
    assert cs.attention_ratio("afafaf")["ratio"] == "3:6"
    assert cs.attention_ratio("afafaf")["fraction"] == 0.5
    assert cs.attention_ratio("ffffff")["fraction"] == 0.0
    assert cs.attention_ratio("iiii") == dict(attention=0, total=0, num_blocks=4, ratio="0:0",
                                              fraction=None)


def test_pareto_front_by_hand():
    # (tokens/s, perplexity): 3 is beaten by 2 (faster and better); 1 and 4 are equal, so
    # neither beats the other; 0 is the best perplexity, 1/4 the fastest.
    points = [(100, 50), (200, 60), (150, 55), (120, 70), (200, 60)]
    assert cs.pareto_front(points) == [0, 1, 2, 4]
    assert cs.pareto_front([(100, 50)]) == [0]
    assert cs.pareto_front([(100, 50), (100, 51)]) == [0]  # as fast, worse
    assert cs.pareto_front([(100, 50), (101, 50)]) == [1]  # as good, slower
    assert cs.pareto_front([]) == []


def test_paired_ratios_and_last_logged(tmp_path):
    assert common.paired_ratio([2.0, 3.0, 4.0], [1.0, 1.0, 4.0]) == 2.0  # median of 2, 3, 1
    log = tmp_path / "training_log.log"
    assert cs.last_logged(log) == {}
    log.write_text("step=10 loss=5.5 tokens_per_sec=100.0\nstep=20 loss=5.0 "
                   "expected_cost=0.75\n\n")
    assert cs.last_logged(log) == {"step": "20", "loss": "5.0", "expected_cost": "0.75"}


def _search(arch):
    return dict(architecture=arch, untrained=False, relative_flops=0.5,
                expected_cost_end=None)


def test_rows_pareto_and_soft_vs_hard_from_summaries():
    searches = {("hard", 0.0): _search("afafaf"), ("hard", 0.2): _search("affiii"),
                ("hard", 1.0): _search("iiiiii"), ("soft", 0.0): _search("afafaf")}
    retrains = {"afafaf": dict(valid_perplexity=100.0), "affiii": dict(valid_perplexity=130.0),
                "iiiiii": dict(valid_perplexity=90.0)}  # an (unlikely) dominating point
    networks = {"afafaf": dict(tokens_per_sec=1000.0, vs_reference=1.0),
                "affiii": dict(tokens_per_sec=1500.0, vs_reference=1.5),
                "iiiiii": dict(tokens_per_sec=3000.0, vs_reference=3.0)}
    rows = cs.result_rows(searches, retrains, dict(networks=networks))
    assert [(r["mode"], r["coef"], r["pareto"]) for r in rows] == [
        ("hard", 0.0, False), ("hard", 0.2, False), ("hard", 1.0, True), ("soft", 0.0, False)]
    assert rows[1]["attention"]["ratio"] == "1:3"
    assert rows[2]["tokens_per_sec_vs_transformer_xl"] == 3.0
    assert cs.soft_vs_hard(rows) == dict(
        same_architecture=True, hard_architecture="afafaf", soft_architecture="afafaf",
        hard_valid_perplexity=100.0, soft_valid_perplexity=100.0)
    searches[("soft", 0.0)] = _search("ffffff")  # not retrained: no perplexity
    rows = cs.result_rows(searches, retrains, dict(networks=networks))
    assert cs.soft_vs_hard(rows)["same_architecture"] is False
    assert cs.soft_vs_hard(rows)["soft_valid_perplexity"] is None
    assert cs.soft_vs_hard(rows[:3]) is None  # no soft search
    table = cs.markdown_table(rows, cs.soft_vs_hard(rows), "cmd")
    assert "| hard | 0.2 | `affiii` | 1:3 | 0.500 | 130.00 |" in table
    assert "different architectures" in table
    # The Transformer-XL retrained with the same budget: a last row, off the front.
    rows = cs.result_rows(searches, retrains, dict(networks=networks), reference="afafaf")
    assert [r["mode"] for r in rows] == ["hard", "hard", "hard", "soft", "transformer_xl"]
    assert rows[-1]["retrain"] == dict(valid_perplexity=100.0) and rows[-1]["pareto"] is False
    assert rows[-1]["tokens_per_sec_vs_transformer_xl"] == 1.0
    assert "| transformer_xl |  | `afafaf` | 3:6 | 1.000 | 100.00 |" in cs.markdown_table(
        rows, None, "cmd")


@pytest.mark.parametrize("argv, message", [
    (["--coefs=0,-0.5"], "--coefs=0,-0.5: -0.5 must be a finite number >= 0"),
    (["--coefs=0,a"], "'a' is not a number"),
    (["--search_steps=0", "--quick"], "--search_steps=0 must be >= 1"),
    (["--search_steps=x"], "invalid int value"),
])
def test_user_errors_exit_1_with_one_message(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        cs.main(argv)
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_missing_data_dir_exits_1(tmp_path, capsys):
    assert cs.main([f"--data_dir={tmp_path / 'nothing'}", f"--runs_dir={tmp_path / 'runs'}"]) == 1
    err = capsys.readouterr().err
    assert "no built dataset in --data_dir=" in err and "./create_tfrecords.sh" in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_quick_pipeline_runs_then_only_reads(word_data, tmp_path, capsys):
    # word_data (tests/conftest.py): a word build (V 256, B 4, T 16) of WikiText-2 slices.
    runs, out, figure = tmp_path / "runs", tmp_path / "sweep.json", tmp_path / "sweep.png"
    argv = ["--quick", f"--data_dir={word_data}", f"--runs_dir={runs}",
            f"--logs_dir={tmp_path / 'logs'}", f"--out={out}", f"--figure={figure}",
            "--coefs=0", "--no_soft", "--search_steps=12", "--retrain_steps=8", "--rounds=1",
            "--sample_seconds=0.05", "--heartbeat=0", "--retrain_reference"]
    assert cs.main(argv) == 0, capsys.readouterr().err
    result = json.loads(out.read_text())
    row, reference_row = result["rows"]
    # --retrain_reference: the Transformer-XL of the same depth, trained with the same budget.
    assert reference_row["mode"] == "transformer_xl" and reference_row["architecture"] == "afaf"
    reference_config = json.loads((runs / "retrain_afaf" / "config.json").read_text())
    assert reference_config["model"]["architecture"] == "afaf"
    assert reference_config["max_steps"] == 8
    reference_metrics = json.loads((runs / "retrain_afaf" / "metrics.json").read_text())
    assert (
        reference_row["retrain"]["test_perplexity"]
        == reference_metrics["last"]["test"]["perplexity"]
    )
    arch = row["architecture"]
    search_dir, retrain_dir = runs / "search_hard_c0", runs / f"retrain_{arch}"
    # The search's own report (counts, FLOPs) agrees with the row.
    report = json.loads((search_dir / "architecture.json").read_text())
    assert report["architecture"] == arch and len(arch) == 4  # the tiny preset's blocks
    assert row["attention"]["attention"] == report["counts"]["attention"]
    assert row["relative_flops"] == report["relative_flops"]
    search_config = json.loads((search_dir / "config.json").read_text())
    assert search_config["model"]["search_mode"] == "hard"
    assert search_config["search"]["search_cost_coef"] == 0.0 and search_config["max_steps"] == 12
    # The retrain is the derived architecture from scratch, evaluated (4 records in --quick).
    retrain_config = json.loads((retrain_dir / "config.json").read_text())
    assert retrain_config["model"]["architecture"] == arch and retrain_config["max_steps"] == 8
    metrics = json.loads((retrain_dir / "metrics.json").read_text())
    assert row["retrain"]["valid_perplexity"] == metrics["last"]["valid"]["perplexity"]
    assert math.isfinite(row["retrain"]["valid_perplexity"])
    # Throughput: the derived network and the Transformer-XL reference, one sample each.
    networks = result["throughput"]["networks"]
    assert set(networks) == {arch, "afaf"} and result["throughput"]["reference"] == "afaf"
    assert networks["afaf"]["vs_reference"] == 1.0
    assert row["tokens_per_sec"] == networks[arch]["tokens_per_sec"] > 0
    assert row["pareto"] is True and result["soft_vs_hard"] is None
    cost = result["throughput"]["cost_per_block"]
    assert set(cost) == {"attention", "dense", "identity", "embedding_and_softmax"}
    # One FLOPs model: the search's cost table, its derivation report and the measured
    # network's FLOPs give the derived architecture the same relative FLOPs.
    names = dict(a="attention", f="dense", i="identity")
    table = cost["embedding_and_softmax"] + sum(cost[names[letter]] for letter in arch)
    assert networks[arch]["relative_flops"] == pytest.approx(row["relative_flops"], rel=1e-12)
    assert table == pytest.approx(row["relative_flops"], rel=1e-12)
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    capsys.readouterr()

    # Again: every stage is read, nothing is trained or measured.
    figure.unlink()
    assert cs.main(argv) == 0
    printed = capsys.readouterr().out
    assert "search_hard_c0: finished, read" in printed
    assert f"retrain_{arch}: finished, read" in printed and "throughput: read" in printed
    for stage in (search_dir, retrain_dir):
        assert len(json.loads((stage / cs.PLAN_FILE).read_text())["attempts"]) == 1
    assert json.loads(out.read_text())["rows"] == result["rows"] and figure.exists()
