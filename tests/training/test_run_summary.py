"""The end-of-run summary train.py prints: metrics, derived architecture, artefacts, the
next commands (the retrain command parses back to the run's recipe), and a run stopped
before the end of its planned schedules says so in its last line."""

import logging
import shlex

from absl import flags
import pytest

from tests.helpers.trainers import StopAfter, Stopped
from training.plugins.base import Plugin, Registration


def _command(summary, script):
    line = next(x for x in summary.splitlines() if x.strip().startswith(f"python3 {script}"))
    return shlex.split(line.split("#")[0])[2:]  # the flags


@pytest.mark.slow
def test_summary_of_a_search_cut_short(tiny_config_factory, tmp_path, caplog):
    import train as train_cli
    from training.report.summary import run_summary
    from training.run.loop import train

    config = tiny_config_factory(
        tmp_path / "search", max_steps=8, checkpoint_interval=4, log_interval=1,
        eval_interval=4, eval_max_records=2, sample_tokens=0, arch_warmup_steps=1,
        optimizer="adamw", weight_decay=0.01, warmup_steps=2, model_num_blocks=2,
        model_attention="adaptive_span")
    with pytest.raises(Stopped):
        train(config, callbacks=[StopAfter(5)])  # dies after the checkpoint at step 4
    shorter = config.replace(max_steps=6)  # resumed: its schedules stay planned for 8
    with caplog.at_level(logging.WARNING):
        results = train(shorter)
    summary = run_summary(shorter, results)
    lines = summary.splitlines()

    assert results["step"] == 6 and results["planned_steps"] == 8
    assert lines[-1].startswith("cut short: stopped at step 6 of the 8 steps its schedules")
    assert any(r.getMessage().startswith("cut short: stopped at step 6 of the 8")
               for r in caplog.records)
    best = results["best"]
    assert lines[0] == f"finished {shorter.model_dir}: step 6 (transformer_xl, preset tiny)"
    assert lines[1] == (
        f"best valid (step {best['step']}): perplexity {best['valid']['perplexity']:.2f}, "
        f"word perplexity {best['valid']['word_perplexity']:.2f}, bits/byte "
        f"{best['valid']['bits_per_byte']:.4f}; test perplexity "
        f"{best['test']['perplexity']:.2f} at that step")
    derived = results["derivation"]["architecture"]
    assert lines[2].startswith(f"derived architecture: {derived}")
    assert f"run directory: {shorter.model_dir}   TensorBoard logs: {shorter.logdir}" in lines
    for script in ("generate.py", "evaluate.py", "export.py"):
        assert f"--model_dir={shorter.model_dir}" in _command(summary, script)
    assert f"  tensorboard --logdir {tmp_path / 'search'}" in lines

    # The retrain command is a valid train.py command with the run's recipe and
    # the derived architecture.
    fv = train_cli.define_flags(flags.FlagValues())
    fv(["train.py", *_command(summary, "train.py")])
    retrain, _ = train_cli.config_from_flags(fv)
    assert retrain.model.architecture == derived
    assert retrain.model_dir == f"{shorter.model_dir}_derived"
    assert retrain.search.arch_warmup_steps == 0
    for name in ("optimizer", "weight_decay", "learning_rate", "warmup_steps", "clip_norm",
                 "max_steps", "eval_interval", "checkpoint_interval", "log_interval"):
        assert getattr(retrain, name) == getattr(shorter, name), name
    assert retrain.model.attention == "adaptive_span"
    assert retrain.model.replace(architecture="supernet", num_blocks=2) == shorter.model


def test_summary_of_a_finished_fixed_run():
    from model.transformer_xl.presets import preset_config
    from training.report.summary import run_summary
    from training.setup.config import TrainConfig

    config = TrainConfig(data_dir="data/x", model_dir="runs/fixed",
                         model=preset_config("tiny", vocab_size=256, architecture="afaf"),
                         preset="tiny", max_steps=10)
    valid = {"perplexity": 51.234, "word_perplexity": 70.0, "bits_per_byte": 1.5}
    results = {"step": 10, "planned_steps": 10, "architecture": "afaf",
               "best": {"step": 10, "valid": valid, "test": None}}
    lines = run_summary(config, results).splitlines()
    assert lines[1] == ("best valid (step 10): perplexity 51.23, word perplexity 70.00, "
                        "bits/byte 1.5000")
    assert lines[2] == "architecture: afaf"
    assert not any("train.py" in line or "cut short" in line for line in lines)
    assert lines[-1] == "  tensorboard --logdir logs"



class _Noter(Plugin):
    """A plug-in of the test: one line of every run in the summary, and one command."""

    @classmethod
    def create(cls, model, config, horizon):
        return None

    @classmethod
    def summary_lines(cls, config, results):
        return [f"noted: {results['step']} steps in {config.model_dir}"]

    @classmethod
    def next_commands(cls, config, results):
        return [f"python3 note.py --model_dir={config.model_dir}   # read the note"]


