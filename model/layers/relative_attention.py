"""Transformer-XL relative multi-head attention (Dai et al. 2019, arXiv 1901.02860).

Size glossary (used in shape comments and einsum equations):
    B: batch size.
    T: segment (query) length.
    M: memory length (cached inputs of the previous segment).
    K: key length, K = M + T.
    N: number of attention heads.
    H: head size (d_head).
    D: model width (d_model).

Score of query i (absolute position M + i) and key j (0 <= j < K):

    s(i, j) = ((q_i + u) . k_j + (q_i + v) . (W_R r_{M+i-j})) / sqrt(H)

with `r` a fixed sinusoid over the distance, `u`, `v` learned per head (per
layer, or one pair shared by every layer and passed in at call time), and a
causal mask that lets query i see the keys j <= M + i (all memory and the
current positions up to i). Scores are laid out `[B, N, T, K]`.

`same_length` (Transformer-XL's evaluation option) also hides the keys
j < i, so that every query sees the same M + 1 keys, those at distances
0..M: the mask `_create_mask(qlen, mlen, same_length=True)` of the reference
TensorFlow code (kimiyoung/transformer-xl, tf/model.py). (Its PyTorch code
keeps one key fewer, distances 0..mem_len-1.)

The layer is TensorFlow-only on purpose (the project trains with
`tf.distribute` from TFRecords): `tf` ops give dynamic shapes, which the
adaptive-span subclass needs to trim its memory inside `tf.function`.
"""

import math

import keras
import tensorflow as tf

from model.layers.dropout import FastDropout
from model.layers.initializers import clone_initializer
from model.layers.layer_norm import LayerNorm

# Added to masked logits (in float32) so their softmax weight is exactly 0;
# finite rather than -inf so a fully masked row could never produce NaN.
MASK_VALUE = -1e30


def relative_positional_encoding(klen, d_model, clamp_len=-1, dtype="float32"):
    """Sinusoid embedding of the relative distances `klen - 1, ..., 1, 0`.

    Row k encodes the distance `klen - 1 - k`, so the last row is distance 0.
    Distances above `clamp_len` are clamped to it when `clamp_len > 0`; as in
    the reference Transformer-XL, `clamp_len <= 0` means no clamping (a clamp
    to 0 would erase all position information).

    Args:
        klen: int or scalar int tensor, the key length K.
        d_model: int, the (even) embedding width D.
        clamp_len: int, clamp distances to this value; <= 0 disables clamping.
        dtype: dtype of the result (computed in float32 first).

    Returns:
        Tensor [K, D]: `concat([sin(p * inv_freq), cos(p * inv_freq)])` with
        `inv_freq = 1 / 10000^(range(0, D, 2) / D)`.
    """
    if d_model % 2:
        raise ValueError(f"d_model must be even for the sinusoid encoding, got {d_model}")
    inv_freq = 1.0 / tf.pow(10000.0, tf.range(0, d_model, 2, dtype=tf.float32) / d_model)
    positions = tf.range(tf.cast(klen, tf.float32) - 1.0, -1.0, -1.0, dtype=tf.float32)
    if clamp_len > 0:
        positions = tf.minimum(positions, float(clamp_len))
    angles = positions[:, None] * inv_freq[None, :]  # [K, D/2]
    encoding = tf.concat([tf.sin(angles), tf.cos(angles)], axis=-1)  # [K, D]
    return tf.cast(encoding, dtype)


