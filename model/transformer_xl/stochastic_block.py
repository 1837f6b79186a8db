"""PAR stochastic block: a Gumbel-softmax choice among the block types.

Mandava, Migacz, Fit-Florea 2020, "Pay Attention when Required"
(arXiv 2009.04534); Gumbel-softmax from Jang et al. 2017 (arXiv 1611.01144)
and the straight-through search of FBNet (Wu et al. 2019, arXiv 1812.03443).

Size glossary:
    B: batch size.
    T: segment length.
    M: memory length.
    D: model width (d_model).
    C: number of candidates: the block types of the config's `candidates`
       (model/transformer_xl/blocks.py; "afi": attention, dense, identity).

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

A frozen block (`freeze(k)`, progressive freezing: docs/freezing.md)
computes candidate k alone, y = f_k(x), with no noise and no mixing, in
training and evaluation.

The noise U is a stateless function of (seed, block_index, step), so a resumed
run draws the same architectures, and all replicas of a distributed step draw
the same one.
"""

import functools
import math

import keras
import tensorflow as tf

from model import xla
from model.layers.dropout import draw_seeds, fixed_seeds
from model.transformer_xl.config import ModelConfig

# Keeps U inside (0, 1) so that -log(-log U) stays finite in float32.
_UNIFORM_EPS = 1e-7


def gumbel_noise(seed, block_index, step, num_candidates):
    """Reproducible Gumbel(0, 1) noise for one block and one step.

    Args:
        seed: int, the run's seed.
        block_index: int, position of the block in the network.
        step: scalar int tensor or int, the search step.
        num_candidates: C, the block's candidates.

    Returns:
        float32 [C] noise `-log(-log U)`, U uniform in [eps, 1 - eps].
    """
    num = int(num_candidates)
    base = tf.constant([seed, block_index], tf.int64)
    key = tf.random.experimental.stateless_fold_in(
        base, tf.cast(step, tf.int64), alg=xla.RNG_ALG)  # [2]
    # The same noise with and without XLA (model/xla.py).
    uniform = xla.uniform_from_bits([num], key)
    uniform = tf.clip_by_value(uniform, _UNIFORM_EPS, 1.0 - _UNIFORM_EPS)
    return -tf.math.log(-tf.math.log(uniform))


def _mix(weights, branches, dtype):
    """sum_k weights[k] * branches[k](): every candidate computed. [C], callables -> [B, T, D]."""
    weights = tf.cast(weights, dtype)  # [C]
    return tf.add_n([weights[k] * branch() for k, branch in enumerate(branches)])


