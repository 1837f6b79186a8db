"""train.py flags -> TrainConfig, --flagfile, and every rejected combination."""

import dataclasses
import json
import os
import shutil
import types

from absl import flags
import pytest

import data_utils
from model.transformer_xl.config import ModelConfig
from model.transformer_xl.presets import preset_config
import train as train_cli
from training.setup import flags as training_flags
from training.setup.config import ConfigError, TrainConfig


@pytest.fixture
def parse(tiny_data, tmp_path):
    """parse(*flags) -> (TrainConfig, overwrite) with --data_dir/--model_dir filled in."""

    def run(*args, data_dir=None):
        fv = train_cli.define_flags(flags.FlagValues())
        fv(["train.py", f"--data_dir={data_dir or tiny_data}",
            f"--model_dir={tmp_path / 'run'}", "--preset=tiny", *args])
        return train_cli.config_from_flags(fv)

    return run


def test_every_config_field_has_a_flag():
    fv = train_cli.define_flags(flags.FlagValues())
    for field in dataclasses.fields(ModelConfig):
        assert field.name == "vocab_size" or field.name in fv, field.name
    sections = TrainConfig.section_fields()
    for field in dataclasses.fields(TrainConfig.complete()):  # the optimizers' options too
        assert field.name == "model" or field.name in sections or field.name in fv, field.name
    for section in sections.values():  # a section's fields are flags of their own
        for field in dataclasses.fields(section):
            assert field.name in fv and "[search]" in fv[field.name].help, field.name


def test_defaults_come_from_preset_data_and_config(parse, tiny_data):
    config, overwrite = parse()
    meta = data_utils.load_meta(str(tiny_data))
    assert not overwrite
    assert config.model == preset_config("tiny", vocab_size=meta["vocab_size"])
    assert (config.seq_len, config.batch_size) == (meta["seq_len"], meta["batch_size"])
    assert config.eval_mem_len == config.model.mem_len
    defaults = TrainConfig(data_dir="d", model_dir="m", model=config.model)
    for name in ("learning_rate", "clip_norm", "epochs", "strategy", "precision"):
        assert getattr(config, name) == getattr(defaults, name), name
    assert config.search == defaults.search  # --tau_start, --arch_learning_rate, ...


def test_model_and_training_flags_override(parse):
    config, overwrite = parse("--d_model=64", "--num_heads=4", "--num_blocks=6",
                              "--dropout=0.2", "--pre_norm", "--cutoffs=10,100",
                              "--proj_dims=8,4", "--attention=adaptive_span",
                              "--search_mode=hard", "--seed=7", "--eval_mem_len=0",
                              "--learning_rate=0.01", "--tau_schedule=linear", "--overwrite",
                              "--lr_schedule=linear", "--precision=mixed_bfloat16")
    model = config.model
    assert (model.d_model, model.num_heads, model.num_blocks, model.dropout) == (64, 4, 6, 0.2)
    assert model.pre_norm and model.cutoffs == (10, 100) and model.proj_dims == (8, 4)
    assert (model.attention, model.search_mode, model.seed) == ("adaptive_span", "hard", 7)
    assert (config.eval_mem_len, config.learning_rate, config.search.tau_schedule) == (
        0, 0.01, "linear")
    assert (config.lr_schedule, config.precision, overwrite) == ("linear", "mixed_bfloat16", True)


def test_cutoffs_none_and_auto(parse, tiny_data):
    from pardata.cutoffs import optimal_cutoffs

    assert parse("--cutoffs=none")[0].model.cutoffs == ()
    config, _ = parse("--cutoffs=auto", "--num_tails=3", "--cutoff_min_head=5",
                      "--cutoff_logit_cost=0")
    counts = data_utils.unigram_counts(str(tiny_data))
    expected = optimal_cutoffs(counts, 3, config.model.d_model, proj_factor=4.0,
                               min_head=5).cutoffs
    assert config.model.cutoffs == tuple(expected) and len(expected) == 3
    # Defaults: the CPU cost model and a head clipped to fit the small vocabulary.
    config, _ = parse("--cutoffs=auto")
    expected = optimal_cutoffs(counts, 2, config.model.d_model, proj_factor=4.0,
                               min_head=min(1000, len(counts) - 2), logit_cost=60.0).cutoffs
    assert config.model.cutoffs == tuple(expected) and expected[0] >= min(1000, len(counts) - 2)


def test_flagfile(parse, tmp_path):
    path = tmp_path / "run.flags"
    path.write_text("--learning_rate=0.02\n--max_steps=7\n--d_model=48\n--cutoffs=none\n")
    config, _ = parse(f"--flagfile={path}")
    assert (config.learning_rate, config.max_steps, config.model.d_model) == (0.02, 7, 48)
    assert config.model.cutoffs == ()


