"""The PAR architecture search as a training plug-in.

For a Transformer-XL / PAR model (model/transformer_xl/model.py) it owns what the
search adds to plain training (Mandava et al. 2020, arXiv 2009.04534):
- the architecture logits' optimizer: Adam (lr `arch_learning_rate`, betas
  `arch_beta_1/2`), L2 decay `arch_weight_decay` added to the gradient, no
  clipping (Adam already normalises the step; clipping with the weights would
  let this gradient shrink the weights' update), updates after the
  architecture warm-up `min(arch_warmup_steps, 20% of the planned steps)`
  (`ARCH_WARMUP_FRACTION`; the flag is a cap, so a short run still searches);
- the Gumbel-softmax temperature `tau_at(step)`, annealed over
  `tau_anneal_steps` or the planned steps, set on the model before every
  step and logged;
- the optional cost-aware search: `search_cost_coef * max(0, E[cost] -
  search_cost_target)` added to the loss, where `E[cost] = sum_blocks
  sum_k p_k cost_k` (plus the fixed embedding and output cost) is the expected
  forward FLOPs per token of the network under p = softmax(alpha), relative
  to a Transformer-XL of the same depth (model/transformer_xl/flops.py), so the knob trades
  perplexity for speed; the expected cost is logged (`expected_cost`);
- the architecture summaries (TensorBoard), the probability history
  (`arch_history.json`), and at the end the derived architecture
  (`architecture.json/.txt`, metrics.json) and the plots. A derivation from
  untrained logits (the architecture optimizer never applied an update, or
  every probability within 1e-3 of uniform) is flagged: a WARNING, a first
  line of architecture.txt and `"untrained": true` in architecture.json and
  metrics.json's derivation.

"Planned steps" is the run's horizon, fixed at its first start
(training/trainer.py).

A fixed architecture gets only its architecture string in metrics.json.
"""

import os

from absl import logging
import numpy as np

from model.transformer_xl import flops
from model.transformer_xl.config import ARCHITECTURE_LETTERS
from training import derive, plots, schedules
from training.config import capped_warmup
from training.plugins import OptimizerGroup, Plugin

# The architecture warm-up is at most this fraction of the planned steps.
ARCH_WARMUP_FRACTION = 0.2


