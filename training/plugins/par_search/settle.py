"""Settling several finished searches by their supernets' own validation loss.

Searches of one recipe that differ only in their seed may derive different
architectures, and a vote over them can pick the worst. Instead, each candidate
architecture is scored as a sub-network of every search's supernet, with the
weights the search trained, as DARTS-PT's masking scores an operation by the
supernet's validation accuracy (Wang et al. 2021, "Rethinking Architecture
Selection in Differentiable NAS", arXiv 2108.04392):

    nll[arch][run] = the valid NLL per token of run's supernet with every block
                     frozen to arch's letter (`TransformerXLLM.set_frozen`: the
                     block computes that candidate alone, no mixing, no noise);
    mean_nll[arch] = the mean of nll[arch] over the runs;
    pick           = the architecture of the lowest mean (ties: the first).

Each supernet is its best checkpoint (its last when it has none), in float32 and
evaluation mode, scored by the one stream evaluator (evaluation/stream.py) with
the run's `eval_mem_len` on the same first `eval_max_records` records of the
valid split (0: the whole split and its tail), so a derived network seeded with
the supernet's weights (`retrain.seed_from_search`) scores the same figure.

Freezing is a Python-level switch read while tracing: every architecture gets a
new evaluator (a new `tf.function`, traced with that frozen set), and the
supernet's own frozen set (progressive freezing) is put back afterwards.

`plan` checks everything a user can get wrong (one `SettleError` line each)
without evaluating; `evaluate` scores a plan; `settle` does both.
"""

import dataclasses
import math
import os

from absl import logging

from model.transformer_xl.config import (
    SUPERNET,
    TRANSFORMER_XL,
    transformer_xl_architecture,
)
from pardata.errors import DataError
from pardata.meta import load_meta
from runstore.config import RunConfig
from runstore.run_dir import CONFIG_FILE
from training.plugins.par_search.derive import ARCHITECTURE_JSON, read_architecture

SETTLE_FILE = "settle.json"
SPLIT = "valid"
# Model fields two supernets may differ in and still be one network to settle: the
# search's randomness and mechanics, and dropout (off at evaluation).
NOT_THE_NETWORK = frozenset({"seed", "search_mode", "hard_gradient", "hard_rows", "eval_mode",
                             "dropout", "attn_dropout"})


class SettleError(ValueError):
    """Bad input, found before any evaluation: one line naming the run or architecture."""


@dataclasses.dataclass(frozen=True)
class Search:
    """A finished search: its directory (as given), config, derived architecture and the
    checkpoint prefix its supernet is read from."""

    run: str
    config: RunConfig
    derived: str
    checkpoint: str


@dataclasses.dataclass(frozen=True)
class SettlePlan:
    """The checked input of an evaluation: searches, architectures in order, records."""

    searches: tuple
    architectures: tuple
    eval_max_records: int

    @property
    def runs(self):
        return tuple(search.run for search in self.searches)


@dataclasses.dataclass(frozen=True)
class Settlement:
    """The table of a settlement and what it was computed from.

    Attributes:
        runs: the run directories, in order.
        architectures: the architectures evaluated, in order.
        nll: {architecture: {run: valid NLL per token (nats)}}.
        tokens: {run: tokens scored} (the same for every architecture).
        derived: {run: its derived architecture}.
        checkpoints: {run: the checkpoint prefix evaluated}.
        eval_max_records: valid records scored (0: the whole split and its tail).
    """

    runs: tuple
    architectures: tuple
    nll: dict
    tokens: dict
    derived: dict
    checkpoints: dict
    eval_max_records: int

    @property
    def mean_nll(self):
        """{architecture: mean over the runs of its NLL}."""
        return mean_over_runs(self.nll, self.runs)

    @property
    def pick(self):
        """The architecture of the lowest mean NLL (ties: the first in order)."""
        return first_lowest(self.mean_nll, self.architectures)

    def to_dict(self):
        """settle.json's content."""
        return {"runs": list(self.runs), "architectures": list(self.architectures),
                "nll": self.nll, "mean_nll": self.mean_nll, "pick": self.pick,
                "eval_max_records": self.eval_max_records, "tokens": self.tokens,
                "derived": self.derived, "checkpoints": self.checkpoints}


def mean_over_runs(nll, runs):
    """{architecture: the mean of nll[architecture][run] over `runs`}."""
    return {arch: math.fsum(row[run] for run in runs) / len(runs) for arch, row in nll.items()}


def first_lowest(means, architectures):
    """The first of `architectures` with the lowest value in `means`."""
    best = None
    for arch in architectures:
        if best is None or means[arch] < means[best]:
            best = arch
    return best


# ------------------------------------------------------------------ checks


