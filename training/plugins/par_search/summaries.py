"""The PAR search's summaries.

TensorBoard: the per-block probabilities of the candidates (the block types of
the run's `candidates`, model/transformer_xl/blocks.py) as scalars
`arch/block_NN/<candidate>` and as a
block-by-choice heat map `arch/probabilities`, written to the train writer by
`ParSearch.on_log` through the run's `training.report.tensorboard.TrainSummaries`.

Console: the end-of-run summary's lines of a search (`result_lines`: the
derived architecture, how it meets a --search_speed_target, and why it has no attention
block) and its first "next"
command (`next_commands`: retrain the derived network), which
`ParSearchReport.summary_lines` / `next_commands` give to training/report/summary.py.
Imports no TensorFlow.
"""

import os

import numpy as np

from training.plugins.par_search.retrain import retrain_command, retrain_config
from training.setup.plan import total_steps

# Pixels per cell of the block-by-choice heat map: TensorBoard shows images at
# their native size, and a 6x3 image would be unreadable.
_CELL = 24


def _block_names():
    """The registered block types (model/transformer_xl/blocks.py imports TensorFlow: loaded
    only by the TensorBoard summaries, not by the console's lines)."""
    from model.transformer_xl import blocks

    return blocks.names()


def _heat_colors(probs):
    """Maps probabilities in [0, 1] to RGB uint8, white (0) to dark blue (1)."""
    low = np.array([255.0, 255.0, 255.0])
    high = np.array([8.0, 48.0, 107.0])
    p = np.clip(probs, 0.0, 1.0)[..., None]
    return np.round(low + (high - low) * p).astype(np.uint8)


def arch_image(probs, cell=_CELL, choices=None):
    """Block-by-choice heat map of architecture probabilities.

    Rows are blocks (block 0 at the top), columns the candidates (attention,
    dense, identity); one-pixel grey lines separate the cells.

    Args:
        probs: [num_blocks, C] probabilities.
        cell: pixels per cell side.
        choices: the candidates' names (see `check_probs`).

    Returns:
        uint8 array [num_blocks * cell, C * cell, 3].
    """
    probs = check_probs(probs, choices)
    image = np.repeat(np.repeat(_heat_colors(probs), cell, axis=0), cell, axis=1)
    image[::cell, :, :] = 160
    image[:, ::cell, :] = 160
    return image


def check_probs(probs, choices=None):
    """probs as float64 [num_blocks, C], checked (ValueError naming the shape or NaN).

    `choices` are the names of the C candidates (the run's `candidates`); None: those
    of a new config (every registered block type)."""
    probs = np.asarray(probs, dtype=np.float64)
    num = len(_block_names() if choices is None else choices)
    if probs.ndim != 2 or probs.shape[1] != num or probs.shape[0] == 0:
        raise ValueError(
            f"architecture probabilities must have shape [num_blocks, {num}], got {probs.shape}"
        )
    if not np.all(np.isfinite(probs)):
        raise ValueError("architecture probabilities contain NaN or inf")
    return probs


def write_architecture(summaries, step, probs, choices=None):
    """Writes per-block choice probabilities and their heat map (train writer).

    Args:
        summaries: the run's `training.report.tensorboard.TrainSummaries`.
        step: global step.
        probs: [num_blocks, C] probabilities of the candidates.
        choices: the candidates' names, the supernet's (its config's
            `candidates`); None: those of a new config (every registered block type).
    """
    names = tuple(_block_names() if choices is None else choices)
    probs = check_probs(probs, names)
    summaries.tagged_scalars(step, {
        f"arch/block_{block:02d}/{choice}": float(p)
        for block, row in enumerate(probs) for choice, p in zip(names, row)})
    summaries.image(step, "arch/probabilities", arch_image(probs, choices=names), description=(
        f"Rows: blocks 0 (input side) to {len(probs) - 1}; columns: {', '.join(names)}; "
        "darker is more probable."))


def result_lines(config, results):
    """The summary's lines of a search: its derived architecture (marked when
    derived from untrained logits, with the path of architecture.json) and why it
    has no attention block; of a fixed architecture's run, the architecture."""
    derivation = results.get("derivation")
    if not derivation:  # a fixed architecture, trained
        return [f"architecture: {results['architecture']}"] if results.get("architecture") else []
    note = " (untrained: NOT a search result)" if derivation.get("untrained") else ""
    lines = [f"derived architecture: {derivation['architecture']}{note} "
             f"({os.path.join(config.model_dir, 'architecture.json')})"]
    if derivation.get("speed_target"):
        lines.append(speed_target_line(derivation))
    decided = derivation.get("decided_step")
    if decided is not None:
        lines.append(f"the search was decided at step {decided} (--stop_rule="
                     f"{config.search.stop_rule}) and ends there by design")
    why = no_attention_note(derivation, results["step"])
    return lines + ([why] if why else [])


