"""Adaptive attention span (Sukhbaatar et al. 2019, arXiv 1905.07799).

Size glossary:
    B: batch size.
    T: segment (query) length.
    M: memory length before trimming, M' after.
    K: key length, K = M + T (M' + T after trimming).
    N: number of attention heads.
    H: head size.
    D: model width.
    S: maximum span (span_max); R: ramp length (span_ramp).

Head h learns `s_h in [0, 1]` (clamped by `ClampConstraint` after every
optimizer update) and attends with span `z_h = S * s_h`. The softmax weight of
a key at distance `x = (M + i) - j` from query i is multiplied by

    m_h(x) = clamp((R + z_h - x) / R, 0, 1)        (0 for non-causal keys)

and the weights are renormalised. `lambda * mean_h(z_h)` is the span loss.
The product and the renormalisation are taken as one softmax over the keys in
span, `log m_h(x)` added to the logits (`span_log_bias`):

    a_ij = m(x_ij) exp(s_ij) / sum_j' m(x_ij') exp(s_ij')

which is the reference's `m p / (sum(m p) + eps)` without its epsilon, whose
term `eps sum_j' exp(s_ij')` runs over every key, in span or not. Without it,
a key of mask 0 plays no part at all, so dropping it (trimming) is exact.

Memory older than every query can see is dropped before attention, so compute
and memory follow the learned spans (see `memory_keep_length`).

Positions (`span_positions`):
    "relative"  Transformer-XL's relative positions (sinusoid, W_R, u, v per
                layer, `RelativeMultiHeadAttention`); a query sees itself.
    "learned"   the adaptive-span reference's (facebookresearch/adaptive-span,
                models.py): a learned key position table `P` [S, H], one for
                every layer and head (owned by the model, passed at call time
                as `key_positions`), no u, v; query i attends to the S keys at
                distances 1..S before it, not to itself, with score
                `(q_i . k_j + q_i . P[x - 1]) / sqrt(H)` for `x = (M + i) - j`,
                and the span mask is taken at `x - 1` (the reference's mask
                reaches 1 at the nearest key).
"""

import math

import keras
import tensorflow as tf

from model import xla
from model.layers.relative_attention import (
    MASK_VALUE,
    RelativeMultiHeadAttention,
    causal_mask,
    merge_heads,
    project_heads,
)

# Kept memory lengths (and the learned positions' key window) are rounded up
# to this multiple. The reference rounds to 64 (for PyTorch's allocator); 1
# keeps the window at the spans (docs/results/adaptive_span_fidelity.md). With
# the in-span softmax any multiple is exact: a dropped key has mask 0.
# model/transformer_xl/block_costs.py counts FLOPs with the same multiple.
TRIM_MULTIPLE = 1
# log m for m = 0 would be -inf, and its gradient NaN: such keys take MASK_VALUE
# and the log is taken of max(m, _LOG_FLOOR).
_LOG_FLOOR = 1e-30
SPAN_POSITIONS = ("relative", "learned")
# With learned positions, queries are scored in blocks of this many, each block
# against its own W + 64 keys instead of all W + T (when T is known when the
# step is traced and is a multiple of it, with two blocks or more).
QUERY_BLOCK = 64


@keras.saving.register_keras_serializable(package="par")
class ClampConstraint(keras.constraints.Constraint):
    """Clips a weight into `[min_value, max_value]` after each optimizer update.

    Keras 3 optimizers apply `variable.constraint` after every `apply` call.

    Args:
        min_value: float, lower bound.
        max_value: float, upper bound.
    """

    def __init__(self, min_value=0.0, max_value=1.0):
        if min_value > max_value:
            raise ValueError(f"ClampConstraint: min_value {min_value} > max_value {max_value}")
        self.min_value = float(min_value)
        self.max_value = float(max_value)

    def __call__(self, w):
        return keras.ops.clip(w, self.min_value, self.max_value)

    def get_config(self):
        return {"min_value": self.min_value, "max_value": self.max_value}


