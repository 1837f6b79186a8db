"""`Trainer`: model, optimizers and the compiled training step of one run.

It also evaluates a split (the one stream evaluator, evaluation/stream.py),
samples text (training/report/samples.py), saves and restores checkpoints and keeps
the training memories. The host loop that drives it (data, logging,
evaluation schedule, metrics.json) is `training.run.loop.train` (training/run/host.py); the
optimizer groups are made by training/optimizers/groups.py.

The trainer uses the model only through the language-model interface
(model/interface.py): state in, state out, token NLL, log-probs, extra
losses, variable groups. Research add-ons (the PAR search, span reports) are
plug-ins (training/plugins) that contribute optimizer groups, losses and
per-step values.

The step (`Trainer.train_step`), with R replicas and the global batch [B, T]:
1. The plug-ins' `before_step` run (e.g. the PAR search sets tau).
2. Each replica runs its rows with its own state and computes
   `loss_r = sum(token_nll_r) / (B*T) + sum(extra_losses) / R`, so that the
   sum over replicas is the mean token NLL of the global batch plus the extra
   losses counted once, and the gradients of every optimizer group.
   With `batch_split=K` (gradient accumulation) the replica runs its rows as
   K micro-batches of B/(R*K) consecutive rows, each with its own rows of the
   model state, one after another in a `tf.while_loop` (one iteration at a
   time, so only one micro-batch's activations are alive). Micro-batch k
   contributes `sum(token_nll_k) / (B*T) + sum(extra_losses_k) / (R*K)` and
   the gradients are summed: the token term adds up to the unsplit one
   exactly, and the extra losses, each a row mean or independent of the
   rows, are counted once. The new state is the micro-batches' new rows in
   order, so checkpoints do not depend on K.
3. The gradients are summed over replicas once (`all_reduce`), so every
   replica holds the gradient of the global loss. Each group's gradients are
   clipped to its `clip_norm` by their global norm (the weights: --clip_norm;
   a plug-in group decides for itself), then its L2 term is added.
4. If the loss and every gradient norm are finite, each group's optimizer
   applies its gradients (a plug-in group from its `start_step` on). The
   Keras optimizers' own cross-replica sum is switched off because the
   gradients are already reduced. Otherwise nothing is applied, and the host
   applies --on_nonfinite (training/run/host.py): stop with
   `training.run.loop.NonFiniteError` naming the quantity (the loss or a
   group's gradient), or go on with the step skipped. Under mixed_float16
   overflowing gradients are normal: the loss-scale optimizer skips the step
   and lowers its scale, and only a non-finite loss counts.
5. With --ema_decay, if the step was finite, the moving average of the
   weights moves towards the updated weights (training/run/ema.py; a
   skipped step leaves it, one step is one update whatever --batch_split).
6. The replicas' new states are kept for the next step.

The learning rate and the plug-ins' schedules are functions of the index of
the step being taken (0 for the first step), read from `TrainState.step`; the
learning-rate warm-up counts steps from 1, as the references do
(training/optimizers/schedules.py): the first step trains at lr / warmup, not at 0.
They are planned for the run's horizon: its total steps at the first start,
saved in the checkpoints (`TrainState.horizon`), so a run resumed with
another --max_steps/--epochs keeps its learning rate and temperature curves
and only stops earlier or later. The learning-rate warm-up is
`min(--warmup_steps, --warmup_fraction of the horizon)`
(`training.setup.config.capped_warmup`); the log line says when the cap shortens it.
"""

import contextlib
import math

from absl import logging
import keras
import tensorflow as tf

from evaluation import stream
from model.families import build_model
from model.interface import WEIGHTS_GROUP, check_model
from pardata.replicas import distribute_rows, gather_rows
from runstore import checkpoints, metrics
from training import plugins
from training.optimizers import groups as optimizer_groups
from training.optimizers import schedules
from training.report import samples
from training.run import checkpoint as checkpoint_lib
from training.run import ema, micro_batches
from training.run import strategy as strategy_lib
from training.setup.config import capped_warmup, check_batch_split, total_steps