def speed_target_line(derivation):
    """The summary's line of a derivation under --search_speed_target (speed_target.py)."""
    target = derivation["speed_target"]
    line = (f"--search_speed_target={target['target']:g} (at most "
            f"{target['max_relative_flops']:.3f} of Transformer-XL's FLOPs): ")
    if target["argmax_meets_target"]:
        return line + (f"met by the most probable architecture "
                       f"({target['argmax_relative_flops']:.3f})")
    return line + (f"the most probable architecture {target['argmax']} "
                   f"({target['argmax_relative_flops']:.3f}) exceeds it; derived "
                   f"{derivation['architecture']} ({derivation['relative_flops']:.3f}), "
                   f"{target['log_probability_given_up']:.3f} nats less log-probability")


def pipeline_lines(results):
    """Both stages of a search with its retrain (--then_retrain), after the run's summary:
    each stage's network and best figures, and the step the search was decided; [] for
    any other run."""
    if "retrain" not in results:
        return []
    lines = ["PAR pipeline:"]
    for name, run in (("search (supernet)", results), ("derived network", results["retrain"])):
        best = run.get("best") or run.get("last") or {}
        line = f"  {name} {run.get('architecture')}"
        if "valid" in best:
            line += (f": best valid perplexity {best['valid']['perplexity']:.2f} "
                     f"(step {best['step']})")
        if "test" in best:
            line += (f", test perplexity {best['test']['perplexity']:.2f}, word perplexity "
                     f"{best['test']['word_perplexity']:.2f}, bits/byte "
                     f"{best['test']['bits_per_byte']:.4f}")
        lines.append(line)
    decided = results.get("derivation", {}).get("decided_step")
    if decided is not None:
        lines.append(f"  the search was decided at step {decided}")
    return lines


def later_steps(config, train_records):
    """The retrain's training steps after a search with --then_retrain (its length does not
    depend on the architecture it will train), or 0."""
    search = config.search
    if not search.then_retrain or getattr(config.model, "architecture", None) != "supernet":
        return 0
    return total_steps(retrain_config(config, "a" * config.model.num_blocks), train_records)


def plan_lines(config, train_records):
    """The two stages of a search with --then_retrain, announced before it starts: the
    search's run directory and most steps (with how it ends), the retrain's steps and run
    directory; [] for any other run."""
    search = config.search
    if not search.then_retrain or getattr(config.model, "architecture", None) != "supernet":
        return []
    steps = total_steps(config, train_records)
    # The retrain's length does not depend on the architecture it will train.
    retrain = retrain_config(config, "a" * config.model.num_blocks)
    recipe = f"with --recipe={retrain.recipe} " if search.retrain_recipe else ""
    ends = ("once every block's choice is stable" if search.stop_rule == "stable"
            else "once every block is frozen")
    return [f"this command runs two stages: 1. the search in {config.model_dir}, at most "
            f"{steps:,} steps (it ends {ends}); 2. the derived network trained from scratch "
            f"{recipe}for {total_steps(retrain, train_records):,} steps in "
            f"{retrain.model_dir}, then evaluated on test"]


def next_commands(config, results):
    """The train.py command retraining the derived network of a search, or [] (no
    derivation, or the derived network was trained in the same command)."""
    if not results.get("derivation") or "retrain" in results:
        return []
    return [f"{retrain_command(config)}   # retrain the derived network"]


def no_attention_note(derivation, step):
    """The summary line saying why a search derived no attention block, or None.

    Args:
        derivation: results["derivation"] of a search (the PAR plug-in's): its block
            `counts` by type name; an `untrained` one has its own line already.
        step: the run's last step.
    """
    counts = derivation.get("counts") or {}
    if derivation.get("untrained") or "attention" not in counts or counts["attention"]:
        return None
    others = ", ".join(f"{n} {name}" for name, n in sorted(counts.items()) if n)
    return (f"no attention block ({others}): after {step} steps the search found the other "
            "choices better in every block: it has not yet trained attention to lower the "
            "loss more than a dense layer does, as in most short searches (the probabilities "
            "over time are in arch_history.png); search longer (a larger --max_steps or more "
            "data) or train a fixed Transformer-XL (--architecture=transformer_xl)")
