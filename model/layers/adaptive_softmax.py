"""Adaptive softmax output layer and adaptive input embedding.

Grave et al. 2017, "Efficient softmax approximation for GPUs"
(arXiv 1609.04309); adaptive input and weight tying from Baevski & Auli 2019,
"Adaptive input representations for neural language modeling"
(arXiv 1809.10853).

Token ids must be ranked by descending training frequency. With cutoffs
`(c_0, ..., c_{K-1})` (all in `[1, V)`, strictly increasing, `c_K = V`):

- the head predicts ids `[0, c_0)` plus one logit per tail cluster;
- tail `i = 1..K` projects `d_model` to `d_i` and predicts ids
  `[c_{i-1}, c_i)`;
- `log p(w) = log p_head(cluster(w)) + log p_tail_i(w)`.

`cutoffs=()` is a plain full softmax (one Dense `D -> V` with bias).

Sizes:
    B: batch size            T: segment length
    D: d_model               V: vocabulary size
    K: number of tail clusters
    S: head size, c_0 + K    C_i: size of tail cluster i, d_i its dimension
    N: number of flattened tokens (product of the leading dimensions)
    n_i: number of tokens that fall in tail cluster i

The layers use `tf` ops directly: per-cluster partition/stitch of tokens has
no `keras.ops` equivalent, and the project runs on the TensorFlow backend only.

Under XLA (model/xla.py) the partition, whose sizes depend on the targets,
would recompile the step for every batch, so while traced for XLA each tail
(and each embedding lookup) runs for all N tokens and is masked to its own:
the same NLL and vectors, for the cost of the tails over every token.
"""

import keras
import tensorflow as tf

from model import xla
from model.config_base import tail_dims
from model.layers.initializers import clone_initializer


def _set_layout(layer, vocab_size, d_model, cutoffs, proj_factor, proj_dims):
    """Validates the shared arguments and stores them (and derived sizes).

    Raises:
        ValueError: naming the argument that is invalid.
    """
    for name, value in (("vocab_size", vocab_size), ("d_model", d_model)):
        if isinstance(value, bool) or int(value) != value or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}.")
    cutoffs = tuple(cutoffs or ())
    if any(isinstance(c, bool) or int(c) != c for c in cutoffs):
        raise ValueError(f"cutoffs must be integers, got {cutoffs!r}.")
    cutoffs = tuple(int(c) for c in cutoffs)
    if any(not 1 <= c < vocab_size for c in cutoffs):
        raise ValueError(
            f"cutoffs must lie in [1, vocab_size={vocab_size}) (the vocabulary "
            f"size is implied, do not list it), got {cutoffs!r}."
        )
    if any(b <= a for a, b in zip(cutoffs, cutoffs[1:])):
        raise ValueError(f"cutoffs must be strictly increasing, got {cutoffs!r}.")
    dims = tail_dims(int(d_model), len(cutoffs), proj_factor, proj_dims)
    layer.vocab_size = int(vocab_size)
    layer.d_model = int(d_model)
    layer.cutoffs = cutoffs
    layer.proj_factor = float(proj_factor)
    layer.proj_dims = dims if proj_dims else ()
    layer.tail_dims = dims
    layer.num_tails = len(cutoffs)
    # Head ids are [0, c_0), all of V without tails.
    layer.head_tokens = cutoffs[0] if cutoffs else layer.vocab_size
    layer.cluster_bounds = tuple(zip(cutoffs, cutoffs[1:] + (layer.vocab_size,)))


_serialize = keras.initializers.serialize


def _fresh(layer, initializer):
    """A copy of `initializer` for the layer's next weight.

    A reused Keras 3 initializer repeats its random stream (tails would copy
    the head), so every weight gets its own clone.
    """
    return clone_initializer(initializer, len(layer.weights))


def _layout_config(layer):
    return {
        "vocab_size": layer.vocab_size,
        "d_model": layer.d_model,
        "cutoffs": list(layer.cutoffs),
        "proj_factor": layer.proj_factor,
        "proj_dims": list(layer.proj_dims),
    }


