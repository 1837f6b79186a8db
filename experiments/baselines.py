r"""The model a Keras user would pick instead: a plain causal decoder beside the project's.

A GPT-style decoder (learned positions, pre-layer-norm blocks of causal multi-head
attention and a GELU feed-forward layer, full softmax) of the size of `wt2_base`'s
Transformer-XL (3 layers, d_model 128, 4 heads, inner 512), trained through the project's
data pipeline (`data_utils.read_stream` of the same build) and scored by the project's
metrics (`runstore.metrics.lm_metrics`: perplexity per token, word perplexity and bits per
byte from the split's word and byte counts in meta.json), on the whole valid and test
splits. Its context: windows of `--context` tokens; evaluation slides them by `--stride`,
and each target is scored once, with at least `context - stride` tokens before it (all
before it in the first window). The Transformer-XL side is `train.py` and `evaluate.py`
(its context: segments of the build's seq_len with a memory of `eval_mem_len`), run by the
commands `transformer_xl_commands` builds.

Skeleton status: the decoder trains, evaluates and writes its artefacts (config.json,
training_log.log, metrics.json) into `--out_dir/decoder`; the Transformer-XL commands are
built and, with `--models=decoder,transformer_xl`, run one after the other. Not yet
here: KerasHub's `TransformerDecoder` as the implementation (`--implementation=keras_hub`
refuses until `keras-hub` is a pinned development requirement), equal-wall-time runs
interleaved on the same cores, the PAR network and the byte-level SHA-RNN/LSTM pairings.

    python -m experiments.baselines --data_dir=data/wikitext2 --out_dir=docs/results/baselines \
        --max_steps=3000
"""

import argparse
import json
import math
import pathlib
import shlex
import subprocess
import sys
import time

import keras
import numpy as np
import tensorflow as tf

import data_utils
from runstore.metrics import lm_metrics

ROOT = pathlib.Path(__file__).resolve().parents[1]


class BaselineError(ValueError):
    """A setting the user can fix (named in the message)."""


class PositionEmbedding(keras.layers.Layer):
    """Adds a learned embedding of positions 0..T-1 (T <= max_length) to [B, T, D] inputs."""

    def __init__(self, max_length, **kwargs):
        super().__init__(**kwargs)
        self.max_length = max_length

    def build(self, input_shape):
        self.positions = self.add_weight(shape=(self.max_length, input_shape[-1]),
                                         initializer="glorot_uniform", name="positions")

    def call(self, inputs):
        length = keras.ops.shape(inputs)[1]
        return inputs + keras.ops.expand_dims(self.positions[:length], 0)

    def get_config(self):
        return dict(super().get_config(), max_length=self.max_length)


def build_decoder(vocab_size, d_model=128, num_layers=3, num_heads=4, d_ffn=512, context=128,
                  dropout=0.1, implementation="keras"):
    """A plain causal decoder: token + learned position embeddings, pre-LN blocks, full softmax.

    Returns a Keras model mapping int ids [B, T <= context] to logits [B, T, vocab_size].
    """
    if implementation == "keras_hub":
        raise BaselineError("--implementation=keras_hub: keras-hub is not a development "
                            "requirement yet; use --implementation=keras (the same design)")
    if implementation != "keras":
        raise BaselineError(f"--implementation={implementation}: use keras or keras_hub")
    ids = keras.Input(shape=(None,), dtype="int32", name="ids")
    tokens = keras.layers.Embedding(vocab_size, d_model, name="token_embedding")(ids)
    hidden = PositionEmbedding(context, name="position_embedding")(tokens)
    hidden = keras.layers.Dropout(dropout)(hidden)
    for layer in range(num_layers):
        normed = keras.layers.LayerNormalization(epsilon=1e-5, name=f"block{layer}_ln1")(hidden)
        attention = keras.layers.MultiHeadAttention(
            num_heads, d_model // num_heads, dropout=dropout, name=f"block{layer}_attention")(
            normed, normed, use_causal_mask=True)
        hidden = hidden + keras.layers.Dropout(dropout)(attention)
        normed = keras.layers.LayerNormalization(epsilon=1e-5, name=f"block{layer}_ln2")(hidden)
        inner = keras.layers.Dense(d_ffn, activation="gelu", name=f"block{layer}_ffn_in")(normed)
        outer = keras.layers.Dense(d_model, name=f"block{layer}_ffn_out")(inner)
        hidden = hidden + keras.layers.Dropout(dropout)(outer)
    hidden = keras.layers.LayerNormalization(epsilon=1e-5, name="final_ln")(hidden)
    logits = keras.layers.Dense(vocab_size, name="softmax")(hidden)
    return keras.Model(ids, logits, name="plain_decoder")


