"""Tiny builds, models and run directories shared by the serving and CLI tests."""

import os

import numpy as np

# Slices of real WikiText-2 (valid split, by line) used as train/valid/test.
LINES = {"train": (0, 600), "valid": (600, 720), "test": (720, 840)}
BEST_STEP, LATEST_STEP = 7, 9



def build_data(root, wikitext2_root, tokenizer="word", lines=None):
    """A tiny build (B 4, T 16) of a slice of WikiText-2 valid; returns its directory.

    Vocabulary: 256 words, 300 sentencepiece pieces, or the 256 bytes. `lines`:
    split -> (first, end) line of WikiText-2 valid (default `LINES`).
    """
    import data_utils

    with open(wikitext2_root / "wikitext-2" / "wiki.valid.tokens", encoding="utf-8") as f:
        text = f.readlines()
    files = {}
    for split, (lo, hi) in (lines or LINES).items():
        files[split] = root / f"{split}.txt"
        files[split].write_text("".join(text[lo:hi]), encoding="utf-8")
    out = root / f"built_{tokenizer}"
    data_utils.build_dataset(data_utils.BuildConfig(
        dataset="text", output_dir=str(out), train_file=str(files["train"]),
        valid_file=str(files["valid"]), test_file=str(files["test"]), tokenizer=tokenizer,
        vocab_size={"word": 256, "sentencepiece": 300}.get(tokenizer, 0), batch_size=4,
        seq_len=16))
    return out


def randomize(model, seed, architecture=None):
    """Larger random weights than the initialisation, so that the context matters.

    Args:
        model: a built TransformerXLLM.
        seed: int.
        architecture: for a supernet, the a/f/i string its argmax should derive.
    """
    rng = np.random.default_rng(seed)
    for v in model.weight_variables:
        if len(v.shape) >= 2:
            v.assign(rng.normal(0.0, 0.4, v.shape).astype(np.float32))
    if architecture:
        for block, letter in zip(model.blocks, architecture):
            block.arch_logits.assign(np.eye(3, dtype=np.float32)["afi".index(letter)] * 2.0)


def make_model(vocab_size=64, seed=0, architecture="supernet", derived="afai", **overrides):
    """A randomised tiny-preset model (no dropout)."""
    from model.families import build_model
    from model.transformer_xl.presets import preset_config

    config = preset_config("tiny", vocab_size=vocab_size, dropout=0.0, architecture=architecture,
                           **overrides)
    model = build_model(config)
    randomize(model, seed, derived if architecture == "supernet" else None)
    return model


def make_run(model_dir, data_dir, architecture="supernet", derived="afai", seeds=(1, 2)):
    """A trained-looking run directory: config.json, best/ckpt-7 and ckpt-9 (other weights).

    `seeds`: the `make_model` seeds of the best and the latest weights.

    Returns:
        (TrainConfig, best model variables as numpy, latest model variables).
    """
    import tensorflow as tf

    import data_utils
    from model.transformer_xl.presets import preset_config
    from runstore.checkpoints import model_checkpoint
    from training.setup.config import TrainConfig

    meta = data_utils.load_meta(str(data_dir))
    config = TrainConfig(
        data_dir=str(data_dir), model_dir=str(model_dir), preset="tiny",
        model=preset_config("tiny", vocab_size=meta["vocab_size"], dropout=0.0,
                            architecture=architecture),
        batch_size=meta["batch_size"], seq_len=meta["seq_len"], eval_mem_len=12, max_steps=9)
    os.makedirs(model_dir, exist_ok=True)
    config.save()
    saved = []
    for seed, step, sub in ((seeds[0], BEST_STEP, "best"), (seeds[1], LATEST_STEP, "")):
        model = make_model(meta["vocab_size"], seed, architecture, derived)
        checkpoint = model_checkpoint(model)
        tf.train.CheckpointManager(checkpoint, os.path.join(model_dir, sub), 1,
                                   checkpoint_name="ckpt").save(checkpoint_number=step)
        saved.append([v.numpy() for v in model.variables])
    return config, saved[0], saved[1]


# A prompt of word ids shared by the generation tests.
PROMPT = [5, 17, 3, 40, 8, 22, 9]


def make_family_run(model_dir, data_dir, family, architecture="afaf", seed=0):
    """A run directory of a registered family with random weights, as train.py lays it out.

    config.json (the family's `tiny_preset`, no dropout), best/ckpt-1 and the
    data's meta.json and tokenizer files in model_dir/data. Transformer-XL
    uses `architecture` ("supernet" derives "afai"); weights come from
    `randomize` (Transformer-XL) or the seeded initialisation (SHA-RNN).

    Returns:
        The TrainConfig.
    """
    import shutil

    import keras
    import tensorflow as tf

    import data_utils
    from model.families import build_model, get_family
    from runstore.checkpoints import VariableList
    from training.setup.config import TrainConfig

    meta = data_utils.load_meta(str(data_dir))
    preset = get_family(family).tiny_preset
    fields = {"architecture": architecture} if family == "transformer_xl" else {}
    model_config = get_family(family).preset_config(
        preset, vocab_size=meta["vocab_size"], dropout=0.0, **fields)
    config = TrainConfig(
        data_dir=str(data_dir), model_dir=str(model_dir), preset=preset, model=model_config,
        model_family=family, batch_size=meta["batch_size"], seq_len=meta["seq_len"],
        eval_mem_len=12, max_steps=1)
    os.makedirs(os.path.join(model_dir, "data"), exist_ok=True)
    config.save()
    for name in meta["tokenizer"]["files"] + ["meta.json"]:
        shutil.copy(os.path.join(data_dir, name), os.path.join(model_dir, "data", name))
    keras.utils.set_random_seed(seed)
    model = build_model(model_config)
    if family == "transformer_xl":
        randomize(model, seed, "afai" if architecture == "supernet" else None)
    checkpoint = tf.train.Checkpoint(model=VariableList(model.variables))
    tf.train.CheckpointManager(checkpoint, os.path.join(model_dir, "best"), 1,
                               checkpoint_name="ckpt").save(checkpoint_number=1)
    return config


def make_word_package(root, data_dir):
    """(the loaded PackagedLM of a tiny Transformer-XL word package, its run, its path) in
    `root`: the run `make_family_run` trains (afaf, seed 3), packaged to root/lm.keras."""
    import par
    from serving.packaged import package_run
    from serving.runs import load_run

    make_family_run(root / "run", data_dir, "transformer_xl", "afaf", seed=3)
    run = load_run(root / "run")
    path = root / "lm.keras"
    package_run(run).save(path)
    return par.load(path), run, path
