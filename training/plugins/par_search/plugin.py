"""The PAR architecture search as a training plug-in.

For a Transformer-XL / PAR model (model/transformer_xl/model.py) it owns what the
search adds to plain training (Mandava et al. 2020, arXiv 2009.04534):
- the architecture logits' optimizer: Adam (lr `arch_learning_rate`, betas
  `arch_beta_1/2`), L2 decay `arch_weight_decay` added to the gradient, no
  clipping (Adam already normalises the step; clipping with the weights would
  let this gradient shrink the weights' update), updates after the
  architecture warm-up `min(arch_warmup_steps, arch_warmup_fraction (default
  20%) of the planned steps)` (the flag is a cap, so a short run still searches);
- the Gumbel-softmax temperature `tau_at(step)`, annealed over
  `tau_anneal_steps` or the planned steps, set on the model before every
  step and logged;
- the optional cost-aware search: `search_cost_coef * max(0, E[cost] -
  search_cost_target)` added to the loss, where `E[cost] = sum_blocks
  sum_k p_k cost_k` (plus the fixed embedding and output cost) is the expected
  forward FLOPs per token of the network under p = softmax(alpha), relative
  to a Transformer-XL of the same depth (model/transformer_xl/flops.py, counted for
  the training batch as the derivation report counts), so the knob trades
  perplexity for speed; the expected cost is logged (`expected_cost`); with
  `search_speed_target` X and no `search_cost_target`, the target is 1/X;
- the optional beta-decay regularisation (beta-DARTS, Ye et al. 2022, arXiv
  2203.01665): `lambda(step) * mean_blocks logsumexp(alpha_b)` added to the
  loss, `lambda` growing linearly from 0 at the end of the architecture
  warm-up to `arch_beta_decay` at the planned last step; its gradient on
  alpha_b is `lambda softmax(alpha_b) / num_blocks`, so it pulls hardest on
  the leading candidate and keeps the probabilities from peaking early; the
  term is logged (`beta_decay`);
- the speed target `search_speed_target` (speed_target.py): the derivation is the most
  probable architecture within 1/X of Transformer-XL's FLOPs, and freezing does not
  freeze a block to a choice no such architecture has;
- progressive freezing (docs/freezing.md): after the architecture warm-up,
  a block whose most probable candidate has kept a probability of at least
  `freeze_threshold` for `freeze_window` consecutive steps is frozen to it
  (`TransformerXLLM.freeze_block`): from the next step on only that
  candidate runs, its logits and the other candidates' weights stop
  training (`inactive_variables`; they stay in the checkpoints with their
  optimizer slots), and the trainer traces its step again (`trace_key`,
  at most once per block). Each freeze is logged (console, a
  training_log.log line, TensorBoard `train/frozen_*`) and listed in
  architecture.json; the counters live in the checkpoints (`search`), so a
  resumed run freezes at the same steps;
- with `then_retrain`, PAR's second stage in the same command: once every
  block is frozen the search ends (`should_stop`, evaluated and saved as a
  last step) and the derived architecture is trained from scratch with the
  same flags (`--architecture=<derived> --arch_warmup_steps=0`) in
  `<model_dir>_retrain` (`follow_up`); the search's metrics.json gets its
  results under "retrain";
- the architecture summaries (TensorBoard), the probability history
  (`arch_history.json`), and at the end the derived architecture
  (`architecture.json/.txt`, metrics.json) and the plots. A derivation from
  untrained logits (the architecture optimizer never applied an update, or
  every probability within 1e-3 of uniform) is flagged: a WARNING, a first
  line of architecture.txt and `"untrained": true` in architecture.json and
  metrics.json's derivation.

"Planned steps" is the run's horizon, fixed at its first start
(training/run/trainer.py).

A fixed architecture gets only its architecture string in metrics.json.
"""

import os

from absl import logging
import numpy as np
import tensorflow as tf

from training.plugins.base import OptimizerGroup
from training.plugins.par_search import derive, plots, stopping
from training.plugins.par_search import summaries as arch_summaries
from training.plugins.par_search.costs import candidate_costs
from training.plugins.par_search.freezing import FreezeState
from training.plugins.par_search.report import ParSearchReport
from training.plugins.par_search.retrain import retrain_config, seed_from_search
from training.plugins.par_search.schedules import tau_at
from training.plugins.par_search.speed_target import SpeedTarget
from training.setup.plan import capped_warmup