def _unskew(scores, window):
    """[..., T, W + T] scores by key -> [..., T, W] by window slot: out[i, l] = x[i, i + l].

    Flat, row i of the input starts at i (W + T); padding T at the end and
    reading rows of W + T + 1 puts x[i, i + l] at row i, column l.
    """
    shape = tf.shape(scores)
    lead, qlen = shape[:-2], shape[-2]
    flat = tf.reshape(scores, tf.concat([lead, [-1]], 0))
    rank = len(scores.shape)
    flat = tf.pad(flat, [[0, 0]] * (rank - 2) + [[0, qlen]])
    rows = tf.reshape(flat, tf.concat([lead, [qlen, window + qlen + 1]], 0))
    # tf.slice, not rows[..., :window]: StridedSliceGrad is several times slower.
    return tf.slice(rows, tf.zeros([rank], tf.int32),
                    tf.concat([tf.fill([rank - 1], -1), [window]], 0))


def _skew(weights):
    """[..., T, W] by window slot -> [..., T, W + T] by key, zeros elsewhere (inverse
    of `_unskew`): row i of the result holds row i of the input at columns i..i+W-1."""
    shape = tf.shape(weights)
    lead, qlen, window = shape[:-2], shape[-2], shape[-1]
    rank = len(weights.shape)
    padded = tf.pad(weights, [[0, 0]] * (rank - 1) + [[0, qlen + 1]])  # [..., T, W + T + 1]
    flat = tf.reshape(padded, tf.concat([lead, [-1]], 0))
    flat = tf.slice(flat, tf.zeros([rank - 1], tf.int32),
                    tf.concat([tf.fill([rank - 2], -1), [qlen * (window + qlen)]], 0))
    return tf.reshape(flat, tf.concat([lead, [qlen, window + qlen]], 0))


def query_blocks(qlen, block=QUERY_BLOCK):
    """How many blocks of `block` queries a segment of `qlen` is scored in: qlen // block
    when `qlen` is a static multiple of `block` of at least two blocks, else 1."""
    if not isinstance(qlen, int) or qlen % block or qlen < 2 * block:
        return 1
    return qlen // block


def _key_blocks(keys, window, blocks, block):
    """[B, N, W + T, H] -> [B, N, nb, W + Tb, H]: the W + Tb keys (or values) the windows
    of query block j reach, starting at key j Tb."""
    return tf.stack([tf.slice(keys, [0, 0, j * block, 0], [-1, -1, window + block, -1])
                     for j in range(blocks)], axis=2)


def windowed_scores(q, k, window, blocks=1):
    """Content scores by window slot: [B, N, T, H] x [B, N, W + T, H] -> [B, N, T, W],
    column l of row i being q_i . k_{i + l}; in `blocks` blocks of queries, each against
    its own W + T/blocks keys (the same numbers, less work when W is small)."""
    if blocks == 1:
        return _unskew(tf.matmul(q, k, transpose_b=True), window)
    shape, block = tf.shape(q), q.shape[2] // blocks
    qb = tf.reshape(q, tf.concat([shape[:2], [blocks, block], shape[3:]], 0))
    kb = _key_blocks(k, window, blocks, block)  # [B, N, nb, W + Tb, H]
    scores = _unskew(tf.matmul(qb, kb, transpose_b=True), window)  # [B, N, nb, Tb, W]
    return tf.reshape(scores, tf.concat([shape[:3], [window]], 0))


def windowed_context(weights, v, blocks=1):
    """The inverse layout of `windowed_scores`: weights by window slot [B, N, T, W] times
    values [B, N, W + T, H] -> [B, N, T, H], in `blocks` blocks of queries."""
    if blocks == 1:
        return tf.matmul(_skew(weights), v)
    shape, block = tf.shape(weights), weights.shape[2] // blocks
    window = shape[3]
    wb = tf.reshape(weights, tf.concat([shape[:2], [blocks, block, window]], 0))
    vb = _key_blocks(v, window, blocks, block)  # [B, N, nb, W + Tb, H]
    context = tf.matmul(_skew(wb), vb)  # [B, N, nb, Tb, H]
    return tf.reshape(context, tf.concat([shape[:3], tf.shape(v)[3:]], 0))


