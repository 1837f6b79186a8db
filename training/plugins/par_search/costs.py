"""The cost-aware search's costs: each candidate's forward FLOPs per token relative to a
Transformer-XL of the same depth (model/transformer_xl/flops.py), and the expected cost of
the network under the blocks' probabilities."""

import numpy as np

from model.transformer_xl import flops


def candidate_costs(model_config, seq_len, mem_len):
    """Forward FLOPs per token of each candidate of one block, and of the rest.

    Returns:
        (float64 [C] costs of the candidates of one block (`model_config.candidates`
        in their order: attention, dense, identity for "afi"), fixed cost of
        embedding and output layer), both relative to the total of a
        Transformer-XL with as many blocks (`af` repeated, an extra `a` for an
        odd count).
    """
    n = model_config.num_blocks
    reference = "af" * (n // 2) + "a" * (n % 2)
    total = flops.forward_flops_per_token(model_config, reference, seq_len, mem_len)
    costs = np.array([spec.flops_per_token(model_config, seq_len, mem_len)
                      for spec in model_config.candidate_specs], np.float64)
    return costs / total["total"], (total["embedding"] + total["head"]) / total["total"]


def expected_cost(probs, costs, fixed):
    """sum_blocks sum_k p_k cost_k + fixed, for probabilities [num_blocks, C]."""
    return float(np.sum(np.asarray(probs) @ costs) + fixed)
