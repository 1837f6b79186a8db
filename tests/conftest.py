"""Shared fixtures: the WikiText-2 the project ships (datasets/), quiet TF, trained runs."""

import json
import lzma
import os
import pathlib
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Multi-worker training starts TensorFlow's PreemptionCheckpointHandler, which
# probes for Google Cloud with an HTTP request to the metadata server: the
# tests (and their children, which inherit this) send it to a closed loopback
# port instead, so that nothing leaves the machine.
os.environ.setdefault("GCE_METADATA_IP", "127.0.0.1:9")
# The suite's two workers share two cores: each TensorFlow (a worker's and its children's,
# which inherit this) runs an op on one intra-op thread instead of a pool of one per core,
# which would put four busy threads on the two cores. A test that sets the thread pools
# itself (--intra_op_threads) still does.
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
# The memory benchmarks read TensorFlow's CPU allocator statistics, which it keeps on an
# AVX2-only CPU only when asked before it starts; the tests import them after TensorFlow
# has started, so the whole session asks for them (bench/common.py, no TensorFlow).
from bench import common as _bench_common  # noqa: E402

_bench_common.keep_cpu_allocator_stats()

import pytest  # noqa: E402

from tests.helpers import PROJECT_ROOT  # noqa: E402

SHIPPED_WIKITEXT2 = PROJECT_ROOT / "datasets" / "wikitext-2"


# The longest test files, longest first: the seconds of each in a full run (two workers on
# two loaded cores: its tests' and fixtures' times among the run's 100 slowest, so a lower
# bound), then files of one test that train or build in child processes. `--dist loadfile`
# hands files out in order of their number of tests, most first, so these few-test files
# came last and one worker ran a long one alone at the end while the other had finished:
# handed out first (longest first), they leave the short files to fill the gaps at the end.
# The order of the other files is xdist's. A file missing here is only scheduled less well.
LONG_TEST_FILES = (
    "tests/serving/test_self_contained.py",  # 334 s
    "tests/training/test_distributed.py",  # 327 s
    "tests/training/test_xla.py",  # 194 s
    "tests/test_notebook.py",  # 148 s
    "tests/training/test_resume.py",  # 124 s
    "tests/faults/test_interrupt.py",  # 108 s
    "tests/experiments/test_baselines.py",  # 91 s
    "tests/faults/test_pipeline_interrupt.py",  # 90 s
    "tests/serving/test_evaluation.py",  # 83 s
    "tests/training/test_ema.py",  # 68 s
    "tests/experiments/test_cost_sweep.py",  # 65 s
    "tests/training/test_finetune.py",  # 64 s
    "tests/model/test_presets.py",  # 62 s
    "tests/serving/test_custom_sampler.py",  # 61 s
    "tests/serving/test_export.py",  # 60 s
    "tests/experiments/test_frontier.py",  # 54 s
    "tests/serving/test_python_api.py",  # 50 s
    "tests/training/test_freezing.py",  # 48 s
    "tests/training/test_train_e2e.py",  # 45 s
    "tests/training/test_batch_split.py",  # 41 s
    "tests/test_generate_cli.py",  # 41 s
    "tests/training/test_muon_lion.py",  # 41 s
    "tests/test_pretrained.py",  # 39 s
    "tests/training/test_horizons.py",  # 36 s
    "tests/faults/test_multi_worker.py",  # 35 s
    "tests/experiments/test_bench_commits.py",  # 35 s
    "tests/faults/test_build_data_interrupt.py",  # 19 s
)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile with LONG_TEST_FILES handed out first (longest first)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class LongFilesFirst(LoadFileScheduling):
        def _assign_work_unit(self, node):
            if not getattr(self, "_long_first", False):  # the queue is complete: sort it once
                rank = {path: i for i, path in enumerate(LONG_TEST_FILES)}
                order = sorted(self.workqueue, key=lambda f: rank.get(f, len(rank)))
                for path in reversed(order):  # stable: the others keep xdist's order
                    self.workqueue.move_to_end(path, last=False)
                self._long_first = True
            super()._assign_work_unit(node)

    return LongFilesFirst(config, log)


@pytest.fixture(scope="session")
def wikitext2_root(tmp_path_factory) -> pathlib.Path:
    """A directory holding wikitext-2/wiki.{train,valid,test}.tokens.

    Unpacked once per session from the copy the project ships
    (datasets/wikitext-2/*.xz): the tests read nothing outside the repository.
    """
    root = tmp_path_factory.mktemp("wikitext2_root")
    (root / "wikitext-2").mkdir()
    for split in ("train", "valid", "test"):
        name = f"wiki.{split}.tokens"
        data = lzma.decompress((SHIPPED_WIKITEXT2 / (name + ".xz")).read_bytes())
        (root / "wikitext-2" / name).write_bytes(data)
    return root


@pytest.fixture(autouse=True)
def _restore_absl_verbosity():
    """A test that runs an entry script's main in this process (optimal_cuts, benchmarks)
    may lower absl's verbosity for the rest of the session: put it back after each test."""
    from absl import logging

    absl_logger = logging.get_absl_logger()
    level = absl_logger.level  # NOTSET unless something set a verbosity
    yield
    absl_logger.setLevel(level)


@pytest.fixture(scope="session")
def project_root() -> pathlib.Path:
    return PROJECT_ROOT


@pytest.fixture(scope="session")
def word_data(tmp_path_factory, wikitext2_root) -> pathlib.Path:
    """A word build (V 256, B 4, T 16) of WikiText-2 slices; valid has a 50-id tail."""
    from tests.helpers.runs import build_data

    return build_data(tmp_path_factory.mktemp("word_data"), wikitext2_root, "word")