def adaptive_span_mask(spans, span_ramp, qlen, klen, dtype=tf.float32):
    """Soft span mask over (head, query, key).

    Args:
        spans: [N] spans z_h in tokens.
        span_ramp: float, ramp length R > 0.
        qlen: int or scalar tensor, T.
        klen: int or scalar tensor, K >= T (the last T keys are the queries).
        dtype: dtype of the result.

    Returns:
        [N, T, K] with `clamp((R + z_h - x) / R, 0, 1)` for the distance
        `x = (K - T + i) - j >= 0`, and 0 for the non-causal keys `x < 0`.
    """
    spans = tf.cast(spans, tf.float32)
    query = tf.range(qlen)[:, None] + (klen - qlen)  # absolute query positions
    distance = tf.cast(query - tf.range(klen)[None, :], tf.float32)  # [T, K]
    ramp = float(span_ramp)
    mask = tf.clip_by_value((ramp + spans[:, None, None] - distance) / ramp, 0.0, 1.0)  # [N, T, K]
    mask = tf.where(distance >= 0.0, mask, 0.0)
    return tf.cast(mask, dtype)


def span_log_bias(mask, keep):
    """The in-span softmax's bias: `log m` where `keep`, MASK_VALUE elsewhere.

    Args:
        mask: float32 span mask m in [0, 1] (any shape).
        keep: bool, broadcastable to `mask`: the keys a query may see at all.

    Returns:
        float32, the broadcast shape: added to the logits, `softmax(logits + bias)`
        is `m exp(logits)` renormalised over the keys of nonzero mask.
    """
    keep = tf.logical_and(keep, mask > 0.0)
    # The floor keeps the unselected branch's log, and so its gradient, finite.
    return tf.where(keep, tf.math.log(tf.maximum(mask, _LOG_FLOOR)), MASK_VALUE)


def memory_keep_length(spans, span_ramp, mlen):
    """Number of most recent memory positions that some query may still see.

    Returns `L = min(M, ceil16(max_h z_h + R))` (ceil16: up to a multiple of
    `TRIM_MULTIPLE`). Dropping the memory positions
    j < M - L is exact: such a key is at distance
    `x = M + i - j >= L + 1 + i > L >= max_h z_h + R` from every query i, so
    `R + z_h - x < 0` and its mask `m_h(x)` is 0 for every head (with learned
    key positions the mask is taken at `x - 1 >= L >= max_h z_h + R`: 0 too).
    Current-segment keys are never dropped: query 0 sees key j = M at
    distance 0.

    Args:
        spans: [N] spans z_h in tokens.
        span_ramp: float, ramp length R.
        mlen: int or scalar int32 tensor, M.

    Returns:
        Scalar int32 tensor L, 0 <= L <= M.
    """
    reach = tf.reduce_max(tf.cast(spans, tf.float32)) + float(span_ramp)
    keep = tf.cast(tf.math.ceil(reach / TRIM_MULTIPLE), tf.int32) * TRIM_MULTIPLE
    return tf.minimum(tf.cast(mlen, tf.int32), keep)


