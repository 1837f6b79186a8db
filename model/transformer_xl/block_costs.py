"""FLOPs and parameters of one block of each type (pure arithmetic, no TensorFlow).

The block registry (model/transformer_xl/blocks.py) gives each block type
these counts; model/transformer_xl/flops.py sums them over an architecture and
adds the embedding and the output layer. Its docstring holds the size glossary
and the counting conventions (a multiply-add is 2 FLOPs, matrix products only).
"""

import math

# The adaptive-span layer keeps memory in multiples of this many positions
# (model/layers/adaptive_span.py's TRIM_MULTIPLE; a test keeps them equal).
SPAN_TRIM_MULTIPLE = 1


def _kept_memory(config, mem_len, span):
    """Memory positions an attention layer actually uses.

    Adaptive span drops memory older than max_h(z_h) + R, rounded up to a
    multiple of SPAN_TRIM_MULTIPLE; `span` is that layer's max_h(z_h) in
    tokens (None: untrimmed).
    """
    if config.attention != "adaptive_span" or span is None:
        return mem_len
    needed = SPAN_TRIM_MULTIPLE * math.ceil((span + config.span_ramp) / SPAN_TRIM_MULTIPLE)
    return min(mem_len, needed)


def check_batch_size(batch_size):
    """The batch size B every FLOPs count takes; ValueError naming it when missing.

    There is one FLOPs model: the position projection W_R r is computed once per call
    and shared by the B rows of the batch, so its cost per token is divided by B * T.
    A count without B would be a second convention (per sequence), so B is required:
    pass the training batch (`TrainConfig.batch_size`), 1 for one sequence.
    """
    if batch_size is None or int(batch_size) != batch_size or batch_size < 1:
        raise ValueError(f"batch_size must be the batch B >= 1 the FLOPs are counted for (the "
                         f"training batch, e.g. --batch_size; 1 for one sequence), got "
                         f"{batch_size}")
    return int(batch_size)


def attention_flops_per_token(config, seq_len, mem_len, batch_size, span=None):
    """FLOPs per token of one attention block, by component.

    Args:
        config: ModelConfig.
        seq_len: int, segment length T.
        mem_len: int, memory length M.
        batch_size: int B >= 1 (required, `check_batch_size`); the position
            projection W_R r over K positions is computed once per call and
            shared by the batch, so it is divided by B * T.
        span: float or None, the layer's largest span in tokens (adaptive
            span only; trims the memory).

    Returns:
        dict with "projections" (q over T, k and v over K, output),
        "position_projection" (W_R r), "scores" (content, position and the
        weighted sum of values) and "total".
    """
    batch_size = check_batch_size(batch_size)
    d, nh = config.d_model, config.num_heads * config.head_size
    keys = _kept_memory(config, mem_len, span) + seq_len
    projections = 2 * d * nh * (2 + 2 * keys / seq_len)  # q and o per token; k, v per key
    position_projection = 2 * keys * d * nh / (seq_len * batch_size)
    scores = 3 * 2 * nh * keys  # (q+u).k, (q+v).r, weights.v
    return {
        "projections": projections,
        "position_projection": position_projection,
        "scores": scores,
        "total": projections + position_projection + scores,
    }


def dense_flops_per_token(config):
    """FLOPs per token of one dense (feed-forward) block: 2 D F + 2 F D."""
    return 4 * config.d_model * config.d_ffn


def attention_param_count(config):
    """Parameters of one attention block: q, k, v, W_R, o, layer norm, u, v, spans
    (learned key positions: no W_R, u, v; their table is the model's)."""
    d, nh = config.d_model, config.num_heads * config.head_size
    if config.learned_key_positions:
        return 4 * d * nh + 2 * d + config.num_heads
    params = 5 * d * nh + 2 * d
    if config.untie_rel_bias:
        params += 2 * nh
    if config.attention == "adaptive_span":
        params += config.num_heads  # one span fraction per head
    return params


def dense_param_count(config):
    """Parameters of one dense block: two kernels, two biases, layer norm."""
    return 2 * config.d_model * config.d_ffn + config.d_ffn + 3 * config.d_model
