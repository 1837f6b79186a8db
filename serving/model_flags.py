"""The serving scripts' model flags: `--model`, `--model_dir`, `--checkpoint`.

generate.py, evaluate.py and export.py each load one model, from a `.keras`
package or a run directory's checkpoint (`serving.generation.load`); they
define these flags with `define` and check them with `problem`:

    from absl import flags
    from serving import model_flags

    model_flags.define(flags.FLAGS)
    ...
    problem = model_flags.problem(flags.FLAGS)

The flags go on the FlagValues the script passes (`flags.FLAGS` of the
`absl.flags` it imported), never on a module-level global of this file, so
tools/flags_doc.py, which hands each script its own FlagValues, documents them
with the script. This module disclaims its flag definitions
(`flags.disclaim_key_flags`), so absl counts the flags as the calling script's
own: its `--helpshort` lists them. No TensorFlow: the checks run before it is
imported.
"""

from absl import flags

from serving import model_source_problem

# The flags `define` defines belong to its caller (absl walks past this module).
flags.disclaim_key_flags()


def define(flag_values, model_purpose=None):
    """Defines --model, --model_dir and --checkpoint on `flag_values`.

    Args:
        flag_values: the script's `absl.flags.FlagValues` (its `flags.FLAGS`).
        model_purpose: what a script does with a --model file besides serving it
            (e.g. "to write its SavedModel"), added to --model's help; None: nothing.
    """
    purpose = f" (e.g. {model_purpose})" if model_purpose else ""
    flags.DEFINE_string("model", None, ".keras file written by export.py (model, tokenizer and "
                        "settings in one file, e.g. pretrained/wt2_base.keras); instead of "
                        f"--model_dir{purpose}.", flag_values=flag_values)
    flags.DEFINE_string("model_dir", None, "Run directory written by train.py (config.json, "
                        "checkpoints, best/).", flag_values=flag_values)
    flags.DEFINE_string("checkpoint", "best", "--model_dir only: best (best on valid; the "
                        "latest if the run was never evaluated), latest, or a checkpoint path "
                        "(ckpt-<step> prefix, absolute or inside --model_dir).",
                        flag_values=flag_values)


def problem(flag_values):
    """What is wrong with the parsed --model / --model_dir / --checkpoint (one line), or
    None: exactly one of a .keras file and a run directory, and --checkpoint only with a
    run directory (`serving.model_source_problem`)."""
    return model_source_problem(flag_values.model, flag_values.model_dir,
                                flag_values["checkpoint"].present)
