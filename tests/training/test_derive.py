"""Derivation report against model/transformer_xl/flops.py and hand counts; reading
architectures."""

import json

import numpy as np
import pytest

from model.transformer_xl import flops
from model.transformer_xl.config import ModelConfig
from training.plugins.par_search.derive import (
    UNTRAINED_HEADER,
    architecture_from_probs,
    derivation_report,
    read_architecture,
    untrained_reason,
    write_derivation,
)

CONFIG = ModelConfig(vocab_size=100, d_model=16, num_heads=2, d_ffn=32, num_blocks=6, mem_len=4)
# argmax per row: a a f i f f
PROBS = np.array(
    [
        [0.6, 0.3, 0.1],
        [0.5, 0.4, 0.1],
        [0.2, 0.7, 0.1],
        [0.1, 0.2, 0.7],
        [0.3, 0.4, 0.3],
        [0.0, 1.0, 0.0],
    ]
)


def test_argmax_string_and_ties():
    assert architecture_from_probs(PROBS) == "aafiff"
    assert architecture_from_probs(np.full((2, 3), 1 / 3)) == "aa"  # ties: first candidate
    with pytest.raises(ValueError, match=r"\[num_blocks, 3\]"):
        architecture_from_probs(np.ones((3, 2)))


def test_report_numbers():
    r = derivation_report(CONFIG, PROBS, seq_len=4, mem_len=4, batch_size=2)
    assert r["architecture"] == "aafiff"
    assert r["counts"] == {"attention": 2, "dense": 3, "identity": 1}
    assert (r["seq_len"], r["mem_len"], r["batch_size"]) == (4, 4, 2)
    ours = flops.forward_flops_per_token(CONFIG, "aafiff", 4, 4, batch_size=2)["total"]
    base = flops.forward_flops_per_token(CONFIG, "afafaf", 4, 4, batch_size=2)["total"]
    assert r["flops_per_token"] == ours
    assert r["transformer_xl_flops_per_token"] == base
    assert r["relative_flops"] == pytest.approx(ours / base)
    assert r["relative_flops"] == pytest.approx(
        flops.relative_to_transformer_xl(CONFIG, "aafiff", 4, 4, batch_size=2)["total"]
    )
    assert r["speedup"] == pytest.approx(base / ours)
    assert r["attention_fraction"] == pytest.approx(2 / 6)
    assert r["attention_flops_fraction"] == pytest.approx(r["flops"]["attention"] / ours)
    assert r["params"] == flops.param_count(CONFIG, "aafiff")
    assert r["params"] < r["transformer_xl_params"]
    # By hand (D=16, N*H=16, F=32, V=100, T=M=4, K=8, B=2): attention block
    # 2*16*16*(2 + 2*8/4) + 2*8*16*16/(4*2) + 3*2*16*8 = 3072 + 512 + 768 = 4352 (W_R r is
    # computed once for the batch), dense 4*16*32 = 2048, full softmax 2*16*100 = 3200.
    assert ours == 2 * 4352 + 3 * 2048 + 3200  # 18048
    assert base == 3 * 4352 + 3 * 2048 + 3200  # 22400
    json.dumps(r)  # serialisable


def test_report_odd_blocks_and_mismatch():
    odd = CONFIG.replace(num_blocks=5)
    r = derivation_report(odd, PROBS[:5], seq_len=4, mem_len=4, batch_size=2)
    assert r["architecture"] == "aafif"
    assert r["speedup"] is None and r["transformer_xl_flops_per_token"] is None
    with pytest.raises(ValueError, match="num_blocks=6"):
        derivation_report(CONFIG, PROBS[:4], seq_len=4, mem_len=4, batch_size=2)


def test_write_then_read_three_ways(tmp_path):
    report = derivation_report(CONFIG, PROBS, seq_len=4, mem_len=4, batch_size=2)
    json_path, txt_path = write_derivation(tmp_path / "run", report)
    assert (tmp_path / "run" / "architecture.txt").read_text() == "aafiff\n"
    assert (
        json.loads((tmp_path / "run" / "architecture.json").read_text())["speedup"]
        == report["speedup"]
    )
    assert read_architecture(tmp_path / "run") == "aafiff"
    assert read_architecture(json_path) == "aafiff"
    assert read_architecture(txt_path) == "aafiff"
    assert read_architecture(" afaf ") == "afaf"
    assert read_architecture("aafiff", num_blocks=6) == "aafiff"
    (tmp_path / "run" / "architecture.json").unlink()  # falls back to the txt
    assert read_architecture(str(tmp_path / "run")) == "aafiff"
    assert not list((tmp_path / "run").glob("*.tmp"))


def test_read_errors(tmp_path):
    with pytest.raises(ValueError, match="neither a string"):
        read_architecture("abc")
    with pytest.raises(ValueError, match="num_blocks=4"):
        read_architecture("afa", num_blocks=4)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_architecture(str(tmp_path / "nope" / "architecture.json"))
    with pytest.raises(FileNotFoundError, match="holds no architecture.json"):
        read_architecture(tmp_path)
    bad_txt = tmp_path / "arch.txt"
    bad_txt.write_text("afx\n")
    with pytest.raises(ValueError, match="not an architecture string"):
        read_architecture(bad_txt)
    bad_json = tmp_path / "arch.json"
    bad_json.write_text(json.dumps({"speedup": 1.0}))
    with pytest.raises(ValueError, match="no 'architecture' key"):
        read_architecture(bad_json)
    bad_json.write_text("{")
    with pytest.raises(ValueError, match="not valid JSON"):
        read_architecture(bad_json)
    with pytest.raises(ValueError, match="not an architecture string"):
        write_derivation(tmp_path, {"architecture": "xyz"})


def test_untrained_reason():
    uniform = np.full((6, 3), 1 / 3)
    assert "never applied an update" in untrained_reason(PROBS, updates=0)
    assert "within" in untrained_reason(uniform, updates=50)
    near = uniform + np.array([9e-4, -9e-4, 0.0])  # every probability within 1e-3
    assert "uniform" in untrained_reason(near, updates=50)
    moved = uniform + np.array([2e-3, -2e-3, 0.0])
    assert untrained_reason(moved, updates=50) is None
    assert untrained_reason(PROBS, updates=1) is None


def test_untrained_report_is_flagged_on_disk(tmp_path):
    trained = derivation_report(CONFIG, PROBS, seq_len=4, mem_len=4, batch_size=2)
    assert trained["untrained"] is False and "untrained_reason" not in trained
    reason = untrained_reason(np.full((6, 3), 1 / 3), updates=0)
    report = derivation_report(CONFIG, np.full((6, 3), 1 / 3), seq_len=4, mem_len=4,
                               batch_size=2, untrained=reason)
    assert report["untrained"] is True and report["untrained_reason"] == reason
    json_path, txt_path = write_derivation(tmp_path / "run", report)
    lines = open(txt_path, encoding="utf-8").read().splitlines()
    assert lines == [f"{UNTRAINED_HEADER} {reason}", "aaaaaa"]
    assert json.loads(open(json_path).read())["untrained"] is True
    # Both files still read back (comment lines are skipped).
    assert read_architecture(json_path) == read_architecture(txt_path) == "aaaaaa"
    commented = tmp_path / "commented.txt"
    commented.write_text("# my note\nafaf\n")
    assert read_architecture(commented) == "afaf"
