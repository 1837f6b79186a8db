"""training.report.notes: the summary's prompt comes from the data's own valid split, and a
search that derived no attention says why."""

import json

from training.plugins.par_search.summaries import no_attention_note
from training.report.notes import prompt_from_text


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
    from pardata.records import load_tokenizer
    from tests.helpers.runs import LINES, build_data
    from training.report.notes import valid_prompt
    from training.report.summary import run_summary
    from training.setup.config import TrainConfig

    data = build_data(tmp_path, wikitext2_root, "byte")  # bytes decode to the exact text
    with open(wikitext2_root / "wikitext-2" / "wiki.valid.tokens", encoding="utf-8") as f:
        lines = f.readlines()
    text = "".join(lines[slice(*LINES["valid"])])
    # The split's tail (its ids after the last record) is read first, without TensorFlow;
    # this build's is 12 bytes, no prose: the start of the split's records is taken.
    assert json.loads((data / "meta.json").read_text())["splits"]["valid"]["dropped_ids"] < 20
    expected = prompt_from_text(text)
    assert expected == "The accompanying music"  # the first line of the valid slice
    assert valid_prompt(str(data)) == expected
    assert valid_prompt(str(tmp_path / "nowhere")) is None
    config = TrainConfig(data_dir=str(data), model_dir="runs/x",
                         model=preset_config("tiny", vocab_size=256, architecture="afaf"),
                         preset="tiny", max_steps=10)
    summary = run_summary(config, {"step": 10, "planned_steps": 10, "architecture": "afaf"})
    assert (f"  python3 generate.py --model_dir=runs/x --prompt='{expected}' --seed=1"
            in summary.splitlines())
    # A tail holding prose gives the prompt from its first sentence.
    tokenizer = load_tokenizer(str(data))
    ids = tokenizer.encode("ending one . The quiet harbour town grew\n")
    (data / "valid-tail.txt").write_text("".join(f"{i}\n" for i in ids), encoding="ascii")
    assert valid_prompt(str(data)) == "The quiet harbour"


def test_no_attention_note_says_why():
    assert no_attention_note({"counts": {"attention": 3, "dense": 2, "identity": 1}}, 300) is None
    derivation = {"counts": {"attention": 0, "dense": 2, "identity": 4}, "untrained": None}
    note = no_attention_note(derivation, 300)
    assert note.startswith("no attention block (2 dense, 4 identity): after 300 steps the "
                           "search found the other choices better in every block: ")
    assert "--architecture=transformer_xl" in note and "\n" not in note
    # An untrained derivation has its own line; a result without counts gives none.
    assert no_attention_note({**derivation, "untrained": "no update"}, 300) is None
    assert no_attention_note({}, 300) is None


def test_a_short_search_without_attention_says_why():
    from model.transformer_xl.presets import preset_config
    from training.report.summary import run_summary
    from training.setup.config import TrainConfig

    config = TrainConfig(data_dir="data/x", model_dir="runs/s",
                         model=preset_config("tiny", vocab_size=256), preset="tiny",
                         max_steps=30)
    derivation = {"architecture": "ffif", "counts": {"attention": 0, "dense": 3, "identity": 1},
                  "untrained": None}
    lines = run_summary(config, {"step": 30, "planned_steps": 30, "architecture": "ffif",
                                 "derivation": derivation}).splitlines()
    assert lines[1].startswith("derived architecture: ffif (")
    assert lines[2] == no_attention_note(derivation, 30)
    summary = run_summary(config, {"step": 30, "planned_steps": 30, "architecture": "afif",
                                   "derivation": {**derivation, "architecture": "afif",
                                                  "counts": {"attention": 1, "dense": 2}}})
    assert "derived architecture: afif" in summary and "no attention block" not in summary