def rel_shift(x):
    """Aligns position scores from "by relative distance" to "by key index".

    On input, `x[..., i, c]` is the score of query i against the position
    embedding of row c, i.e. distance `K - 1 - c` (descending encoding). On
    output, `out[..., i, j] = x[..., i, j + T - 1 - i]`: the score of query i
    (absolute position M + i) against key j, whose distance is `M + i - j`,
    because `K - 1 - (j + T - 1 - i) = M + i - j`.

    Why pad / reshape / drop a row works: pad one zero column in front of the
    key axis, giving rows of length K + 1, and look at the flat buffer. Output
    element (i, j) is flat element `i * K + j` of the result, which after
    dropping the first T entries (one row of the [K + 1, T] view) is flat
    element `T + i * K + j = i * (K + 1) + (T - i + j)` of the padded buffer:
    row i, padded column `T - i + j`, i.e. original column `j + T - 1 - i`.
    This stays in row i while `T - i + j <= K`, that is `j <= M + i`: exactly
    the causal keys. Entries with `j > M + i` hold values from the next row
    (or padding) and must be masked by the caller.

    Args:
        x: Tensor [B, N, T, K] (any leading dims; the last two are T, K with
            K >= T).

    Returns:
        Tensor with the shape and dtype of `x`.
    """
    shape = tf.shape(x)
    lead, qlen, klen = shape[:-2], shape[-2], shape[-1]
    rank = len(x.shape)
    padded = tf.pad(x, [[0, 0]] * (rank - 1) + [[1, 0]])  # [B, N, T, K + 1]
    padded = tf.reshape(padded, tf.concat([lead, [klen + 1, qlen]], 0))  # [B, N, K + 1, T]
    # tf.slice rather than `padded[..., 1:, :]`: the gradient of a strided
    # slice (StridedSliceGrad) is several times slower than Slice's (a Pad).
    shifted = tf.slice(padded, [0] * (rank - 2) + [1, 0], [-1] * rank)  # [B, N, K, T]
    return tf.reshape(shifted, shape)  # [B, N, T, K]


def project_heads(x, kernel):
    """[B, L, D] x [D, N, H] -> [B, N, L, H], heads-major.

    One 2-D matmul and a transpose: faster on CPU than the equivalent
    `einsum("bld,dnh->bnlh")`, forward and backward
    (docs/results/adaptive_span_fidelity.md#speed).
    """
    shape = tf.shape(x)
    num_heads, head_size = kernel.shape[1], kernel.shape[2]
    flat = tf.matmul(tf.reshape(x, [-1, kernel.shape[0]]),
                     tf.reshape(kernel, [kernel.shape[0], num_heads * head_size]))
    heads = tf.reshape(flat, [shape[0], shape[1], num_heads, head_size])  # [B, L, N, H]
    return tf.transpose(heads, [0, 2, 1, 3])  # [B, N, L, H]


def merge_heads(context, kernel):
    """[B, N, T, H] x [N, H, D] -> [B, T, D]: the output projection as a transpose and one
    2-D matmul (the inverse layout of `project_heads`)."""
    shape = tf.shape(context)
    num_heads, head_size, width = kernel.shape
    heads = tf.transpose(context, [0, 2, 1, 3])  # [B, T, N, H]
    flat = tf.matmul(tf.reshape(heads, [-1, num_heads * head_size]),
                     tf.reshape(kernel, [num_heads * head_size, width]))
    return tf.reshape(flat, [shape[0], shape[2], width])


def causal_mask(qlen, klen, max_distance=None):
    """Boolean [T, K]: query i (absolute position K - T + i) sees keys j <= K - T + i.

    Args:
        qlen: int or scalar int tensor, T.
        klen: int or scalar int tensor, K >= T.
        max_distance: None, or int / scalar int tensor: also hide the keys
            farther than this from the query, `(K - T + i) - j > max_distance`
            (`same_length` passes the memory length M).

    Returns:
        bool Tensor [T, K].
    """
    mlen = klen - qlen
    query = tf.range(qlen)[:, None]
    key = tf.range(klen)[None, :]
    mask = key <= query + mlen
    if max_distance is not None:
        mask = tf.logical_and(mask, query + mlen - key <= max_distance)
    return mask


