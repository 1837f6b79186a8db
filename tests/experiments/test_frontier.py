"""experiments/frontier.py: the paper's rule against hand counts, the point table, each run's
command as train.py parses it, the per-point statistics by hand, bad input (one line, nothing
written), and the whole driver on the tiny preset (runs, summary.json, plot, interleaved
throughput, then a second invocation that only reads)."""

import argparse
import json
import os

import pytest

from experiments import frontier as fr

# The tiny preset on the tests' word build; evaluations on a record or two.
TINY = "--preset=tiny --cutoffs=none --eval_max_records=2 --sample_tokens=0"
SUMMARY_KEYS = ["name", "kind", "architecture", "num_blocks", "d_model", "d_ffn", "seed",
                "valid_ppl", "test_ppl", "tokens_per_s", "relative_flops"]


def test_paper_rule_by_hand_counts():
    # 6 blocks: 6/5 = 1.2 -> 1 attention block, first two thirds = blocks 0-3, at block 0.
    assert fr.paper_rule(6) == "afffff"
    # 12: 2.4 -> 2, region 8 blocks, spread: blocks 0 and 4.
    assert fr.paper_rule(12) == "afff" + "afff" + "ffff"
    # 32: 6.4 -> 6, region floor(64/3) = 21 blocks, at floor(k * 21 / 6) = 0 3 7 10 14 17.
    assert fr.paper_rule(32) == "aff" "afff" "aff" "afff" "aff" "a" + "f" * 14
    # 8: 1.6 rounds up to 2, region 5: blocks 0 and 2. p = 2 at 6 blocks: 3 in the first 4.
    assert fr.paper_rule(8) == "afafffff"
    assert fr.paper_rule(6, p=2) == "aaafff"
    assert fr.paper_rule(1) == "a" and fr.paper_rule(3, p=1) == "aaa"
    for bad in ((0, 5), (6, 0), (6.5, 5), (6, 2.5)):
        with pytest.raises(ValueError, match="paper_rule needs integers"):
            fr.paper_rule(*bad)


def test_point_table():
    table = fr.points()
    assert list(table) == ["afafaf", "afaf", "af", "afafaf_ffn256", "afafaf_d96", "aaafaf",
                           "aaaaff", "aaaaaf", "aaiiia", "iaiiii", "paper_rule", "sandwich"]
    assert {p.kind for p in table.values() if p.name.startswith("af")} == {"transformer_xl"}
    assert table["paper_rule"].architecture == "afffff"
    assert (table["sandwich"].kind, table["sandwich"].architecture) == ("par", "aaafff")
    assert table["afafaf"].size_flags() == ["--num_blocks=6"]
    assert table["af"].size_flags() == ["--num_blocks=2"]
    assert table["afafaf_ffn256"].size_flags() == ["--num_blocks=6", "--d_ffn=256"]
    assert table["afafaf_d96"].size_flags() == ["--num_blocks=6", "--d_model=96"]
    assert list(fr.points(["aaffff"])) [-3:] == ["aaffff", "paper_rule", "sandwich"]
    with pytest.raises(ValueError, match="two points are called afafaf"):
        fr.points(["afafaf"])
    for args, message in ((("x", "par", "aaf", 4), "has 3 blocks but num_blocks is 4"),
                          (("x", "par", "aax", 3), "must be letters a"),
                          (("x", "lstm", "af", 2), "kind 'lstm'")):
        with pytest.raises(ValueError, match=message):
            fr.Point(*args)
    assert [p.name for p in fr.select_points(table, "sandwich,af")] == ["af", "sandwich"]
    assert len(fr.select_points(table, "")) == len(table)
    assert fr.parse_seeds("2, 0") == [2, 0]


def _configs(word_data, tmp_path, *extra):
    args = fr.parse_args([f"--data_dir={word_data}", f"--runs_dir={tmp_path / 'runs'}",
                          f"--logs_dir={tmp_path / 'logs'}", "--seeds=0,1",
                          "--train_flags=--cutoffs=none", *extra])
    records = json.loads((word_data / "meta.json").read_text())["splits"]["train"]["records"]
    flags = {fr.run_name(p, s): fr.run_flags(p, s, args, records)
             for s in args.seeds for p in args.points}
    return fr.train_configs(flags), records