def _warn_slow_precision(config, strategy):
    """Warns of a 16-bit setting that runs slower than float32 on this machine's CPU: float16
    on any CPU, bfloat16 on a CPU without bfloat16 instructions (AVX512_BF16, AMX)."""
    if tf.config.list_physical_devices("GPU") or isinstance(strategy, tf.distribute.TPUStrategy):
        return
    if config.precision == "mixed_float16":
        logging.warning("--precision=mixed_float16 on a machine without a GPU: CPUs have "
                        "no fast float16 math, so this runs slower than float32 (CPUs "
                        "with bfloat16 instructions may gain from mixed_bfloat16)")
    bfloat16 = [flag for flag, on in (
        ("--precision=mixed_bfloat16", config.precision == "mixed_bfloat16"),
        ("--muon_ns_bfloat16=1", config.optimizer == "muon" and config.muon_ns_bfloat16 == 1))
        if on]
    if bfloat16 and strategy_lib.cpu_has_bfloat16() is False:
        logging.warning("%s on a CPU without bfloat16 instructions (%s lists neither "
                        "avx512_bf16 nor amx_bf16): bfloat16 is emulated there and may run "
                        "slower than float32; drop %s unless you measured it faster",
                        " and ".join(bfloat16), strategy_lib.CPUINFO,
                        " and ".join(flag.split("=")[0] for flag in bfloat16))


