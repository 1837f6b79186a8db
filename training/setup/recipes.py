"""Training recipes by name: a recipe is a named set of train.py flag values.

`--recipe=NAME` fills the flags it names wherever the command line does not
give them. A recipe has two kinds of values:

    settings  what makes the recipe (optimizer, learning rate and schedule,
              dropout, ...): a flag given with another value contradicts the
              recipe and is refused before any work, naming the flag and the
              fix; given with the same value it is accepted.
    length    how long it trains (epochs, warm-up, how often it evaluates and
              when it stops early): a flag given explicitly wins (a longer or
              shorter run of the same recipe).

A recipe's values go into config.json like any flag's (and the recipe's name
into its `recipe` field), so a resumed run keeps them. A recipe may name a
TrainConfig field, a plug-in section's field (e.g. the search's) or a model
field (e.g. `dropout`). With the PAR pipeline (`--then_retrain`) the derived
network's stage takes the recipe's length unless --retrain_epochs is given
(training/plugins/par_search/retrain.py).

A new recipe is one entry of `RECIPES`; docs/training.md#recipes lists them
and docs/results/speedrun.md holds the measurements behind `fast`. This
module imports no TensorFlow, so the flags can be checked cheaply.
"""

import dataclasses

# The run-length fields a recipe may set (an explicit flag wins over them).
LENGTH_FIELDS = ("epochs", "max_steps", "warmup_steps", "eval_interval", "early_stop")


@dataclasses.dataclass(frozen=True)
class Recipe:
    """One entry of `RECIPES`.

    Attributes:
        name: the value of --recipe.
        help: one line for the flag's help text.
        settings: flag name -> value; an explicit flag may only repeat it.
        length: flag name (of LENGTH_FIELDS) -> value; an explicit flag wins.
    """

    name: str
    help: str
    settings: dict
    length: dict

    def __post_init__(self):
        odd = sorted(set(self.length) - set(LENGTH_FIELDS))
        if odd:
            raise ValueError(f"recipe {self.name}: {odd} are not run-length fields "
                             f"({', '.join(LENGTH_FIELDS)}): put them in its settings")
        both = sorted(set(self.length) & set(self.settings))
        if both:
            raise ValueError(f"recipe {self.name}: {both} are both settings and length")

    @property
    def values(self):
        """Every flag value of the recipe (settings and length)."""
        return {**self.settings, **self.length}


# The recipe of the seed project (README's base_model.sh before recipes):
# Adam at 1e-3 with a 1,000-step warm-up and cosine decay to 1e-5, gradient
# norm clipped at 0.25, 20 epochs.
SEED = Recipe(
    "seed", "Adam 1e-3, warm-up 1,000, cosine to 1e-5, clip 0.25, 20 epochs (the seed "
    "project's recipe; base_model.sh's flags without --recipe).",
    settings=dict(optimizer="adam", learning_rate=1e-3, lr_schedule="cosine", min_lr=1e-5,
                  clip_norm=0.25),
    length=dict(epochs=20, warmup_steps=1000))

FAST = Recipe(
    "fast", "A candidate for shorter training on wt2_base, from 3-epoch screens "
    "(docs/results/speedrun.md): Adam 2e-3, no dropout, cosine to 1e-5, 9 epochs; at its "
    "full length it overfits and does not reach the seed recipe's quality yet.",
    settings=dict(optimizer="adam", learning_rate=2e-3, lr_schedule="cosine", min_lr=1e-5,
                  clip_norm=0.25, dropout=0.0),
    length=dict(epochs=9, warmup_steps=1000))

# The best recipe of the speedrun for 30 minutes on two CPU cores (docs/results/speedrun.md):
# Muon on the hidden matrices at an update scale of 0.15 (0.3 trailed 0.2, 0.15 led at
# every epoch), the Newton-Schulz iteration in bfloat16 (1.11x the step, no visible cost),
# dropout 0.1 (0 overfits at this length, 0.15 trailed), decoupled weight decay 0.05 of the
# matrices (42.25 against 42.88 without, the same seed; a schedule holding the peak longer
# lost), 10 epochs: aaafaf tests at 42.16-42.36 (seeds 0-2) against the seed recipe's 42.15
# in 20 epochs, in 25.4-29.8 minutes on both cores of the development CPU (the record runs of
# speedrun.md). Precision and threads are the CPU's
# business, not the recipe's: on a CPU with bfloat16 instructions add
# --precision=mixed_bfloat16 --intra_op_threads=1 --inter_op_threads=2.
MUON = Recipe(
    "muon", "The speedrun's best recipe for 30 minutes on 2 CPU cores "
    "(docs/results/speedrun.md): Muon 2e-3 (update scale 0.15, Newton-Schulz in bfloat16; "
    "Adam on embeddings, softmax, biases and norms; decoupled weight decay 0.05 of the "
    "matrices), warm-up 1,000, cosine to 1e-5, clip 0.25, dropout 0.1, 10 epochs: aaafaf "
    "tests at most 0.5% above the seed recipe's 20 epochs (3 seeds).",
    settings=dict(optimizer="muon", learning_rate=2e-3, muon_rms_rate=0.15,
                  muon_ns_bfloat16=1.0, weight_decay=0.05, lr_schedule="cosine", min_lr=1e-5,
                  clip_norm=0.25, dropout=0.1),
    length=dict(epochs=10, warmup_steps=1000))

# Fine-tuning a trained model on a new text (--init_weights, ./finetune.sh): Adam at a
# constant rate; docs/results/finetune.md measured 3e-5, 1e-4, 3e-4 and 1e-3 over 300 steps
# on a text far from WikiText and 1e-3 (wt2_base's own peak rate) led at every evaluation;
# valid every 200 steps, the best kept and the run stopped after 3 evaluations without a
# better one, which guards against the overfitting a high rate brings on a small text.
FINETUNE = Recipe(
    "finetune", "Fine-tuning (--init_weights, ./finetune.sh): Adam at a constant 1e-3, "
    "clip 0.25, valid every 200 steps, early stop after 3 evaluations without a new best, "
    "at most 20 epochs (docs/results/finetune.md).",
    settings=dict(optimizer="adam", learning_rate=1e-3, lr_schedule="constant", min_lr=0.0,
                  clip_norm=0.25),
    length=dict(epochs=20, warmup_steps=0, eval_interval=200, early_stop=3))

RECIPES = {recipe.name: recipe for recipe in (SEED, FAST, MUON, FINETUNE)}


def get_recipe(name):
    """The `Recipe` called `name`; ValueError listing the choices otherwise."""
    if name not in RECIPES:
        raise ValueError(f"unknown recipe {name!r}; choose one of {sorted(RECIPES)}")
    return RECIPES[name]


def contradiction(recipe, name, given):
    """The error text for flag --name given as `given` where the recipe sets another
    value, or None when it may be given (a length flag, or the recipe's own value)."""
    if name not in recipe.settings:
        return None
    wanted = recipe.settings[name]
    if _same(given, wanted):
        return None
    return (f"--{name}={given} contradicts --recipe={recipe.name}, which sets "
            f"--{name}={wanted}: drop --{name} to train with the recipe, or drop --recipe "
            "to choose every flag yourself")


def _same(a, b):
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) \
            and not isinstance(a, bool) and not isinstance(b, bool):
        return float(a) == float(b)
    return a == b