def _cluster_index(ids, cutoffs):
    """Cluster of each id: 0 for the head, i for tail i. int32, same shape."""
    cluster = tf.zeros_like(ids, dtype=tf.int32)
    for c in cutoffs:
        cluster += tf.cast(ids >= c, tf.int32)
    return cluster


def _lookup_by_cluster(flat_ids, cutoffs, lookups):
    """Embeds each id with the lookup of its cluster and restores the order.

    Args:
        flat_ids: int32 [N] ids in [0, V).
        cutoffs: the K cutoffs.
        lookups: K + 1 callables, `lookups[i](local_ids [n_i]) -> [n_i, D]`,
            local ids counted from the start of cluster i.

    Returns:
        [N, D] vectors in the order of `flat_ids`.
    """
    if not cutoffs:
        return lookups[0](flat_ids)
    if xla.compiling_with_xla():
        return _lookup_masked(flat_ids, cutoffs, lookups)
    num_parts = len(cutoffs) + 1
    cluster = _cluster_index(flat_ids, cutoffs)
    id_parts = tf.dynamic_partition(flat_ids, cluster, num_parts)
    positions = tf.dynamic_partition(tf.range(tf.size(flat_ids)), cluster, num_parts)
    starts = (0,) + cutoffs
    vectors = [lookup(ids - start) for lookup, ids, start in zip(lookups, id_parts, starts)]
    return tf.dynamic_stitch(positions, vectors)


def _lookup_masked(flat_ids, cutoffs, lookups):
    """`_lookup_by_cluster` with static shapes: every lookup for all N ids, masked."""
    bounds = zip((0,) + tuple(cutoffs), tuple(cutoffs) + (None,))
    total = None
    for lookup, (start, end) in zip(lookups, bounds):
        inside = flat_ids >= start if end is None else (flat_ids >= start) & (flat_ids < end)
        # Ids of other clusters look up row 0 of this one, then are zeroed.
        vectors = lookup(tf.where(inside, flat_ids - start, 0))  # [N, D]
        vectors = tf.where(inside[:, None], vectors, tf.zeros_like(vectors))
        total = vectors if total is None else total + vectors
    return total


def _embed(layer, ids, lookups):
    """Shared body of the embeddings: flatten, look up per cluster, reshape."""
    ids = tf.convert_to_tensor(ids)
    if ids.dtype != tf.int32:
        ids = tf.cast(ids, tf.int32)
    flat = _lookup_by_cluster(tf.reshape(ids, [-1]), layer.cutoffs, lookups)
    out_shape = tf.concat([tf.shape(ids), [layer.d_model]], axis=0)
    return tf.cast(tf.reshape(flat, out_shape), layer.compute_dtype)