@pytest.mark.slow
def test_every_run_is_its_point_with_the_same_recipe_and_budget(word_data, tmp_path):
    configs, records = _configs(word_data, tmp_path)
    assert len(configs) == 12 * 2
    reference = configs["afafaf_seed0"]
    assert (reference.epochs, reference.max_steps, reference.eval_interval,
            reference.checkpoint_interval) == (3, 0, records, records)
    assert (reference.search.arch_warmup_steps, reference.recipe, reference.optimizer,
            reference.learning_rate, reference.model.dropout) == (0, "", "adam", 1e-3, 0.1)
    for point in fr.points().values():
        for seed in (0, 1):
            config = configs[fr.run_name(point, seed)]
            model = config.model
            assert (model.architecture, model.num_blocks, model.seed) == (
                point.architecture, point.num_blocks, seed)
            assert config.model_dir == str(tmp_path / "runs" / fr.run_name(point, seed))
            # Everything else is the reference's: same recipe, budget, data, evaluation.
            assert config.replace(model=reference.model, model_dir=reference.model_dir,
                                  logdir=reference.logdir) == reference, point.name
            assert model.replace(architecture="afafaf", num_blocks=6, seed=0, d_model=128,
                                 d_ffn=512) == reference.model
    assert (configs["afafaf_d96_seed1"].model.d_model,
            configs["afafaf_d96_seed1"].model.head_size) == (96, 24)  # the preset's 4 heads
    assert configs["afafaf_ffn256_seed0"].model.d_ffn == 256
    assert configs["afafaf_ffn256_seed0"].model.d_model == 128
    # --recipe and --max_steps reach every run; an explicit budget beats the recipe's 9 epochs.
    configs, _ = _configs(word_data, tmp_path, "--recipe=fast", "--points=af")
    assert (configs["af_seed1"].recipe, configs["af_seed1"].epochs,
            configs["af_seed1"].learning_rate, configs["af_seed1"].model.dropout) == (
                "fast", 3, 2e-3, 0.0)
    configs, _ = _configs(word_data, tmp_path, "--max_steps=50", "--points=af")
    assert configs["af_seed0"].max_steps == 50


FLOPS = {"afafaf": 1.0, "af": 0.5, "aaafaf": 0.97, "aaiiia": 0.6}


def _row(name, kind, seed, test, arch=None):
    return dict(name=name, kind=kind, architecture=arch or name, num_blocks=6, d_model=128,
                d_ffn=512, seed=seed, valid_ppl=test - 10, test_ppl=test, tokens_per_s=0,
                relative_flops=FLOPS[name])


