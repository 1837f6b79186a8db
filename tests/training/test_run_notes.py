"""training.run_notes: the summary's prompt comes from the data's own valid split, and a
search that derived no attention says why."""

import json

import pytest

from training.run_notes import no_attention_note, prompt_from_text, search_note


def test_prompt_from_text_takes_the_first_prose_words():
    text = " = Homarus gammarus = \n \n Homarus gammarus , known as the European lobster\n"
    assert prompt_from_text(text) == "Homarus gammarus"
    assert prompt_from_text(" The tower is tall and old\n") == "The tower is"
    assert prompt_from_text(" The tower is tall\n", max_words=2) == "The tower"
    # An opening quote is passed over; a line starting with a special token or only
    # punctuation gives nothing, the next does.
    assert prompt_from_text(' " Race Against Time " was released\n') == "Race Against Time"
    assert prompt_from_text(' <unk> was\n " , \n " <unk> " is\n Jeff Todd <unk> and\n') == (
        "Jeff Todd")
    assert prompt_from_text(" = A = \n\n , ; \n") is None


def test_the_summary_suggests_a_prompt_of_the_valid_split(tmp_path, wikitext2_root):
    from model.transformer_xl.presets import preset_config
    from tests.helpers.runs import LINES, build_data
    from training.config import TrainConfig
    from training.loop import run_summary
    from training.run_notes import valid_prompt

    data = build_data(tmp_path, wikitext2_root, "byte")  # bytes decode to the exact text
    with open(wikitext2_root / "wikitext-2" / "wiki.valid.tokens", encoding="utf-8") as f:
        lines = f.readlines()
    expected = prompt_from_text("".join(lines[slice(*LINES["valid"])]))
    assert expected == "The accompanying music"  # the first line of the valid slice
    assert valid_prompt(str(data)) == expected
    assert valid_prompt(str(tmp_path / "nowhere")) is None
    config = TrainConfig(data_dir=str(data), model_dir="runs/x",
                         model=preset_config("tiny", vocab_size=256, architecture="afaf"),
                         preset="tiny", max_steps=10)
    summary = run_summary(config, {"step": 10, "planned_steps": 10, "architecture": "afaf"})
    assert (f"  python3 generate.py --model_dir=runs/x --prompt='{expected}' --seed=1"
            in summary.splitlines())


def test_no_attention_note_says_why():
    probabilities = [[0.30, 0.45, 0.25], [0.41, 0.20, 0.39], [0.10, 0.80, 0.10]]
    note = no_attention_note("fai", probabilities, "afi", 300)
    assert note is None  # attention was derived
    note = no_attention_note("ffi", [[0.30, 0.45, 0.25], [0.35, 0.40, 0.25],
                                     [0.10, 0.10, 0.80]], "afi", 300)
    assert note.startswith("no attention block: after 300 steps every block's probabilities "
                           "favour another choice (attention's highest is 0.35, block 2): ")
    assert "--architecture=transformer_xl" in note and "\n" not in note
    # The column of attention follows the letters' order.
    note = no_attention_note("ff", [[0.6, 0.3, 0.1], [0.7, 0.1, 0.2]], "fai", 5)
    assert "attention's highest is 0.30, block 1" in note


@pytest.mark.parametrize("untrained", [None, "no update"])
def test_search_note_reads_the_run(tmp_path, untrained):
    probabilities = [[0.2, 0.5, 0.3], [0.25, 0.5, 0.25]]
    (tmp_path / "architecture.json").write_text(json.dumps({"probabilities": probabilities}))
    derivation = {"architecture": "ff", "untrained": untrained}
    note = search_note(str(tmp_path), derivation, 40)
    if untrained:
        assert note is None  # the summary already says the derivation is untrained
    else:
        assert note.startswith("no attention block: after 40 steps")
        assert "attention's highest is 0.25, block 2" in note
    assert search_note(str(tmp_path / "none"), {"architecture": "ff"}, 40) is None
