"""The project's public Python API: `import par`, then load, generate and score.

    import keras
    import par  # registers the project's Keras classes (package "par")

    lm = keras.saving.load_model("pretrained/wt2_base.keras")  # or par.load(path)
    lm.generate("The game was released in", max_length=40, sampler="top_p", top_p=0.9, seed=1)
    lm.generate(["The game", "In 1990"], num_tokens=30, seed=1, stop="\n")  # one batch
    for piece in lm.stream("The game", seed=1): print(piece, end="")
    lm.score("The game was released in 2004 .")["perplexity"]
    print(lm.card)                   # the model card export.py wrote

Importing this module registers every Keras class a `.keras` file of the
project holds (the package `PackagedLM`, its `TokenizerAssets`, the layers
of every model family), so `keras.saving.load_model` opens any `.keras`
file export.py writes. Run Python from the repository root (or put the root
on PYTHONPATH); the rest of the code is internal.

Entry points:
    load(path)                       the `PackagedLM` of a `.keras` file, with
                                     one-line errors (a missing or damaged
                                     file, another project's file)
    generate(model, prompts, ...)    `model.generate`: the text generate.py
                                     prints for the same seed and options (a
                                     list: one batch, prompt i with seed + i;
                                     stop=, repetition_penalty=)
    stream(model, prompt, ...)       `model.stream`: the same text, yielded
                                     piece by piece as it is decoded
    finetune(model, text, ...)       fine-tunes a `.keras` package, run directory
                                     or loaded model on a text (a file, a str or
                                     a list of str) as ./finetune.sh does; returns
                                     the loaded fine-tuned model
    score(model, texts, ...)         `model.score`: evaluate.py's perplexity,
                                     NLL per token and tokens of each text
    PackagedLM                       the loaded model (serving/packaged.py)
    SAMPLERS                         "greedy", "temperature", "top_k", "top_p"
    Sampler, Param, register_sampler, a new sampler: a `Sampler` subclass and
    unregister_sampler,              one `register_sampler(cls)`; then
    sampler_names                    `lm.generate(..., sampler=cls.name,
                                     sampler_args={...})` (samplers/base.py)

Generation never emits the unknown-word token (WikiText's <unk>) unless
`allow_unk=True`.
"""

import pardata.quiet  # noqa: F401  (TensorFlow's start-up noise, as in the scripts; first)
from samplers.base import Param, Sampler
from samplers.registry import register_sampler, sampler_names, unregister_sampler
from serving.errors import EvaluationError, GenerationError
from serving.packaged import PackagedLM, PackageError, load_packaged_lm
from serving.texts import SAMPLERS
from training.finetune import FinetuneError, finetune

__all__ = ["EvaluationError", "FinetuneError", "GenerationError", "PackageError",
           "PackagedLM", "Param", "SAMPLERS", "Sampler", "finetune", "generate", "load",
           "register_sampler", "sampler_names", "score", "stream", "unregister_sampler"]


def load(path):
    """The `PackagedLM` of a `.keras` file written by export.py (computing in float32).

    Raises:
        PackageError: a missing file, not a Keras file, a file of another
            project, or an older `.keras` without its tokenizer (the message
            says how to export it again).
    """
    return load_packaged_lm(path)


def generate(model, prompts, max_length=None, **options):
    """`model.generate(prompts, max_length, **options)` (see `PackagedLM.generate`)."""
    return model.generate(prompts, max_length, **options)


def stream(model, prompt, max_length=None, **options):
    """`model.stream(prompt, max_length, **options)` (see `PackagedLM.stream`)."""
    return model.stream(prompt, max_length, **options)


def score(model, texts, **settings):
    """`model.score(texts, **settings)` (see `PackagedLM.score`)."""
    return model.score(texts, **settings)
