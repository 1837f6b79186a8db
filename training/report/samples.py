"""The trainer's evaluation samples: text generated after a prompt of the valid split.

`TextSampler.sample_text` continues the first segment of the valid split's
first row for a number of tokens with serving's decoding loop
(`samplers.decoding`: the segment as one chunk, then one length-1 step per
token, all in one compiled call) and sampler (the registered "sample" at
temperature 1, never the unknown-word token), with the stateless seeds
(model seed, step * 1_000_003 + i), in evaluation mode: deterministic, and
the training RNG is not disturbed.
`Trainer.sample_text` makes one per compiled generation of the trainer (a
plug-in's trace key change makes it again).
"""

import contextlib

from absl import logging
import tensorflow as tf

from pardata import quiet
from pardata.records import make_dataset
from samplers.decoding import CompiledDecoding
from samplers.registry import get_sampler

# Seeds of the token i of the samples at step s: (model seed, s * _STEP_STRIDE + i).
_STEP_STRIDE = 1_000_003


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
        self._decoding = CompiledDecoding(model, self.mem_len)
        self._traced = False

    def sample_text(self, num_tokens, step):
        """Text generated after the first segment of the valid split's first row.

        Deterministic given (seed, step): sampling (the registered "sample" sampler,
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
        with self._first_run(step):
            tokens = self._decoding.run(
                prompt[0].numpy(), num_tokens, get_sampler("sample"),
                state=self.model.initial_state(1, self.mem_len), chunk_len=int(prompt.shape[1]),
                seed=self.config.model.seed, step_offset=step * _STEP_STRIDE,
                exclude_ids=self.tokenizer.unknown_ids())["tokens"]  # never <unk>
        prompt_text = self.tokenizer.decode(prompt[0].numpy().tolist())
        return f"{prompt_text} || {self.tokenizer.decode(tokens[0].numpy().tolist())}"

    def _first_run(self, step):
        """The first sample traces the decoding loop (tens of seconds on a busy CPU): said
        before it starts, and TensorFlow's notices while it optimises the graph (oneDNN's
        int32 fallback) filtered as at start-up (pardata/quiet.py)."""
        if self._traced:
            return contextlib.nullcontext()
        self._traced = True
        logging.info("sample at step %d: tracing the decoding loop first (once per run; "
                     "tens of seconds on a CPU)", step)
        return quiet.filtered_stderr()
