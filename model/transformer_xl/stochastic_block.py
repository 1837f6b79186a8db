"""PAR stochastic block: a Gumbel-softmax choice of attention, dense or identity.

Mandava, Migacz, Fit-Florea 2020, "Pay Attention when Required"
(arXiv 2009.04534); Gumbel-softmax from Jang et al. 2017 (arXiv 1611.01144)
and the straight-through search of FBNet (Wu et al. 2019, arXiv 1812.03443).

Size glossary:
    B: batch size.
    T: segment length.
    M: memory length.
    D: model width (d_model).
    C: number of candidates (3: attention, dense, identity).

The block owns architecture logits `alpha` [C] and, while training, mixes its
candidates `f_k` with `w = softmax((alpha + g) / tau)`, `g = -log(-log U)`:
    soft: y = sum_k w_k f_k(x)                      (all candidates computed)
    hard: k = argmax(w); the value is f_k(x) exactly and only f_k's
          weights are trained. The architecture gradient (`hard_gradient`):
      "all":    y = sum_j (onehot_j + w_j - stop_gradient(w_j)) f_j(x), the
                straight-through Gumbel-softmax estimator (Jang et al. 2017):
                dL/dw_j = <dL/dy, f_j(x)> for every candidate, so alpha learns
                which candidate would lower the loss. f_k runs forward and
                backward on every row; the others run forward only, under
                stop_gradient, on a random `hard_rows` fraction of the rows
                (their terms scaled: an unbiased estimate; 0.25 by default).
      "chosen": y = f_k(x) * (1 + w_k - stop_gradient(w_k)), only f_k
                computed (a step costs one candidate). dL/dw_k = <dL/dy,
                f_k(x)> only says whether scaling the chosen output helps,
                not which candidate is better; on WikiText-2 every such
                search drifted to identity (README, "A cost-aware search").
At evaluation there is no noise: "argmax" computes only argmax(alpha)'s
candidate, "expected" mixes all of them with softmax(alpha).

The noise U is a stateless function of (seed, block_index, step), so a resumed
run draws the same architectures, and all replicas of a distributed step draw
the same one.
"""

import functools
import math

import keras
import tensorflow as tf

from model import xla
from model.layers.adaptive_span import AdaptiveSpanAttention
from model.layers.dropout import draw_seeds, fixed_seeds
from model.layers.feed_forward import PositionwiseFeedForward
from model.layers.relative_attention import RelativeMultiHeadAttention

CANDIDATES = ("attention", "dense", "identity")
_SEARCH_MODES = ("soft", "hard")
_HARD_GRADIENTS = ("all", "chosen")
_EVAL_MODES = ("argmax", "expected")
_ATTENTIONS = ("relative", "adaptive_span")
# Keeps U inside (0, 1) so that -log(-log U) stays finite in float32.
_UNIFORM_EPS = 1e-7


def gumbel_noise(seed, block_index, step):
    """Reproducible Gumbel(0, 1) noise for one block and one step.

    Args:
        seed: int, the run's seed.
        block_index: int, position of the block in the network.
        step: scalar int tensor or int, the search step.

    Returns:
        float32 [C] noise `-log(-log U)`, U uniform in [eps, 1 - eps].
    """
    base = tf.constant([seed, block_index], tf.int64)
    key = tf.random.experimental.stateless_fold_in(
        base, tf.cast(step, tf.int64), alg=xla.RNG_ALG)  # [2]
    # The same noise with and without XLA (model/xla.py).
    uniform = xla.uniform_from_bits([len(CANDIDATES)], key)
    uniform = tf.clip_by_value(uniform, _UNIFORM_EPS, 1.0 - _UNIFORM_EPS)
    return -tf.math.log(-tf.math.log(uniform))


def _mix(weights, branches, dtype):
    """sum_k weights[k] * branches[k](): every candidate computed. [C], callables -> [B, T, D]."""
    weights = tf.cast(weights, dtype)  # [C]
    return tf.add_n([weights[k] * branch() for k, branch in enumerate(branches)])


def make_attention(kind, name, dtype, **kwargs):
    """Builds an attention sub-layer; shared with the fixed-architecture model.

    Args:
        kind: "relative" or "adaptive_span".
        name: layer name.
        dtype: dtype policy.
        **kwargs: RelativeMultiHeadAttention arguments plus span_max,
            span_ramp, span_init, span_loss_coef (dropped for "relative").

    Returns:
        A RelativeMultiHeadAttention or AdaptiveSpanAttention layer.
    """
    if kind == "adaptive_span":
        return AdaptiveSpanAttention(dtype=dtype, name=name, **kwargs)
    kwargs.pop("add_span_loss", None)
    if kind != "relative":
        raise ValueError(f"attention must be one of {_ATTENTIONS}, got {kind!r}")
    for key in ("span_max", "span_ramp", "span_init", "span_loss_coef"):
        kwargs.pop(key, None)
    return RelativeMultiHeadAttention(dtype=dtype, name=name, **kwargs)