@keras.saving.register_keras_serializable(package="par")
class AdaptiveSoftmax(keras.layers.Layer):
    """Adaptive softmax over a frequency-ranked vocabulary (Grave et al. 2017).

    `call(hidden)` returns full log-probabilities so the layer works with
    `fit` and saving; training code should use `nll`, which computes each
    tail only for the tokens whose target falls in it. Logits are cast to
    float32 before the log-softmax under any dtype policy.

    Args:
        vocab_size: V, number of token ids (ids ranked by frequency).
        d_model: D, width of the hidden states.
        cutoffs: `(c_0, ..., c_{K-1})`, strictly increasing, in `[1, V)`;
            `()` gives a full softmax.
        proj_factor: tail i has dimension `d_model // proj_factor ** i`.
        proj_dims: explicit tail dimensions (K ints), override proj_factor.
        tie_embedding: the layer also serves as the input embedding through
            `embed` (tied adaptive input, Baevski & Auli 2019).
        kernel_initializer: initializer of the head kernel, tail projections
            and tail kernels. Biases start at zero.
        **kwargs: passed to `keras.layers.Layer` (name, dtype, ...).
    """

    def __init__(
        self,
        vocab_size,
        d_model,
        cutoffs=(),
        proj_factor=4.0,
        proj_dims=(),
        tie_embedding=False,
        kernel_initializer="glorot_uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        _set_layout(self, vocab_size, d_model, cutoffs, proj_factor, proj_dims)
        self.tie_embedding = bool(tie_embedding)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        # Head logits: the head ids plus one per tail cluster.
        self.head_size = self.head_tokens + self.num_tails
        # Shapes depend only on the arguments, and `embed` may run before
        # `call`, so all weights exist from construction on.
        self.build()

    def build(self, input_shape=None):
        if self.built:
            return
        # autocast=False: variables are cast by hand, so the biases are added
        # to float32 logits even when the matmuls run in bfloat16.
        self.head_kernel = self.add_weight(
            name="head_kernel",
            shape=(self.d_model, self.head_size),  # [D, S]
            initializer=_fresh(self, self.kernel_initializer),
            autocast=False,
        )
        self.head_bias = self.add_weight(
            name="head_bias",
            shape=(self.head_size,),
            initializer="zeros",
            autocast=False,
        )
        self.tail_projections = []
        self.tail_kernels = []
        self.tail_biases = []
        for i, (dim, (lo, hi)) in enumerate(
            zip(self.tail_dims, self.cluster_bounds), start=1
        ):
            self.tail_projections.append(
                self.add_weight(
                    name=f"tail_{i}_projection",
                    shape=(self.d_model, dim),  # [D, d_i]
                    initializer=_fresh(self, self.kernel_initializer),
                    autocast=False,
                )
            )
            self.tail_kernels.append(
                self.add_weight(
                    name=f"tail_{i}_kernel",
                    shape=(dim, hi - lo),  # [d_i, C_i]
                    initializer=_fresh(self, self.kernel_initializer),
                    autocast=False,
                )
            )
            self.tail_biases.append(
                self.add_weight(
                    name=f"tail_{i}_bias",
                    shape=(hi - lo,),
                    initializer="zeros",
                    autocast=False,
                )
            )

    def _weight(self, variable):
        return tf.cast(variable, self.compute_dtype)

    def _head_logits(self, hidden):
        """[..., D] -> [..., S] float32 head logits."""
        logits = tf.tensordot(hidden, self._weight(self.head_kernel), axes=1)
        return tf.cast(logits, tf.float32) + self.head_bias

    def _tail_logits(self, hidden, i):
        """[..., D] -> [..., C_i] float32 logits of tail i (0-based index)."""
        projected = tf.tensordot(
            hidden, self._weight(self.tail_projections[i]), axes=1
        )  # [..., d_i]
        # d_i is small, so this product costs little in float32, and it
        # spares casting the large [..., C_i] logits (slower in bfloat16).
        projected = tf.cast(projected, tf.float32)
        return tf.tensordot(projected, self.tail_kernels[i], axes=1) + self.tail_biases[i]

    def nll(self, hidden, targets):
        """Per-token negative log-likelihood.

        Args:
            hidden: [..., D] float hidden states (e.g. [B, T, D]).
            targets: [...] int target ids (e.g. [B, T]); ids < 0 are padding.

        Returns:
            [...] float32 NLL in nats, 0 at padding positions.

        Raises:
            tf.errors.InvalidArgumentError: a target is >= vocab_size.
        """
        hidden = tf.cast(hidden, self.compute_dtype)
        targets = tf.cast(targets, tf.int32)
        if not hidden.shape[:-1].is_compatible_with(targets.shape):
            raise ValueError(
                f"nll: hidden {hidden.shape} must be targets {targets.shape} + [D]."
            )
        flat_hidden = tf.reshape(hidden, [-1, self.d_model])  # [N, D]
        flat_targets = tf.reshape(targets, [-1])  # [N]
        valid = flat_targets >= 0
        safe_targets = tf.where(valid, flat_targets, 0)
        check = tf.debugging.assert_less(
            safe_targets,
            self.vocab_size,
            message=f"targets must be < vocab_size={self.vocab_size}",
        )
        with tf.control_dependencies([check]):
            safe_targets = tf.identity(safe_targets)

        cluster = _cluster_index(safe_targets, self.cutoffs)
        # A head-cluster target is its own id; a tail target is represented
        # in the head by its cluster logit.
        head_labels = tf.where(
            cluster == 0, safe_targets, self.head_tokens + cluster - 1
        )
        nll = tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=head_labels, logits=self._head_logits(flat_hidden)
        )  # [N]
        if self.num_tails:
            tails = self._tail_nll_masked if xla.compiling_with_xla() else self._tail_nll
            nll += tails(flat_hidden, safe_targets, cluster)
        nll = tf.where(valid, nll, 0.0)
        return tf.reshape(nll, tf.shape(targets))

    def _tail_nll(self, flat_hidden, targets, cluster):
        """Tail NLL of every token, 0 for head tokens: float32 [N].

        Partitions the tokens by cluster: tail i costs n_i rows.
        """
        num_parts = self.num_tails + 1
        hidden_parts = tf.dynamic_partition(flat_hidden, cluster, num_parts)
        target_parts = tf.dynamic_partition(targets, cluster, num_parts)
        positions = tf.dynamic_partition(tf.range(tf.size(targets)), cluster, num_parts)
        # Head tokens add nothing from the tails.
        tail_nll = [tf.zeros(tf.shape(positions[0]), tf.float32)]
        for i, (lo, _) in enumerate(self.cluster_bounds):
            tail_nll.append(
                tf.nn.sparse_softmax_cross_entropy_with_logits(
                    labels=target_parts[i + 1] - lo,
                    logits=self._tail_logits(hidden_parts[i + 1], i),
                )  # [n_i]
            )
        return tf.dynamic_stitch(positions, tail_nll)

    def _tail_nll_masked(self, flat_hidden, targets, cluster):
        """`_tail_nll` with static shapes (XLA): tail i for all N tokens, masked."""
        total = tf.zeros(tf.shape(targets), tf.float32)  # [N]
        for i, (lo, _) in enumerate(self.cluster_bounds):
            inside = cluster == i + 1  # [N]
            nll = tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=tf.where(inside, targets - lo, 0),
                logits=self._tail_logits(flat_hidden, i),
            )  # [N]
            total += tf.where(inside, nll, 0.0)
        return total

    def log_probs(self, hidden):
        """Full log-probabilities over the vocabulary.

        Args:
            hidden: [..., D] float hidden states.

        Returns:
            [..., V] float32 log-probabilities (each row log-sums to 0).
        """
        hidden = tf.cast(hidden, self.compute_dtype)
        head = tf.nn.log_softmax(self._head_logits(hidden))  # [..., S]
        pieces = [head[..., : self.head_tokens]]
        for i in range(self.num_tails):
            cluster_logp = head[..., self.head_tokens + i, None]  # [..., 1]
            pieces.append(
                cluster_logp + tf.nn.log_softmax(self._tail_logits(hidden, i))
            )
        return tf.concat(pieces, axis=-1) if len(pieces) > 1 else pieces[0]

    def embed(self, ids):
        """Tied (adaptive) input embedding from the output weights.

        A head id w uses column w of the head kernel; a tail id w in cluster
        i uses `tail_projection_i @ tail_kernel_i[:, w - c_{i-1}]`. Not
        scaled: the language model applies its own sqrt(D).

        Args:
            ids: [...] int ids in [0, V).

        Returns:
            [..., D] embeddings in the compute dtype.

        Raises:
            ValueError: the layer was built with tie_embedding=False.
        """
        if not self.tie_embedding:
            raise ValueError(
                f"{self.name}.embed() needs tie_embedding=True; use "
                "AdaptiveEmbedding for an untied input embedding."
            )

        def head_lookup(local_ids):
            # Gather columns of [D, S]: no transpose of the whole kernel.
            return tf.transpose(tf.gather(self.head_kernel, local_ids, axis=1))

        def tail_lookup(i):
            def lookup(local_ids):
                rows = tf.transpose(
                    tf.gather(self.tail_kernels[i], local_ids, axis=1)
                )  # [n_i, d_i]
                return tf.matmul(rows, self.tail_projections[i], transpose_b=True)

            return lookup

        lookups = [head_lookup] + [tail_lookup(i) for i in range(self.num_tails)]
        return _embed(self, ids, lookups)

    def call(self, hidden):
        return self.log_probs(hidden)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.vocab_size,)

    def get_config(self):
        config = super().get_config()
        config.update(_layout_config(self))
        config["tie_embedding"] = self.tie_embedding
        config["kernel_initializer"] = _serialize(self.kernel_initializer)
        return config