def test_point_stats_and_table_by_hand():
    rows = [_row("afafaf", "transformer_xl", 0, 100.0), _row("afafaf", "transformer_xl", 1, 102.0),
            _row("af", "transformer_xl", 0, 120.0), _row("af", "transformer_xl", 1, 120.0),
            _row("aaafaf", "par", 0, 99.0), _row("aaafaf", "par", 1, 105.0),
            _row("aaiiia", "par", 0, 130.0), _row("aaiiia", "par", 1, 134.0)]
    networks = {"afafaf": (1000.0, 1.0), "af": (2000.0, 2.1), "aaafaf": (1050.0, 1.05),
                "aaiiia": (1500.0, 1.5)}
    throughput = dict(networks={k: dict(tokens_per_sec=t, vs_reference=r)
                                for k, (t, r) in networks.items()})
    stats = {e["name"]: e for e in fr.point_stats(rows, throughput)}
    assert stats["afafaf"]["test"] == (101.0, pytest.approx(2 ** 0.5))
    assert stats["afafaf"]["valid"] == (91.0, pytest.approx(2 ** 0.5))
    assert stats["af"]["test"] == (120.0, 0.0) and stats["af"]["seeds"] == [0, 1]
    assert stats["aaafaf"]["test"] == (102.0, pytest.approx(18 ** 0.5))
    assert stats["aaafaf"]["test_vs_reference"] == pytest.approx(102.0 / 101.0)
    assert stats["af"]["tokens_vs_reference"] == 2.1 and stats["af"]["tokens_per_s"] == 2000.0
    assert stats["af"]["relative_flops"] == 0.5 and stats["afafaf"]["relative_flops"] == 1.0
    # Fronts per kind: af and afafaf trade; aaafaf (102 at 1,050) and aaiiia (132 at 1,500)
    # too. A PAR point is not judged against the Transformer-XLs.
    assert all(e["front"] for e in stats.values())
    rows[4]["test_ppl"] = rows[5]["test_ppl"] = 140.0  # now slower and worse than aaiiia
    stats = {e["name"]: e for e in fr.point_stats(rows, throughput)}
    assert not stats["aaafaf"]["front"] and stats["aaiiia"]["front"]
    table = fr.markdown_table(list(stats.values()), "cmd")
    assert ("| point | kind | architecture | blocks | d_model | d_ffn | seeds | test ppl | "
            "valid ppl | tokens/s | tokens/s vs afafaf | FLOPs vs afafaf | test ppl vs afafaf | "
            "front |") in table
    assert ("| afafaf | transformer_xl | `afafaf` | 6 | 128 | 512 | 2 | 101.00 ± 1.41 | "
            "91.00 ± 1.41 | 1,000 | 1.00 | 1.000 | 1.000 | yes |") in table
    assert "| aaafaf | par | `aaafaf` | 6 | 128 | 512 | 2 | 140.00 ± 0.00 |" in table
    assert "| 1,050 | 1.05 | 0.970 | 1.386 |  |" in table  # 140 / 101; off the front
    # Without the reference's runs there is no perplexity ratio (tokens/s still has one).
    stats = fr.point_stats(rows[2:], throughput)
    assert {e["test_vs_reference"] for e in stats} == {None}
    assert "| 2,000 | 2.10 | 0.500 |  | yes |" in fr.markdown_table(stats, "cmd")


def _split(ppl):
    return dict(perplexity=ppl, nll=1.0)


def test_summary_rows_take_the_best_checkpoint(tmp_path):
    table = fr.points()
    plan = [(table["afafaf_d96"], 0), (table["sandwich"], 2)]
    for (point, seed), best in zip(plan, (50.0, 60.0)):
        run = tmp_path / fr.run_name(point, seed)
        run.mkdir()
        model = dict(architecture=point.architecture, num_blocks=6, d_model=point.d_model or 128,
                     d_ffn=512, seed=seed, num_heads=4)
        (run / "config.json").write_text(json.dumps(dict(model=model, max_steps=9)))
        (run / "metrics.json").write_text(json.dumps(dict(
            step=9, last=dict(step=9, valid=_split(best + 5), test=_split(best + 6)),
            best=dict(step=6, valid=_split(best), test=_split(best + 1)))))
    throughput = dict(networks=dict(afafaf_d96=dict(tokens_per_sec=1234.5),
                                    sandwich=dict(tokens_per_sec=999.0)))
    flops = dict(afafaf=1.0, afafaf_d96=0.7, sandwich=0.95)
    assert fr.summary_rows(plan, tmp_path, throughput, flops) == [
        dict(name="afafaf_d96", kind="transformer_xl", architecture="afafaf", num_blocks=6,
             d_model=96, d_ffn=512, seed=0, valid_ppl=50.0, test_ppl=51.0, tokens_per_s=1234.5,
             relative_flops=0.7),
        dict(name="sandwich", kind="par", architecture="aaafff", num_blocks=6, d_model=128,
             d_ffn=512, seed=2, valid_ppl=60.0, test_ppl=61.0, tokens_per_s=999.0,
             relative_flops=0.95)]


