"""The trainer's evaluation samples: text generated after a prompt of the valid split.

`TextSampler.sample_text` continues the first segment of the valid split's
first row for a number of tokens, one compiled length-1 step at a time, with
serving's sampler (`samplers.sampler.sample_tokens` at temperature 1, never
the unknown-word token) and stateless seeds derived from (model seed, step),
in evaluation mode: deterministic, and the training RNG is not disturbed.
`Trainer.sample_text` makes one per compiled generation of the trainer (a
plug-in's trace key change makes it again).
"""

import tensorflow as tf

from pardata.records import make_dataset
from samplers.sampler import sample_tokens


class TextSampler:
    """Samples text from a trainer's model at evaluation time.

    Args:
        model: the built language model (model/interface.py).
        config: the run's TrainConfig (data_dir, eval_mem_len, model.seed).
        meta: meta.json of the data.
        tokenizer: the data's tokenizer, or None (no samples).
        strategy: the run's tf.distribute strategy (TPU: no samples, the
            generation runs outside `strategy.run`).
    """

    def __init__(self, model, config, meta, tokenizer, strategy):
        self.model = model
        self.config = config
        self.meta = meta
        self.tokenizer = tokenizer
        self.strategy = strategy
        self.mem_len = max(config.eval_mem_len, 1)
        self._generate_fn = tf.function(self._generate_one, input_signature=[
            tf.TensorSpec([1, None], tf.int32), model.state_signature(),
            tf.TensorSpec([2], tf.int64)])

    def _generate_one(self, inputs, model_state, seed):
        hidden, new_state = self.model(inputs, model_state, training=False,
                                       mem_len=self.mem_len)
        log_probs = self.model.log_probs(hidden[:, -1:])[:, 0]  # [1, V]
        token = sample_tokens(log_probs, seed[None],  # [1], serving's sampler, never <unk>
                              exclude_ids=self.tokenizer.unknown_ids())[:, None]  # [1, 1]
        return token, new_state

    def sample_text(self, num_tokens, step):
        """Text generated after the first segment of the valid split's first row.

        Deterministic given (seed, step): sampling (`samplers.sampler.sample_tokens`,
        as serving's, at temperature 1) uses stateless seeds and evaluation mode, so it
        does not disturb the training RNG.

        Returns:
            "prompt ... || sample" decoded by the tokenizer ("" without one).
        """
        if self.tokenizer is None or num_tokens <= 0 or isinstance(
                self.strategy, tf.distribute.TPUStrategy):  # runs outside strategy.run
            return ""
        dataset = make_dataset(self.config.data_dir, "valid", meta=self.meta)
        prompt = next(iter(dataset))[0][:1]  # [1, T]
        model_state = self.model.initial_state(1, self.mem_len)
        token, generated = prompt, []
        for i in range(num_tokens):
            seed = tf.constant([self.config.model.seed, step * 1_000_003 + i], tf.int64)
            token, model_state = self._generate_fn(token, model_state, seed)
            generated.append(int(token[0, 0]))
        prompt_text = self.tokenizer.decode(prompt[0].numpy().tolist())
        return f"{prompt_text} || {self.tokenizer.decode(generated)}"