class Trainer:
    """Model, optimizers, state and compiled steps of one run.

    Creating one sets the global Keras dtype policy to `config.precision` and
    seeds Keras, NumPy and TensorFlow with the model seed (`training.run.loop.train`
    restores the previous policy when it returns).

    Args:
        config: TrainConfig.
        meta: meta.json of the data.
        strategy: tf.distribute strategy (created before any TF op).
        tokenizer: the data's tokenizer (for the text sample), or None.
        horizon: total steps the schedules are planned for; None: this
            config's total steps (a fresh run). A resumed run passes the
            horizon of its checkpoint (`checkpoint.saved_horizon`).
    """

    def __init__(self, config, meta, strategy, tokenizer=None, horizon=None):
        self.config = config
        self.meta = meta
        self.strategy = strategy
        self.tokenizer = tokenizer
        self.replicas = strategy.num_replicas_in_sync
        self.total_steps = total_steps(config, meta["splits"]["train"]["records"])
        self.horizon = int(horizon or self.total_steps)
        self.batch_size = meta["splits"]["train"]["batch_size"]
        self.batch_split = config.batch_split
        check_batch_split(config, self.batch_size // self.replicas, self.replicas)
        self._global_tokens = float(self.batch_size * config.seq_len)
        keras.mixed_precision.set_global_policy(config.precision)
        _warn_slow_precision(config, strategy)
        keras.utils.set_random_seed(config.model.seed)
        self.warmup_steps = capped_warmup(config.warmup_steps, self.horizon,
                                          config.warmup_fraction)
        self.lr_schedule = schedules.make_lr_schedule(
            config.lr_schedule, config.learning_rate, self.warmup_steps,
            config.decay_steps or max(self.horizon, self.warmup_steps), config.min_lr,
            config.lr_cooldown_fraction)
        logging.info(
            "schedules planned for %d steps%s; learning-rate warm-up %d steps%s", self.horizon,
            "" if self.horizon == self.total_steps else
            f" (fixed at the first start; this run stops at step {self.total_steps})",
            self.warmup_steps,
            "" if self.warmup_steps == config.warmup_steps else
            f" (--warmup_steps={config.warmup_steps} capped: the run is too short for it, at "
            f"most --warmup_fraction={config.warmup_fraction:g} of its steps warm up)")

        with strategy.scope():
            self.model = check_model(build_model(config.model))
        self.plugins = plugins.make_plugins(self.model, config, self.horizon)
        state_shapes = [s.shape for s in self.model.initial_state(self.batch_size)]
        # Host variables (outside the scope): never mirrored.
        self.state = checkpoint_lib.TrainState(state_shapes, self.model.compute_dtype)
        self.state.horizon.assign(self.horizon)
        with strategy.scope():
            self.groups = optimizer_groups.make_groups(
                self.model, config, self.plugins, self.lr_schedule, self.state.step)
        optimizer_groups.check_groups(self.model, self.groups)
        # The average of the weights group only (not the architecture logits).
        self.weight_average = ema.WeightAverage(
            self.model.variable_groups()[WEIGHTS_GROUP], config.ema_decay,
            strategy) if config.ema_decay else None
        extras = {}
        for plugin in self.plugins:
            extras.update(plugin.checkpoint_objects())
        self.checkpointer = checkpoint_lib.Checkpointer(
            config.model_dir, self.model, {f"{g.name}_optimizer": g.optimizer
                                           for g in self.groups},
            self.state, config.keep_checkpoints, strategy, extras=extras,
            weight_average=self.weight_average)
        self.model_state = None
        self.reset_state()
        self.traces = 0  # how often the compiled functions were (re)made
        self._trace_key = None
        self._compile()

    def _compile(self):
        """(Re)creates the compiled functions for the plug-ins' current trace keys.

        A plug-in whose trace key changes (the PAR search freezing a block)
        changes what the functions compute and which variables train; they
        are made again, so each is traced once more (at most once per freeze).
        """
        config, strategy = self.config, self.strategy
        self._trace_key = self._current_trace_key()
        inactive = {id(v) for plugin in self.plugins for v in plugin.inactive_variables()}
        # Per group the variables that train now (gradients computed, updates applied).
        self._active = [[v for v in g.variables if id(v) not in inactive] for g in self.groups]
        self._forward_backward = tf.function(self._replica_forward_backward,
                                             jit_compile=config.xla or None)
        # --xla on one device: the whole step (forward, backward, clipping,
        # the optimizers' updates) is one XLA program. Across replicas the
        # forward and backward pass is compiled and the all-reduce and
        # updates run as TensorFlow ops around it.
        whole_step_xla = config.xla and not isinstance(strategy, (
            tf.distribute.MirroredStrategy, tf.distribute.MultiWorkerMirroredStrategy,
            tf.distribute.TPUStrategy))  # (a TPU compiles its replica step anyway)
        self._step_fn = tf.function(self._step, jit_compile=whole_step_xla or None)
        # Evaluation compiled like the training forward pass under --xla (model/xla.py).
        self._evaluator = stream.StreamEvaluator(self.model, config.eval_mem_len, strategy,
                                                 jit_compile=config.xla)
        self._sampler = samples.TextSampler(self.model, config, self.meta, self.tokenizer,
                                            strategy)
        self.traces += 1

    def _current_trace_key(self):
        return tuple(plugin.trace_key() for plugin in self.plugins)

    def _check_compiled(self):
        """Makes the compiled functions again if a plug-in's trace key changed."""
        if self._current_trace_key() != self._trace_key:
            self._compile()

    # ------------------------------------------------------------ construction

    @property
    def optimizers(self):
        """dict group name -> its Keras optimizer ("weights" first)."""
        return {g.name: g.optimizer for g in self.groups}

    @property
    def _loss_scale(self):
        return optimizer_groups.loss_scale(self.groups)

    @property
    def _variables(self):
        """The variables that train now, group after group (see `_compile`)."""
        return [v for active in self._active for v in active]

    # ------------------------------------------------------------------- state

    def initial_state(self, batch_size, mem_len=None):
        """The model's zero state for a global batch, split over the replicas."""
        return distribute_rows(
            self.strategy, self.model.initial_state(batch_size, mem_len))

    def reset_state(self):
        """Zero training state (start of the run and of every epoch)."""
        self.model_state = self.initial_state(self.batch_size)

    def global_state(self):
        """The training state as global [B, ...] tensors (collective)."""
        return gather_rows(self.strategy, list(self.model_state))

    def find_resume_point(self):
        """The newest checkpoint of model_dir that reads back whole (`checkpoint.find_good`;
        training.run.loop also checks its data position, which only the loop keeps).

        Returns:
            (prefix or None, list of (prefix, problem) of damaged newer ones).
        """
        return checkpoints.find_good(self.config.model_dir)

    def restore(self, path=None):
        """Restores a checkpoint (model state included); returns its step or None.

        Args:
            path: checkpoint prefix; None: the newest good one of model_dir
                (`find_resume_point`).

        Raises:
            ValueError: the checkpoint's horizon differs from this trainer's
                (create it with `horizon=checkpoint.saved_horizon(path)`).
        """
        if path is None:
            path, _ = self.find_resume_point()
        step = None if path is None else self.checkpointer.restore(path)
        if step is not None:
            saved = int(self.state.horizon.numpy())
            if saved != self.horizon:
                raise ValueError(
                    f"the checkpoint's schedules are planned for {saved} steps, this trainer's "
                    f"for {self.horizon}: create the Trainer with horizon="
                    "training.run.checkpoint.saved_horizon(path)")
            self.model_state = distribute_rows(
                self.strategy, [tf.convert_to_tensor(m) for m in self.state.memories])
        return step

    def save(self):
        """Saves a checkpoint at the current step (collective under multi-worker)."""
        return self.checkpointer.save(self.global_state())

    # -------------------------------------------------------------------- step

    def _replica_forward_backward(self, inputs, targets, model_state):
        """Loss, NLL sum, gradients and new state of one (micro-)batch of rows."""
        model = self.model
        variables = self._variables
        with tf.GradientTape() as tape:
            hidden, new_state = model(inputs, model_state, training=True)
            nll_sum = tf.reduce_sum(model.token_nll(hidden, targets))
            loss = nll_sum / self._global_tokens
            extra = list(model.extra_losses(hidden))
            for plugin in self.plugins:
                extra.extend(plugin.extra_losses())
            if extra:
                loss += tf.add_n([tf.cast(x, tf.float32) for x in extra]) / (
                    self.replicas * self.batch_split)
            scaled = self._loss_scale.scale_loss(loss) if self._loss_scale else loss
        grads = tape.gradient(scaled, variables)
        missing = [v.path for v, g in zip(variables, grads) if g is None]
        if missing:
            logging.warning("no gradient for %s; using zeros", missing)
        grads = [tf.zeros_like(v) if g is None else tf.convert_to_tensor(g)
                 for g, v in zip(grads, variables)]
        return loss, nll_sum, grads, new_state

    def _replica_gradients(self, inputs, targets, model_state):
        """(loss, nll_sum, gradients, new_state) of this replica's rows, in `batch_split`
        micro-batches (training/run/micro_batches.py) summed."""
        if self.batch_split == 1:
            return self._forward_backward(inputs, targets, model_state)
        return micro_batches.accumulate(self._forward_backward, self.batch_split,
                                        self._variables, inputs, targets, model_state)

    def _replica_step(self, inputs, targets, model_state):
        loss, nll_sum, grads, new_state = self._replica_gradients(inputs, targets, model_state)
        if self.replicas > 1:
            context = tf.distribute.get_replica_context()
            reduced = context.all_reduce(tf.distribute.ReduceOp.SUM, [loss, nll_sum] + grads)
            loss, nll_sum, grads = reduced[0], reduced[1], reduced[2:]
        if self._loss_scale:
            scale = tf.cast(self._loss_scale.dynamic_scale, tf.float32)
            grads = [g / scale for g in grads]
        by_group, norms, offset = [], {}, 0
        for group, active in zip(self.groups, self._active):
            group_grads = grads[offset:offset + len(active)]
            offset += len(active)
            norm = tf.linalg.global_norm(group_grads) if group_grads else tf.constant(0.0)
            if group.clip_norm > 0:
                group_grads, _ = tf.clip_by_global_norm(group_grads, group.clip_norm,
                                                        use_norm=norm)
            if group.l2 > 0:
                decayed = {id(v) for v in group.l2_variables}
                group_grads = [g + group.l2 * tf.convert_to_tensor(v) if id(v) in decayed else g
                               for g, v in zip(group_grads, active)]
            by_group.append(group_grads)
            norms[group.name] = norm
        if self._loss_scale:  # the loss-scale optimizer divides by the scale again
            by_group[0] = [g * scale for g in by_group[0]]
        grads_finite = tf.reduce_all(tf.stack([tf.math.is_finite(n) for n in norms.values()]))
        out = dict(loss=loss, nll_sum=nll_sum, loss_finite=tf.math.is_finite(loss),
                   grads_finite=grads_finite)
        out.update({_norm_key(name): norm for name, norm in norms.items()})
        return out, by_group, new_state

    def _step(self, inputs, targets, model_state):
        step = self.state.step
        for plugin in self.plugins:
            plugin.before_step(step)
        lr = self.lr_schedule(step)
        out, by_group, new_state = self.strategy.run(
            self._replica_step, args=(inputs, targets, model_state))
        out = {k: strategy_lib.first_local(self.strategy, v) for k, v in out.items()}

        # The conds live in the cross-replica context: Keras optimizers
        # merge_call, which a cond in a replica context cannot hold. A tensor
        # condition (not a Python one) keeps one traced graph for the whole run.
        def apply(group, grads, active):
            def fn():
                self.strategy.run(lambda g: group.optimizer.apply(g, active), args=(grads,))
                return tf.constant(True)
            return fn

        def skip():
            return tf.constant(False)

        finite = out["loss_finite"] & out["grads_finite"]
        for index, (group, grads, active) in enumerate(zip(self.groups, by_group, self._active)):
            if not active:  # e.g. the architecture logits once every block is frozen
                continue
            condition = finite
            if index == 0 and self._loss_scale is not None:
                # The loss-scale optimizer also sees overflowing gradients: it
                # skips them and lowers its scale.
                condition = tf.constant(True)
            if group.start_step > 0:
                condition &= step >= group.start_step
            tf.cond(condition, apply(group, grads, active), skip)
        if self.weight_average is not None:  # after the updates (they write its inputs)
            tf.cond(finite, self._update_average, skip)
        out["lr"] = lr
        for plugin in self.plugins:
            out.update(plugin.step_values(step))
        step.assign_add(1)
        return out, new_state

    def _update_average(self):
        self.weight_average.update()
        return tf.constant(True)

    def train_step(self, inputs, targets):
        """Runs one training step on a global batch.

        Args:
            inputs, targets: int32 [B, T] global batch.

        Returns:
            Dict of Python numbers: loss (with extra losses), nll (mean token
            NLL), grad_norm (weights), `<group>_grad_norm` of plug-in groups,
            lr, the plug-ins' step values (e.g. tau), finite, and
            `nonfinite`: the quantities that were not finite ("loss", or the
            gradient norm keys such as "grad_norm", "arch_grad_norm"), empty
            when `finite`. A non-finite step applied no update.
        """
        self._check_compiled()
        inputs, targets = distribute_rows(self.strategy, (inputs, targets))
        out, self.model_state = self._step_fn(inputs, targets, self.model_state)
        out = {k: v.numpy() for k, v in out.items()}
        result = {k: float(v) for k, v in out.items() if not k.endswith("finite")}
        result["nll"] = result.pop("nll_sum") / self._global_tokens
        # Overflowing gradients are expected now and then under loss scaling.
        result["finite"] = bool(out["loss_finite"]) and (
            bool(out["grads_finite"]) or self._loss_scale is not None)
        nonfinite = []
        if not result["finite"]:
            if not bool(out["loss_finite"]):
                nonfinite.append("loss")
            nonfinite += [k for k in result if k.endswith("grad_norm")
                          and not math.isfinite(result[k])]
        result["nonfinite"] = nonfinite
        return result

    def state_is_finite(self):
        """bool: the training memories hold no NaN/inf (checked after a skipped step)."""
        return all(bool(tf.reduce_all(tf.math.is_finite(s))) for s in self.global_state()
                   if s.dtype.is_floating)

    # ------------------------------------------------- evaluation and samples

    def evaluation_weights(self):
        """Context in which the model holds the weights a run evaluates.

        With --ema_decay the moving average of the weights is swapped in and
        the live weights are put back bit for bit on exit
        (`ema.WeightAverage.swapped_in`); without it, the live weights (a
        context that does nothing). `evaluate` and `sample_text` inside it
        score the averaged weights, and a best checkpoint saved inside it
        holds them.
        """
        if self.weight_average is None:
            return contextlib.nullcontext()
        return self.weight_average.swapped_in()

    def reset_average(self):
        """Starts the moving average again at the current weights (after weights were
        loaded into the model: --init_weights); nothing without --ema_decay."""
        if self.weight_average is not None:
            self.weight_average.reset()

    def evaluate(self, split, max_records=0, should_stop=None):
        """Deterministic evaluation of a split through the one stream evaluator.

        `evaluation.stream.StreamEvaluator` with this run's strategy (each
        replica its fixed rows), --xla and eval_mem_len, from the zero state
        (`evaluation.stream.split_plan`): the whole split includes the tail
        after the records (evaluate.py's figure for the same checkpoint); a
        subset (the first `max_records` records) has no tail and scales the
        split's words and bytes by the fraction of its transitions scored.

        Args:
            split: "valid", "test" or "train".
            max_records: evaluate at most this many records (0 = all).
            should_stop: optional () -> bool, asked after every segment; True
                abandons the evaluation (an interrupted run).

        Returns:
            metrics.lm_metrics dict plus tokens and records (the batched
            segments); None when abandoned.
        """
        self._check_compiled()
        plan, whole = stream.split_plan(self.config.data_dir, split, self.meta, max_records)
        result = self._evaluator.run(plan, f"evaluating {split}", should_stop=should_stop)
        if result is None:
            return None
        info = self.meta["splits"][split]
        fraction = 1.0 if whole else result.tokens / (info["ids"] - 1)
        out = metrics.lm_metrics(result.total_nll, result.tokens, words=info["words"] * fraction,
                                 num_bytes=info["bytes"] * fraction)
        out.update(tokens=result.tokens, records=result.batched_segments)
        return out

    def sample_text(self, num_tokens, step):
        """Text generated after the first segment of the valid split's first row
        (`training.report.samples.TextSampler.sample_text`: deterministic given (seed, step),
        serving's sampler at temperature 1, never the unknown-word token).

        Returns:
            "prompt ... || sample" decoded by the tokenizer ("" without one).
        """
        self._check_compiled()
        return self._sampler.sample_text(num_tokens, step)


def _norm_key(group_name):
    """Output key of a group's gradient norm: grad_norm for the weights."""
    return "grad_norm" if group_name == WEIGHTS_GROUP else f"{group_name}_grad_norm"