def read_search(run):
    """The finished search in directory `run` (its checkpoint not resolved yet).

    Raises:
        SettleError: no such directory, no readable config.json, not a supernet, or
            no architecture.json (the search has not finished).
    """
    run = os.path.normpath(os.fspath(run))
    if not os.path.isdir(run):
        raise SettleError(f"run {run} is not a directory: give the directory of a finished "
                          "search (train.py --architecture=supernet)")
    try:
        config = RunConfig.load(run)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise SettleError(f"run {run}: cannot read its {CONFIG_FILE} ({error}): give the "
                          "directory of a finished search") from None
    architecture = getattr(config.model, "architecture", None)
    if architecture != SUPERNET:
        what = (f"the fixed network {architecture!r}" if architecture is not None
                else f"a {config.model_family} model")
        raise SettleError(f"run {run} trained {what}, not a supernet: give the directories "
                          "of finished searches (--architecture=supernet)")
    path = os.path.join(run, ARCHITECTURE_JSON)
    if not os.path.isfile(path):
        raise SettleError(f"run {run} holds no {ARCHITECTURE_JSON}: its search has not "
                          "finished (run its training command again to finish it)")
    try:
        derived = read_architecture(path, config.model.num_blocks)
    except (OSError, ValueError) as error:
        raise SettleError(f"run {run}: {error}") from None
    return Search(run, config, derived, checkpoint="")


def _data_fingerprint(search):
    """What makes two runs' valid records the same: tokenizer, vocabulary, segment length
    and the valid split's records and tail (their checksums)."""
    try:
        meta = load_meta(search.config.data_dir)
    except DataError as error:
        raise SettleError(f"run {search.run}: cannot read its data ({error})") from None
    return (meta["tokenizer"], meta["vocab_size"], meta["seq_len"],
            meta["splits"][SPLIT])


def check_same_supernet(searches):
    """Raises SettleError unless every supernet is the first's network on its data."""
    first = searches[0]
    network = {k: v for k, v in first.config.model.to_dict().items() if k not in NOT_THE_NETWORK}
    data = _data_fingerprint(first)
    for other in searches[1:]:
        fields = other.config.model.to_dict()
        differ = sorted(k for k in set(network) | set(fields) - NOT_THE_NETWORK
                        if network.get(k) != fields.get(k))
        if differ:
            name = differ[0]
            raise SettleError(
                f"runs {first.run} and {other.run} are different supernets ({name} "
                f"{network.get(name)!r} against {fields.get(name)!r}"
                f"{f', and {len(differ) - 1} more field(s)' if len(differ) > 1 else ''}): "
                "settle searches of one size, candidates and data")
        if _data_fingerprint(other) != data:
            raise SettleError(
                f"runs {first.run} and {other.run} were trained on different data "
                f"({first.config.data_dir} against {other.config.data_dir}): settle searches "
                "of one build, so that they score the same valid records")


def check_architecture(value, model_config):
    """The a/f/i string of `value` (a string, or "transformer_xl") for the supernet of
    `model_config`.

    Raises:
        SettleError: wrong length, or a letter that is not one of the supernet's candidates.
    """
    value = str(value).strip()
    num_blocks, candidates = model_config.num_blocks, model_config.candidates
    if value == TRANSFORMER_XL:
        try:
            value = transformer_xl_architecture(num_blocks)
        except ValueError as error:
            raise SettleError(f"architecture {TRANSFORMER_XL}: {error}") from None
    foreign = sorted(set(value) - set(candidates))
    if not value or foreign:
        raise SettleError(f"architecture {value!r} uses {''.join(foreign) or 'no letter'}, "
                          f"not among the supernet's candidates {candidates!r}: give "
                          f"{num_blocks} letters of {candidates}")
    if len(value) != num_blocks:
        raise SettleError(f"architecture {value!r} has {len(value)} blocks but the supernets "
                          f"have {num_blocks}: give {num_blocks} letters of {candidates}")
    return value


def _resolve_checkpoint(search):
    """`search` with the prefix of its best checkpoint (else its last), verified."""
    from runstore import checkpoints

    try:
        prefix, warnings = checkpoints.resolve_checkpoint(search.run, "best")
    except checkpoints.CheckpointError as error:
        raise SettleError(f"run {search.run}: {error}") from None
    for warning in warnings:
        logging.warning("%s", warning)
    return dataclasses.replace(search, checkpoint=prefix)


