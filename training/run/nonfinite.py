"""What the user reads when a loss or a gradient is not finite (--on_nonfinite).

docs/faults.md says when each is shown: --on_nonfinite=stop raises
`NonFiniteError` with `stop_message`; skip warns at each skipped step and
raises with `too_many_message` after --max_nonfinite_steps in a row; a
checkpoint refused for a non-finite value adds `nonfinite_fixes`.
"""


def nonfinite_fixes(config, skip_hint=True):
    """The likely fixes of a non-finite loss, with the run's current values."""
    clip = f"{config.clip_norm:g}" if config.clip_norm else "0 = off"
    text = (f"likely fixes: lower --learning_rate (now {config.learning_rate:g}), clip with "
            f"--clip_norm (now {clip}), train in --precision=float32 (now {config.precision})")
    if skip_hint and config.on_nonfinite == "stop":
        text += ", or skip such steps with --on_nonfinite=skip"
    return text


def describe_nonfinite(out):
    """'the loss (nan) is', 'the gradient of the weights (grad_norm=inf) is', ...: what
    was not finite in a step's output (Trainer.train_step's `nonfinite`)."""
    parts = []
    for key in out.get("nonfinite", []):
        if key == "loss":
            parts.append(f"the loss ({out['loss']})")
        elif key == "grad_norm":
            parts.append(f"the gradient of the weights (grad_norm={out[key]})")
        else:
            group = key[:-len("_grad_norm")]
            parts.append(f"the gradient of the {group} group ({key}={out[key]})")
    if not parts:
        return "the loss or a gradient is"
    return " and ".join(parts) + (" are" if len(parts) > 1 else " is")


def stop_message(config, step, what, latest):
    """--on_nonfinite=stop: the step, what was not finite and the fixes."""
    return (f"non-finite loss or gradient at step {step}: {what} not finite; stopped "
            f"without saving; the last checkpoint ({latest}) is intact; "
            f"{nonfinite_fixes(config)}")


def too_many_message(config, in_a_row, step, what, latest):
    """--on_nonfinite=skip after --max_nonfinite_steps non-finite steps in a row."""
    return (f"{in_a_row} steps in a row were non-finite (--max_nonfinite_"
            f"steps={config.max_nonfinite_steps}), the last at step {step}: {what} not "
            f"finite; stopped "
            f"without saving; the last checkpoint ({latest}) is intact; "
            f"{nonfinite_fixes(config, skip_hint=False)}")


def save_refused_message(config, error):
    """A checkpoint refused because a saved value is not finite."""
    return f"{error}; {nonfinite_fixes(config)}"