def test_architecture_string_and_paths(parse, tmp_path):
    config, _ = parse("--architecture=afif")
    assert (config.model.architecture, config.model.num_blocks) == ("afif", 4)
    assert config.model.architecture != "supernet"
    run = tmp_path / "search"
    run.mkdir()
    (run / "architecture.txt").write_text("aaffff\n")
    config, _ = parse(f"--architecture={run}", "--num_blocks=6")
    assert (config.model.architecture, config.model.num_blocks) == ("aaffff", 6)
    # The string never sets the depth: one letter per --num_blocks (the preset's: 4).
    with pytest.raises(ConfigError, match=rf"--architecture={run} \(aaffff\) has 6 blocks but "
                       r"the model has --num_blocks=4 \(the preset tiny's unless given\): "
                       r"give 4 letters, or pass --num_blocks=6"):
        parse(f"--architecture={run}")
    with pytest.raises(ConfigError, match="--architecture=aff has 3 blocks.*--num_blocks=4"):
        parse("--architecture=aff", "--num_blocks=4")
    with pytest.raises(ConfigError, match="--architecture=aff has 3 blocks.*--num_blocks=4"):
        parse("--architecture=aff")
    with pytest.raises(ConfigError, match="--architecture"):
        parse(f"--architecture={tmp_path}")  # no architecture.json there


@pytest.mark.parametrize("args,pattern", [
    (["--eval_mem_len=-1"], "--eval_mem_len=-1"),
    (["--cutoffs=100,300"], r"--cutoffs=100,300 .*vocab_size=256.*--cutoffs=auto"),
    (["--preset=wt2_base"], r"--cutoffs=\d+,\d+ \(from --preset=wt2_base\).*--cutoffs=auto"),
    (["--cutoffs=ten"], "--cutoffs=ten must be a comma list"),
    (["--seq_len=32"], r"--seq_len=32 but .* seq_len=16"),
    (["--batch_size=8"], r"--batch_size=8 but .* batch_size=4"),
    (["--d_model=33"], "d_model"),
    (["--num_cpu_replicas=2"], "--num_cpu_replicas.*--strategy=mirrored"),
    (["--preset=huge"], "--preset=huge"),
    (["--batch_split=3"], r"--batch_split=3: must divide --batch_size=4 .*\[1, 2, 4\]"),
    (["--batch_split=0"], r"--batch_split=0: must be >= 1"),
    (["--inter_op_threads=-2"], r"--inter_op_threads=-2: must be >= 0"),
])
def test_rejected_flags(parse, args, pattern):
    with pytest.raises(ConfigError, match=pattern):
        parse(*args)


