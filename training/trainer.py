"""`Trainer`: model, optimizers and the compiled training step of one run.

It also evaluates a split, samples text, saves and restores checkpoints and
keeps the training memories. The host loop that drives it (data, logging,
evaluation schedule, metrics.json) is `training.loop.train`.

The step (`Trainer.train_step`), with R replicas and the global batch [B, T]:
1. Set the search state: `tau = tau_at(step)` and the Gumbel-noise step.
2. Each replica runs its rows with its own memory and computes
   `loss_r = sum(token_nll_r) / (B*T) + sum(span_losses) / R`, so that the sum
   over replicas is the mean token NLL of the global batch plus the span
   losses counted once, and the gradients of all variables.
3. The gradients are summed over replicas once (`all_reduce`), so every
   replica holds the gradient of the global loss. The weights' gradients are
   clipped to `clip_norm` by their global norm. The architecture logits are
   not clipped: Adam already normalises their step, and clipping them with the
   weights would let their gradient shrink the weights' update.
4. If the loss and both gradient norms are finite, the weights optimizer and
   (from `arch_warmup_steps` on) the architecture optimizer apply them. The
   Keras optimizers' own cross-replica sum is switched off because the
   gradients are already reduced. Otherwise nothing is applied and the host
   stops the run with `training.loop.NonFiniteError`. Under mixed_float16
   overflowing gradients are normal: the loss-scale optimizer skips the step
   and lowers its scale, and only a non-finite loss stops the run.
5. The replicas' new memories are kept for the next step.

The learning rate and tau are functions of the index of the step being taken
(0 for the first step); both optimizers read it from `TrainState.step`.
"""

from absl import logging
import keras
import tensorflow as tf

import data_utils
from model.builder import build_model
from training import checkpoint as checkpoint_lib
from training import metrics, schedules
from training import strategy as strategy_lib
from training.config import total_steps


def _no_aggregation(grads_and_vars):
    # Replaces the Keras optimizers' cross-replica gradient sum: our gradients
    # are summed (once) before clipping, which must see the global gradient.
    return list(grads_and_vars)


def _is_decayed(variable):
    # Biases, norm scales, relative biases and architecture logits are vectors.
    return len(variable.shape) > 1