def _softmax(logits):
    """Row-wise softmax of float64 [num_blocks, C] logits."""
    z = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


class ParSearch(ParSearchReport):
    """See the module docstring."""

    RUN_FILES = (plots.ARCH_HISTORY_FILE, derive.ARCHITECTURE_JSON, derive.ARCHITECTURE_TXT,
                 "arch_history.png", "arch_history.gif")

    def __init__(self, model, config, horizon):
        self.model = model
        self.config = config
        self.searching = "arch" in model.variable_groups()
        self._tau_steps = config.search.tau_anneal_steps or horizon
        self._horizon = horizon
        self.arch_warmup_steps = capped_warmup(config.search.arch_warmup_steps, horizon,
                                               config.search.arch_warmup_fraction)
        self._tau = None
        self._optimizer = None
        self._costs = None
        if self.searching and config.search.search_cost_coef > 0:
            self._costs, self._fixed_cost = candidate_costs(
                config.model, config.seq_len, config.model.mem_len, config.batch_size)
        # The candidates' names, the columns of the probabilities (the model's config's).
        self.choices = tuple(spec.name for spec in model.model_config.candidate_specs)
        self.history = plots.ArchHistory(choices=self.choices)
        self.freezing = self.searching and config.search.freeze_threshold > 0
        # --search_speed_target: the derivation's FLOPs budget, which freezing respects.
        self.speed_target = SpeedTarget.for_run(config) if self.searching else None
        self._withheld = set()  # blocks whose freeze the speed target holds back (logged once)
        self.freeze_state = FreezeState(model.num_blocks) if self.searching else None
        self.stability = None
        if self.searching and config.search.stop_rule == "stable":
            search = config.search
            self.stability = stopping.StabilityRule(
                stopping.StopState(model.num_blocks, len(model.blocks[0].candidates)),
                self.arch_warmup_steps, search.stop_window, search.stop_min_lead,
                search.stop_tolerance)
        self._since = self._choice = self._frozen_step = self._frozen_probability = None
        if self.searching:
            self._read_freeze_state()
            logging.info("architecture warm-up %d steps (--arch_warmup_steps=%d, at most %d%% of "
                         "the %d planned steps)", self.arch_warmup_steps,
                         config.search.arch_warmup_steps,
                         round(100 * config.search.arch_warmup_fraction),
                         horizon)
        if self.freezing:
            logging.info("progressive freezing: a block is frozen to its choice once its "
                         "probability has stayed >= %g for %d steps after the warm-up "
                         "(--freeze_threshold, --freeze_window)", config.search.freeze_threshold,
                         config.search.freeze_window)

    @classmethod
    def create(cls, model, config, horizon):
        # A PAR network: searchable (a supernet) or derived (a fixed string).
        if not (hasattr(model, "arch_variables") and hasattr(model, "derived_architecture")):
            return None
        return cls(model, config, horizon)

    # ------------------------------------------------------------ freezing

    def _read_freeze_state(self):
        state = self.freeze_state
        self._since = state.stable_since.numpy().copy()
        self._choice = state.stable_choice.numpy().copy()
        self._frozen_step = state.frozen_step.numpy().copy()
        self._frozen_probability = state.frozen_probability.numpy().copy()

    def _write_freeze_state(self):
        state = self.freeze_state
        state.stable_since.assign(self._since)
        state.stable_choice.assign(self._choice)
        state.frozen_step.assign(self._frozen_step)
        state.frozen_probability.assign(self._frozen_probability)

    def checkpoint_objects(self):
        objects = {"search": self.freeze_state} if self.searching else {}
        if self.stability is not None:
            objects["search_stop"] = self.stability.state
        return objects

    def trace_key(self):
        return self.model.frozen_blocks if self.searching else None

    def inactive_variables(self):
        """A frozen block's logits and its other candidates' weights."""
        if not self.searching:
            return []
        inactive = []
        for block, frozen in zip(self.model.blocks, self.model.frozen_blocks):
            if frozen is None:
                continue
            inactive.append(block.arch_logits)
            for index in range(len(block.candidates)):
                layer = block.candidate_layer(index)
                if index != frozen and layer is not None:
                    inactive.extend(layer.trainable_variables)
        return inactive

    def _probabilities(self):
        """float64 [num_blocks, C] softmax(alpha), read on the host."""
        logits = np.stack([np.asarray(v.numpy(), np.float64)
                           for v in self.model.variable_groups()["arch"]])
        return _softmax(logits)

    def freezes(self):
        """The frozen blocks in freezing order: dicts block, step, choice (letter),
        candidate (name), probability."""
        out = []
        for block, frozen in enumerate(self.model.frozen_blocks if self.searching else ()):
            if frozen is None:
                continue
            spec = self.model.blocks[block].candidates[frozen]
            out.append({"block": block, "step": int(self._frozen_step[block]),
                        "choice": spec.letter, "candidate": spec.name,
                        "probability": float(self._frozen_probability[block])})
        return sorted(out, key=lambda f: (f["step"], f["block"]))

    def after_step(self, step):
        """The freezing rule, then the stability rule (`stopping.StabilityRule`)."""
        events = self._freeze_after(step)
        if self.stability is not None and self.stability.decided_step is None:
            if self.stability.observe(step, self._probabilities):
                logging.info("step %d: the search is decided (--stop_rule=stable): every "
                             "block kept its most probable candidate for the last %d steps "
                             "with a lead >= %g that did not fall by more than %g: %s", step,
                             stopping.SAMPLES * self.stability.interval,
                             self.config.search.stop_min_lead,
                             self.config.search.stop_tolerance,
                             self.model.derived_architecture)
                events.append({"search_decided": 1})
        return events

    def _freeze_after(self, step):
        """Counts each searching block's steps above the threshold; freezes it after the window.

        Steps of the architecture warm-up are not observed (the logits are not
        trained yet), so the first freeze comes `freeze_window` steps after it
        at the earliest.
        """
        if not self.freezing or step <= self.arch_warmup_steps:
            return []
        frozen = self.model.frozen_blocks
        if all(f is not None for f in frozen):
            return []
        c = self.config
        probs = self._probabilities()
        events, changed = [], False
        for block, choice in enumerate(frozen):
            if choice is not None:
                continue
            best = int(np.argmax(probs[block]))
            probability = float(probs[block, best])
            if probability < c.search.freeze_threshold:
                if self._since[block] >= 0:
                    self._since[block], self._choice[block], changed = -1, -1, True
                continue
            if self._since[block] < 0 or self._choice[block] != best:
                self._since[block], self._choice[block], changed = step, best, True
            if step - self._since[block] + 1 >= c.search.freeze_window:
                if not self._freeze_allowed(block, best, probability):
                    continue
                self.model.freeze_block(block, best)
                self._frozen_step[block] = step
                self._frozen_probability[block] = probability
                changed = True
                spec = self.model.blocks[block].candidates[best]
                logging.info("step %d: block %d frozen to %s (%s), probability %.4f (>= %g for "
                             "the last %d steps); frozen %s", step, block, spec.letter,
                             spec.name, probability, c.search.freeze_threshold,
                             c.search.freeze_window, self._frozen_pattern())
                events.append({"frozen_block": block, "frozen_choice": best,
                               "frozen_probability": probability})
        if changed:
            self._write_freeze_state()
        if events and all(f is not None for f in self.model.frozen_blocks):
            logging.info("step %d: every block is frozen: the run continues as the derived "
                         "architecture %s", step, self.model.derived_architecture)
        return events

    def _freeze_allowed(self, block, choice, probability):
        """False when freezing `block` to candidate `choice` would leave no architecture
        within --search_speed_target (the other searching blocks at their cheapest): the
        block then keeps searching, so every frozen block can keep its choice in the
        derivation. Logged once per block."""
        if self.speed_target is None:
            return True
        pattern = [None if f is None else block_.candidates[f].letter
                   for block_, f in zip(self.model.blocks, self.model.frozen_blocks)]
        pattern[block] = self.model.blocks[block].candidates[choice].letter
        if self.speed_target.reachable(pattern):
            return True
        if block not in self._withheld:
            self._withheld.add(block)
            logging.info("block %d is not frozen to %s (probability %.4f): no architecture "
                         "with it would be within %s (%.4f of Transformer-XL's FLOPs); it "
                         "keeps searching", block, pattern[block], probability,
                         self.speed_target.flag, self.speed_target.budget)
        return False

    def _frozen_pattern(self):
        """'aa?f??': the frozen blocks' letters, '?' for those still searching."""
        return "".join("?" if f is None else block.candidates[f].letter
                       for block, f in zip(self.model.blocks, self.model.frozen_blocks))

    @property
    def all_frozen(self):
        """True when every block of the supernet is frozen."""
        return self.searching and all(f is not None for f in self.model.frozen_blocks)

    @property
    def decided(self):
        """True when the search is decided by its --stop_rule."""
        if not self.searching:
            return False
        if self.stability is not None:
            return self.all_frozen or self.stability.decided_step is not None
        return self.all_frozen

    # ------------------------------------------------------------ the step

    def optimizer_groups(self, step):
        if not self.searching:
            return []
        from training.optimizers.fused_adam import FusedAdam

        c = self.config
        variables = list(self.model.variable_groups()["arch"])
        search = c.search
        self._optimizer = FusedAdam(learning_rate=search.arch_learning_rate,
                                    beta_1=search.arch_beta_1, beta_2=search.arch_beta_2,
                                    epsilon=c.epsilon)
        return [OptimizerGroup(
            name="arch", variables=variables, optimizer=self._optimizer,
            l2=search.arch_weight_decay, l2_variables=variables, clip_norm=0.0,
            start_step=self.arch_warmup_steps, learning_rate=lambda: search.arch_learning_rate)]

    def _logits(self):
        """Float32 [num_blocks, C] tensor of the architecture logits."""
        logits = tf.stack([tf.convert_to_tensor(v) for v in self.model.variable_groups()["arch"]])
        return tf.cast(logits, tf.float32)

    def _expected_cost(self):
        """Scalar float32 tensor: the expected relative FLOPs under softmax(alpha)."""
        probs = tf.nn.softmax(self._logits(), axis=-1)  # [num_blocks, C]
        return tf.reduce_sum(probs * tf.constant(self._costs, tf.float32)) + self._fixed_cost

    def _beta_decay(self):
        """Scalar float32 tensor: lambda(step) * mean over blocks of logsumexp(alpha_b).

        lambda grows linearly from 0 at the end of the architecture warm-up to
        --arch_beta_decay at the planned last step (read from the model's search step,
        so it moves inside a traced step).
        """
        span = max(self._horizon - self.arch_warmup_steps, 1)
        since = tf.cast(self.model.search_step, tf.float32) - float(self.arch_warmup_steps)
        ramp = tf.clip_by_value(since / float(span), 0.0, 1.0)
        smoothmax = tf.reduce_mean(tf.reduce_logsumexp(self._logits(), axis=-1))
        return self.config.search.arch_beta_decay * ramp * smoothmax

    def extra_losses(self):
        if not self.searching:
            return []
        c = self.config
        losses = []
        if self._costs is not None:
            cost = self._expected_cost()
            target = c.search.cost_target  # --search_cost_target, or 1/--search_speed_target
            if target > 0:  # only the cost above the target
                cost = tf.maximum(cost - target, 0.0)
            losses.append(c.search.search_cost_coef * cost)
        if c.search.arch_beta_decay > 0:
            losses.append(self._beta_decay())
        return losses

    def before_step(self, step):
        if not self.searching:
            return
        c = self.config
        self._tau = tau_at(step, c.search.tau_start, c.search.tau_end,
                           self._tau_steps, c.search.tau_schedule)
        self.model.set_search_state(self._tau, step)

    def step_values(self, step):
        if not self.searching:
            return {}
        values = {"tau": self._tau}
        if self._costs is not None:
            values["expected_cost"] = self._expected_cost()
        if self.config.search.arch_beta_decay > 0:
            values["beta_decay"] = self._beta_decay()
        return values

    # ------------------------------------------------------------ then retrain

    def should_stop(self):
        search = self.config.search
        return self.decided and (search.then_retrain or search.stop_rule == "stable")

    def follow_up(self, config, results):
        """The derived architecture from scratch once the search is decided (--then_retrain).

        With --stop_rule=stable a search that reached its planned end undecided is
        retrained too (its derived architecture, as PAR derives at the end), with
        a warning."""
        if not (self.searching and config.search.then_retrain):
            return None
        if not self.decided:
            if config.search.stop_rule != "stable":
                return None
            logging.warning("the search ended after its planned %d steps before every block "
                            "was decided (--stop_rule=stable%s): training its derived "
                            "architecture %s next", results.get("step", -1),
                            self._undecided_reasons(), self.model.derived_architecture)
        # The derivation on_finish wrote (under --search_speed_target not the argmax).
        # (A second stage started with another recipe was refused before the search:
        # SearchConfig.check_run.)
        return retrain_config(config, results.get("architecture",
                                                  self.model.derived_architecture))

    def _undecided_reasons(self):
        last = self.stability.last if self.stability is not None else None
        if not last:
            return ""
        return "; " + ", ".join(f"block {b}: {why}" for b, (ok, _, why) in enumerate(last)
                                if not ok)

    # ------------------------------------------------------------ the host

    def on_start(self, model_dir, resumed_step):
        init_from = self.config.search.init_from
        if init_from and resumed_step is None:
            prefix = seed_from_search(self.model, init_from)
            logging.info("the derived network %s starts from the weights of its candidates in "
                          "%s (--init_from)", self.model.derived_architecture, prefix)
        path = os.path.join(model_dir, plots.ARCH_HISTORY_FILE)
        if resumed_step is not None and os.path.exists(path):
            self.history = plots.ArchHistory.load(path)
            self.history.truncate(resumed_step)
        if self.searching:
            self._read_freeze_state()  # restored with the checkpoint
            if any(f is not None for f in self.model.frozen_blocks):
                logging.info("resumed with frozen blocks %s", self._frozen_pattern())

    def log_values(self, step, out):
        if not self.searching:
            return {}
        training = step > self.arch_warmup_steps and not self.all_frozen
        return {"lr_arch": self.config.search.arch_learning_rate if training else 0.0,
                "frozen_blocks": float(sum(f is not None for f in self.model.frozen_blocks))}

    def on_log(self, step, summaries, model_dir):
        if not self.searching:
            return
        probs = np.asarray(self.model.arch_probabilities)
        arch_summaries.write_architecture(summaries, step, probs, self.choices)
        self.history.append(step, probs)
        self.history.save(model_dir)

    def _derivation(self):
        """The derivation report: the argmax per block, or under --search_speed_target the
        most probable architecture within it (speed_target.py), frozen blocks kept."""
        c = self.config
        probs = np.asarray(self.model.arch_probabilities)
        updates = int(self._optimizer.iterations.numpy())
        untrained = derive.untrained_reason(probs, updates)
        if self.speed_target is None:
            return derive.derivation_report(c.model, probs, c.seq_len, c.model.mem_len,
                                            batch_size=c.batch_size, untrained=untrained)
        report = self.speed_target.derivation_report(probs, self.model.frozen_blocks, untrained)
        target = report["speed_target"]
        logging.info("%s: the most probable architecture %s has %.4f of Transformer-XL's FLOPs "
                     "(at most %.4f): %s", self.speed_target.flag, target["argmax"],
                     target["argmax_relative_flops"], target["max_relative_flops"],
                     "derived as it is" if target["argmax_meets_target"] else
                     f"derived {report['architecture']} instead, giving up "
                     f"{target['log_probability_given_up']:.3f} nats of log-probability")
        return report

    def on_finish(self, results, model_dir, chief):
        results["architecture"] = self.model.derived_architecture
        if not self.searching:
            return
        report = self._derivation()
        report["freezes"] = self.freezes()
        report["decided_step"] = (self.stability.decided_step if self.stability is not None
                                  else None)
        results["derivation"] = {k: report[k] for k in (
            "architecture", "counts", "relative_flops", "speedup", "untrained", "freezes",
            "decided_step")}
        if self.speed_target is not None:
            results["architecture"] = report["architecture"]
            results["derivation"]["speed_target"] = report["speed_target"]
        if report["untrained"]:
            logging.warning("the derived architecture %s is NOT a search result: %s",
                            report["architecture"], report["untrained_reason"])
        if chief:
            derive.write_derivation(model_dir, report)
            if len(self.history):
                plots.plot_arch_history(
                    self.history, os.path.join(model_dir, "arch_history.png"),
                    os.path.join(model_dir, "arch_history.gif"),
                    freezes={f["block"]: f["step"] for f in report["freezes"]})
        logging.info("derived architecture %s (%s), %.3f of Transformer-XL FLOPs",
                     report["architecture"], report["counts"], report["relative_flops"] or 0)
