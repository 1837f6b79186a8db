"""tools/freeze_replay.py: the freezing rule replayed on a finished search's history."""

import json

import numpy as np

from tools import freeze_replay


def _history(tmp_path, top):
    """A 2-block history every 100 steps: block 0's 'a' probability from `top`, block 1 'f'."""
    entries = []
    for i, p in enumerate(top):
        rest = (1 - p) / 2
        entries.append({"step": 100 * (i + 1), "probs": [[p, rest, rest], [rest, p, rest]]})
    (tmp_path / "arch_history.json").write_text(json.dumps(
        {"format_version": 1, "choices": ["attention", "dense", "identity"],
         "entries": entries}))
    return tmp_path


def test_a_block_freezes_after_a_whole_window_above_the_threshold(tmp_path):
    #       steps 100  200  300  400  500  600  700  800
    top = [0.99, 0.99, 0.95, 0.99, 0.99, 0.99, 0.99, 0.99]
    steps, probs, choices = freeze_replay.load_history(_history(tmp_path, top))
    assert choices == ("attention", "dense", "identity") and probs.shape == (8, 2, 3)
    # The warm-up hides steps 100-200; the dip at 300 restarts the window at 400.
    assert freeze_replay.replay(steps, probs, 0.97, 300, arch_warmup_steps=200) == [
        (600, 0), (600, 1)]
    assert freeze_replay.replay(steps, probs, 0.9, 300) == [(300, 0), (300, 1)]
    assert freeze_replay.replay(steps, probs, 0.999, 100) == [None, None]


def test_the_documented_search_froze_to_its_final_choice(project_root, capsys):
    run = project_root / "docs" / "results" / "wt2_base_20ep"
    assert freeze_replay.main([str(run), "--thresholds=0.97", "--windows=1000"]) == 0
    out = capsys.readouterr().out
    assert "final aaafaf, warm-up 2000" in out
    assert "| 0.97 | 1,000 | 6,500, 20,200, 11,600, 19,200, 14,100, 5,800 | aaafaf | 0 | " \
           "20,200 |" in out
    steps, probs, _ = freeze_replay.load_history(run)
    assert np.all(np.diff(steps) > 0)
