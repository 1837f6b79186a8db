"""16-bit settings that run slower than float32 on this machine's CPU are warned about:
the CPU's bfloat16 instructions are read from the flags Linux lists for it."""

import types

import pytest
import tensorflow as tf

from training.run import strategy as strategy_lib
from training.run import trainer as trainer_lib

X86_WITH = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 avx512_vnni\n"
X86_WITHOUT = "processor\t: 0\nflags\t\t: fpu avx2 fma f16c\n"
ARM_WITH = "processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n"


@pytest.mark.parametrize("text, want", [
    (X86_WITH, True), (X86_WITHOUT, False), (ARM_WITH, True),
    ("processor\t: 0\nmodel name\t: something\n", None),
    # A flag that only contains the name is not the flag.
    ("flags\t\t: avx512_bf16x notbf16\n", False),
])
def test_cpu_bfloat16_from_the_listed_flags(tmp_path, text, want):
    path = tmp_path / "cpuinfo"
    path.write_text(text)
    assert strategy_lib.cpu_has_bfloat16(str(path)) is want


def test_cpu_bfloat16_unknown_without_cpuinfo(tmp_path):
    assert strategy_lib.cpu_has_bfloat16(str(tmp_path / "missing")) is None


def _warnings(caplog, monkeypatch, tmp_path, cpuinfo, **config):
    path = tmp_path / "cpuinfo"
    path.write_text(cpuinfo)
    monkeypatch.setattr(strategy_lib, "CPUINFO", str(path))
    fields = dict(precision="float32", optimizer="adam", muon_ns_bfloat16=None)
    fields.update(config)
    caplog.clear()
    caplog.set_level("WARNING")
    trainer_lib._warn_slow_precision(types.SimpleNamespace(**fields), tf.distribute.get_strategy())
    return [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]


@pytest.mark.skipif(bool(tf.config.list_physical_devices("GPU")),
                    reason="the warnings are for CPU-only machines")
def test_bfloat16_warned_only_on_a_cpu_without_it(caplog, monkeypatch, tmp_path):
    both = dict(precision="mixed_bfloat16", optimizer="muon", muon_ns_bfloat16=1.0)
    (message,) = _warnings(caplog, monkeypatch, tmp_path, X86_WITHOUT, **both)
    assert "--precision=mixed_bfloat16 and --muon_ns_bfloat16=1 on a CPU without" in message
    assert str(tmp_path / "cpuinfo") in message and "drop --precision and --muon_ns_bfloat16" \
        in message
    (message,) = _warnings(caplog, monkeypatch, tmp_path, X86_WITHOUT,
                           precision="mixed_bfloat16")
    assert message.startswith("--precision=mixed_bfloat16 on a CPU without")
    # The Newton-Schulz switch matters only to Muon, and 0 is float32.
    assert _warnings(caplog, monkeypatch, tmp_path, X86_WITHOUT, optimizer="adam",
                     muon_ns_bfloat16=1.0) == []
    assert _warnings(caplog, monkeypatch, tmp_path, X86_WITHOUT, optimizer="muon",
                     muon_ns_bfloat16=0.0) == []
    assert _warnings(caplog, monkeypatch, tmp_path, X86_WITH, **both) == []
    assert _warnings(caplog, monkeypatch, tmp_path, "no flags here\n", **both) == []
    assert _warnings(caplog, monkeypatch, tmp_path, X86_WITHOUT) == []
    (message,) = _warnings(caplog, monkeypatch, tmp_path, X86_WITH, precision="mixed_float16")
    assert "no fast float16 math" in message