def plan(runs, architectures=None, extra=(), eval_max_records=0):
    """Checks a settlement's input without evaluating anything.

    Args:
        runs: directories of finished searches (supernets of one size, candidates and
            data).
        architectures: a/f/i strings to evaluate (or "transformer_xl"); None: the runs'
            derived architectures, without repeats, in the runs' order.
        extra: more architectures, after those (repeats dropped).
        eval_max_records: valid records to score, the same for every run and
            architecture; 0: the whole valid split and its tail.

    Returns:
        A `SettlePlan`.

    Raises:
        SettleError: see `read_search`, `check_same_supernet`, `check_architecture`;
            no run, a run given twice, no architecture, a bad eval_max_records, a run
            without a usable checkpoint.
    """
    runs = [os.path.normpath(os.fspath(run)) for run in runs]
    if not runs:
        raise SettleError("no run given: give the directories of finished searches")
    seen = {}
    for run in runs:
        if os.path.realpath(run) in seen:
            raise SettleError(f"run {run} is given twice (also as {seen[os.path.realpath(run)]})"
                              ": give each search once")
        seen[os.path.realpath(run)] = run
    if isinstance(eval_max_records, bool) or not isinstance(eval_max_records, int) or (
            eval_max_records < 0):
        raise SettleError(f"eval_max_records={eval_max_records!r} must be an integer >= 0 "
                          "(0: the whole valid split)")
    searches = [read_search(run) for run in runs]
    check_same_supernet(searches)
    model_config = searches[0].config.model
    chosen = [s.derived for s in searches] if architectures is None else list(architectures)
    ordered = []
    for value in [*chosen, *extra]:
        arch = check_architecture(value, model_config)
        if arch not in ordered:
            ordered.append(arch)
    if not ordered:
        raise SettleError("no architecture to evaluate: give at least one")
    searches = [_resolve_checkpoint(search) for search in searches]
    return SettlePlan(tuple(searches), tuple(ordered), eval_max_records)


# -------------------------------------------------------------- evaluation


def architecture_nll(model, architecture, data_dir, meta, mem_len, eval_max_records=0):
    """The valid NLL of supernet `model` with every block frozen to `architecture`.

    A new `StreamEvaluator` (a new `tf.function`) is traced with that frozen set;
    the model's own frozen set is put back afterwards, also on an error.

    Args:
        model: a built supernet (TransformerXLLM) with the weights to score.
        architecture: a/f/i string over its candidates, one letter per block.
        data_dir, meta: the build and its meta.json.
        mem_len: the evaluation memory (the run's eval_mem_len).
        eval_max_records: the first records of the valid split; 0: all and the tail.

    Returns:
        (NLL per token in nats, tokens scored).
    """
    from evaluation.stream import StreamEvaluator, split_plan

    letters = model.model_config.candidates
    saved = model.frozen_blocks
    try:
        model.set_frozen([letters.index(letter) for letter in architecture])
        evaluator = StreamEvaluator(model, mem_len)
        segments, _ = split_plan(data_dir, SPLIT, meta, eval_max_records)
        result = evaluator.run(segments, label=f"evaluating {SPLIT} as {architecture}")
    finally:
        model.set_frozen(saved)
    return result.total_nll / result.tokens, result.tokens


def evaluate_search(search, architectures, eval_max_records=0):
    """({architecture: valid NLL}, tokens) of one search's supernet (`architecture_nll`)."""
    from model.families import build_model
    from runstore import checkpoints

    config = search.config
    model = build_model(config.model, dtype="float32")
    checkpoints.restore_model_variables(model, search.checkpoint,
                                        what=f"the supernet of {search.run}")
    meta = load_meta(config.data_dir)
    nll, tokens = {}, None
    for arch in architectures:
        nll[arch], tokens = architecture_nll(model, arch, config.data_dir, meta,
                                             config.eval_mem_len, eval_max_records)
        logging.info("%s: %s valid NLL %.4f (perplexity %.2f) over %d tokens", search.run, arch,
                     nll[arch], math.exp(nll[arch]), tokens)
    return nll, tokens


def evaluate(settle_plan):
    """Scores every architecture of a `SettlePlan` in every supernet; a `Settlement`."""
    nll = {arch: {} for arch in settle_plan.architectures}
    tokens = {}
    for search in settle_plan.searches:
        row, tokens[search.run] = evaluate_search(search, settle_plan.architectures,
                                                  settle_plan.eval_max_records)
        for arch, value in row.items():
            nll[arch][search.run] = value
    return Settlement(
        runs=settle_plan.runs, architectures=settle_plan.architectures, nll=nll, tokens=tokens,
        derived={s.run: s.derived for s in settle_plan.searches},
        checkpoints={s.run: s.checkpoint for s in settle_plan.searches},
        eval_max_records=settle_plan.eval_max_records)


def settle(runs, architectures=None, extra=(), eval_max_records=0):
    """Checks (`plan`) and evaluates (`evaluate`): the `Settlement` of the runs."""
    return evaluate(plan(runs, architectures, extra, eval_max_records))