@keras.saving.register_keras_serializable(package="par")
class StochasticBlock(keras.layers.Layer):
    """A supernet block choosing between attention, dense and identity.

    Args:
        d_model: int, model width D.
        num_heads: int, attention heads N.
        d_head: int, head size H.
        d_ffn: int, inner width F of the dense candidate.
        dropout: float, dropout of both sub-layers.
        attn_dropout: float, dropout on attention weights.
        clamp_len: int, relative distance clamp (<= 0: none).
        pre_norm: bool, pre-norm sub-layers.
        untie_rel_bias: bool, the attention candidate owns its relative biases
            u, v (True) or takes the model's shared pair in `call` (False).
        same_length: bool, the attention candidate's queries all see M + 1
            keys (see `RelativeMultiHeadAttention`).
        attention: "relative" or "adaptive_span".
        span_max: int, adaptive-span maximum span S.
        span_ramp: int, adaptive-span ramp R.
        span_init: float, initial span fraction.
        span_loss_coef: float, span loss coefficient lambda.
        search_mode: "soft" or "hard" (see the module docstring).
        hard_gradient: "all" or "chosen", hard search's architecture
            gradient (see the module docstring).
        hard_rows: float in (0, 1], with "all": the fraction of rows on
            which the unchosen candidates run (see `_hard_all`).
        eval_mode: "argmax" or "expected".
        seed: int, seed of the Gumbel noise.
        block_index: int, position of this block (decorrelates the noise).
        **kwargs: base `keras.layers.Layer` arguments (name, dtype, ...).

    Attributes:
        attention_layer: the attention candidate (its span variables give the
            span loss and spans whichever candidate is sampled).
        dense_layer: the feed-forward candidate.
        arch_logits: float32 [C] trainable logits alpha (after build).
    """

    def __init__(
        self,
        d_model,
        num_heads,
        d_head,
        d_ffn,
        dropout=0.0,
        attn_dropout=0.0,
        clamp_len=-1,
        pre_norm=False,
        untie_rel_bias=True,
        same_length=False,
        attention="relative",
        span_max=1024,
        span_ramp=32,
        span_init=0.0,
        span_loss_coef=2e-6,
        search_mode="soft",
        hard_gradient="all",
        hard_rows=0.25,
        eval_mode="argmax",
        seed=0,
        block_index=0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if search_mode not in _SEARCH_MODES:
            raise ValueError(f"search_mode must be one of {_SEARCH_MODES}, got {search_mode!r}")
        if hard_gradient not in _HARD_GRADIENTS:
            raise ValueError(
                f"hard_gradient must be one of {_HARD_GRADIENTS}, got {hard_gradient!r}")
        if not 0.0 < float(hard_rows) <= 1.0:
            raise ValueError(f"hard_rows must be in (0, 1], got {hard_rows}")
        if eval_mode not in _EVAL_MODES:
            raise ValueError(f"eval_mode must be one of {_EVAL_MODES}, got {eval_mode!r}")
        self.d_model = int(d_model)
        self.num_heads = int(num_heads)
        self.d_head = int(d_head)
        self.d_ffn = int(d_ffn)
        self.dropout = float(dropout)
        self.attn_dropout = float(attn_dropout)
        self.clamp_len = int(clamp_len)
        self.pre_norm = bool(pre_norm)
        self.untie_rel_bias = bool(untie_rel_bias)
        self.same_length = bool(same_length)
        self.attention = str(attention)
        self.span_max = int(span_max)
        self.span_ramp = int(span_ramp)
        self.span_init = float(span_init)
        self.span_loss_coef = float(span_loss_coef)
        self.search_mode = str(search_mode)
        self.hard_gradient = str(hard_gradient)
        self.hard_rows = float(hard_rows)
        self.eval_mode = str(eval_mode)
        self.seed = int(seed)
        self.block_index = int(block_index)

        self.attention_layer = make_attention(
            self.attention,
            name="attention",
            dtype=self.dtype_policy,
            d_model=self.d_model,
            num_heads=self.num_heads,
            d_head=self.d_head,
            dropout=self.dropout,
            attn_dropout=self.attn_dropout,
            clamp_len=self.clamp_len,
            pre_norm=self.pre_norm,
            untie_rel_bias=self.untie_rel_bias,
            same_length=self.same_length,
            span_max=self.span_max,
            span_ramp=self.span_ramp,
            span_init=self.span_init,
            span_loss_coef=self.span_loss_coef,
            add_span_loss=False,  # added below, outside any switch_case branch
        )
        self.dense_layer = PositionwiseFeedForward(
            self.d_model,
            self.d_ffn,
            dropout=self.dropout,
            pre_norm=self.pre_norm,
            dtype=self.dtype_policy,
            name="dense",
        )

    def build(self, input_shape):
        # Logits, not probabilities: no constraint; zeros = uniform choice.
        # float32 whatever the policy (autocast off): the softmax over three
        # logits must not run in bfloat16.
        self.arch_logits = self.add_weight(
            name="arch_logits",
            shape=(len(CANDIDATES),),
            initializer="zeros",
            trainable=True,
            autocast=False,
            dtype="float32",
        )
        # Every candidate is built up front: variables cannot be created
        # inside the switch_case branches of the hard and argmax paths.
        self.attention_layer.build(input_shape)
        self.dense_layer.build(input_shape)
        super().build(input_shape)

    def mixing_weights(self, tau, step, training):
        """Candidate weights of this block.

        Args:
            tau: scalar float, Gumbel-softmax temperature (> 0).
            step: scalar int, search step (selects the noise).
            training: bool; False gives softmax(alpha) without noise.

        Returns:
            float32 [C], sums to 1.
        """
        logits = tf.convert_to_tensor(self.arch_logits)  # [C]
        if not training:
            return tf.nn.softmax(logits)
        noise = gumbel_noise(self.seed, self.block_index, step)  # [C]
        return tf.nn.softmax((logits + noise) / tf.cast(tau, tf.float32))

    def _branches(self, x, mem, training, rel_bias):
        """One zero-argument callable per candidate, each returning [B, T, D]."""
        return [
            lambda: self.attention_layer(x, mem, training=training, rel_bias=rel_bias),
            lambda: self.dense_layer(x, training=training),
            lambda: x,
        ]

    def call(self, x, mem=None, tau=1.0, step=0, training=False, rel_bias=None):
        """Applies the (mixture of) candidate(s).

        Args:
            x: [B, T, D] block input.
            mem: [B, M, D] memory for the attention candidate, or None.
            tau: scalar float, temperature (used only when training).
            step: scalar int, search step (used only when training).
            training: bool; selects Gumbel sampling vs deterministic eval.
            rel_bias: (u, v) [N, H] shared relative biases for the attention
                candidate, required when `untie_rel_bias=False` (else None).

        Returns:
            [B, T, D] in the compute dtype.
        """
        x = tf.cast(x, self.compute_dtype)
        if training and isinstance(self.attention_layer, AdaptiveSpanAttention):
            # From the span variable, whichever candidate runs (as
            # TransformerXLLM.span_losses does).
            self.add_loss(self.attention_layer.span_loss())
        branches = self._branches(x, mem, training, rel_bias)
        mode = self.search_mode if training else self.eval_mode
        weights = self.mixing_weights(tau, step, training)  # [C] float32
        if mode in ("soft", "expected"):
            return _mix(weights, branches, self.compute_dtype)
        choice = tf.argmax(weights, output_type=tf.int32)
        if mode == "argmax":  # evaluation: no gradient, no dropout
            return tf.switch_case(choice, branches)  # only the chosen candidate runs
        # Every candidate's dropout seeds are drawn first, whichever runs, so
        # that the masks do not depend on the path taken below.
        layers = self.attention_layer.dropout_layers + self.dense_layer.dropout_layers
        dropouts, seeds = draw_seeds(layers if training else [])
        with fixed_seeds(dropouts, seeds):
            branches = self._branches(x, mem, training, rel_bias)
            if self.hard_gradient == "all":
                return self._hard_all(choice, weights, branches, x, mem, training, rel_bias,
                                      step)
            return self._hard_chosen(choice, weights, branches)

    def _hard_all(self, choice, weights, branches, x, mem, training, rel_bias, step):
        """Straight-through Gumbel-softmax: [B, T, D], the value of f_k alone.

        Weights h = onehot + w - stop_gradient(w) are exactly one-hot in value
        (w - sg(w) == 0), so y = f_k(x) bit for bit, while dL/dw_j =
        <dL/dy, f_j(x)> for every j. The chosen candidate runs on every row
        and trains; the others run forward only, under stop_gradient (their
        weights get no gradient, their backward pass is not computed).

        With `hard_rows` < 1 they run on n = ceil(hard_rows * B) rows S drawn
        from (seed, block, step), and their terms are scaled by B / n:
        dL/dw_j = (B / n) <dL/dy[S], f_j(x[S])>, an unbiased estimate of
        <dL/dy, f_j(x)> (rows are independent through every candidate).
        Under XLA (model/xla.py) the chosen output is a one-hot mix of every
        candidate's (same values and gradients) instead of a `switch_case`.
        """
        num = len(CANDIDATES)
        onehot = tf.one_hot(choice, num)  # [C]
        rows = None  # every row
        sub, scale = branches, 1.0
        if self.hard_rows < 1.0:
            batch = x.shape[0] if x.shape[0] is not None else tf.shape(x)[0]
            if isinstance(batch, int):
                n = max(1, math.ceil(self.hard_rows * batch))
            else:
                n = tf.maximum(1, tf.cast(tf.math.ceil(
                    self.hard_rows * tf.cast(batch, tf.float32)), tf.int32))
            key = tf.random.experimental.stateless_fold_in(
                tf.constant([self.seed, len(CANDIDATES) + self.block_index], tf.int64),
                tf.cast(step, tf.int64), alg=xla.RNG_ALG)  # not the Gumbel noise's key
            scores = xla.uniform_from_bits(tf.reshape(batch, [1]), key)  # [B]
            rows = tf.sort(tf.math.top_k(scores, n).indices)  # [n]
            sub = self._branches(tf.gather(x, rows),
                                 None if mem is None else tf.gather(mem, rows),
                                 training, rel_bias)
            scale = tf.cast(batch, self.compute_dtype) / tf.cast(n, self.compute_dtype)

        if xla.compiling_with_xla():
            full = [f() for f in branches]  # each candidate built once
            y = _mix(onehot, [functools.partial(tf.identity, o) for o in full],
                     self.compute_dtype)
            parts = full if rows is None else [f() for f in sub]
            others = tf.stack([tf.stop_gradient(o) for o in parts])  # [C, n, T, D]
            others = others * tf.cast(1.0 - onehot, self.compute_dtype)[:, None, None, None]
        else:
            def outputs(k):  # candidate k on every row, the others (on the rows S)
                return branches[k](), tf.stack([
                    tf.zeros_like(sub[2]()) if j == k else tf.stop_gradient(f())
                    for j, f in enumerate(sub)])  # fmt: skip

            y, others = tf.switch_case(choice, [functools.partial(outputs, k) for k in range(num)])
        delta = tf.cast(weights - tf.stop_gradient(weights), self.compute_dtype)  # [C], zeros
        out = y * (1.0 + tf.gather(delta, choice))
        for j in range(num):  # each term is exactly 0 in value
            term = others[j] if rows is None else tf.scatter_nd(
                rows[:, None], others[j] * scale, tf.shape(x))
            out = out + delta[j] * term
        return out

    def _hard_chosen(self, choice, weights, branches):
        """Candidate `choice` alone, gradient to its logit only: [B, T, D].

        Without XLA only the chosen candidate runs (`tf.switch_case`). Under
        XLA (model/xla.py), whose `switch_case` gradient carries every
        branch's intermediates, every candidate runs and a one-hot weight
        selects the chosen one: the same value (1 * y + 0 * others) and the
        same gradients.
        """
        if not xla.compiling_with_xla():
            y = tf.switch_case(choice, branches)  # only the chosen candidate runs
        else:
            y = _mix(tf.one_hot(choice, len(CANDIDATES)), branches, self.compute_dtype)
        # Straight-through: the factor is exactly 1 in value (w - sg(w) == 0)
        # while d y / d w_k = f_k(x) carries the gradient to alpha.
        chosen = tf.gather(weights, choice)
        factor = 1.0 + (chosen - tf.stop_gradient(chosen))
        return y * tf.cast(factor, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "d_model": self.d_model,
                "num_heads": self.num_heads,
                "d_head": self.d_head,
                "d_ffn": self.d_ffn,
                "dropout": self.dropout,
                "attn_dropout": self.attn_dropout,
                "clamp_len": self.clamp_len,
                "pre_norm": self.pre_norm,
                "untie_rel_bias": self.untie_rel_bias,
                "same_length": self.same_length,
                "attention": self.attention,
                "span_max": self.span_max,
                "span_ramp": self.span_ramp,
                "span_init": self.span_init,
                "span_loss_coef": self.span_loss_coef,
                "search_mode": self.search_mode,
                "hard_gradient": self.hard_gradient,
                "hard_rows": self.hard_rows,
                "eval_mode": self.eval_mode,
                "seed": self.seed,
                "block_index": self.block_index,
            }
        )
        return config
