"""tools/collect_run.py: a run's small artefacts into docs/results/<name>/, never checkpoints."""

import json

import pytest

from tools import collect_run

LOG = ("I1124 05:55:35.286309 1 loop.py:319] step 5000 valid: nll 4.2559 ppl 70.52 word ppl "
       "217.46 bpb 1.5066 (274432 tokens)\nI1124 06:06:29.438549 1 loop.py:306] step 5100/52880 "
       "loss 4.1 ppl 60.3\nI1124 06:06:29 1 loop.py:319] step 7500 valid: nll 4.1551 ppl 63.76 "
       "word ppl 191.42 bpb 1.4709 (274432 tokens)\n")


def _run(tmp_path, **extra):
    run = tmp_path / "runs" / "my_run"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"max_steps": 9000}))
    (run / "training_log.log").write_text("step=100 loss=8.5 ppl=5000.0\nstep=200 loss=6.9 "
                                          "ppl=1009.0\n")
    (run / "ckpt-200.data-00000-of-00001").write_bytes(b"\0" * 100)
    for name, content in extra.items():
        (run / name).write_bytes(content)
    return run


def test_copies_artefacts_and_reports_progress(tmp_path):
    run = _run(tmp_path, **{"architecture.json": b"{}"})
    console = tmp_path / "console.txt"
    console.write_text(LOG)
    target = collect_run.collect(run, tmp_path / "results", console)
    assert sorted(p.name for p in target.iterdir()) == [
        "STATUS.md", "architecture.json", "config.json", "console.log", "training_log.log"]
    status = (target / "STATUS.md").read_text()
    assert "in progress" in status and "last logged step 200 of 9000" in status
    assert "| 5000 | 4.2559 | 70.52 | 217.46 | 1.5066 |" in status
    assert "| 7500 | 4.1551 | 63.76 | 191.42 | 1.4709 |" in status
    (run / "metrics.json").write_text("{}")
    assert "Status: finished" in (collect_run.collect(run, tmp_path / "results") /
                                  "STATUS.md").read_text()


def test_errors_leave_the_previous_copy(tmp_path, capsys):
    run = _run(tmp_path)
    target = collect_run.collect(run, tmp_path / "results")
    (run / "arch_history.json").write_bytes(b" " * (collect_run.MAX_BYTES + 1))
    assert collect_run.main([str(run), f"--out_dir={tmp_path / 'results'}"]) == 1
    assert "arch_history.json" in capsys.readouterr().err
    assert sorted(p.name for p in target.iterdir()) == [
        "STATUS.md", "config.json", "training_log.log"]
    with pytest.raises(collect_run.CollectError, match="training run directory"):
        collect_run.collect(tmp_path, tmp_path / "results")
    with pytest.raises(collect_run.CollectError, match="does not exist"):
        collect_run.collect(tmp_path / "nope", tmp_path / "results")


def test_a_step_evaluated_again_after_a_restart_is_listed_once(tmp_path):
    run = _run(tmp_path)
    console = tmp_path / "console.txt"
    again = LOG.replace("nll 4.2559 ppl 70.52", "nll 4.2560 ppl 70.53")  # re-run of 5000, 7500
    console.write_text(LOG + again.split("\n")[0] + "\n")
    status = (collect_run.collect(run, tmp_path / "results", console) / "STATUS.md").read_text()
    rows = [line for line in status.splitlines() if line.startswith("| 5000 ")]
    assert rows == ["| 5000 | 4.2560 | 70.53 | 217.46 | 1.5066 |"]  # the latest
    assert status.index("| 5000 ") < status.index("| 7500 ")


def test_freezes_and_the_speed_of_each_stage(tmp_path):
    run = _run(tmp_path)
    (run / "config.json").write_text(json.dumps({"seq_len": 32, "batch_size": 32}))
    lines = [f"step={s} loss=4.0 ppl=55.0 tokens_per_sec={t}" for s, t in (
        (100, 3000.0), (200, 3100.0), (300, 2000.0), (400, 4096.0), (500, 4200.0),
        (600, 1000.0), (700, 6144.0), (800, 6000.0))]
    lines.insert(2, "step=250 frozen_block=5 frozen_choice=1 frozen_probability=0.975")
    lines.insert(6, "step=550 frozen_block=0 frozen_choice=0 frozen_probability=0.98")
    lines.insert(7, "step=550 frozen_block=2 frozen_choice=2 frozen_probability=0.99")
    (run / "training_log.log").write_text("\n".join(lines) + "\n")
    status = (collect_run.collect(run, tmp_path / "results") / "STATUS.md").read_text()
    assert "| 250 | 5 | 1 | 0.9750 |" in status and "| 550 | 2 | 2 | 0.9900 |" in status
    # The intervals holding a freeze (ending at 300 and 600) belong to no stage.
    assert "| 0-250 | 0 | 3,100 | 3.03 |" in status
    assert "| 250-550 | 1 | 4,200 | 4.10 |" in status
    assert "| 550-800 | 3 | 6,144 | 6.00 |" in status
    assert "last logged step 800" in status
