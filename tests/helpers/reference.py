"""Slow, explicit reference implementations the layer tests compare against."""

import math

import numpy as np


def randomize_weights(layer, seed=0, scale=0.4):
    """Large random weights so that scores are far from uniform attention."""
    rng = np.random.default_rng(seed)
    for weight in layer.weights:
        value = rng.normal(0.0, scale, weight.shape)
        if weight.path.endswith("gamma"):
            value = 1.0 + value
        weight.assign(value.astype("float32"))


def sinusoid(position, d_model):
    inv_freq = [1.0 / 10000 ** (k / d_model) for k in range(0, d_model, 2)]
    sines = [math.sin(position * f) for f in inv_freq]
    return np.array(sines + [math.cos(position * f) for f in inv_freq])


def layer_norm(h, gamma, beta, eps):
    return (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + eps) * gamma + beta


def slow_attention(layer, x, mem, span_weight=None, renorm_eps=0.0, rel_bias=None,
                   same_length=None):
    """Relative attention layer output from the formula, one (b, i, n, j) at a time.

    Args:
        layer: a built RelativeMultiHeadAttention (or subclass): weights only.
        x: [B, T, D] array.
        mem: [B, M, D] array or None.
        span_weight: optional function (head, distance) -> multiplier applied
            to the softmax weights, which are then renormalised.
        renorm_eps: epsilon added to the renormalisation denominator.
        rel_bias: optional (u, v) [N, H] used instead of the layer's own
            (a layer built with untie_rel_bias=False has none).
        same_length: see only the M + 1 keys at distances 0..M; None: the
            layer's same_length.

    Returns:
        float64 [B, T, D].
    """
    w = {v.path.split("/")[-1]: np.asarray(v.numpy(), np.float64) for v in layer.weights}
    if rel_bias is not None:
        w["content_bias"], w["position_bias"] = (np.asarray(b, np.float64) for b in rel_bias)
    x = np.asarray(x, np.float64)
    mem = np.zeros((x.shape[0], 0, x.shape[2])) if mem is None else np.asarray(mem, np.float64)
    batch, qlen, width = x.shape
    mlen = mem.shape[1]
    same_length = layer.same_length if same_length is None else same_length
    first_key = (lambda i: i) if same_length else (lambda i: 0)
    eps = layer.layer_norm_epsilon
    keys = np.concatenate([mem, x], axis=1)
    if layer.pre_norm:
        keys = layer_norm(keys, w["gamma"], w["beta"], eps)
    queries = keys[:, mlen:]
    out = np.zeros_like(x)
    for b in range(batch):
        for i in range(qlen):
            attn = np.zeros(width)
            for n in range(layer.num_heads):
                q = queries[b, i] @ w["query_kernel"][:, n]
                scores, values = [], []
                keys_seen = range(first_key(i), mlen + i + 1)
                for j in keys_seen:  # causal: keys up to absolute position M + i
                    distance = mlen + i - j
                    if layer.clamp_len > 0:
                        distance = min(distance, layer.clamp_len)
                    k = keys[b, j] @ w["key_kernel"][:, n]
                    r = sinusoid(distance, width) @ w["position_kernel"][:, n]
                    score = (q + w["content_bias"][n]) @ k + (q + w["position_bias"][n]) @ r
                    scores.append(score / math.sqrt(layer.d_head))
                    values.append(keys[b, j] @ w["value_kernel"][:, n])
                p = np.exp(np.array(scores) - max(scores))
                p /= p.sum()
                if span_weight is not None:
                    p = p * np.array([span_weight(n, mlen + i - j) for j in keys_seen])
                    p /= p.sum() + renorm_eps
                attn += (p @ np.array(values)) @ w["output_kernel"][n]
            out[b, i] = x[b, i] + attn
    if not layer.pre_norm:
        out = layer_norm(out, w["gamma"], w["beta"], eps)
    return out
