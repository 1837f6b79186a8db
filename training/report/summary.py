"""What the console shows of a run: its end-of-run summary, durations, the cut-short note.

train.py prints `run_summary` at the end of a run, then `closing_summary` (a notebook calling
`training.run.loop.train` can print it the same way); the loop logs
`cut_short_note` and its ETA with `format_duration`.
"""

import os
import shlex

from training import plugins
from training.report import notes as run_notes


def closing_summary(results, exported=None):
    """What train.py prints after `run_summary`: the plug-ins' lines about the command's
    later stages (`Plugin.closing_lines`: a search and its retrain) and the exported
    package with the command that uses it; "" when there is neither."""
    lines = plugins.closing_lines(results)
    if exported:
        indent = "  " if lines else ""
        lines.append(f"{indent}exported: {exported}   (python3 generate.py --model={exported} "
                     "--prompt=...)")
    return "\n".join(lines)


def format_duration(seconds):
    """'1h02m', '3m05s' or '42s'."""
    seconds = int(round(max(seconds, 0.0)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def default_logdir(model_dir):
    """logs/<basename of model_dir>, so `tensorboard --logdir logs` shows every run."""
    return os.path.join("logs", os.path.basename(os.path.normpath(model_dir)))


def cut_short_note(step, planned):
    """The line that says a run stopped before the end of its planned schedules."""
    return (f"cut short: stopped at step {step} of the {planned} steps its schedules were "
            "planned for at its first start (the learning rate, the temperature and the "
            f"warm-ups did not finish their curves); run it again with --max_steps={planned} "
            "(or the --epochs of that length) to finish the plan")


def _result_lines(config, results):
    """The first lines: the run, its best valid (and test) figures, its architecture
    (or what the plug-ins say of it: `Plugin.summary_lines`)."""
    best = results.get("best") or results.get("last") or {}
    lines = [f"finished {config.model_dir}: step {results['step']} ({config.model_family}, "
             f"preset {config.preset})"]
    valid, test = best.get("valid"), best.get("test")
    if valid:
        line = (f"best valid (step {best['step']}): perplexity {valid['perplexity']:.2f}, "
                f"word perplexity {valid['word_perplexity']:.2f}, "
                f"bits/byte {valid['bits_per_byte']:.4f}")
        if test:
            line += f"; test perplexity {test['perplexity']:.2f} at that step"
        lines.append(line)
    lines += plugins.summary_lines(config, results)  # a search: its derived network
    if valid:
        lines += _yardstick_lines(config, results)
    return lines


# Valid perplexity this far above its best, at least two evaluations later: overfitting.
OVERFIT_RISE = 1.02


def _yardstick_lines(config, results):
    """The data's unigram and uniform valid perplexities beside the model's
    (pardata/yardsticks.py, in metrics.json), and an overfitting note when valid
    perplexity rose past its best for at least two evaluations."""
    lines = []
    base = (results.get("yardsticks") or {}).get("valid")  # metrics.json since they exist
    if base:
        lines.append(f"for comparison, valid perplexity of the data's unigram frequencies "
                     f"{base['unigram']:.2f}, of a uniform guess {base['uniform']:.0f}")
    best, last = results.get("best") or {}, results.get("last") or {}
    if "valid" not in best or "valid" not in last or not config.eval_interval:
        return lines
    b, now = best["valid"]["perplexity"], last["valid"]["perplexity"]
    if now > OVERFIT_RISE * b and last["step"] - best["step"] >= 2 * config.eval_interval:
        lines.append(
            f"overfitting: valid perplexity rose from {b:.2f} at step {best['step']} to "
            f"{now:.2f} at step {last['step']} (the best checkpoint is the one kept); to do "
            f"better, train on more text, raise the dropout (--dropout), or stop near step "
            f"{best['step']} (--max_steps={best['step']})")
    return lines


def run_summary(config, results):
    """A short end-of-run summary for the console (train.py prints it).

    Best valid metrics, the plug-ins' lines (`Plugin.summary_lines`: the
    derived architecture of a search), where the artefacts are (run directory,
    TensorBoard logdir) and the commands that come next: the plug-ins' own
    (`Plugin.next_commands`: retrain the derived network after a search),
    generate, evaluate, export, TensorBoard. A run stopped before the end of its
    planned schedules says so in its last line (`cut_short_note`), unless a
    plug-in ended it there by design (`Plugin.should_stop`: metrics.json's
    `ended_by_plugin`, a decided search).

    Args:
        config: the run's TrainConfig.
        results: what `train` returned (the content of metrics.json).

    Returns:
        The summary, lines joined by newlines.
    """
    quote = shlex.quote
    model_dir = quote(config.model_dir)
    logdir = config.logdir or default_logdir(config.model_dir)
    lines = _result_lines(config, results)
    lines.append(f"run directory: {config.model_dir}   TensorBoard logs: {logdir}")
    lines.append("next:")
    lines += [f"  {command}" for command in plugins.next_commands(config, results)]
    prompt = run_notes.valid_prompt(config.data_dir) or "The game"  # the data's own words
    lines += [
        f"  python3 generate.py --model_dir={model_dir} --prompt={quote(prompt)} --seed=1",
        f"  python3 evaluate.py --model_dir={model_dir} --split=test",
        f"  python3 export.py --model_dir={model_dir} "
        f"--output={quote(os.path.join(config.model_dir, 'model.keras'))}",
        f"  tensorboard --logdir {quote(os.path.dirname(os.path.normpath(logdir)) or logdir)}",
    ]
    planned = results.get("planned_steps")
    early = results.get("early_stopped")
    if early:
        lines.append(f"stopped early at step {results['step']:,}: {early['evaluations']} "
                     f"evaluations without a better valid loss than step "
                     f"{early['best_step']:,}'s (--early_stop)")
    elif planned and results["step"] < planned and not results.get("ended_by_plugin"):
        lines.append(cut_short_note(results["step"], planned))
    return "\n".join(lines)