def candidate_costs(model_config, seq_len, mem_len):
    """Forward FLOPs per token of each candidate of one block, and of the rest.

    Returns:
        (float64 [C] costs of (attention, dense, identity) of one block,
        fixed cost of embedding and output layer), both relative to the total
        of a Transformer-XL with as many blocks (`af` repeated, an extra `a`
        for an odd count).
    """
    n = model_config.num_blocks
    reference = "af" * (n // 2) + "a" * (n % 2)
    total = flops.forward_flops_per_token(model_config, reference, seq_len, mem_len)
    per_letter = {
        "a": flops.attention_flops_per_token(model_config, seq_len, mem_len)["total"],
        "f": flops.dense_flops_per_token(model_config),
        "i": 0.0,
    }
    costs = np.array([per_letter[letter] for letter in ARCHITECTURE_LETTERS], np.float64)
    return costs / total["total"], (total["embedding"] + total["head"]) / total["total"]


def expected_cost(probs, costs, fixed):
    """sum_blocks sum_k p_k cost_k + fixed, for probabilities [num_blocks, C]."""
    return float(np.sum(np.asarray(probs) @ costs) + fixed)


class ParSearch(Plugin):
    """See the module docstring."""

    RUN_FILES = (plots.ARCH_HISTORY_FILE, "architecture.json", "architecture.txt",
                 "arch_history.png", "arch_history.gif")

    def __init__(self, model, config, horizon):
        self.model = model
        self.config = config
        self.searching = "arch" in model.variable_groups()
        self._tau_steps = config.tau_anneal_steps or horizon
        self.arch_warmup_steps = capped_warmup(config.arch_warmup_steps, horizon,
                                               ARCH_WARMUP_FRACTION)
        self._tau = None
        self._optimizer = None
        self._costs = None
        if self.searching and config.search_cost_coef > 0:
            self._costs, self._fixed_cost = candidate_costs(
                config.model, config.seq_len, config.model.mem_len)
        self.history = plots.ArchHistory()
        if self.searching:
            logging.info("architecture warm-up %d steps (--arch_warmup_steps=%d, at most %d%% of "
                         "the %d planned steps)", self.arch_warmup_steps,
                         config.arch_warmup_steps, round(100 * ARCH_WARMUP_FRACTION), horizon)

    @classmethod
    def create(cls, model, config, horizon):
        if getattr(model, "family", None) != "transformer_xl":
            return None
        return cls(model, config, horizon)

    # ------------------------------------------------------------ the step

    def optimizer_groups(self, step):
        if not self.searching:
            return []
        from training.optimizers.fused_adam import FusedAdam

        c = self.config
        variables = list(self.model.variable_groups()["arch"])
        self._optimizer = FusedAdam(learning_rate=c.arch_learning_rate, beta_1=c.arch_beta_1,
                                    beta_2=c.arch_beta_2, epsilon=c.epsilon)
        return [OptimizerGroup(
            name="arch", variables=variables, optimizer=self._optimizer,
            l2=c.arch_weight_decay, l2_variables=variables, clip_norm=0.0,
            start_step=self.arch_warmup_steps, learning_rate=lambda: c.arch_learning_rate)]

    def _expected_cost(self):
        """Scalar float32 tensor: the expected relative FLOPs under softmax(alpha)."""
        import tensorflow as tf

        logits = tf.stack([tf.convert_to_tensor(v) for v in self.model.variable_groups()["arch"]])
        probs = tf.nn.softmax(tf.cast(logits, tf.float32), axis=-1)  # [num_blocks, C]
        return tf.reduce_sum(probs * tf.constant(self._costs, tf.float32)) + self._fixed_cost

    def extra_losses(self):
        if self._costs is None:
            return []
        import tensorflow as tf

        c = self.config
        cost = self._expected_cost()
        if c.search_cost_target > 0:  # only the cost above the target
            cost = tf.maximum(cost - c.search_cost_target, 0.0)
        return [c.search_cost_coef * cost]

    def before_step(self, step):
        if not self.searching:
            return
        c = self.config
        self._tau = schedules.tau_at(step, c.tau_start, c.tau_end, self._tau_steps,
                                     c.tau_schedule)
        self.model.set_search_state(self._tau, step)

    def step_values(self, step):
        if not self.searching:
            return {}
        values = {"tau": self._tau}
        if self._costs is not None:
            values["expected_cost"] = self._expected_cost()
        return values

    # ------------------------------------------------------------ the host

    def on_start(self, model_dir, resumed_step):
        path = os.path.join(model_dir, plots.ARCH_HISTORY_FILE)
        if resumed_step is not None and os.path.exists(path):
            self.history = plots.ArchHistory.load(path)
            self.history.truncate(resumed_step)

    def log_values(self, step, out):
        if not self.searching:
            return {}
        return {"lr_arch": self.config.arch_learning_rate
                if step > self.arch_warmup_steps else 0.0}

    def on_log(self, step, summaries, model_dir):
        if not self.searching:
            return
        probs = np.asarray(self.model.arch_probabilities)
        summaries.architecture(step, probs)
        self.history.append(step, probs)
        self.history.save(model_dir)

    def on_finish(self, results, model_dir, chief):
        results["architecture"] = self.model.derived_architecture
        if not self.searching:
            return
        c = self.config
        probs = np.asarray(self.model.arch_probabilities)
        updates = int(self._optimizer.iterations.numpy())
        report = derive.derivation_report(
            c.model, probs, c.seq_len, c.model.mem_len, batch_size=c.batch_size,
            untrained=derive.untrained_reason(probs, updates))
        results["derivation"] = {k: report[k] for k in (
            "architecture", "counts", "relative_flops", "speedup", "untrained")}
        if report["untrained"]:
            logging.warning("the derived architecture %s is NOT a search result: %s",
                            report["architecture"], report["untrained_reason"])
        if chief:
            derive.write_derivation(model_dir, report)
            if len(self.history):
                plots.plot_arch_history(
                    self.history, os.path.join(model_dir, "arch_history.png"),
                    os.path.join(model_dir, "arch_history.gif"))
        logging.info("derived architecture %s (%s), %.3f of Transformer-XL FLOPs",
                     report["architecture"], report["counts"], report["relative_flops"] or 0)
