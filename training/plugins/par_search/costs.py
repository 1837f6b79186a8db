"""The cost-aware search's costs: each candidate's forward FLOPs per token relative to a
Transformer-XL of the same depth (model/transformer_xl/flops.py, the project's one FLOPs
model: counted for the training batch), and the expected cost of the network under the
blocks' probabilities."""

import numpy as np

from model.transformer_xl import flops


def candidate_costs(model_config, seq_len, mem_len, batch_size):
    """Forward FLOPs per token of each candidate of one block, and of the rest.

    Counted as the derivation report counts (derive.derivation_report), for the same
    segment, memory and batch, so a fixed architecture's expected cost is its reported
    `relative_flops`.

    Args:
        model_config: the supernet's ModelConfig.
        seq_len, mem_len: segment length T and memory length M.
        batch_size: the training batch B (the position projection is shared by it).

    Returns:
        (float64 [C] costs of the candidates of one block (`model_config.candidates`
        in their order: attention, dense, identity for "afi"), fixed cost of
        embedding and output layer), both relative to the total of a
        Transformer-XL with as many blocks (`af` repeated, an extra `a` for an
        odd count).
    """
    n = model_config.num_blocks
    reference = "af" * (n // 2) + "a" * (n % 2)
    total = flops.forward_flops_per_token(model_config, reference, seq_len, mem_len,
                                          batch_size=batch_size)
    costs = np.array([spec.flops_per_token(model_config, seq_len, mem_len, batch_size)
                      for spec in model_config.candidate_specs], np.float64)
    return costs / total["total"], (total["embedding"] + total["head"]) / total["total"]


def expected_cost(probs, costs, fixed):
    """sum_blocks sum_k p_k cost_k + fixed, for probabilities [num_blocks, C]."""
    return float(np.sum(np.asarray(probs) @ costs) + fixed)