class Trainer:
    """Model, optimizers, state and compiled steps of one run.

    Creating one sets the global Keras dtype policy to `config.precision` and
    seeds Keras, NumPy and TensorFlow with the model seed (`training.loop.train`
    restores the previous policy when it returns).

    Args:
        config: TrainConfig.
        meta: meta.json of the data.
        strategy: tf.distribute strategy (created before any TF op).
        tokenizer: the data's tokenizer (for the text sample), or None.
    """

    def __init__(self, config, meta, strategy, tokenizer=None):
        self.config = config
        self.meta = meta
        self.strategy = strategy
        self.tokenizer = tokenizer
        self.replicas = strategy.num_replicas_in_sync
        self.total_steps = total_steps(config, meta["splits"]["train"]["records"])
        self.batch_size = meta["splits"]["train"]["batch_size"]
        self._global_tokens = float(self.batch_size * config.seq_len)
        keras.mixed_precision.set_global_policy(config.precision)
        keras.utils.set_random_seed(config.model.seed)
        self.lr_schedule = schedules.make_lr_schedule(
            config.lr_schedule, config.learning_rate, config.warmup_steps,
            config.decay_steps or max(self.total_steps, config.warmup_steps), config.min_lr)
        self._tau_steps = config.tau_anneal_steps or self.total_steps

        with strategy.scope():
            self.model = build_model(config.model)
        mem_shapes = [m.shape for m in self.model.initial_mems(self.batch_size)]
        # Host variables (outside the scope): never mirrored.
        self.state = checkpoint_lib.TrainState(mem_shapes, self.model.compute_dtype)
        with strategy.scope():
            self._weights = list(self.model.weight_variables)
            self._arch = list(self.model.arch_variables)
            self.weights_optimizer, self.arch_optimizer = self._make_optimizers()
        self._decayed = [_is_decayed(v) for v in self._weights]
        optimizers = {"weights_optimizer": self.weights_optimizer}
        if self.arch_optimizer is not None:
            optimizers["arch_optimizer"] = self.arch_optimizer
        self.checkpointer = checkpoint_lib.Checkpointer(
            config.model_dir, self.model, optimizers, self.state, config.keep_checkpoints,
            strategy)
        self.mems = None
        self.reset_memory()
        self._forward_backward = tf.function(self._replica_forward_backward,
                                             jit_compile=config.xla or None)
        self._step_fn = tf.function(self._step)
        self._eval_fn = tf.function(self._eval)
        gen_mems = [tf.TensorSpec(m.shape, m.dtype)
                    for m in self.model.initial_mems(1, self._sample_mem_len)]
        self._generate_fn = tf.function(self._generate_one, input_signature=[
            tf.TensorSpec([1, None], tf.int32), gen_mems, tf.TensorSpec([2], tf.int64)])

    # ------------------------------------------------------------ construction

    def _make_optimizers(self):
        c = self.config
        step = self.state.step

        def learning_rate():
            return self.lr_schedule(step)

        kwargs = dict(learning_rate=learning_rate, beta_1=c.beta_1, beta_2=c.beta_2,
                      epsilon=c.epsilon)
        if c.optimizer == "adamw":
            weights = keras.optimizers.AdamW(weight_decay=c.weight_decay, **kwargs)
            weights.exclude_from_weight_decay(
                var_list=[v for v in self._weights if not _is_decayed(v)])
        else:
            weights = keras.optimizers.Adam(**kwargs)  # L2 decay is added to the gradient
        weights._all_reduce_sum_gradients = _no_aggregation
        if c.precision == "mixed_float16":
            weights = keras.optimizers.LossScaleOptimizer(weights)
        weights.build(self._weights)
        arch = None
        if self._arch:
            arch = keras.optimizers.Adam(learning_rate=c.arch_learning_rate,
                                         beta_1=c.arch_beta_1, beta_2=c.arch_beta_2,
                                         epsilon=c.epsilon)
            arch._all_reduce_sum_gradients = _no_aggregation
            arch.build(self._arch)
        return weights, arch

    @property
    def _loss_scale(self):
        if isinstance(self.weights_optimizer, keras.optimizers.LossScaleOptimizer):
            return self.weights_optimizer
        return None

    # ------------------------------------------------------------------ memory

    def initial_memory(self, batch_size, mem_len=None):
        """Zero memories for a global batch, split over the replicas."""
        return strategy_lib.distribute_rows(
            self.strategy, self.model.initial_mems(batch_size, mem_len))

    def reset_memory(self):
        """Zero training memories (start of the run and of every epoch)."""
        self.mems = self.initial_memory(self.batch_size)

    def global_memory(self):
        """The training memories as global [B, M, D] tensors (collective)."""
        return strategy_lib.gather_rows(self.strategy, list(self.mems))

    def restore(self):
        """Restores the latest checkpoint (memories included); returns its step or None."""
        step = self.checkpointer.restore_latest()
        if step is not None:
            self.mems = strategy_lib.distribute_rows(
                self.strategy, [tf.convert_to_tensor(m) for m in self.state.memories])
        return step

    def save(self):
        """Saves a checkpoint at the current step (collective under multi-worker)."""
        return self.checkpointer.save(self.global_memory())

    # -------------------------------------------------------------------- step

    def _replica_forward_backward(self, inputs, targets, mems):
        model = self.model
        variables = self._weights + self._arch
        with tf.GradientTape() as tape:
            hidden, new_mems = model(inputs, mems, training=True)
            nll_sum = tf.reduce_sum(model.token_nll(hidden, targets))
            loss = nll_sum / self._global_tokens
            span_losses = model.span_losses
            if span_losses:
                loss += tf.add_n([tf.cast(s, tf.float32) for s in span_losses]) / self.replicas
            scaled = self._loss_scale.scale_loss(loss) if self._loss_scale else loss
        grads = tape.gradient(scaled, variables)
        missing = [v.path for v, g in zip(variables, grads) if g is None]
        if missing:
            logging.warning("no gradient for %s; using zeros", missing)
        grads = [tf.zeros_like(v) if g is None else tf.convert_to_tensor(g)
                 for g, v in zip(grads, variables)]
        return loss, nll_sum, grads, new_mems

    def _replica_step(self, inputs, targets, mems):
        c = self.config
        loss, nll_sum, grads, new_mems = self._forward_backward(inputs, targets, mems)
        if self.replicas > 1:
            context = tf.distribute.get_replica_context()
            reduced = context.all_reduce(tf.distribute.ReduceOp.SUM, [loss, nll_sum] + grads)
            loss, nll_sum, grads = reduced[0], reduced[1], reduced[2:]
        if self._loss_scale:
            scale = tf.cast(self._loss_scale.dynamic_scale, tf.float32)
            grads = [g / scale for g in grads]
        w_grads, a_grads = grads[:len(self._weights)], grads[len(self._weights):]
        w_norm = tf.linalg.global_norm(w_grads)
        a_norm = tf.linalg.global_norm(a_grads) if a_grads else tf.constant(0.0)
        if c.clip_norm > 0:
            w_grads, _ = tf.clip_by_global_norm(w_grads, c.clip_norm, use_norm=w_norm)
        if c.optimizer == "adam" and c.weight_decay > 0:
            w_grads = [g + c.weight_decay * tf.convert_to_tensor(v) if decayed else g
                       for g, v, decayed in zip(w_grads, self._weights, self._decayed)]
        if c.arch_weight_decay > 0:
            a_grads = [g + c.arch_weight_decay * tf.convert_to_tensor(v)
                       for g, v in zip(a_grads, self._arch)]
        if self._loss_scale:  # the loss-scale optimizer divides by the scale again
            w_grads = [g * scale for g in w_grads]
        grads_finite = tf.math.is_finite(w_norm) & tf.math.is_finite(a_norm)
        out = dict(loss=loss, nll_sum=nll_sum, grad_norm=w_norm, arch_grad_norm=a_norm,
                   loss_finite=tf.math.is_finite(loss), grads_finite=grads_finite)
        return out, w_grads, a_grads, new_mems

    def _step(self, inputs, targets, mems):
        step = self.state.step
        tau = schedules.tau_at(step, self.config.tau_start, self.config.tau_end,
                               self._tau_steps, self.config.tau_schedule)
        if self.config.is_supernet:
            self.model.set_search_state(tau, step)
        lr = self.lr_schedule(step)
        out, w_grads, a_grads, new_mems = self.strategy.run(
            self._replica_step, args=(inputs, targets, mems))
        out = {k: strategy_lib.first_local(self.strategy, v) for k, v in out.items()}

        # The conds live in the cross-replica context: Keras optimizers
        # merge_call, which a cond in a replica context cannot hold. A tensor
        # condition (not a Python one) keeps one traced graph for the whole run.
        def apply_weights():
            self.strategy.run(lambda g: self.weights_optimizer.apply(g, self._weights),
                              args=(w_grads,))
            return tf.constant(True)

        def apply_arch():
            self.strategy.run(lambda g: self.arch_optimizer.apply(g, self._arch),
                              args=(a_grads,))
            return tf.constant(True)

        def skip():
            return tf.constant(False)

        finite = out["loss_finite"] & out["grads_finite"]
        # Under mixed_float16 the loss-scale optimizer also sees overflowing
        # gradients: it skips them and lowers its scale.
        tf.cond(finite | (self._loss_scale is not None), apply_weights, skip)
        if self.arch_optimizer is not None:
            tf.cond(finite & (step >= self.config.arch_warmup_steps), apply_arch, skip)
        step.assign_add(1)
        out.update(lr=lr, tau=tau)
        return out, new_mems

    def train_step(self, inputs, targets):
        """Runs one training step on a global batch.

        Args:
            inputs, targets: int32 [B, T] global batch.

        Returns:
            Dict of Python numbers: loss (with span losses), nll (mean token
            NLL), grad_norm, arch_grad_norm, lr, tau (of this step), finite.
        """
        inputs, targets = strategy_lib.distribute_rows(self.strategy, (inputs, targets))
        out, self.mems = self._step_fn(inputs, targets, self.mems)
        out = {k: v.numpy() for k, v in out.items()}
        result = {k: float(v) for k, v in out.items() if not k.endswith("finite")}
        result["nll"] = result.pop("nll_sum") / self._global_tokens
        # Overflowing gradients are expected now and then under loss scaling.
        result["finite"] = bool(out["loss_finite"]) and (
            bool(out["grads_finite"]) or self._loss_scale is not None)
        return result

    # -------------------------------------------------------------- evaluation

    def _eval(self, inputs, targets, mems):
        mem_len = self.config.eval_mem_len

        def replica(inputs, targets, mems):
            hidden, new_mems = self.model(inputs, mems, training=False, mem_len=mem_len)
            nll = self.model.token_nll(hidden, targets)
            count = tf.reduce_sum(tf.cast(targets >= 0, tf.float32))
            return tf.reduce_sum(nll), count, new_mems

        nll_sum, count, new_mems = self.strategy.run(replica, args=(inputs, targets, mems))
        total = self.strategy.reduce(tf.distribute.ReduceOp.SUM, nll_sum, axis=None)
        count = self.strategy.reduce(tf.distribute.ReduceOp.SUM, count, axis=None)
        return total, count, new_mems

    def evaluate(self, split, max_records=0):
        """Deterministic evaluation of a split with memory carried across it.

        The memory starts as zeros of length eval_mem_len at the split's
        start. The NLL is summed per batch on the device and accumulated in
        float64 on the host. meta.json's words and bytes count the whole
        split, but the records cover only `records * B * T` of its ids (the
        tail that does not fill a record is dropped, and max_records may cap
        it further), so they are scaled by (tokens evaluated) / (split ids).

        Args:
            split: "valid", "test" or "train".
            max_records: evaluate at most this many records (0 = all).

        Returns:
            metrics.lm_metrics dict plus tokens and records.
        """
        info = self.meta["splits"][split]
        dataset = data_utils.make_dataset(self.config.data_dir, split, meta=self.meta)
        if max_records:
            dataset = dataset.take(max_records)
        mems = self.initial_memory(info["batch_size"], self.config.eval_mem_len)
        acc = metrics.NllAccumulator()
        records = 0
        for inputs, targets in dataset:
            batch = strategy_lib.distribute_rows(self.strategy, (inputs, targets))
            nll_sum, count, mems = self._eval_fn(batch[0], batch[1], mems)
            acc.add(nll_sum.numpy(), count.numpy())
            records += 1
        fraction = acc.count / info["ids"]
        result = acc.result(words=info["words"] * fraction, num_bytes=info["bytes"] * fraction)
        result["records"] = records
        return result

    # -------------------------------------------------------------- generation

    @property
    def _sample_mem_len(self):
        return max(self.config.eval_mem_len, 1)

    def _generate_one(self, inputs, mems, seed):
        hidden, new_mems = self.model(inputs, mems, training=False,
                                      mem_len=self._sample_mem_len)
        log_probs = self.model.log_probs(hidden[:, -1:])[:, 0]  # [1, V]
        token = tf.random.stateless_categorical(log_probs, 1, seed=seed, dtype=tf.int32)
        return token, new_mems

    def sample_text(self, num_tokens, step):
        """Text generated after the first segment of the valid split's first row.

        Deterministic given (seed, step): sampling uses stateless seeds and
        evaluation mode, so it does not disturb the training RNG.

        Returns:
            "prompt ... || sample" decoded by the tokenizer ("" without one).
        """
        if self.tokenizer is None or num_tokens <= 0 or isinstance(
                self.strategy, tf.distribute.TPUStrategy):  # runs outside strategy.run
            return ""
        dataset = data_utils.make_dataset(self.config.data_dir, "valid", meta=self.meta)
        prompt = next(iter(dataset))[0][:1]  # [1, T]
        mems = self.model.initial_mems(1, self._sample_mem_len)
        token, generated = prompt, []
        for i in range(num_tokens):
            seed = tf.constant([self.config.model.seed, step * 1_000_003 + i], tf.int64)
            token, mems = self._generate_fn(token, mems, seed)
            generated.append(int(token[0, 0]))
        prompt_text = self.tokenizer.decode(prompt[0].numpy().tolist())
        return f"{prompt_text} || {self.tokenizer.decode(generated)}"
