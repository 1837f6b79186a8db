"""bench/bench_generation.py: the --quick run in-process, and its equality check's teeth."""

import json

import numpy as np
import pytest

from bench import bench_generation as bg


@pytest.mark.slow
def test_quick_run_writes_every_case_and_checks_the_cache(tmp_path):
    out = tmp_path / "bench_generation.json"
    bg.main(["--quick", f"--out={out}"])
    result = json.loads(out.read_text())
    presets, batches = ["wt2_base", "wt2_large"], [1, 32]
    assert sorted(result["models"]) == presets and result["batch_sizes"] == batches
    expected = {bg.case_name(p, b, m) for p in presets for b in batches for m in bg.METHODS}
    assert {row["name"] for row in result["rows"]} == expected
    for row in result["rows"]:
        assert row["step_ms"] > 0 and row["tokens_per_sec"] > 0, row
        assert len(row["round_step_ms"]) == result["rounds"] == 2
        assert row["mem_len"] == (result["window"] - 1 if row["method"] == "cache" else 0)
    assert len(result["pairs"]) == len(presets) * len(batches)
    for pair in result["pairs"]:
        assert pair["cache_ms"] > 0 and pair["recompute_ms"] > 0 and pair["speedup"] > 0
        assert pair["architecture"] == "af" * (len(pair["architecture"]) // 2)
    for preset, info in result["models"].items():
        check = info["check"]
        assert check["positions"] > 1 and check["rows"] == bg.CHECK_ROWS, preset
        assert 0 <= check["max_abs_diff"] <= check["atol"] < check["no_context_max_abs_diff"]
        assert info["tracing_counts"] == {"cache": 1, "recompute": 1}  # any batch, any length
    assert "| wt2_large `afafafafafaf` |" in result["markdown"]


class ForgetfulCache:
    """A broken cache: claims a long memory but runs every forward without it."""

    def __init__(self, model, decoder):
        self.model, self.decoder, self.mem_len = model, decoder, 10**6

    def forward(self, ids, state):
        ids = np.asarray(ids)
        return self.decoder.forward(ids, self.model.initial_state(ids.shape[0], 0))


@pytest.mark.slow
def test_check_fails_on_a_broken_cache_and_passes_on_the_decoder():
    from serving.generation import Decoder

    _, model, _ = bg.build("tiny", "transformer_xl")
    recompute = Decoder(model, mem_len=0)
    ids = bg.zipf_ids(np.random.default_rng(1), model.vocab_size, (2, 12))
    check = bg.check_cache_equals_recompute(model, Decoder(model, mem_len=11), recompute, ids,
                                            1e-4)
    assert check["positions"] == 7 and check["max_abs_diff"] <= 1e-4
    with pytest.raises(AssertionError, match="cached path is broken"):
        bg.check_cache_equals_recompute(model, ForgetfulCache(model, recompute), recompute, ids,
                                        1e-4)
    with pytest.raises(ValueError, match="mem_len >= 11"):
        bg.check_cache_equals_recompute(model, Decoder(model, mem_len=4), recompute, ids, 1e-4)