@keras.saving.register_keras_serializable(package="par")
class AdaptiveSpanAttention(RelativeMultiHeadAttention):
    """Relative multi-head attention with a learned soft span per head.

    Same call as `RelativeMultiHeadAttention`; when `training`, the span loss
    is added with `add_loss` (so `model.losses` / `fit` pick it up).

    Args:
        d_model, num_heads, d_head, dropout, attn_dropout, clamp_len,
            pre_norm, untie_rel_bias, same_length, layer_norm_epsilon,
            kernel_initializer:
            as in `RelativeMultiHeadAttention`.
        span_max: int, maximum span S in tokens.
        span_ramp: int, ramp length R > 0 of the soft mask.
        span_init: float in [0, 1], initial s_h of every head.
        span_loss_coef: float >= 0, lambda of the span loss.
        trim_memory: bool, drop memory no query can see (exact, see
            `memory_keep_length`); False keeps all of it (for comparisons).
        span_positions: "relative" (Transformer-XL's) or "learned" (the
            reference's shared key position table, passed to `call`; see the
            module docstring).
        add_span_loss: bool, add the span loss with `add_loss` when training.
            A container that calls this layer inside a `tf.switch_case`
            branch passes False and adds `span_loss()` itself, because a
            branch graph's tensors cannot leave the branch.
        **kwargs: base `keras.layers.Layer` arguments.
    """

    def __init__(
        self,
        d_model,
        num_heads,
        d_head,
        span_max=1024,
        span_ramp=32,
        span_init=0.0,
        span_loss_coef=2e-6,
        trim_memory=True,
        add_span_loss=True,
        span_positions="relative",
        **kwargs,
    ):
        if span_positions not in SPAN_POSITIONS:
            raise ValueError(f"span_positions must be one of {SPAN_POSITIONS}, got "
                             f"{span_positions!r}")
        # Read by the base class's build (relative_positions).
        self.span_positions = span_positions
        super().__init__(d_model, num_heads, d_head, **kwargs)
        if span_max <= 0:
            raise ValueError(f"span_max must be positive, got {span_max}")
        if not 0 < span_ramp <= span_max:
            raise ValueError(f"span_ramp must be in (0, span_max={span_max}], got {span_ramp}")
        if not 0.0 <= span_init <= 1.0:
            raise ValueError(f"span_init must be in [0, 1] (a fraction of span_max), got "
                             f"{span_init}")
        if span_loss_coef < 0:
            raise ValueError(f"span_loss_coef must be >= 0, got {span_loss_coef}")
        self.span_max = int(span_max)
        self.span_ramp = int(span_ramp)
        self.span_init = float(span_init)
        self.span_loss_coef = float(span_loss_coef)
        self.trim_memory = bool(trim_memory)
        self.add_span_loss = bool(add_span_loss)

    @property
    def relative_positions(self):
        return self.span_positions == "relative"

    def build(self, input_shape):
        super().build(input_shape)
        # float32 even under mixed precision: z_h = S * s_h needs the precision.
        self.span = self.add_weight(
            name="span",
            shape=(self.num_heads,),
            initializer=keras.initializers.Constant(self.span_init),
            constraint=ClampConstraint(0.0, 1.0),
            autocast=False,
        )  # s_h [N]

    @property
    def spans(self):
        """[N] float32 spans z_h = S * s_h in tokens."""
        if not self.built:
            raise ValueError(f"{self.name}: spans are created when the layer is built; call it "
                             f"first")
        return tf.convert_to_tensor(self.span) * float(self.span_max)

    def span_loss(self):
        """Scalar float32 `span_loss_coef * mean_h(z_h)`, usable outside `call`."""
        return self.span_loss_coef * tf.reduce_mean(self.spans)

    def _select_memory(self, mem):
        # Under XLA the kept length, a function of the spans, would make the
        # key length a compile-time constant: keep everything (exact).
        if not self.trim_memory or xla.compiling_with_xla():
            return mem
        mlen = tf.shape(mem)[1]
        keep = memory_keep_length(self.spans, self.span_ramp, mlen)
        return mem[:, mlen - keep :]  # [B, M', D]

    def _attention_weights(self, logits, max_distance=None):
        # Relative positions only: learned ones take `_attend_window`. A query
        # always sees itself (distance 0, mask 1), so no row is empty.
        shape = tf.shape(logits)
        mask = adaptive_span_mask(self.spans, self.span_ramp, shape[-2], shape[-1])  # [N, T, K]
        bias = span_log_bias(mask, causal_mask(shape[-2], shape[-1], max_distance))
        return tf.nn.softmax(logits + bias, axis=-1)  # [B, N, T, K]

    def _attend(self, query_input, kv_input, training, positions, max_distance=None):
        if self.relative_positions:
            return super()._attend(query_input, kv_input, training, positions, max_distance)
        return self._attend_window(query_input, kv_input, training, positions, max_distance)

    def _window(self, klen, qlen):
        """W, the distances 1..W that the scores cover: at most S, at most K - 1
        (the farthest key of the last query), at most ceil16(max_h z_h + R) while
        trimming (a key farther than that has span mask 0)."""
        window = tf.minimum(self.span_max, klen - 1)
        if self.trim_memory and not xla.compiling_with_xla():
            window = tf.minimum(window, memory_keep_length(self.spans, self.span_ramp,
                                                           self.span_max))
        return tf.maximum(window, 1)

    def _attend_window(self, query_input, kv_input, training, table, max_distance=None):
        """Learned key positions over each query's window of W keys before it.

        As the reference (models.py `_skew` / `_unskew`), scores are laid out
        `[B, N, T, W]` by distance (column l: distance W - l), so the in-span
        softmax and the masks see W keys per query instead of K. Keys farther
        than W have span mask 0 or lie past S: leaving them out changes nothing.
        A segment whose length is a static multiple of QUERY_BLOCK (two blocks or
        more) is scored block by block, each block of queries against the
        W + QUERY_BLOCK keys its windows reach (`windowed_scores`).

        Args:
            query_input: [B, T, D]; kv_input: [B, K, D]; training: bool.
            table: [S, H] key position table (row x - 1: distance x).
            max_distance: None, or the farthest distance a query sees.

        Returns:
            [B, T, D] output of the output projection (before dropout).
        """
        qlen, klen = tf.shape(query_input)[1], tf.shape(kv_input)[1]
        window = self._window(klen, qlen)
        # Pad keys in front so that every query has W slots (masked below).
        pad = tf.maximum(window - (klen - qlen), 0)
        kv_input = tf.pad(kv_input, [[0, 0], [pad, 0], [0, 0]])
        # The W + T keys any query's window reaches: drop the older ones.
        kv_input = tf.slice(kv_input, [0, klen + pad - qlen - window, 0], [-1, -1, -1])
        # [B, W + T, D]
        scale = 1.0 / math.sqrt(self.d_head)
        # The scale on the [D, N, H] kernel, not on the [B, N, T, H] queries: one pass less.
        q = project_heads(query_input, self.query_kernel * scale)  # [B, N, T, H], scaled
        k = project_heads(kv_input, self.key_kernel)  # [B, N, W + T, H]
        v = project_heads(kv_input, self.value_kernel)  # [B, N, W + T, H]
        blocks = query_blocks(query_input.shape[1])
        content = windowed_scores(q, k, window, blocks)  # [B, N, T, W]
        rows = tf.reverse(tf.slice(tf.cast(table, self.compute_dtype), [0, 0], [window, -1]),
                          axis=[0])  # [W, H]
        position = tf.matmul(q, rows, transpose_b=True)  # [B, N, T, W], column l: distance W - l
        distance = window - tf.range(window)  # [W]
        # A slot is a real key when its distance reaches no further back than
        # the keys given (M + i for query i), and within max_distance.
        visible = distance[None, :] <= (klen - qlen) + tf.range(qlen)[:, None]  # [T, W]
        if max_distance is not None:
            visible &= distance[None, :] <= max_distance
        ramp = float(self.span_ramp)
        mask = tf.clip_by_value(
            (ramp + self.spans[:, None] - tf.cast(distance - 1, tf.float32)[None, :]) / ramp,
            0.0, 1.0)  # [N, W], the reference's mask at x - 1
        bias = span_log_bias(mask[:, None, :], visible)  # [N, T, W]
        weights = tf.nn.softmax(tf.cast(content + position, tf.float32) + bias, axis=-1)
        # Query 0 of an empty memory has no key (distance 0 is not attended): its
        # row would be uniform over masked slots; the reference's gives zeros.
        has_key = visible[:, -1:]  # [T, 1], distance 1
        weights = tf.cond(tf.reduce_all(has_key), lambda: weights,
                          lambda: weights * tf.cast(has_key, weights.dtype))
        weights = self.attn_dropout_layer(weights, training=training)
        weights = tf.cast(weights, self.compute_dtype)
        context = windowed_context(weights, v, blocks)  # [B, N, T, H]
        return merge_heads(context, self.output_kernel)  # [B, T, D]

    def call(self, x, mem=None, training=False, rel_bias=None, key_positions=None):
        """See `RelativeMultiHeadAttention.call`; adds the span loss when training.

        Args:
            key_positions: [S, H] the shared learned key position table,
                required with `span_positions="learned"` (else None).
        """
        if self.relative_positions:
            if key_positions is not None:
                raise ValueError(f"{self.name}: span_positions='relative' takes no "
                                 "key_positions; build it with span_positions='learned'")
            outputs = super().call(x, mem, training=training, rel_bias=rel_bias)
        else:
            if key_positions is None or rel_bias is not None:
                raise ValueError(
                    f"{self.name}: span_positions='learned' takes key_positions [span_max, "
                    "d_head] (the model owns the table) and no rel_bias")
            outputs = self._apply(x, mem, training, key_positions)
        if training and self.add_span_loss:
            self.add_loss(self.span_loss())
        return outputs

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "span_max": self.span_max,
                "span_ramp": self.span_ramp,
                "span_init": self.span_init,
                "span_loss_coef": self.span_loss_coef,
                "trim_memory": self.trim_memory,
                "add_span_loss": self.add_span_loss,
                "span_positions": self.span_positions,
            }
        )
        return config
