"""Text generation from a trained run of any model family: the API of generate.py.

`load` gives a `Run` from a run directory (`serving.runs.load_run`) or a
`.keras` package (`serving.packaged.load_package`); `generate_text` turns a text
prompt into its continuation with the run's cached decoder. The pieces live in
a module each, and this module exports their public names as well:

    serving.errors    GenerationError
    serving.runs      Run, load_run, resolve_checkpoint, override_model
    serving.decoder   Decoder, generate, check_sampling_args (the state as a cache)
    serving.prompts   Prompt, encode_prompt, continuation_text, excluded_ids
    samplers          sample_tokens, filter_logits (temperature, top-k, top-p,
                      greedy, Gumbel-max draws with stateless seeds);
                      get_sampler, register_sampler, sampler_names (the
                      registry of `Sampler` objects, samplers/registry.py)
"""

from absl import logging

from pardata.meta import META_FILE
from samplers.registry import get_sampler, register_sampler, sampler_names
from samplers.sampler import filter_logits, sample_tokens
from serving.decoder import Decoder, check_sampling_args, generate, resolve_sampler
from serving.errors import GenerationError
from serving.prompts import Prompt, continuation_text, encode_prompt, excluded_ids
from serving.runs import Run, load_run, override_model, resolve_checkpoint

__all__ = ["META_FILE", "Decoder", "GenerationError", "Prompt", "Run", "check_sampling_args",
           "continuation_text", "encode_prompt", "excluded_ids", "filter_logits", "generate",
           "generate_text", "get_sampler", "load", "load_run", "override_model",
           "register_sampler", "resolve_checkpoint", "resolve_sampler", "sample_tokens",
           "sampler_names"]


def load(model_dir=None, model=None, checkpoint="best", model_overrides=None):
    """A `Run` from a run directory (`load_run`) or a `.keras` package
    (`serving.packaged.load_package`): give exactly one of `model_dir`, `model`."""
    if (model_dir is None) == (model is None):
        raise GenerationError("give either --model (a .keras file) or --model_dir (a run "
                              "directory)")
    if model is not None:
        from serving.packaged import load_package

        return load_package(model, model_overrides)
    return load_run(model_dir, checkpoint, model_overrides)


def generate_text(run, prompt, num_tokens, *, temperature=1.0, top_k=0, top_p=1.0, greedy=False,
                  seed=None, mem_len=None, chunk_len=None, allow_unk=False, sampler=None):
    """Generates the text that follows `prompt` (the prompt not included).

    An empty prompt starts from the tokenizer's line start (`encode_prompt`).
    Prompt words the tokenizer does not know become its unknown token and are
    listed in one logged warning. The unknown token is never generated unless
    `allow_unk`. `mem_len` defaults to `run.default_mem_len`, `chunk_len` to the
    run's seq_len; the other arguments (`sampler`: a registered sampler's name
    or instance instead of the four options) are `generate`'s.
    """
    check_sampling_args(num_tokens, temperature, top_k, top_p)
    encoded = encode_prompt(run.tokenizer, prompt)
    if encoded.unknown_words:
        logging.warning("prompt words unknown to the tokenizer, encoded as <unk>: %s",
                        " ".join(encoded.unknown_words))
    tokens = run.decoder(mem_len).generate(
        encoded.ids, num_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
        greedy=greedy, seed=seed, exclude_ids=excluded_ids(run.tokenizer, allow_unk),
        sampler=sampler,
        chunk_len=run.config.seq_len if chunk_len is None else chunk_len)
    return continuation_text(run.tokenizer, encoded, tokens[0])