def test_a_registered_plugin_adds_its_line_and_its_command_to_the_summary():
    from model.transformer_xl.presets import preset_config
    from training import plugins
    from training.report.summary import run_summary
    from training.setup.config import TrainConfig

    config = TrainConfig(data_dir="data/x", model_dir="runs/x",
                         model=preset_config("tiny", vocab_size=256, architecture="afaf"),
                         preset="tiny", max_steps=10)
    results = {"step": 10, "planned_steps": 10, "architecture": "afaf"}
    before = run_summary(config, results).splitlines()
    plugins.register(Registration(name="noter", load=lambda: _Noter))
    try:
        lines = run_summary(config, results).splitlines()
    finally:
        plugins.unregister("noter")
    # Its line stands after the registered plug-ins' (the search names the fixed
    # architecture); its command comes first under "next:"; nothing else changes.
    assert before[1] == "architecture: afaf"
    assert lines[1:3] == ["architecture: afaf", "noted: 10 steps in runs/x"]
    assert lines[lines.index("next:") + 1] == (
        "  python3 note.py --model_dir=runs/x   # read the note")
    assert [x for x in lines if "note" not in x] == before
    assert run_summary(config, results).splitlines() == before  # unregistered: gone


def test_yardsticks_against_a_count_of_the_ids(tiny_data):
    import collections
    import math

    from pardata.records import read_stream
    from pardata.yardsticks import yardsticks

    train = collections.Counter(read_stream(str(tiny_data), "train").tolist())
    valid = read_stream(str(tiny_data), "valid").tolist()[1:]
    meta_vocab = 256
    total = sum(train.values())
    nll = sum(-math.log((train[i] + 1) / (total + meta_vocab)) for i in valid) / len(valid)
    got = yardsticks(str(tiny_data))
    assert got["uniform"] == meta_vocab
    assert got["unigram"] == pytest.approx(math.exp(nll), rel=1e-9)
    assert 1 < got["unigram"] < meta_vocab


@pytest.mark.slow
def test_a_run_records_its_yardsticks_and_the_summary_says_when_it_overfits(
        short_word_data, tmp_path):
    """A tiny run writes the data's yardsticks beside its metrics and the summary prints
    them; the overfitting note appears when valid perplexity ended more than 2% above its
    best at least two evaluations later, and not otherwise. (The rise is planted in the
    run's own figures: whether a tiny run's noisy curve rises at a given step depends on
    the machine's arithmetic.)"""
    from pardata.yardsticks import yardsticks
    from tests.training.conftest import tiny_config
    from training.report.summary import run_summary
    from training.run.loop import train

    config = tiny_config(short_word_data, tmp_path / "run", max_steps=50,
                         learning_rate=5e-3, lr_schedule="constant", eval_interval=25,
                         sample_tokens=0, log_interval=100, model_d_model=32,
                         model_d_ffn=64, model_num_blocks=2, model_architecture="af")
    results = train(config)
    base = yardsticks(str(short_word_data))
    assert results["yardsticks"]["valid"] == pytest.approx(base)
    lines = run_summary(config, results).splitlines()
    assert (f"for comparison, valid perplexity of the data's unigram frequencies "
            f"{base['unigram']:.2f}, of a uniform guess 256") in lines

    best = results["best"]
    b = best["valid"]["perplexity"]

    def later(steps, rise):
        return dict(results, last={"step": best["step"] + steps,
                                   "valid": {"perplexity": b * rise}})

    def notes(res):
        return [x for x in run_summary(config, res).splitlines()
                if x.startswith("overfitting")]

    risen = later(50, 1.03)
    assert notes(risen) == [
        f"overfitting: valid perplexity rose from {b:.2f} at step {best['step']} to "
        f"{b * 1.03:.2f} at step {best['step'] + 50} (the best checkpoint is the one kept); "
        "to do better, train on more text, raise the dropout (--dropout), or stop near step "
        f"{best['step']} (--max_steps={best['step']})"]
    assert notes(later(50, 1.01)) == []      # within 2%: noise
    assert notes(later(25, 1.5)) == []       # one evaluation after the best
    assert notes(dict(results, last=best)) == []


def test_the_closing_summary_names_the_later_stages_only_when_there_were_some():
    """After the run's summary: a search with its retrain gets both stages (the search
    plug-in's lines) with the export indented under them; a plain run with an export gets
    the export alone (no pipeline heading); a plain run gets nothing."""
    from training.report.summary import closing_summary

    def best(valid, test, step):
        figures = {"perplexity": test, "word_perplexity": test * 2, "bits_per_byte": 1.0}
        return {"step": step, "valid": {"perplexity": valid}, "test": figures}

    retrain = {"architecture": "aaafaf", "best": best(44.0, 42.5, 900)}
    search = {"architecture": "aaafaf", "best": best(60.0, 58.0, 300), "retrain": retrain,
              "derivation": {"decided_step": 250}}
    lines = closing_summary(search, "runs/x.keras").splitlines()
    assert lines == [
        "PAR pipeline:",
        "  search (supernet) aaafaf: best valid perplexity 60.00 (step 300), test perplexity "
        "58.00, word perplexity 116.00, bits/byte 1.0000",
        "  derived network aaafaf: best valid perplexity 44.00 (step 900), test perplexity "
        "42.50, word perplexity 85.00, bits/byte 1.0000",
        "  the search was decided at step 250",
        "  exported: runs/x.keras   (python3 generate.py --model=runs/x.keras --prompt=...)"]
    plain = {"best": best(50.0, 49.0, 100)}
    assert closing_summary(plain, "runs/y.keras") == (
        "exported: runs/y.keras   (python3 generate.py --model=runs/y.keras --prompt=...)")
    assert closing_summary(plain) == ""
