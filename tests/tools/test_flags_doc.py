"""docs/flags.md is generated from the scripts' flag definitions and cannot drift."""

import re
import subprocess
import sys

from absl import flags
import pytest

from tools import flags_doc


@pytest.fixture(scope="module")
def block():
    return flags_doc.render_page()


def _section(text, script):
    """The part of the page documenting one script."""
    start = text.index(f"\n## {script}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def _helpshort_flags(project_root, script):
    """Flag names the script itself reports with --helpshort (independent of the tool)."""
    # absl exits with status 1 after printing the help.
    out = subprocess.run([sys.executable, script, "--helpshort"], cwd=project_root,
                         capture_output=True, text=True, timeout=120).stdout
    return set(re.findall(r"^\s+--(?:\[no\])?(\w+):", out, flags=re.M))


def test_flags_page_is_up_to_date(project_root, block):
    page = project_root / "docs" / "flags.md"
    assert page == flags_doc.PAGE
    assert page.read_text(encoding="utf-8") == block, (
        "docs/flags.md is stale: run python -m tools.flags_doc --write")
    assert block.startswith(flags_doc.TITLE + "\n")


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
    assert "### train.py: distribution" in train
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
    assert text.index("### fake.py: sampling") < text.index("### fake.py: run")
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
    page = tmp_path / "flags.md"
    assert flags_doc.main(["--check", "--page", str(page)]) == 1  # missing
    assert flags_doc.main(["--write", "--page", str(page)]) == 0
    assert page.read_text(encoding="utf-8") == block
    assert flags_doc.main(["--check", "--page", str(page)]) == 0
    # A stale page is rewritten whole.
    page.write_text(block.replace("| `--num_tokens` |", "| `--num_tokenz` |") + "\nextra\n",
                    encoding="utf-8")
    assert flags_doc.main(["--check", "--page", str(page)]) == 1
    assert flags_doc.main(["--write", "--page", str(page)]) == 0
    assert page.read_text(encoding="utf-8") == block


def test_check_prints_a_diff(tmp_path, capsys):
    page = tmp_path / "flags.md"
    page.write_text(f"{flags_doc.TITLE}\n\nold\n", encoding="utf-8")
    assert flags_doc.main(["--check", "--page", str(page)]) == 1
    err = capsys.readouterr().err
    assert "-old" in err and "+| `--dataset` |" in err and "--write" in err


def test_runs_as_a_module_from_the_project_root(project_root):
    result = subprocess.run(
        [sys.executable, "-m", "tools.flags_doc", "--check"],
        cwd=project_root,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