# The train text of `short_word_data`: lines of WikiText-2 valid (word_data's: 0 to 600).
SHORT_TRAIN_LINES = (0, 120)


@pytest.fixture(scope="session")
def short_word_data(tmp_path_factory, wikitext2_root) -> pathlib.Path:
    """`word_data` with a fifth of its train text (97 records, not 460; the same valid
    and test): for the PAR pipeline tests, whose retrain runs whole epochs."""
    from tests.helpers.runs import LINES, build_data

    lines = dict(LINES, train=SHORT_TRAIN_LINES)
    return build_data(tmp_path_factory.mktemp("short_word_data"), wikitext2_root, "word", lines)


# The settings of the runs `trained_run` makes.
TRAINED_RUN_STEPS = 4
TRAINED_RUN_EVAL_MEM_LEN = 8


def _train_tiny_run(data_dir, model_dir, family):
    import data_utils
    from model.families import get_family
    from training.run.loop import train
    from training.setup.config import TrainConfig

    meta = data_utils.load_meta(str(data_dir))
    preset = get_family(family).tiny_preset
    # A fixed Transformer-XL (afaf): a 4-step supernet search may derive no attention.
    fixed = {"architecture": "transformer_xl"} if family == "transformer_xl" else {}
    model = get_family(family).preset_config(preset, vocab_size=meta["vocab_size"], **fixed)
    config = TrainConfig(
        data_dir=str(data_dir), model_dir=str(model_dir), model=model, model_family=family,
        preset=preset, batch_size=meta["batch_size"], seq_len=meta["seq_len"],
        eval_mem_len=TRAINED_RUN_EVAL_MEM_LEN, max_steps=TRAINED_RUN_STEPS,
        learning_rate=3e-3, eval_interval=0, eval_max_records=0, checkpoint_interval=0,
        sample_tokens=0, log_interval=TRAINED_RUN_STEPS, logdir=str(model_dir) + "_logs")
    return train(config)


@pytest.fixture(scope="session")
def trained_run(word_data, tmp_path_factory):
    """trained_run(family) -> model_dir of a run of the family's tiny preset on `word_data`.

    Trained TRAINED_RUN_STEPS steps by training.run.loop.train (Transformer-XL as
    a fixed afaf), evaluated on every record, eval_mem_len
    TRAINED_RUN_EVAL_MEM_LEN. Made once per session, on first use: tests only
    read it.
    """
    root = tmp_path_factory.mktemp("trained_runs")
    runs = {}

    def get(family):
        if family not in runs:
            _train_tiny_run(word_data, root / family, family)
            runs[family] = root / family
        return runs[family]

    return get


# Runs the entry script argv[1] once per case of argv[2] (JSON name -> arguments),
# as `python <script> <arguments>` would, but in this one process: the
# script's __main__ block runs again for every case with sys.argv set and the
# flags back at their defaults, with file descriptors 1 and 2 sent to files
# (C++ logging is caught too). Prints JSON name -> [exit status, stdout, stderr].
# argv[1] "": each case's arguments start with its script; before each case the
# scripts' flags are removed (the case's script defines its own) and absl's
# verbosity is put back to the process's first (as tests/helpers/faults.py's child).
_CLI_CASES_CHILD = r"""
import json, os, runpy, sys, tempfile, traceback
from absl import app, flags, logging  # noqa: F401  (app first: its own flags stay)

script, cases = sys.argv[1], json.loads(sys.argv[2])
results = {}
real_stdout = os.dup(1)
absl_flags, verbosity = set(flags.FLAGS), logging.get_verbosity()
for name, args in cases.items():
    case_script, args = (script, args) if script else (args[0], args[1:])
    if not script:  # several scripts: each case defines its script's flags anew
        for flag in set(flags.FLAGS) - absl_flags:
            delattr(flags.FLAGS, flag)
        logging.set_verbosity(verbosity)
    flags.FLAGS.unparse_flags()
    sys.argv = [case_script, *args]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        try:
            runpy.run_path(case_script, run_name="__main__")
            code = 0
        except SystemExit as exit:
            code = exit.code
            if isinstance(code, str):  # as the interpreter: the message, status 1
                print(code, file=sys.stderr)
                code = 1
            code = code or 0
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
        out.seek(0)
        err.seek(0)
        results[name] = [code, out.read().decode(), err.read().decode()]
os.write(real_stdout, ("CASES " + json.dumps(results) + "\n").encode())
"""


@pytest.fixture(scope="session")
def cli_cases(project_root):
    """cli_cases(script, cases, timeout=600, stdin=None) -> name -> (exit status, stdout,
    stderr).

    Runs `python <script> <arguments>` for every case (name -> argument list)
    from the project root, one after another in one child process, so that
    TensorFlow starts once (script None: each argument list starts with its
    own script, so that several scripts share the process). Each case still
    runs the script's __main__ block with fresh flags and its own stdout and
    stderr (at the file descriptor); TensorFlow's start-up output, if any,
    falls to the first case that imports it. `stdin`: text the process reads
    on its standard input (a case of `--prompt_file=-` reads it).
    """

    def run(script, cases, timeout=600, stdin=None):
        env = dict(os.environ, PYTHONPATH=str(project_root), TF_CPP_MIN_LOG_LEVEL="2")
        child = subprocess.run([sys.executable, "-c", _CLI_CASES_CHILD, script or "",
                                json.dumps(cases)],
                               cwd=project_root, env=env, capture_output=True, text=True,
                               timeout=timeout, input=stdin)
        lines = [x for x in child.stdout.splitlines() if x.startswith("CASES ")]
        assert child.returncode == 0 and lines, child.stderr[-3000:]
        return {name: tuple(result) for name, result in json.loads(lines[-1][6:]).items()}

    return run