def training_windows(stream, context, batch_size, step):
    """Batch `step` of consecutive windows (inputs, targets) [B, context] in stream order.

    The stream is cut into windows of context + 1 ids that share their boundary id; batch
    `step` holds windows step*B .. step*B + B - 1, wrapping around the stream (an epoch).
    """
    windows = (len(stream) - 1) // context
    if windows < batch_size:
        raise BaselineError(f"the train split ({len(stream)} ids) holds {windows} windows of "
                            f"--context={context}, fewer than one batch of {batch_size}: lower "
                            "--context or --tokens_per_step")
    rows = [(step * batch_size + b) % windows for b in range(batch_size)]
    batch = np.stack([stream[r * context:r * context + context + 1] for r in rows])
    return batch[:, :-1].astype("int32"), batch[:, 1:].astype("int32")


def scoring_windows(length, context, stride):
    """(start, first scored target offset) of the evaluation windows of a stream of `length`.

    Window k covers inputs [s, s + context) and targets [s + 1, s + context]; it scores its
    targets from the one after the previous window's last, so each target is scored once.
    """
    if not 1 <= stride <= context:
        raise BaselineError(f"--stride={stride} must be in [1, --context={context}]")
    windows, last = [], 0  # last: the last target index scored so far
    start = 0
    while last < length - 1:
        end = min(start + context, length - 1)  # last target index of this window
        windows.append((start, last + 1 - (start + 1)))
        last = end
        start += stride
    return windows


def _picked_log_probs(logits, targets):
    """log p(target) per position of logits [N, T, V] (float64, stable log-softmax)."""
    logits = np.asarray(logits, dtype="float64")
    logits = logits - logits.max(axis=-1, keepdims=True)
    log_norm = np.log(np.exp(logits).sum(axis=-1))
    rows, cols = np.indices(targets.shape)
    return logits[rows, cols, targets] - log_norm


def sliding_nll(logits_fn, ids, context, stride, batch_size=64):
    """(total NLL in nats, scored targets) of a stream, each target scored once.

    `logits_fn(inputs [N, T]) -> logits [N, T, V]` (no dropout); windows of equal length
    go through it `batch_size` at a time.
    """
    ids = np.asarray(ids, dtype="int32")
    total, count = 0.0, 0
    windows = scoring_windows(len(ids), context, stride)
    full = [w for w in windows if w[0] + context + 1 <= len(ids)]
    short = [w for w in windows if w[0] + context + 1 > len(ids)]
    groups = [full[i:i + batch_size] for i in range(0, len(full), batch_size)]
    groups += [[w] for w in short]  # at most a few windows at the stream's end
    for group in groups:
        length = min(context + 1, len(ids) - group[0][0])
        batch = np.stack([ids[start:start + length] for start, _ in group])
        picked = _picked_log_probs(logits_fn(batch[:, :-1]), batch[:, 1:])
        for row, (_, first) in enumerate(group):
            total -= float(picked[row, first:].sum())
            count += length - 1 - first
    return total, count


def evaluate_split(model, data_dir, split, context, stride):
    """The project's metrics of the decoder on a whole split of a build."""
    meta = data_utils.load_meta(data_dir)
    info = meta["splits"][split]
    stream = data_utils.read_stream(data_dir, split, meta)
    total, count = sliding_nll(lambda x: model(x, training=False), stream, context, stride)
    return dict(lm_metrics(total, count, words=info["words"], num_bytes=info["bytes"]),
                tokens=count, context=context, stride=stride)


def _schedule(learning_rate, warmup_steps, max_steps):
    decay = keras.optimizers.schedules.CosineDecay(
        0.0, max(1, max_steps - warmup_steps), warmup_target=learning_rate,
        warmup_steps=warmup_steps)
    return decay