def test_a_run_planned_with_other_flags_is_refused(tmp_path):
    command = fr.run_command(["--max_steps=5", "--seed=0"], "")
    plan = tmp_path / "af_seed0" / "sweep_plan.json"
    plan.parent.mkdir()
    plan.write_text(json.dumps(dict(command=["taskset", "-c", "1", *command], max_steps=5)))
    fr.check_plans({"af_seed0": command, "afaf_seed0": ["bash", "x"]}, tmp_path)  # pinning only
    with pytest.raises(fr.UsageError, match=r"af_seed0 was planned with other flags "
                       r"\(--max_steps=5 --max_steps=9\); .* remove that directory"):
        fr.check_plans({"af_seed0": fr.run_command(["--max_steps=9", "--seed=0"], "0")},
                       tmp_path)


@pytest.mark.parametrize("argv, message", [
    (["--seeds=0"], "error: --seeds=0: a frontier needs at least 2 seeds per point for its "
     "spread: give --seeds=0,1,2"),
    (["--seeds=0,0"], "--seeds=0,0: give distinct integers >= 0"),
    (["--points=afafaf,txl9"], "--points: unknown point 'txl9'; choose from afafaf,afaf,"),
    (["--par_archs=aaafa"], "--par_archs=aaafa: 'aaafa' must be 6 letters of a/f/i"),
    (["--par_archs=aaafaf,afafaf"], "two points are called afafaf"),
    (["--train_flags=--cutoffs=none --num_heads=5", "--points=af"],
     "error: run af_seed0 does not fit: invalid model flags: d_model=128 is not divisible by "
     "num_heads=5"),
    (["--train_flags=--num_blocks=4"], "--num_blocks is the frontier's to set"),
    (["--train_flags=--seed=1"], "--seed is the frontier's to set for every run (from --seeds)"),
    (["--epochs=2", "--max_steps=10"], "--epochs and --max_steps are two budgets"),
    (["--recipe=slow"], "argument --recipe: invalid choice: 'slow'"),
    (["--cpus=9999"], "--cpus=9999: this process may use CPUs"),
])
def test_bad_input_is_one_line_and_writes_nothing(argv, message, word_data, tmp_path, capsys):
    dirs = [tmp_path / name for name in ("runs", "results", "logs")]
    assert fr.main([f"--data_dir={word_data}", f"--runs_dir={dirs[0]}",
                    f"--results_dir={dirs[1]}", f"--logs_dir={dirs[2]}", *argv]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.err.count("\n") == 1, captured.err
    assert captured.err.startswith("error: ") and captured.out == ""
    assert not any(d.exists() for d in dirs)


def test_missing_data_is_one_line(tmp_path, capsys):
    assert fr.main([f"--data_dir={tmp_path / 'none'}", f"--runs_dir={tmp_path / 'runs'}"]) == 2
    err = capsys.readouterr().err
    assert "no built dataset in --data_dir=" in err and err.count("\n") == 1
    assert not (tmp_path / "runs").exists()


def _model(config, architecture):
    from model.transformer_xl.config import ModelConfig

    model = ModelConfig.from_dict(config["model"])
    return model.replace(architecture=architecture, num_blocks=len(architecture))


def _flops(config, architecture):
    """A run's forward FLOPs per token (config.json: its batch, segment and memory)."""
    from model.transformer_xl import flops

    model = _model(config, architecture)
    return flops.forward_flops_per_token(model, None, config["seq_len"], model.mem_len,
                                         batch_size=config["batch_size"])["total"]


def _cost_table(config):
    """The search's cost table for afafaf at a run's batch, segment and memory."""
    from training.plugins.par_search.costs import candidate_costs

    model = _model(config, "afafaf")
    return candidate_costs(model, config["seq_len"], model.mem_len, config["batch_size"])


def _check_flops(summary, runs, names, printed):
    """Each row's FLOPs over afafaf's at its run's batch, segment and memory; the block times
    over the three networks of the preset's width (afafaf, af, iaiiii), whose fit of the FLOPs
    gives back the search's cost table."""
    for name, row in zip(names, summary["runs"]):
        config = json.loads((runs / name / "config.json").read_text())
        assert row["relative_flops"] == pytest.approx(_flops(config, row["architecture"])
                                                      / _flops(config, "afafaf"), rel=1e-12)
    block = summary["block_times"]
    assert block["points"] == ["af", "afafaf", "iaiiii"] and block["error"] is None
    costs, fixed = _cost_table(json.loads((runs / names[0] / "config.json").read_text()))
    assert [block["flops"][k] for k in ("attention", "dense", "fixed")] == pytest.approx(
        [costs[0], costs[1], fixed], rel=1e-9)
    assert all(isinstance(block["measured"][k], float) for k in ("attention", "dense", "fixed"))
    assert "Time per token against blocks, least squares over the 3 points" in printed


@pytest.mark.slow
def test_tiny_frontier_runs_then_only_reads(word_data, tmp_path, capsys, monkeypatch):
    from bench import bench_train

    sampled = []  # each call of the interleaved sampler: the networks of a round, the rounds
    real_sampler = bench_train.sample_interleaved

    def spy(cases, steps, rounds, before_round=None):
        sampled.append(([case.name for case in cases], rounds))
        return real_sampler(cases, steps, rounds, before_round)

    monkeypatch.setattr(bench_train, "sample_interleaved", spy)
    runs, results = tmp_path / "runs", tmp_path / "results"
    cpu = min(os.sched_getaffinity(0))
    argv = [f"--data_dir={word_data}", f"--runs_dir={runs}", f"--results_dir={results}",
            f"--logs_dir={tmp_path / 'logs'}", "--points=iaiiii,af", "--seeds=0,1",
            "--max_steps=2", f"--train_flags={TINY}", "--rounds=2", "--sample_seconds=0.05",
            "--heartbeat=0", f"--cpus={cpu}"]
    assert fr.main(argv) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    # Seed by seed, each in the table's order (not the order of --points). Two points, one of
    # each kind (a Transformer-XL and a PAR network): a third point would be a third train.py
    # per seed.
    names = [f"{p}_seed{s}" for s in (0, 1) for p in ("af", "iaiiii")]
    summary = json.loads((results / "summary.json").read_text())
    assert list(summary) == ["runs", "block_times"] and len(summary["runs"]) == 4
    throughput = json.loads((runs / "throughput.json").read_text())
    for name, row in zip(names, summary["runs"]):
        assert list(row) == SUMMARY_KEYS
        config = json.loads((runs / name / "config.json").read_text())
        metrics = json.loads((runs / name / "metrics.json").read_text())
        plan = json.loads((runs / name / "sweep_plan.json").read_text())
        assert plan["command"][:3] == ["taskset", "-c", str(cpu)]
        assert metrics["step"] == config["max_steps"] == 2
        assert f"{row['name']}_seed{row['seed']}" == name
        assert (row["architecture"], row["num_blocks"], row["d_model"], row["d_ffn"]) == (
            config["model"]["architecture"], config["model"]["num_blocks"],
            config["model"]["d_model"], config["model"]["d_ffn"])
        assert row["kind"] == ("par" if row["name"] == "iaiiii" else "transformer_xl")
        assert row["valid_ppl"] == metrics["best"]["valid"]["perplexity"]
        assert row["test_ppl"] == metrics["best"]["test"]["perplexity"]
        assert row["tokens_per_s"] == throughput["networks"][row["name"]]["tokens_per_sec"] > 0
        for artefact in ("config.json", "metrics.json", "training_log.log", "console.log"):
            assert (results / name / artefact).is_file(), (name, artefact)
    assert [r["architecture"] for r in summary["runs"][:2]] == ["af", "iaiiii"]
    assert summary["runs"][0]["d_model"] == 32  # the tiny preset's (no size flag)
    # Throughput: every point and the reference, in this process, sampled round by round.
    assert sampled == [(["afafaf", "af", "iaiiii"], 2)]
    assert throughput["order"] == ["afafaf", "af", "iaiiii"]
    assert throughput["pid"] == os.getpid() and throughput["rounds"] == 2
    assert throughput["cpus"] == [cpu]
    for net in throughput["networks"].values():
        assert len(net["samples_s"]) == 2
    assert throughput["networks"]["afafaf"]["vs_reference"] == 1.0
    assert json.loads((results / "throughput.json").read_text()) == throughput
    assert (results / "frontier.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| af | transformer_xl | `af` | 2 | 32 | 64 | 2 |" in printed
    _check_flops(summary, runs, names, printed)
    assert "round 2/2 done" in printed

    # Again: nothing is trained or measured; the report is written again from the same files.
    stamps = {p: p.stat().st_mtime_ns for p in [runs / "throughput.json", *(
        runs / name / "metrics.json" for name in names)]}
    (results / "frontier.png").unlink()
    assert fr.main(argv) == 0
    printed = capsys.readouterr().out
    assert all(f"{name}: finished, read" in printed for name in names)
    assert "throughput: read" in printed and "round 1/2" not in printed and len(sampled) == 1
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    for name in names:
        assert len(json.loads((runs / name / "sweep_plan.json").read_text())["attempts"]) == 1
    assert json.loads((results / "summary.json").read_text()) == summary
    assert (results / "frontier.png").is_file()
    # Another budget on the same runs: refused in one line, nothing touched.
    assert fr.main([*argv, "--max_steps=3"]) == 2
    err = capsys.readouterr().err
    assert "was planned with other flags (--max_steps=2 --max_steps=3)" in err
    assert err.count("\n") == 1
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps


def test_a_second_checkout_linking_the_same_directories_resumes_the_plan(tmp_path):
    """Only where the checkout is differs: the script by name, the directories by where
    they resolve to; another data directory is still refused."""
    first, second = tmp_path / "main", tmp_path / "other"
    (first / "runs" / "af_seed0").mkdir(parents=True)
    second.mkdir()
    (second / "runs").symlink_to(first / "runs")
    planned = ["bash", str(first / "base_model.sh"), f"--model_dir={first}/runs/af_seed0",
               "--max_steps=5"]
    (first / "runs" / "af_seed0" / "sweep_plan.json").write_text(json.dumps(dict(
        command=planned)))
    moved = ["bash", str(second / "base_model.sh"), f"--model_dir={second}/runs/af_seed0",
             "--max_steps=5"]
    fr.check_plans({"af_seed0": moved}, first / "runs")
    with pytest.raises(fr.UsageError, match="planned with other flags"):
        fr.check_plans({"af_seed0": [*moved[:2], f"--model_dir={second}/elsewhere",
                                     "--max_steps=5"]}, first / "runs")


def test_a_planned_run_resumes_with_the_second_checkouts_scripts(tmp_path, monkeypatch):
    """The run trains with this checkout's base_model.sh (the first one may be edited
    meanwhile), and its plan records that command."""
    from experiments import cost_sweep

    first, second = tmp_path / "main", tmp_path / "other"
    (first / "runs" / "af_seed0").mkdir(parents=True)
    second.mkdir()
    (second / "runs").symlink_to(first / "runs")
    planned = ["taskset", "-c", "0", "bash", str(first / "base_model.sh"),
               f"--model_dir={first}/runs/af_seed0", "--max_steps=5"]
    plan_file = first / "runs" / "af_seed0" / cost_sweep.PLAN_FILE
    plan_file.write_text(json.dumps(dict(name="af_seed0", max_steps=5, command=planned,
                                         attempts=[])))
    moved = ["bash", str(second / "base_model.sh"), f"--model_dir={second}/runs/af_seed0",
             "--max_steps=5"]
    ran = []

    def fake_train(command, run_dir, max_steps, heartbeat):
        ran.append(command)
        (run_dir / "metrics.json").write_text(json.dumps({"step": max_steps}))
        return 0, 0.5

    monkeypatch.setattr(cost_sweep, "run_train", fake_train)
    args = argparse.Namespace(runs_dir=str(second / "runs"), heartbeat=0)
    cost_sweep.run_stage("af_seed0", 5, [], args, command=moved, same=fr.same_run)
    assert ran == [moved]
    assert json.loads(plan_file.read_text())["command"] == moved
    # Without `same` (or for another run), the plan's own command still runs.
    plan_file.write_text(json.dumps(dict(name="af_seed0", max_steps=5, command=planned,
                                         attempts=[])))
    (first / "runs" / "af_seed0" / "metrics.json").unlink()
    cost_sweep.run_stage("af_seed0", 5, [], args, command=moved)
    assert ran[-1] == planned
