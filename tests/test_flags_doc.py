"""The README's flag tables are generated from the scripts and cannot drift."""

import re
import subprocess
import sys

from absl import flags
import pytest

from tools import flags_doc


@pytest.fixture(scope="module")
def block():
    return flags_doc.render_block()


def _section(text, script):
    """The part of the block documenting one script."""
    start = text.index(f"\n### {script}\n")
    end = text.find("\n### ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def _helpshort_flags(project_root, script):
    """Flag names the script itself reports with --helpshort (independent of the tool)."""
    # absl exits with status 1 after printing the help.
    out = subprocess.run([sys.executable, script, "--helpshort"], cwd=project_root,
                         capture_output=True, text=True, timeout=120).stdout
    return set(re.findall(r"^\s+--(?:\[no\])?(\w+):", out, flags=re.M))


def test_readme_block_is_up_to_date(project_root, block):
    readme = (project_root / "README.md").read_text(encoding="utf-8")
    span = flags_doc.find_block(readme)
    assert span is not None, "README.md has no flags block: run python -m tools.flags_doc --write"
    assert readme[span[0]:span[1]] == block, (
        "README.md's flags block is stale: run python -m tools.flags_doc --write")
    assert readme[:span[0]].rstrip().endswith(flags_doc.HEADING)


@pytest.mark.parametrize("script", sorted(flags_doc.SCRIPTS))
def test_every_flag_of_every_script_is_documented(project_root, block, script):
    documented = set(re.findall(r"^\| `--(\w+)` \|", _section(block, script), flags=re.M))
    expected = _helpshort_flags(project_root, script)
    assert len(expected) >= 5, f"could not read {script}'s flags from --helpshort"
    assert documented == expected


def test_defaults_and_help_come_from_the_definitions(block):
    train = _section(block, "train.py")
    # The [group] prefix becomes the table heading, absl's "<a|b>: " enum prefix
    # becomes a list of choices.
    assert "#### train.py: distribution" in train
    assert "[distribution]" not in train and "<default|" not in train
    assert ("| `--strategy` | enum | `default` | tf.distribute strategy (multi_worker reads "
            "TF_CONFIG). One of `default`, `mirrored`, `multi_worker`, `tpu`. |") in train
    generate = _section(block, "generate.py")
    assert "| `--num_tokens` | integer | `100` |" in generate
    assert "| `--greedy` | boolean | `false` |" in generate
    assert "| `--seed` | integer | *unset* |" in generate
    assert "(&lt;eos&gt;)" in generate  # raw <eos> would vanish as an HTML tag
    assert "| `--proj_dims` | list | *empty* |" in _section(block, "optimal_cuts.py")


def _fake_flags():
    fv = flags.FlagValues()
    flags.DEFINE_string("model_dir", None, "Run.", flag_values=fv)
    flags.DEFINE_integer("num_tokens", 3, "How many.", flag_values=fv)
    flags.DEFINE_enum("format", "a", ["a", "b"], "Which | one.", flag_values=fv)
    return fv


def _as_list(fv):
    return [fv[name] for name in fv]


def test_an_unmapped_flag_stops_the_generator():
    fv = _fake_flags()
    groups = (("run", ("model_dir", "format")),)
    with pytest.raises(flags_doc.FlagsDocError, match=r"without a group: --num_tokens"):
        flags_doc.render_script("fake.py", _as_list(fv), groups=groups)


def test_a_new_flag_in_a_real_script_stops_the_generator():
    flag_list, doc = flags_doc.load_flags("generate.py")
    fv = flags.FlagValues()
    flags.DEFINE_boolean("brand_new", False, "Not in GROUPS.", flag_values=fv)
    with pytest.raises(flags_doc.FlagsDocError, match=r"generate.py.*--brand_new"):
        flags_doc.render_script("generate.py", flag_list + [fv["brand_new"]], doc)


def test_a_mapping_naming_a_removed_flag_stops_the_generator():
    fv = _fake_flags()
    groups = (("run", ("model_dir", "format", "num_tokens", "gone")),)
    with pytest.raises(flags_doc.FlagsDocError, match=r"no longer defines: --gone"):
        flags_doc.render_script("fake.py", _as_list(fv), groups=groups)


def test_a_help_without_group_prefix_stops_the_generator():
    fv = flags.FlagValues()
    flags.DEFINE_integer("max_steps", 0, "[run length] Steps.", flag_values=fv)
    flags.DEFINE_integer("new_flag", 0, "No group here.", flag_values=fv)
    with pytest.raises(flags_doc.FlagsDocError, match=r"--new_flag"):
        flags_doc.render_script("train.py", _as_list(fv), groups=flags_doc.HELP_PREFIX)


def test_render_groups_in_mapping_order_and_escapes_cells():
    fv = _fake_flags()
    groups = (("sampling", ("num_tokens",)), ("run", ("format", "model_dir")))
    text = flags_doc.render_script("fake.py", _as_list(fv), "Fake script.\n\nMore.", groups)
    assert text.index("#### fake.py: sampling") < text.index("#### fake.py: run")
    # Definition order inside a group, whatever the mapping order.
    assert text.index("`--model_dir`") < text.index("`--format`")
    assert "Which \\| one. One of `a`, `b`." in text
    assert "Fake script." in text and "More." not in text


def test_loading_leaves_the_global_flags_alone():
    before = set(flags.FLAGS)
    for script in flags_doc.SCRIPTS:
        flags_doc.load_flags(script)
    assert set(flags.FLAGS) == before


def test_write_and_check(tmp_path, block):
    readme = tmp_path / "README.md"
    readme.write_text("# Title\n\nIntro.\n", encoding="utf-8")
    assert flags_doc.main(["--check", "--readme", str(readme)]) == 1
    assert flags_doc.main(["--write", "--readme", str(readme)]) == 0
    text = readme.read_text(encoding="utf-8")
    assert text == f"# Title\n\nIntro.\n\n{flags_doc.HEADING}\n\n{block}\n"
    assert flags_doc.main(["--check", "--readme", str(readme)]) == 0
    # A stale block is replaced in place; text around it is kept.
    stale = text.replace("| `--num_tokens` |", "| `--num_tokenz` |") + "\n## After\n"
    readme.write_text(stale, encoding="utf-8")
    assert flags_doc.main(["--check", "--readme", str(readme)]) == 1
    assert flags_doc.main(["--write", "--readme", str(readme)]) == 0
    assert readme.read_text(encoding="utf-8") == text + "\n## After\n"


def test_check_prints_a_diff(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(f"x\n\n{flags_doc.HEADING}\n\n{flags_doc.BEGIN}\nold\n{flags_doc.END}\n",
                      encoding="utf-8")
    assert flags_doc.main(["--check", "--readme", str(readme)]) == 1
    err = capsys.readouterr().err
    assert "-old" in err and "+| `--dataset` |" in err and "--write" in err


def test_broken_markers_are_an_error(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(f"{flags_doc.BEGIN}\n{flags_doc.BEGIN}\n{flags_doc.END}\n",
                      encoding="utf-8")
    assert flags_doc.main(["--write", "--readme", str(readme)]) == 1
    assert "exactly one" in capsys.readouterr().err