@keras.saving.register_keras_serializable(package="par")
class AdaptiveEmbedding(keras.layers.Layer):
    """Untied adaptive input embedding (Baevski & Auli 2019).

    Head ids `[0, c_0)` use a `[c_0, D]` table; tail i uses a `[C_i, d_i]`
    table and a `[d_i, D]` projection, with the same clusters and dims as
    `AdaptiveSoftmax`. Without cutoffs it is a plain `[V, D]` table. Not
    scaled: the language model applies its own sqrt(D).

    Args:
        vocab_size: V, number of token ids (ids ranked by frequency).
        d_model: D, output width.
        cutoffs: as in `AdaptiveSoftmax`.
        proj_factor: tail i has dimension `d_model // proj_factor ** i`.
        proj_dims: explicit tail dimensions (K ints), override proj_factor.
        embeddings_initializer: initializer of the tables.
        kernel_initializer: initializer of the tail projections.
        **kwargs: passed to `keras.layers.Layer`.
    """

    def __init__(
        self,
        vocab_size,
        d_model,
        cutoffs=(),
        proj_factor=4.0,
        proj_dims=(),
        embeddings_initializer="uniform",
        kernel_initializer="glorot_uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        _set_layout(self, vocab_size, d_model, cutoffs, proj_factor, proj_dims)
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.build()

    def build(self, input_shape=None):
        if self.built:
            return
        self.head_embeddings = self.add_weight(
            name="head_embeddings",
            shape=(self.head_tokens, self.d_model),  # [c_0, D]
            initializer=_fresh(self, self.embeddings_initializer),
            autocast=False,
        )
        self.tail_embeddings = []
        self.tail_projections = []
        for i, (dim, (lo, hi)) in enumerate(
            zip(self.tail_dims, self.cluster_bounds), start=1
        ):
            self.tail_embeddings.append(
                self.add_weight(
                    name=f"tail_{i}_embeddings",
                    shape=(hi - lo, dim),  # [C_i, d_i]
                    initializer=_fresh(self, self.embeddings_initializer),
                    autocast=False,
                )
            )
            self.tail_projections.append(
                self.add_weight(
                    name=f"tail_{i}_projection",
                    shape=(dim, self.d_model),  # [d_i, D]
                    initializer=_fresh(self, self.kernel_initializer),
                    autocast=False,
                )
            )

    def call(self, ids):
        """Embeds ids.

        Args:
            ids: [...] int ids in [0, V).

        Returns:
            [..., D] embeddings in the compute dtype.
        """

        def head_lookup(local_ids):
            return tf.gather(self.head_embeddings, local_ids)

        def tail_lookup(i):
            def lookup(local_ids):
                rows = tf.gather(self.tail_embeddings[i], local_ids)  # [n_i, d_i]
                return tf.matmul(rows, self.tail_projections[i])  # [n_i, D]

            return lookup

        lookups = [head_lookup] + [tail_lookup(i) for i in range(self.num_tails)]
        return _embed(self, ids, lookups)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape) + (self.d_model,)

    def get_config(self):
        config = super().get_config()
        config.update(_layout_config(self))
        config["embeddings_initializer"] = _serialize(self.embeddings_initializer)
        config["kernel_initializer"] = _serialize(self.kernel_initializer)
        return config