@keras.saving.register_keras_serializable(package="par")
class RelativeMultiHeadAttention(keras.layers.Layer):
    """Transformer-XL attention sub-layer with memory, residual and layer norm.

    Queries come from the current segment only; keys and values from
    `concat(mem, x)`. The q/k/v/position/output projections have no biases,
    as in Transformer-XL. Softmax runs in float32 whatever the dtype policy.

    Post-norm (default, as in the paper): `LN(x + Attn(x, mem))`.
    Pre-norm: `x + Attn(LN(x), LN(mem))`: the same norm is applied to the
    memory and the current input (the memory caches un-normalised block
    inputs), and the residual adds the raw input.

    Relative biases: with `untie_rel_bias=True` (default) the layer owns its
    `u`, `v`. With `untie_rel_bias=False` it creates none and takes the pair
    shared by all layers at call time (`rel_bias=(u, v)`), as the reference
    Transformer-XL does when `untie_r` is False; the owner of the shared
    variables (`TransformerXLLM`) creates, saves and passes them, so the layer
    stays serialisable on its own (its config holds only the flag).

    Args:
        d_model: int, model width D.
        num_heads: int, number of heads N.
        d_head: int, head size H.
        dropout: float, dropout on the output projection (`FastDropout`: the
            rate is quantised to a multiple of 1/256).
        attn_dropout: float, dropout on the attention weights (likewise).
        clamp_len: int, clamp relative distances to this value; <= 0: no clamp.
        pre_norm: bool, pre-norm instead of post-norm.
        untie_rel_bias: bool, own `u`, `v` (True) or take them in `call`.
        same_length: bool, every query sees the same number of keys, M + 1
            (the keys at distances 0..M, M the memory length of the call), as
            Transformer-XL's evaluation option; False: all causal keys.
        layer_norm_epsilon: float, epsilon of the layer norm.
        kernel_initializer: initializer of the projections and of `u`, `v`
            (default normal with stddev 0.02, as in Transformer-XL).
        **kwargs: base `keras.layers.Layer` arguments (name, dtype, ...).
    """

    def __init__(
        self,
        d_model,
        num_heads,
        d_head,
        dropout=0.0,
        attn_dropout=0.0,
        clamp_len=-1,
        pre_norm=False,
        untie_rel_bias=True,
        same_length=False,
        layer_norm_epsilon=1e-5,
        kernel_initializer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        for field, value in (("d_model", d_model), ("num_heads", num_heads), ("d_head", d_head)):
            if int(value) <= 0:
                raise ValueError(f"{field} must be a positive integer, got {value}")
        if d_model % 2:
            raise ValueError(f"d_model must be even (sinusoid positions), got {d_model}")
        for field, value in (("dropout", dropout), ("attn_dropout", attn_dropout)):
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{field} must be in [0, 1), got {value}")
        self.d_model = int(d_model)
        self.num_heads = int(num_heads)
        self.d_head = int(d_head)
        self.dropout = float(dropout)
        self.attn_dropout = float(attn_dropout)
        self.clamp_len = int(clamp_len)
        self.pre_norm = bool(pre_norm)
        self.untie_rel_bias = bool(untie_rel_bias)
        self.same_length = bool(same_length)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        if kernel_initializer is None:
            kernel_initializer = keras.initializers.RandomNormal(stddev=0.02)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

        self.layer_norm = LayerNorm(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name="layer_norm"
        )
        self.attn_dropout_layer = FastDropout(
            self.attn_dropout, dtype=self.dtype_policy, name="attn_dropout"
        )
        self.output_dropout = FastDropout(
            self.dropout, dtype=self.dtype_policy, name="output_dropout"
        )

    def build(self, input_shape):
        if input_shape[-1] is not None and input_shape[-1] != self.d_model:
            raise ValueError(
                f"{self.name}: input width {input_shape[-1]} != d_model {self.d_model}; "
                "pass inputs of shape [B, T, d_model]"
            )
        projection = (self.d_model, self.num_heads, self.d_head)

        def kernel(name, shape):
            initializer = clone_initializer(self.kernel_initializer, len(self.weights))
            return self.add_weight(name=name, shape=shape, initializer=initializer)

        self.query_kernel = kernel("query_kernel", projection)  # [D, N, H]
        self.key_kernel = kernel("key_kernel", projection)  # [D, N, H]
        self.value_kernel = kernel("value_kernel", projection)  # [D, N, H]
        self.position_kernel = None
        if self.relative_positions:
            self.position_kernel = kernel("position_kernel", projection)  # W_R [D, N, H]
        output = (self.num_heads, self.d_head, self.d_model)
        self.output_kernel = kernel("output_kernel", output)  # [N, H, D]
        if self.untie_rel_bias and self.relative_positions:
            self.content_bias = kernel("content_bias", (self.num_heads, self.d_head))  # u [N, H]
            self.position_bias = kernel("position_bias", (self.num_heads, self.d_head))  # v [N, H]
        else:
            self.content_bias = self.position_bias = None  # shared: passed to call
        self.layer_norm.build(input_shape)
        super().build(input_shape)

    @property
    def relative_positions(self):
        """bool: scores use Transformer-XL's relative positions (W_R, u, v); a
        subclass with other positions returns False and overrides `_logits`."""
        return True

    def _select_memory(self, mem):
        """Hook for subclasses to drop memory positions; [B, M, D] -> [B, M', D]."""
        return mem

    def _attention_weights(self, logits, max_distance=None):
        """Causally masked softmax over keys.

        Args:
            logits: float32 [B, N, T, K], already scaled.
            max_distance: None, or the farthest distance a query may see
                (see `causal_mask`).

        Returns:
            float32 [B, N, T, K] attention weights (rows sum to 1).
        """
        shape = tf.shape(logits)
        mask = causal_mask(shape[-2], shape[-1], max_distance)  # [T, K]
        return tf.nn.softmax(tf.where(mask, logits, MASK_VALUE), axis=-1)

    def _relative_biases(self, rel_bias):
        """(u, v) [N, H] in the compute dtype: the layer's own or the shared pair."""
        if self.untie_rel_bias:
            if rel_bias is not None:
                raise ValueError(
                    f"{self.name}: untie_rel_bias=True, the layer owns its u, v; do not pass "
                    "rel_bias (or build the layer with untie_rel_bias=False to share them)"
                )
            return self.content_bias, self.position_bias
        if rel_bias is None:
            raise ValueError(
                f"{self.name}: untie_rel_bias=False, the relative biases are shared: pass "
                "rel_bias=(u, v), each [num_heads, d_head] (TransformerXLLM owns them), or "
                "build the layer with untie_rel_bias=True"
            )
        content_bias, position_bias = rel_bias
        return tf.cast(content_bias, self.compute_dtype), tf.cast(position_bias, self.compute_dtype)

    def _logits(self, q, k, positions):
        """Scaled attention scores: content plus relative-position terms.

        Args:
            q: [B, N, T, H] queries.
            k: [B, N, K, H] keys.
            positions: (u, v), each [N, H] (see `_relative_biases`).

        Returns:
            float32 [B, N, T, K], before masking.
        """
        content_bias, position_bias = positions
        klen = tf.shape(k)[2]
        scale = 1.0 / math.sqrt(self.d_head)
        # The position projection does not depend on the batch: once per call.
        r = relative_positional_encoding(
            klen, self.d_model, self.clamp_len, self.compute_dtype
        )  # [K, D]
        r = tf.einsum("kd,dnh->nkh", r, self.position_kernel)  # [N, K, H]
        # Scaling the [B, N, T, H] queries is cheaper than scaling [B, N, T, K] scores.
        q_content = (q + content_bias[:, None, :]) * scale  # [B, N, T, H]
        q_position = (q + position_bias[:, None, :]) * scale  # [B, N, T, H]
        content = tf.matmul(q_content, k, transpose_b=True)  # [B, N, T, K]
        # r broadcasts over the batch.
        position = rel_shift(tf.matmul(q_position, r, transpose_b=True))  # [B, N, T, K]
        return tf.cast(content + position, tf.float32)  # [B, N, T, K]

    def _attend(self, query_input, kv_input, training, positions, max_distance=None):
        """Attention without residual and norm.

        Args:
            query_input: [B, T, D] current segment.
            kv_input: [B, K, D] memory followed by the current segment.
            training: bool.
            positions: what `_logits` takes for the position terms.
            max_distance: None, or the farthest key distance a query sees.

        Returns:
            [B, T, D] output of the output projection (before dropout).
        """
        # Heads-major [B, N, *, H] straight from the projections: the score
        # and context products are then batched matmuls over (B, N) with no
        # transposes inside them, faster than [B, T, N, H] einsums
        # (bench/README.md#speed-against-earlier-code).
        q = project_heads(query_input, self.query_kernel)  # [B, N, T, H]
        k = project_heads(kv_input, self.key_kernel)  # [B, N, K, H]
        v = project_heads(kv_input, self.value_kernel)  # [B, N, K, H]
        logits = self._logits(q, k, positions)  # [B, N, T, K]
        weights = self._attention_weights(logits, max_distance)  # [B, N, T, K]
        weights = self.attn_dropout_layer(weights, training=training)
        weights = tf.cast(weights, self.compute_dtype)
        context = tf.matmul(weights, v)  # [B, N, T, H]
        return merge_heads(context, self.output_kernel)  # [B, T, D]

    @property
    def dropout_layers(self):
        """The FastDropout layers a training call draws from
        (`model.layers.dropout.fixed_seeds`)."""
        return [self.attn_dropout_layer, self.output_dropout]

    def call(self, x, mem=None, training=False, rel_bias=None):
        """Applies attention over `concat(mem, x)`, the residual and the norm.

        Args:
            x: [B, T, D] current segment.
            mem: [B, M, D] memory (M may be 0) or None.
            training: bool, enables dropout.
            rel_bias: (u, v), each [N, H], the biases shared across layers:
                required when `untie_rel_bias=False`, refused otherwise.

        Returns:
            [B, T, D] in the compute dtype.

        Raises:
            ValueError: `rel_bias` does not match `untie_rel_bias`.
        """
        return self._apply(x, mem, training, self._relative_biases(rel_bias))

    def _apply(self, x, mem, training, positions):
        """`call` once the position inputs are known (see `_logits`)."""
        x = tf.cast(x, self.compute_dtype)
        # same_length: distances 0..M of the memory as given (a subclass may
        # drop memory no query sees; distances do not change with it).
        max_distance = None
        if self.same_length:
            max_distance = 0 if mem is None else tf.shape(mem)[1]
        if mem is not None:
            mem = self._select_memory(tf.cast(mem, self.compute_dtype))
        kv_input = x if mem is None else tf.concat([mem, x], axis=1)  # [B, K, D]
        if self.pre_norm:
            kv_input = self.layer_norm(kv_input)
            qlen = tf.shape(x)[1]
            # The last T positions; tf.slice for its cheaper gradient (see rel_shift).
            query_input = tf.slice(kv_input, [0, tf.shape(kv_input)[1] - qlen, 0], [-1, qlen, -1])
        else:
            query_input = x
        attn = self._attend(query_input, kv_input, training, positions, max_distance)
        attn = self.output_dropout(attn, training=training)
        if self.pre_norm:
            return x + attn
        return self.layer_norm(x + attn)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "d_model": self.d_model,
                "num_heads": self.num_heads,
                "d_head": self.d_head,
                "dropout": self.dropout,
                "attn_dropout": self.attn_dropout,
                "clamp_len": self.clamp_len,
                "pre_norm": self.pre_norm,
                "untie_rel_bias": self.untie_rel_bias,
                "same_length": self.same_length,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config
