"""serving/model_flags.py: the --model / --model_dir / --checkpoint flags the serving
scripts share, defined once and checked once."""

from absl import flags
import pytest

from serving import model_flags
from tools import flags_doc

SCRIPTS = ("generate.py", "evaluate.py", "export.py")


def _parsed(*args, model_purpose=None):
    fv = flags.FlagValues()
    model_flags.define(fv, model_purpose=model_purpose)
    fv(["prog", *args])
    return fv


def test_defines_the_three_flags_on_the_given_flag_values_only():
    before = set(flags.FLAGS)
    fv = _parsed()
    assert set(fv) == {"model", "model_dir", "checkpoint"}
    assert set(flags.FLAGS) == before
    assert (fv.model, fv.model_dir, fv.checkpoint) == (None, None, "best")
    assert not fv["checkpoint"].present


def test_the_flags_belong_to_the_caller():
    """absl counts them as the calling module's (a script's --helpshort lists them)."""
    fv = _parsed()
    for name in ("model", "model_dir", "checkpoint"):
        assert fv.find_module_defining_flag(name) == __name__


def test_the_purpose_is_added_to_the_model_help_only():
    plain, export = flags.FlagValues(), flags.FlagValues()
    model_flags.define(plain)
    model_flags.define(export, model_purpose="to write its SavedModel")
    assert plain["model"].help.endswith("instead of --model_dir.")
    assert export["model"].help.endswith("instead of --model_dir (e.g. to write its SavedModel).")
    assert plain["model_dir"].help == export["model_dir"].help
    assert plain["checkpoint"].help == export["checkpoint"].help


@pytest.mark.parametrize("args, expected", [
    (["--model=lm.keras"], None),
    (["--model_dir=runs/a"], None),
    (["--model_dir=runs/a", "--checkpoint=latest"], None),
    ([], "is required"),
    (["--model=lm.keras", "--model_dir=runs/a"], "not both"),
    (["--model=lm.keras", "--checkpoint=best"], "drop --checkpoint"),  # given, even if default
])
def test_problem(args, expected):
    problem = model_flags.problem(_parsed(*args))
    if expected is None:
        assert problem is None
    else:
        assert expected in problem and "\n" not in problem


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_scripts_define_the_shared_flags(script):
    """Each script's flags, as tools/flags_doc.py loads them, carry the shared definitions."""
    shared = _parsed()
    loaded = {flag.name: flag for flag in flags_doc.load_flags(script)[0]}
    for name in ("model_dir", "checkpoint"):
        assert (loaded[name].default, loaded[name].help) == (shared[name].default,
                                                             shared[name].help)
    assert loaded["model"].default is None
    assert loaded["model"].help.startswith(shared["model"].help[:-1])