def test_missing_or_incomplete_data_dir(parse, tiny_data, tmp_path):
    with pytest.raises(data_utils.DataError, match="meta.json"):
        parse(data_dir=tmp_path / "nowhere")
    broken = tmp_path / "broken"
    shutil.copytree(tiny_data, broken)
    meta = json.loads((broken / "meta.json").read_text())
    del meta["splits"]["valid"]["words"]
    (broken / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(data_utils.DataError, match="incomplete"):
        parse(data_dir=broken)
    # A file (e.g. --data_dir=README.md) is named as a file, with what the flag expects,
    # never with a build command writing into it.
    notes = tmp_path / "notes.md"
    notes.write_text("notes\n")
    with pytest.raises(ConfigError) as error:
        parse(data_dir=notes)
    assert str(error.value) == (
        f"--data_dir={notes} is a file, not a data directory: give the directory "
        "./create_tfrecords.sh or build_data.py wrote, the one holding meta.json "
        "(e.g. data/wikitext2)")
    assert notes.read_text() == "notes\n" and not (tmp_path / "run").exists()
    with pytest.raises(data_utils.DataError, match=rf"^{notes} is a file, not a built data "):
        data_utils.load_meta(str(notes))


def test_train_rejects_before_writing(parse, tmp_path):
    from training.run.loop import train

    config, _ = parse()
    # A batch of 4 does not split over 3 replicas.
    three = types.SimpleNamespace(num_replicas_in_sync=3)
    with pytest.raises(ConfigError, match="not divisible by the 3 replicas"):
        train(config, strategy=three)
    assert not os.path.exists(config.model_dir)
    # 2 rows per replica do not split into 4 micro-batches.
    two = types.SimpleNamespace(num_replicas_in_sync=2)
    with pytest.raises(ConfigError, match=r"--batch_split=4 does not divide the 2 rows of each "
                       r"of the 2 replicas \(--batch_size=4\).*use one of \[1, 2\]"):
        train(config.replace(batch_split=4), strategy=two)
    assert not os.path.exists(config.model_dir)
    # A run with another config is there: refused unless --overwrite.
    os.makedirs(config.model_dir)
    other = config.replace(model=config.model.replace(d_model=64))
    other.save()
    before = sorted(os.listdir(config.model_dir))
    with pytest.raises(ConfigError, match="different config.*--overwrite"):
        train(config, strategy=types.SimpleNamespace(num_replicas_in_sync=1))
    assert sorted(os.listdir(config.model_dir)) == before
    assert TrainConfig.load(config.model_dir) == other


@pytest.mark.slow
def test_cli_errors_are_one_line_and_write_nothing(tiny_data, tmp_path, cli_cases):
    flagfile = tmp_path / "bad.flags"
    flagfile.write_text(f"--data_dir={tiny_data}\n--model_dir={tmp_path / 'b'}\n"
                        "--preset=tiny\n--cutoffs=100,300\n")
    commands = {
        "missing": [f"--data_dir={tmp_path / 'nowhere'}", f"--model_dir={tmp_path / 'a'}"],
        "cutoffs": [f"--flagfile={flagfile}"],
        "batch_split": [f"--data_dir={tiny_data}", f"--model_dir={tmp_path / 'c'}",
                        "--preset=tiny", "--batch_split=3"],
    }
    results = cli_cases("train.py", commands, timeout=300)
    for name, needle in (("missing", "meta.json"), ("cutoffs", "--cutoffs=auto"),
                         ("batch_split", "--batch_split=3: must divide --batch_size=4")):
        code, _, stderr = results[name]
        errors = [x for x in stderr.splitlines() if x.startswith("error:")]
        assert code == 1 and len(errors) == 1 and needle in errors[0], stderr[-2000:]
        assert "Traceback" not in stderr
    assert not [name for name in "abc" if (tmp_path / name).exists()]


def test_strategy_errors(monkeypatch):
    import tensorflow as tf

    from training.run.strategy import make_strategy

    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(ConfigError, match="TF_CONFIG"):
        make_strategy("multi_worker")
    tf.constant(1.0) + 1.0  # the runtime is up: logical devices are too late now
    with pytest.raises(ConfigError, match="--num_cpu_replicas=2"):
        make_strategy("mirrored", num_cpu_replicas=2)
    with pytest.raises(ConfigError, match="--strategy='nccl'"):
        make_strategy("nccl")
    assert make_strategy("default").num_replicas_in_sync == 1


def test_thread_pools_set_after_start_up_are_one_clear_error():
    import tensorflow as tf

    from training.run.strategy import configure_threads

    tf.constant(1.0) + 1.0  # the runtime is up: its thread pools are fixed
    configure_threads(0, 0)  # TensorFlow's defaults: nothing to set
    intra = tf.config.threading.get_intra_op_parallelism_threads()
    configure_threads(intra, 0)  # what it already runs with: nothing to set
    with pytest.raises(ConfigError, match="--inter_op_threads=7: TensorFlow was initialised"):
        configure_threads(0, 7)


def test_overwrite_removes_only_our_files(tmp_path):
    from training.run.checkpoint import clear_run

    run, logs = tmp_path / "run", tmp_path / "logs"
    ours = ["config.json", "checkpoint", "ckpt-5.index", "ckpt-5.data-00000-of-00001",
            "training_log.log", "metrics.json", "arch_history.json", "architecture.txt"]
    for name in ours + ["notes.md"]:
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text("x")
    (run / "best").mkdir()
    (run / "best" / "ckpt-3.index").write_text("x")
    (logs / "train").mkdir(parents=True)
    (logs / "train" / "events.out.tfevents.1").write_text("x")
    clear_run(str(run), str(logs))
    assert sorted(os.listdir(run)) == ["notes.md"]
    assert not (logs / "train").exists()


# ------------------------------------------------------------- model families


@pytest.fixture
def parse_any(tiny_data, tmp_path):
    """parse_any(*flags) -> (TrainConfig, overwrite): like `parse` without a default preset."""

    def run(*args):
        fv = train_cli.define_flags(flags.FlagValues())
        fv(["train.py", f"--data_dir={tiny_data}", f"--model_dir={tmp_path / 'run'}", *args])
        return train_cli.config_from_flags(fv)

    return run


def test_sha_rnn_flags_come_from_its_config_fields(parse_any, tiny_data):
    from model.sha_rnn.config import ShaRnnConfig

    fv = train_cli.define_flags(flags.FlagValues())
    for field in dataclasses.fields(ShaRnnConfig):
        assert field.name == "vocab_size" or field.name in fv, field.name
        # The flag's help is the field's own (one source of truth), except for
        # the flags train.py parses itself (cutoffs: 'auto', 'none').
        if field.name not in ("vocab_size",) + training_flags.hand_parsed_model_flags()[0]:
            assert field.metadata["help"] in fv[field.name].help, field.name
    config, _ = parse_any("--model_family=sha_rnn", "--preset=sha_rnn_tiny", "--d_model=24",
                          "--boom_dim=48", "--attention_layers=0,1", "--mem_len=5")
    assert config.model_family == "sha_rnn" and isinstance(config.model, ShaRnnConfig)
    meta = data_utils.load_meta(str(tiny_data))
    assert (config.model.vocab_size, config.model.d_model, config.model.boom_dim,
            config.model.attention_layers, config.model.mem_len) == (
        meta["vocab_size"], 24, 48, (0, 1), 5)
    assert config.eval_mem_len == 5
    assert TrainConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    plain, _ = parse_any("--model_family=sha_rnn", "--preset=sha_rnn_tiny", "--attention_layers=")
    assert plain.model.attention_layers == ()  # a plain LSTM language model


def test_sha_rnn_presets_bring_their_recipe(parse_any):
    config, _ = parse_any("--model_family=sha_rnn", "--preset=lstm_small")
    assert (config.optimizer, config.learning_rate, config.warmup_steps) == (
        "lamb_sharnn", 2e-3, 800)
    assert (config.lr_schedule, config.warmup_fraction, config.epsilon, config.weight_decay,
            config.clip_norm) == ("constant", 0.5, 1e-6, 1.2e-6, 0.25)
    assert (config.min_trust, config.weight_norm_clip) == (None, None)  # the optimizer's own
    assert config.preset == "lstm_small" and config.model.attention_layers == ()
    # Flags the user gives win over the recipe.
    config, _ = parse_any("--model_family=sha_rnn", "--preset=lstm_small",
                          "--learning_rate=1e-3", "--optimizer=adam")
    assert (config.optimizer, config.learning_rate, config.warmup_steps) == ("adam", 1e-3, 800)
    # The family's default preset.
    config, _ = parse_any("--model_family=sha_rnn")
    assert config.preset == "sha_rnn_small"


@pytest.mark.parametrize("args,pattern", [
    (["--model_family=sha_rnn", "--preset=sha_rnn_tiny", "--num_heads=2"],
     r"--num_heads is a flag of --model_family=transformer_xl, not of --model_family=sha_rnn"),
    (["--preset=tiny", "--attention_layers=0"],
     r"--attention_layers is a flag of --model_family=sha_rnn, not of "
     r"--model_family=transformer_xl"),
    (["--model_family=sha_rnn", "--preset=tiny"],
     r"--preset=tiny is a transformer_xl preset but --model_family=sha_rnn: pass "
     r"--model_family=transformer_xl"),
    (["--preset=sha_rnn_tiny"],
     r"--preset=sha_rnn_tiny is a sha_rnn preset but --model_family=transformer_xl: pass "
     r"--model_family=sha_rnn"),
    (["--model_family=sha_rnn", "--preset=sha_rnn_tiny", "--architecture=afaf"],
     r"--architecture does not apply to --model_family=sha_rnn"),
])
def test_family_mismatches_are_refused(parse_any, args, pattern):
    with pytest.raises(ConfigError, match=pattern):
        parse_any(*args)


def test_unknown_family_is_a_flag_error():
    fv = train_cli.define_flags(flags.FlagValues())
    with pytest.raises(flags.IllegalFlagValueError, match="transformer_xl"):
        fv(["train.py", "--model_family=gpt"])


@pytest.mark.parametrize("flag,value,choice", [
    ("optimizer", "sgd", "adagrad"), ("lr_schedule", "step", "inverse_sqrt")])
def test_unknown_optimizer_or_schedule_is_a_flag_error(flag, value, choice):
    fv = train_cli.define_flags(flags.FlagValues())
    with pytest.raises(flags.IllegalFlagValueError, match=f"--{flag}=.*{choice}"):
        fv(["train.py", f"--{flag}={value}"])


def test_every_optimizer_and_schedule_is_a_flag_choice(parse):
    from training.optimizers import OPTIMIZERS
    from training.optimizers.schedules import LR_SCHEDULES

    for name in OPTIMIZERS:
        assert parse(f"--optimizer={name}")[0].optimizer == name
    for name in LR_SCHEDULES:
        assert parse(f"--lr_schedule={name}")[0].lr_schedule == name
    assert parse("--batch_split=2")[0].batch_split == 2


def test_resuming_a_run_as_another_family_is_refused(parse_any):
    from training.run.loop import train

    txl, _ = parse_any("--preset=tiny")
    os.makedirs(txl.model_dir)
    txl.save()
    before = sorted(os.listdir(txl.model_dir))
    sha, _ = parse_any("--model_family=sha_rnn", "--preset=sha_rnn_tiny")
    with pytest.raises(ConfigError, match=r"holds a transformer_xl run, which "
                       r"--model_family=sha_rnn cannot resume: use --model_family=transformer_xl"):
        train(sha, strategy=types.SimpleNamespace(num_replicas_in_sync=1))
    assert sorted(os.listdir(txl.model_dir)) == before
