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

The decoder is built from KerasHub's layers as `keras_hub.models.GPT2Backbone` builds GPT-2
(`TokenAndPositionEmbedding`, `TransformerDecoder` blocks in decoder-only mode with a causal
mask, a tied softmax); `--implementation=keras` builds the same blocks from Keras layers
(untied softmax) where keras-hub (a development requirement) is not installed. It trains
with a plain `tf.function` step (no XLA: Keras' `fit` does not use XLA on a CPU either),
AdamW with a linear warm-up and cosine decay, gradient clipping, dropout, on B parallel
streams of windows (as the Transformer-XL reads its B rows). `--models=transformer_xl,par`
trains the Transformer-XL and the derived PAR network (`--par_architecture`) with
`base_model.sh` and the recipe of docs/results/wt2_base_r3k.md, in
runs/baselines/<out_dir name>/<model>, copies their artefacts into `--out_dir/<model>`
(tools.collect_run) and scores their last checkpoint there (evaluate.py).

At the byte level, `--models=sha_rnn,lstm` trains the project's SHA-RNN and LSTM with
train.py (the presets `sha_rnn_<--recurrent_preset>` and `lstm_<...>` and their recipe, at
--d_model, --num_layers and a Boom width of --d_ffn) on a byte build, and scores them the
same way (evaluate.py: the build's rows read in segments with the recurrent state, and the
SHA-RNN's attention memory, carried across them), against the same decoder over the 256
bytes. sha_rnn and lstm need a byte build, transformer_xl and par a word-level one.
`--profile=<dir>` profiles the decoder's training step instead (op time by op type and by
component). Results: docs/results/baselines.md.

    python -m experiments.baselines --models=decoder,transformer_xl,par \
        --data_dir=data/wikitext2 --out_dir=docs/results/baselines/equal_tokens --max_steps=3000
    python -m experiments.baselines --models=sha_rnn,lstm --data_dir=data/wt2_bytes16 \
        --out_dir=docs/results/baselines/bytes --max_steps=2500
"""

import argparse
import collections
import json
import math
import pathlib
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
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


def _keras_hub():
    try:
        import keras_hub
    except ImportError:
        raise BaselineError("--implementation=keras_hub needs keras-hub (a development "
                            "requirement: pip install -r requirements-dev.txt), or use "
                            "--implementation=keras (the same blocks from Keras layers)") from None
    return keras_hub


def _gelu_tanh(x):
    return keras.activations.gelu(x, approximate=True)


def _keras_hub_decoder(ids, vocab_size, d_model, num_layers, num_heads, d_ffn, context,
                       dropout):
    """GPT-2's design from KerasHub's layers (as `keras_hub.models.GPT2Backbone` builds it):
    token + learned position embeddings, pre-LN `TransformerDecoder` blocks in decoder-only
    mode (causal mask, no cross-attention), tanh-approximate GELU, a final layer norm and the
    token embedding reused as the softmax (tied weights)."""
    keras_hub = _keras_hub()
    init = keras.initializers.RandomNormal(stddev=0.02)
    embedding = keras_hub.layers.TokenAndPositionEmbedding(
        vocab_size, context, d_model, tie_weights=True, embeddings_initializer=init,
        name="embedding")
    hidden = keras.layers.Dropout(dropout, name="embedding_dropout")(embedding(ids))
    for layer in range(num_layers):
        hidden = keras_hub.layers.TransformerDecoder(
            d_ffn, num_heads, dropout=dropout, activation=_gelu_tanh, layer_norm_epsilon=1e-5,
            kernel_initializer=init,
            normalize_first=True, name=f"block{layer}")(hidden, use_causal_mask=True)
    hidden = keras.layers.LayerNormalization(epsilon=1e-5, name="final_ln")(hidden)
    return embedding.token_embedding(hidden, reverse=True)


def _keras_decoder(ids, vocab_size, d_model, num_layers, num_heads, d_ffn, context, dropout):
    """The same pre-LN blocks from plain Keras layers (exact GELU, untied softmax)."""
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
    return keras.layers.Dense(vocab_size, name="softmax")(hidden)


IMPLEMENTATIONS = {"keras_hub": _keras_hub_decoder, "keras": _keras_decoder}


def build_decoder(vocab_size, d_model=128, num_layers=3, num_heads=4, d_ffn=512, context=128,
                  dropout=0.1, implementation="keras_hub"):
    """A plain causal decoder: token + learned position embeddings, pre-LN blocks, full softmax.

    Args:
        implementation: keras_hub (KerasHub's layers, GPT-2's design, tied softmax) or keras
            (the same blocks from Keras layers, untied softmax; no keras-hub needed).

    Returns a Keras model mapping int ids [B, T <= context] to logits [B, T, vocab_size].
    """
    if implementation not in IMPLEMENTATIONS:
        raise BaselineError(f"--implementation={implementation}: use keras_hub or keras")
    ids = keras.Input(shape=(None,), dtype="int32", name="ids")
    logits = IMPLEMENTATIONS[implementation](ids, vocab_size, d_model, num_layers, num_heads,
                                             d_ffn, context, dropout)
    return keras.Model(ids, logits, name=f"plain_decoder_{implementation}")


def training_windows(stream, context, batch_size, step):
    """Batch `step` (inputs, targets) [B, context]: row b reads the b-th of B parallel streams.

    The stream is cut into W windows of context + 1 ids that share their boundary id, and
    the W windows into B contiguous parts (as the Transformer-XL's batches cut the split into
    B rows): batch `step` holds window (step mod W // B) of each part, so an epoch of W // B
    steps reads each window of the parts once, in text order within a row.
    """
    windows = (len(stream) - 1) // context
    if windows < batch_size:
        raise BaselineError(f"the train split ({len(stream)} ids) holds {windows} windows of "
                            f"--context={context}, fewer than one batch of {batch_size}: lower "
                            "--context or --tokens_per_step")
    per_row = windows // batch_size
    rows = [b * per_row + step % per_row for b in range(batch_size)]
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


def token_nll_fn(model):
    """A compiled `(inputs, targets) [N, T] -> NLL [N, T]` (nats, float32) of the model
    without dropout: the log-softmax of its logits at each target."""

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)] * 2)
    def token_nll(inputs, targets):
        logits = tf.cast(model(inputs, training=False), tf.float32)
        return tf.nn.sparse_softmax_cross_entropy_with_logits(targets, logits)

    return token_nll


def sliding_nll(nll_fn, ids, context, stride, batch_size=32):
    """(total NLL in nats, scored targets) of a stream, each target scored once.

    `nll_fn(inputs [N, T], targets [N, T]) -> NLL [N, T]` (token_nll_fn of a model); windows
    of equal length go through it `batch_size` at a time; the sum is kept in float64.
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
        nll = np.asarray(nll_fn(batch[:, :-1], batch[:, 1:]), dtype="float64")
        for row, (_, first) in enumerate(group):
            total += float(nll[row, first:].sum())
            count += length - 1 - first
    return total, count


def evaluate_split(model, data_dir, split, context, stride):
    """The project's metrics of the decoder on a whole split of a build."""
    meta = data_utils.load_meta(data_dir)
    info = meta["splits"][split]
    stream = data_utils.read_stream(data_dir, split, meta)
    total, count = sliding_nll(token_nll_fn(model), stream, context, stride)
    return dict(lm_metrics(total, count, words=info["words"], num_bytes=info["bytes"]),
                tokens=count, context=context, stride=stride)


def _schedule(learning_rate, min_lr, warmup_steps, max_steps):
    """Linear warm-up to `learning_rate`, then cosine decay to `min_lr` at `max_steps`."""
    return keras.optimizers.schedules.CosineDecay(
        0.0, max(1, max_steps - warmup_steps), alpha=min_lr / learning_rate,
        warmup_target=learning_rate, warmup_steps=warmup_steps)


LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def decoder_loss(model, inputs, targets, training):
    """Mean token NLL (nats) of int [B, T] targets given [B, T] inputs: the training loss."""
    return LOSS(targets, model(inputs, training=training))


def decoder_step(args, meta):
    """(model, step_fn) of the decoder's training: `step_fn(inputs, targets)` [B, T] ids is
    one AdamW update (the --learning_rate schedule, --clip_norm), returning the loss."""
    keras.utils.set_random_seed(args.seed)
    model = build_decoder(meta["vocab_size"], args.d_model, args.num_layers, args.num_heads,
                          args.d_ffn, args.context, args.dropout, args.implementation)
    optimizer = keras.optimizers.AdamW(
        _schedule(args.learning_rate, args.min_lr, args.warmup_steps, args.max_steps),
        weight_decay=args.weight_decay, clipnorm=args.clip_norm)

    @tf.function
    def step_fn(inputs, targets):
        with tf.GradientTape() as tape:
            loss = decoder_loss(model, inputs, targets, training=True)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return model, step_fn


def train_decoder(args, meta, out_dir):
    """Trains the decoder for --max_steps; writes config.json and training_log.log."""
    batch_size = args.tokens_per_step // args.context
    model, step_fn = decoder_step(args, meta)
    stream = data_utils.read_stream(args.data_dir, "train", meta)
    config = dict(vars(args), batch_size=batch_size, vocab_size=meta["vocab_size"],
                  parameters=int(model.count_params()))
    (out_dir / "config.json").write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    started, interval = time.perf_counter(), 0.0
    with open(out_dir / "training_log.log", "w", encoding="utf-8") as log:
        for step in range(args.max_steps):
            loss = float(step_fn(*training_windows(stream, args.context, batch_size, step)))
            interval += loss
            if (step + 1) % args.log_interval == 0 or step + 1 == args.max_steps:
                now = time.perf_counter()
                done = (step + 1) % args.log_interval or args.log_interval
                mean = interval / done  # the interval's mean loss, as train.py logs it
                log.write(f"step={step + 1} loss={mean:.7f} ppl={math.exp(mean):.4f} tokens_per_"
                          f"sec={done * args.tokens_per_step / (now - started):.1f}\n")
                log.flush()
                started, interval = now, 0.0
    return model, config


def run_decoder(args, out_dir):
    """Trains and evaluates the decoder; writes metrics.json beside config and training log."""
    meta = data_utils.load_meta(args.data_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    model, config = train_decoder(args, meta, out_dir)
    trained = time.perf_counter()
    metrics = {split: evaluate_split(model, args.data_dir, split, args.context, args.stride)
               for split in ("valid", "test")}
    result = dict(model=f"plain decoder ({args.implementation})",
                  parameters=config["parameters"], steps=args.max_steps,
                  train_wall_seconds=trained - started,
                  eval_wall_seconds=time.perf_counter() - trained, **metrics)
    (out_dir / "metrics.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result


def evaluate_commands(model_dir, eval_dir):
    """evaluate.py command lines scoring a run's last checkpoint on the whole valid and test
    splits (its state carried across segments), written to eval_dir/<split>.json."""
    return [[sys.executable, "evaluate.py", f"--model_dir={model_dir}", "--checkpoint=latest",
             f"--split={split}", f"--output={eval_dir}/{split}.json"]
            for split in ("valid", "test")]


# Components of the decoder's step, by the first of these substrings in an op's node name
# (lower case; backward ops carry their forward scope under gradient_tape/; the tape's
# gradient sums, AddN, have no scope and count as other).
COMPONENTS = (("crossentropy", "loss (log-softmax, cross-entropy)"),
              ("embedding", "token embedding and tied softmax product"),
              ("layer_norm", "layer norms"), ("final_ln", "layer norms"),
              ("attention", "attention"), ("feedforward", "feed-forward"),
              ("adam_w", "optimizer and clipping"))


def decoder_component(name):
    """The COMPONENTS label of an op's node name, or "other"."""
    lower = name.lower()
    return next((label for key, label in COMPONENTS if key in lower), "other")


def profile_decoder(args, steps=10, warmup=3):
    """Per-step op time of the decoder's training step (the one train_decoder runs, on the
    build's first batches), by op type and by component, from tf.profiler's host trace
    (read by bench.profile_step's reader: each op event's self time)."""
    from bench.profile_step import STEP_MARKER, read_host_plane, step_of, trace_events

    meta = data_utils.load_meta(args.data_dir)
    model, step_fn = decoder_step(args, meta)
    stream = data_utils.read_stream(args.data_dir, "train", meta)
    batch_size = args.tokens_per_step // args.context
    batches = [[tf.constant(x) for x in training_windows(stream, args.context, batch_size, i)]
               for i in range(steps + warmup + 1)]
    for inputs, targets in batches[:warmup + 1]:  # trace, then warm up
        float(step_fn(inputs, targets))
    logdir = tempfile.mkdtemp(prefix="profile_decoder_")
    try:
        tf.profiler.experimental.start(logdir)
        try:
            for i, (inputs, targets) in enumerate(batches[warmup + 1:]):
                with tf.profiler.experimental.Trace(STEP_MARKER, step_num=i, _r=1):
                    float(step_fn(inputs, targets))
        finally:
            tf.profiler.experimental.stop()
        ops, markers, _ = trace_events(read_host_plane(logdir))
    finally:
        shutil.rmtree(logdir, ignore_errors=True)
    by_type, by_component, by_node = (collections.Counter() for _ in range(3))
    step = step_of(markers)
    for name, op_type, start, _, self_ps in ops:
        if step(start) is not None:
            by_type[op_type] += self_ps
            by_component[decoder_component(name)] += self_ps
            by_node[name] += self_ps
    ms = 1e-9 / len(markers)  # ps over the steps -> ms per step
    total = sum(by_type.values())

    def shares(counter, top=None):
        return [dict(name=k, ms_per_step=v * ms, fraction=v / total)
                for k, v in counter.most_common(top)]

    return dict(steps=len(markers), warmup=warmup, parameters=int(model.count_params()),
                vocab_size=meta["vocab_size"], batch_size=batch_size, context=args.context,
                wall_ms_per_step=[(e - s) * 1e-9 for s, e in markers], op_ms_per_step=total * ms,
                op_types=shares(by_type), components=shares(by_component),
                top_nodes=shares(by_node, 25))


def profile_tables(profile, top=12):
    """Markdown: the op-time fractions by component and by op type (largest `top`)."""
    from bench.common import markdown_table

    def rows(entries):
        return [[e["name"], f"{100 * e['fraction']:.1f}%"] for e in entries]

    return "\n\n".join([
        markdown_table(["component", "% of op time"], rows(profile["components"]), "lr"),
        markdown_table([f"op type (largest {top})", "% of op time"],
                       rows(profile["op_types"][:top]), "lr")])


def write_profile(args, out_dir):
    """Profiles --profile_steps decoder training steps; writes out_dir/profile.json (figures
    per step, the command, the machine and its load) and out_dir/profile.md (the tables)."""
    from bench import common

    load_start = common.loadavg()
    profile = profile_decoder(args, args.profile_steps)
    command = "python -m experiments.baselines " + shlex.join(sys.argv[1:])
    result = dict(command=command, machine=common.machine_info(load_start, common.loadavg()),
                  **profile)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "profile.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    tables = profile_tables(profile)
    (out_dir / "profile.md").write_text(f"`{command}`\n\n{tables}\n", encoding="utf-8")
    print(tables)
    return result


def transformer_xl_commands(args, model_dir, eval_dir, architecture="transformer_xl"):
    """base_model.sh (the wt2_base_r3k recipe) and evaluate.py command lines of a
    Transformer-XL-family run: the same build and steps, the last checkpoint scored."""
    train = ["./base_model.sh", f"--model_dir={model_dir}", f"--data_dir={args.data_dir}",
             f"--max_steps={args.max_steps}", f"--warmup_steps={args.warmup_steps}",
             "--eval_interval=1000", "--checkpoint_interval=1000",
             f"--architecture={architecture}", "--arch_warmup_steps=0", "--sample_tokens=0",
             f"--seed={args.seed}"]
    return [train, *evaluate_commands(model_dir, eval_dir)]


def recurrent_commands(args, model_dir, eval_dir, model):
    """train.py and evaluate.py command lines of a byte-level SHA-RNN or LSTM run.

    `model` (sha_rnn or lstm) picks the preset `<model>_<--recurrent_preset>` (the SHA-RNN
    family's recipe: the reference's LAMB, lr 2e-3, warm-up of at most 800 steps and half
    the run, then constant, clip 0.25; docs/results/sha_rnn_fidelity.md) at the width
    --d_model, depth --num_layers and Boom width --d_ffn; batch and segment length are the
    build's. In-training evaluations are a quick look (--eval_max_records); evaluate.py
    scores the last checkpoint on the whole splits. TensorBoard logs go beside the run
    (<model_dir's parent>/logs/<model>).
    """
    logdir = pathlib.Path(model_dir).parent / "logs" / pathlib.Path(model_dir).name
    train = [sys.executable, "train.py", "--model_family=sha_rnn",
             f"--preset={model}_{args.recurrent_preset}", f"--model_dir={model_dir}",
             f"--logdir={logdir}",
             f"--data_dir={args.data_dir}", f"--d_model={args.d_model}",
             f"--num_layers={args.num_layers}", f"--boom_dim={args.d_ffn}",
             f"--max_steps={args.max_steps}", "--eval_interval=0",
             f"--eval_max_records={args.recurrent_eval_records}", "--checkpoint_interval=0",
             f"--log_interval={args.log_interval}", "--sample_tokens=0", f"--seed={args.seed}"]
    return [train, *evaluate_commands(model_dir, eval_dir)]


def run_transformer_xl(args, name, architecture, out_dir):
    """Trains a Transformer-XL-family run (run_project_model)."""
    run_project_model(args, name, out_dir, lambda model_dir, eval_dir: transformer_xl_commands(
        args, model_dir, eval_dir, architecture))


def run_recurrent(args, name, out_dir):
    """Trains a byte-level SHA-RNN or LSTM run (run_project_model)."""
    run_project_model(args, name, out_dir, lambda model_dir, eval_dir: recurrent_commands(
        args, model_dir, eval_dir, name))


def run_project_model(args, name, out_dir, commands):
    """Trains (in <--runs_dir>/<out_dir name>/<name>), collects its artefacts into
    out_dir/<name> (tools.collect_run), then evaluates the last checkpoint there.

    `commands(model_dir, eval_dir)`: the training and evaluation command lines.
    """
    model_dir = pathlib.Path(args.runs_dir, out_dir.name, name)  # relative: from ROOT
    (ROOT / model_dir.parent).mkdir(parents=True, exist_ok=True)
    console = ROOT / model_dir.parent / f"{name}.log"
    train, *evaluate = commands(model_dir, out_dir / name)
    seconds = {}
    with open(console, "a", encoding="utf-8") as log:
        print("+ " + shlex.join(train), flush=True)
        started = time.perf_counter()
        subprocess.run(train, cwd=ROOT, check=True, stdout=log, stderr=subprocess.STDOUT)
        seconds["train_wall_seconds"] = time.perf_counter() - started
    subprocess.run([sys.executable, "-m", "tools.collect_run", str(ROOT / model_dir),
                    f"--console_log={console}", f"--out_dir={out_dir}"], cwd=ROOT, check=True)
    started = time.perf_counter()
    for command in evaluate:
        print("+ " + shlex.join(command), flush=True)
        subprocess.run(command, cwd=ROOT, check=True)
    seconds["eval_wall_seconds"] = time.perf_counter() - started
    commands = "\n".join(shlex.join(c).replace(sys.executable, "python3")
                         for c in (train, *evaluate)) + "\n"
    (out_dir / name / "commands.txt").write_text(commands, encoding="utf-8")
    (out_dir / name / "timings.json").write_text(json.dumps(seconds, indent=1) + "\n",
                                                 encoding="utf-8")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data_dir", default=str(ROOT / "data" / "wikitext2"))
    p.add_argument("--out_dir", default=str(ROOT / "runs" / "baselines"))
    p.add_argument("--models", default="decoder",
                   help="comma list of " + ", ".join(MODELS) + " (par: --par_architecture)")
    p.add_argument("--par_architecture", default="aaafaf",
                   help="the derived PAR network's a/f string (train.py --architecture)")
    p.add_argument("--implementation", default="keras_hub", choices=tuple(IMPLEMENTATIONS))
    p.add_argument("--recurrent_preset", default="small", choices=("small", "tiny"),
                   help="sha_rnn and lstm: the presets sha_rnn_<this> and lstm_<this>, at "
                   "--d_model, --num_layers and --d_ffn (their Boom width)")
    p.add_argument("--recurrent_eval_records", type=int, default=100,
                   help="sha_rnn and lstm: valid records of train.py's end-of-run look (the "
                   "reported figures are evaluate.py's, on the whole splits)")
    p.add_argument("--runs_dir", default=str(pathlib.Path("runs", "baselines")),
                   help="where the project's models train (<this>/<--out_dir name>/<model>; "
                   "relative: from the project root); their artefacts are copied to --out_dir")
    p.add_argument("--max_steps", type=int, default=3000)
    p.add_argument("--tokens_per_step", type=int, default=1024)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--stride", type=int, default=64, help="evaluation window step")
    p.add_argument("--d_model", type=int, default=128, help="the decoder's, sha_rnn's and "
                   "lstm's width")
    p.add_argument("--num_layers", type=int, default=3, help="decoder blocks; sha_rnn and "
                   "lstm blocks")
    p.add_argument("--num_heads", type=int, default=4)
    p.add_argument("--d_ffn", type=int, default=512, help="the decoder's inner width; the "
                   "Boom width of sha_rnn and lstm")
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--learning_rate", type=float, default=1e-3)
    p.add_argument("--min_lr", type=float, default=1e-5, help="end of the cosine decay")
    p.add_argument("--warmup_steps", type=int, default=300)
    p.add_argument("--weight_decay", type=float, default=0.01)
    p.add_argument("--clip_norm", type=float, default=0.25)
    p.add_argument("--log_interval", type=int, default=100)
    p.add_argument("--seed", type=int, default=1111)
    p.add_argument("--profile", default=None, help="instead of training: profile "
                   "--profile_steps training steps of the decoder with tf.profiler; write "
                   "<this dir>/profile.json and profile.md (op time by op type and component)")
    p.add_argument("--profile_steps", type=int, default=10)
    p.add_argument("--summarize", default=None, help="instead of training: write "
                   "<this dir>/summary.json from the runs under <this dir>/*/<model>")
    args = p.parse_args(argv)
    if args.tokens_per_step % args.context:
        p.error(f"--tokens_per_step={args.tokens_per_step} must be a multiple of "
                f"--context={args.context}")
    unknown = set(args.models.split(",")) - set(MODELS)
    if unknown:
        p.error(f"--models: unknown {sorted(unknown)}; use a comma list of {', '.join(MODELS)}")
    return args


def run_summary(run_dir):
    """One model's row: parameters, steps, valid/test metrics, training speed and time.

    `run_dir`: a decoder's (metrics.json) or a collected Transformer-XL-family run's
    (config.json, valid.json, test.json). tokens_per_sec is the median of the logged
    intervals after the first (tracing); train_seconds the time in training steps.
    """
    from experiments.compare_families import training_seconds
    from training.report.log import read_training_log

    rows = read_training_log(run_dir / "training_log.log")
    speeds = [row["tokens_per_sec"] for row in rows[1:]] or [rows[0]["tokens_per_sec"]]
    keys = ("perplexity", "word_perplexity", "bits_per_byte", "nll", "tokens")
    metrics = run_dir / "metrics.json"
    if (run_dir / "valid.json").exists():
        from training.setup.config import TrainConfig

        config = TrainConfig.load(str(run_dir))
        tokens_per_step = config.batch_size * config.seq_len
        splits = {split: json.loads((run_dir / f"{split}.json").read_text(encoding="utf-8"))
                  for split in ("valid", "test")}
        row = dict(model=run_dir.name, **_project_model_row(config, metrics),
                   steps=splits["valid"]["step"])
    else:
        splits = json.loads(metrics.read_text(encoding="utf-8"))
        tokens_per_step = json.loads((run_dir / "config.json").read_text())["tokens_per_step"]
        row = dict(model=run_dir.name, architecture="decoder",
                   parameters=splits["parameters"], steps=splits["steps"])
    for split in ("valid", "test"):
        row.update({f"{split}_{k}": splits[split][k] for k in keys})
    return dict(row, tokens_per_sec=statistics.median(speeds),
                train_seconds=training_seconds(rows, tokens_per_step))


def _project_model_row(config, metrics):
    """architecture and parameters of a collected project run: a Transformer-XL's from its
    metrics.json and `flops.param_count` (adaptive input and softmax); an SHA-RNN's or
    LSTM's (sha_rnn or lstm: attention layers or none) from its built model."""
    if config.model_family == "transformer_xl":
        from model.transformer_xl import flops

        return dict(architecture=json.loads(metrics.read_text(encoding="utf-8"))["architecture"],
                    parameters=flops.param_count(config.model))
    from model.families import build_model

    architecture = "sha_rnn" if config.model.resolved_attention_layers else "lstm"
    return dict(architecture=architecture,
                parameters=int(build_model(config.model).count_params()))


def summarize(root):
    """Writes root/summary.json: run_summary of each finished run in root/<comparison>/<model>."""
    runs = sorted(p.parent for p in root.glob("*/*/metrics.json"))  # finished runs only
    table = {f"{p.parent.name}/{p.name}": run_summary(p) for p in runs}
    (root / "summary.json").write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    return table


MODELS = ("decoder", "transformer_xl", "par", "sha_rnn", "lstm")
BYTE_MODELS = ("sha_rnn", "lstm")  # the byte-level comparison: these against the decoder
WORD_MODELS = ("transformer_xl", "par")  # base_model.sh: the wt2_base recipe (12k vocabulary)


def check_build(models, data_dir):
    """BaselineError unless the build suits every model: sha_rnn and lstm want a byte build,
    transformer_xl and par a word-level one (the decoder takes either)."""
    try:
        kind = data_utils.load_meta(data_dir)["tokenizer"]["kind"]
    except (OSError, ValueError, KeyError) as error:
        raise BaselineError(f"--data_dir={data_dir}: no readable build ({error}); build it "
                            "with build_data.py") from None
    wrong = [m for m in models if (m in BYTE_MODELS) != (kind == "byte") and m != "decoder"]
    if wrong:
        wanted = "a byte build (e.g. data/wt2_bytes16)" if wrong[0] in BYTE_MODELS else \
            "a word-level build (e.g. data/wikitext2)"
        raise BaselineError(f"--models={wrong[0]} needs {wanted}, but --data_dir={data_dir} "
                            f"has a {kind} tokenizer: change --data_dir or --models (byte "
                            f"level: {', '.join(BYTE_MODELS)}, decoder; word level: "
                            f"{', '.join(WORD_MODELS)}, decoder)")


def main(argv=None):
    args = parse_args(argv)
    if args.summarize:
        print(json.dumps(summarize(pathlib.Path(args.summarize)), indent=1))
        return 0
    if args.profile:
        write_profile(args, pathlib.Path(args.profile))
        return 0
    out_dir = pathlib.Path(args.out_dir)
    models = args.models.split(",")
    try:
        check_build(models, args.data_dir)
        if "decoder" in models:
            result = run_decoder(args, out_dir / "decoder")
            print(json.dumps({k: result[k] for k in ("parameters", "steps")}))
        if "transformer_xl" in models:
            run_transformer_xl(args, "transformer_xl", "transformer_xl", out_dir)
        if "par" in models:
            run_transformer_xl(args, "par", args.par_architecture, out_dir)
        for name in BYTE_MODELS:
            if name in models:
                run_recurrent(args, name, out_dir)
    except BaselineError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as error:
        print(f"error: {shlex.join(map(str, error.cmd))} exited with status "
              f"{error.returncode} (a training's output is in runs/baselines/*/<model>.log)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