def train_decoder(args, meta, out_dir):
    """Trains the decoder for --max_steps; writes config.json and training_log.log."""
    keras.utils.set_random_seed(args.seed)
    batch_size = args.tokens_per_step // args.context
    model = build_decoder(meta["vocab_size"], args.d_model, args.num_layers, args.num_heads,
                          args.d_ffn, args.context, args.dropout, args.implementation)
    optimizer = keras.optimizers.AdamW(_schedule(args.learning_rate, args.warmup_steps,
                                                 args.max_steps), weight_decay=args.weight_decay,
                                       clipnorm=args.clip_norm)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step_fn(inputs, targets):
        with tf.GradientTape() as tape:
            loss = loss_fn(targets, model(inputs, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    stream = data_utils.read_stream(args.data_dir, "train", meta)
    config = dict(vars(args), batch_size=batch_size, vocab_size=meta["vocab_size"],
                  parameters=int(model.count_params()))
    (out_dir / "config.json").write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    lines, started = [], time.perf_counter()
    for step in range(args.max_steps):
        loss = float(step_fn(*training_windows(stream, args.context, batch_size, step)))
        if (step + 1) % args.log_interval == 0 or step + 1 == args.max_steps:
            now = time.perf_counter()
            done = (step + 1) % args.log_interval or args.log_interval
            lines.append(f"step={step + 1} loss={loss:.7f} ppl={math.exp(loss):.4f} "
                         f"tokens_per_sec={done * args.tokens_per_step / (now - started):.1f}")
            started = now
    (out_dir / "training_log.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return model, config


def transformer_xl_commands(args, model_dir):
    """train.py and evaluate.py command lines of the Transformer-XL side (same build, steps)."""
    train = [sys.executable, "train.py", "--preset=wt2_base", "--architecture=transformer_xl",
             "--arch_warmup_steps=0", f"--data_dir={args.data_dir}", f"--model_dir={model_dir}",
             f"--max_steps={args.max_steps}", "--sample_tokens=0", f"--seed={args.seed}"]
    evaluate = [[sys.executable, "evaluate.py", f"--model_dir={model_dir}", f"--split={split}",
                 f"--output={model_dir}/{split}.json"] for split in ("valid", "test")]
    return [train, *evaluate]


def run_decoder(args, out_dir):
    meta = data_utils.load_meta(args.data_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model, config = train_decoder(args, meta, out_dir)
    metrics = {split: evaluate_split(model, args.data_dir, split, args.context, args.stride)
               for split in ("valid", "test")}
    result = dict(model="plain decoder (Keras layers)", parameters=config["parameters"],
                  steps=args.max_steps, **metrics)
    (out_dir / "metrics.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data_dir", default=str(ROOT / "data" / "wikitext2"))
    p.add_argument("--out_dir", default=str(ROOT / "runs" / "baselines"))
    p.add_argument("--models", default="decoder", help="comma list of decoder, transformer_xl")
    p.add_argument("--implementation", default="keras", choices=("keras", "keras_hub"))
    p.add_argument("--max_steps", type=int, default=3000)
    p.add_argument("--tokens_per_step", type=int, default=1024)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--stride", type=int, default=64, help="evaluation window step")
    p.add_argument("--d_model", type=int, default=128)
    p.add_argument("--num_layers", type=int, default=3)
    p.add_argument("--num_heads", type=int, default=4)
    p.add_argument("--d_ffn", type=int, default=512)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--learning_rate", type=float, default=1e-3)
    p.add_argument("--warmup_steps", type=int, default=300)
    p.add_argument("--weight_decay", type=float, default=0.01)
    p.add_argument("--clip_norm", type=float, default=0.25)
    p.add_argument("--log_interval", type=int, default=100)
    p.add_argument("--seed", type=int, default=1111)
    args = p.parse_args(argv)
    if args.tokens_per_step % args.context:
        p.error(f"--tokens_per_step={args.tokens_per_step} must be a multiple of "
                f"--context={args.context}")
    unknown = set(args.models.split(",")) - {"decoder", "transformer_xl"}
    if unknown:
        p.error(f"--models: unknown {sorted(unknown)}; use decoder and/or transformer_xl")
    return args


def main(argv=None):
    args = parse_args(argv)
    out_dir = pathlib.Path(args.out_dir)
    try:
        if "decoder" in args.models.split(","):
            result = run_decoder(args, out_dir / "decoder")
            print(json.dumps({k: result[k] for k in ("parameters", "steps")}))
        if "transformer_xl" in args.models.split(","):
            for command in transformer_xl_commands(args, out_dir / "transformer_xl"):
                print("+ " + shlex.join(command), flush=True)
                subprocess.run(command, cwd=ROOT, check=True)
    except BaselineError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
