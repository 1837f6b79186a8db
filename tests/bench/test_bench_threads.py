"""bench/bench_threads.py: the settings it runs and how it summarises their processes."""

import pytest

from bench import bench_threads


def test_settings_cover_the_thread_pools_replicas_and_one_pinned_core():
    table = bench_threads.settings([0, 1])
    assert list(table)[0] == "default" and table["default"] == ([], None, {})
    assert table["intra 1 / inter 2"][0] == ["--intra_op_threads", 1, "--inter_op_threads", 2]
    assert table["mirrored 2 CPU replicas"][0] == ["--num_cpu_replicas", 2]
    assert table["one core (1)"] == ([], [1], {})
    assert table["oneDNN on"] == ([], None, {"TF_ENABLE_ONEDNN_OPTS": "1"})
    assert table["oneDNN on, one core (1)"] == ([], [1], {"TF_ENABLE_ONEDNN_OPTS": "1"})


def test_a_setting_s_environment_reaches_its_process(tmp_path, monkeypatch):
    seen = {}

    def fake_run(argv, env=None, preexec_fn=None, **_):
        seen.update(env=env, pinned=preexec_fn is not None)
        (tmp_path / "run.json").write_text('{"rows": []}')
        return type("Done", (), {"returncode": 0})()

    monkeypatch.setattr(bench_threads.subprocess, "run", fake_run)
    args = bench_threads.parse_args([])
    flags, pin, env = bench_threads.settings([0])["oneDNN on, one core (0)"]
    assert bench_threads.run_setting(flags, pin, args, str(tmp_path / "run.json"), env) == \
        {"rows": []}
    assert seen["env"]["TF_ENABLE_ONEDNN_OPTS"] == "1" and seen["pinned"]


def _run(**tokens_per_sec):
    return {"rows": [{"name": name, "tokens_per_sec": t} for name, t in tokens_per_sec.items()]}


def test_summary_is_the_median_process_and_its_ratio_to_the_default():
    results = {"default": [_run(soft=100.0, fixed=200.0), _run(soft=300.0, fixed=180.0),
                           _run(soft=120.0, fixed=190.0)],
               "other": [_run(soft=150.0, fixed=95.0), _run(soft=90.0, fixed=100.0),
                         _run(soft=1000.0, fixed=90.0)]}
    rows = {(r["case"], r["setting"]): r for r in bench_threads.summarize(results, list(results))}
    assert rows[("soft", "default")]["tokens_per_sec"] == 120.0
    assert rows[("soft", "other")]["tokens_per_sec"] == 150.0
    assert rows[("soft", "other")]["vs_default"] == pytest.approx(150.0 / 120.0)
    assert rows[("fixed", "other")]["vs_default"] == pytest.approx(95.0 / 190.0)
    assert rows[("fixed", "other")]["runs"] == [95.0, 100.0, 90.0]