@keras.saving.register_keras_serializable(package="par")
class StochasticBlock(keras.layers.Layer):
    """A supernet block choosing among the block types of `config.candidates`.

    Args:
        config: the model's `ModelConfig` (or its dict): candidates, sizes,
            dropout, attention kind, search_mode, hard_gradient, hard_rows,
            eval_mode and seed (see the module docstring).
        block_index: int, position of this block (decorrelates the noise).
        **kwargs: base `keras.layers.Layer` arguments (name, dtype, ...).

    Attributes:
        candidates: the BlockSpecs chosen among (model/transformer_xl/blocks.py),
            those of `config.candidates` in its order.
        <name>_layer: the layer of each candidate that has one
            (`attention_layer`, `dense_layer`); the attention candidate's span
            variables give the span loss and spans whichever candidate is
            sampled.
        arch_logits: float32 [C] trainable logits alpha (after build).
        frozen: None while searching, else the index of the candidate the
            block is frozen to (`freeze`): only that candidate runs, without
            Gumbel mixing, in training and evaluation.
    """

    def __init__(self, config, block_index=0, **kwargs):
        super().__init__(**kwargs)
        if isinstance(config, dict):
            config = ModelConfig.from_dict(config)
        self.model_config = config
        self.block_index = int(block_index)
        self.candidates = config.candidate_specs
        self.frozen = None
        for spec in self.candidates:  # created in candidate order: variable order
            layer = spec.make_layer(config, spec.name, self.dtype_policy, supernet=True)
            if layer is not None:
                setattr(self, f"{spec.name}_layer", layer)

    @property
    def seed(self):
        """int: seed of the Gumbel noise (the model's)."""
        return self.model_config.seed

    def candidate_layer(self, index):
        """The layer of candidate `index`, or None (identity)."""
        return getattr(self, f"{self.candidates[index].name}_layer", None)

    def build(self, input_shape):
        # Logits, not probabilities: no constraint; zeros = uniform choice.
        # float32 whatever the policy (autocast off): the softmax over the
        # logits must not run in bfloat16.
        self.arch_logits = self.add_weight(
            name="arch_logits",
            shape=(len(self.candidates),),
            initializer="zeros",
            trainable=True,
            autocast=False,
            dtype="float32",
        )
        # Every candidate is built up front: variables cannot be created
        # inside the switch_case branches of the hard and argmax paths.
        for index in range(len(self.candidates)):
            layer = self.candidate_layer(index)
            if layer is not None:
                layer.build(input_shape)
        super().build(input_shape)

    def freeze(self, index):
        """Computes only candidate `index` from now on (None: searching again). A
        Python-level switch: functions traced before keep their block."""
        if index is None:
            self.frozen = None
            return
        index = int(index)
        if not 0 <= index < len(self.candidates):
            raise ValueError(f"block {self.block_index}: candidate {index} out of range "
                             f"[0, {len(self.candidates)})")
        self.frozen = index

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
        noise = gumbel_noise(self.seed, self.block_index, step, len(self.candidates))  # [C]
        return tf.nn.softmax((logits + noise) / tf.cast(tau, tf.float32))

    def _branches(self, x, mem, training, shared):
        """One zero-argument callable per candidate, each returning [B, T, D].

        `shared` holds what the model owns for every attention layer (the
        shared `rel_bias`, the learned `key_positions`), only those it has.
        """
        def branch(index):
            layer = self.candidate_layer(index)
            if layer is None:
                return lambda: x
            if self.candidates[index].carries_memory:
                return lambda: layer(x, mem, training=training, **shared)
            return lambda: layer(x, training=training)

        return [branch(k) for k in range(len(self.candidates))]

    def _span_loss_layers(self):
        """Candidate layers with a span loss that still trains."""
        indices = range(len(self.candidates)) if self.frozen is None else [self.frozen]
        layers = [self.candidate_layer(k) for k in indices]
        return [layer for layer in layers if hasattr(layer, "span_loss")]

    def call(self, x, mem=None, tau=1.0, step=0, training=False, rel_bias=None,
             key_positions=None):
        """Applies the (mixture of) candidate(s).

        Args:
            x: [B, T, D] block input.
            mem: [B, M, D] memory for the attention candidate, or None.
            tau: scalar float, temperature (used only when training).
            step: scalar int, search step (used only when training).
            training: bool; selects Gumbel sampling vs deterministic eval.
            rel_bias: (u, v) [N, H] shared relative biases for the attention
                candidate, required when `untie_rel_bias=False` (else None).
            key_positions: [S, H] learned key position table shared by every
                attention layer (`span_positions="learned"`), else None.

        Returns:
            [B, T, D] in the compute dtype.
        """
        x = tf.cast(x, self.compute_dtype)
        if training:
            # From the span variable, whichever candidate runs (as
            # TransformerXLLM.span_losses does).
            for layer in self._span_loss_layers():
                self.add_loss(layer.span_loss())
        shared = {name: value for name, value in (("rel_bias", rel_bias),
                                                  ("key_positions", key_positions))
                  if value is not None}
        branches = self._branches(x, mem, training, shared)
        if self.frozen is not None:  # only the chosen candidate, no mixing
            return tf.cast(branches[self.frozen](), self.compute_dtype)
        config = self.model_config
        mode = config.search_mode if training else config.eval_mode
        weights = self.mixing_weights(tau, step, training)  # [C] float32
        if mode in ("soft", "expected"):
            return _mix(weights, branches, self.compute_dtype)
        choice = tf.argmax(weights, output_type=tf.int32)
        if mode == "argmax":  # evaluation: no gradient, no dropout
            return tf.switch_case(choice, branches)  # only the chosen candidate runs
        # Every candidate's dropout seeds are drawn first, whichever runs, so
        # that the masks do not depend on the path taken below.
        layers = [self.candidate_layer(k) for k in range(len(self.candidates))]
        layers = [d for layer in layers if layer is not None
                  for d in getattr(layer, "dropout_layers", [])]
        dropouts, seeds = draw_seeds(layers if training else [])
        with fixed_seeds(dropouts, seeds):
            branches = self._branches(x, mem, training, shared)
            if config.hard_gradient == "all":
                return self._hard_all(choice, weights, branches, x, mem, training, shared, step)
            return self._hard_chosen(choice, weights, branches)

    def _hard_all(self, choice, weights, branches, x, mem, training, shared, step):
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
        num = len(self.candidates)
        hard_rows = self.model_config.hard_rows
        onehot = tf.one_hot(choice, num)  # [C]
        rows = None  # every row
        sub, sub_x, scale = branches, x, 1.0
        if hard_rows < 1.0:
            batch = x.shape[0] if x.shape[0] is not None else tf.shape(x)[0]
            if isinstance(batch, int):
                n = max(1, math.ceil(hard_rows * batch))
            else:
                n = tf.maximum(1, tf.cast(tf.math.ceil(
                    hard_rows * tf.cast(batch, tf.float32)), tf.int32))
            key = tf.random.experimental.stateless_fold_in(
                tf.constant([self.seed, num + self.block_index], tf.int64),
                tf.cast(step, tf.int64), alg=xla.RNG_ALG)  # not the Gumbel noise's key
            scores = xla.uniform_from_bits(tf.reshape(batch, [1]), key)  # [B]
            rows = tf.sort(tf.math.top_k(scores, n).indices)  # [n]
            sub_x = tf.gather(x, rows)
            sub = self._branches(sub_x,
                                 None if mem is None else tf.gather(mem, rows),
                                 training, shared)
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
                    tf.zeros_like(sub_x) if j == k else tf.stop_gradient(f())
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
            y = _mix(tf.one_hot(choice, len(self.candidates)), branches, self.compute_dtype)
        # Straight-through: the factor is exactly 1 in value (w - sg(w) == 0)
        # while d y / d w_k = f_k(x) carries the gradient to alpha.
        chosen = tf.gather(weights, choice)
        factor = 1.0 + (chosen - tf.stop_gradient(chosen))
        return y * tf.cast(factor, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"config": self.model_config.to_dict(), "block_index": self.block_index})
        return config
