"""Derivation of a fixed architecture from a searched PAR supernet.

After the search, each block keeps its most probable candidate (argmax of its
architecture probabilities) and the resulting a/f/i string is trained from
scratch (Mandava et al. 2020, arXiv 2009.04534, section 3). This module builds
the derivation report (counts, FLOPs relative to the Transformer-XL with the
same number of blocks), writes it to the run directory and reads an
architecture back from a string, a run directory or a file, for
`train.py --architecture=...`.
"""

import json
import os

from absl import logging
import numpy as np

from model.transformer_xl import blocks, flops
from runstore import run_dir

ARCHITECTURE_JSON = "architecture.json"
ARCHITECTURE_TXT = "architecture.txt"
# Probabilities all this close to uniform carry no search result.
UNIFORM_TOLERANCE = 1e-3
# First line of architecture.txt for a derivation from untrained logits
# (lines starting with "#" are comments to `read_architecture`).
UNTRAINED_HEADER = "# WARNING: untrained architecture logits, not a search result:"


def untrained_reason(arch_probs, updates):
    """Why the probabilities carry no search result, or None when they do.

    Args:
        arch_probs: [num_blocks, C] architecture probabilities.
        updates: updates the architecture optimizer applied.

    Returns:
        None (trained) or a sentence: the optimizer never applied an update,
        or every probability is within UNIFORM_TOLERANCE of 1/C (the argmax
        is then a tie broken by candidate order).
    """
    probs = np.asarray(arch_probs, dtype=np.float64)
    if updates == 0:
        return ("the architecture optimizer never applied an update (is --arch_warmup_steps "
                "as long as the run?)")
    deviation = float(np.max(np.abs(probs - 1.0 / probs.shape[-1])))
    if deviation <= UNIFORM_TOLERANCE:
        return (f"every probability is within {deviation:.1e} of uniform after {updates} "
                "architecture updates (train longer or raise --arch_learning_rate)")
    return None


def architecture_from_probs(arch_probs, candidates=None):
    """The architecture string of the argmax of each block's probabilities.

    Args:
        arch_probs: [num_blocks, C] over the candidates in their order;
            ties go to the earlier candidate.
        candidates: the supernet's candidate letters (its config's
            `candidates`, e.g. "afi"); None: those of a new config (every
            registered block type).

    Returns:
        str of length num_blocks.
    """
    probs = np.asarray(arch_probs, dtype=np.float64)
    letters = blocks.letters() if candidates is None else candidates
    if probs.ndim != 2 or probs.shape[1] != len(letters) or probs.shape[0] == 0:
        raise ValueError(f"architecture probabilities must have shape [num_blocks, "
                         f"{len(letters)}] (one column per candidate, {letters}), got "
                         f"{probs.shape}")
    if not np.all(np.isfinite(probs)):
        raise ValueError("architecture probabilities contain NaN or inf")
    return "".join(letters[i] for i in np.argmax(probs, axis=1))


def derivation_report(model_config, arch_probs, seq_len, mem_len, batch_size,
                      untrained=None, architecture=None, **flops_kwargs):
    """Describes the architecture derived from the supernet's probabilities.

    Args:
        model_config: the supernet's `ModelConfig`.
        arch_probs: [num_blocks, C] probabilities over `model_config.candidates`
            (e.g. model.arch_probabilities).
        seq_len, mem_len: segment length T and memory length M the FLOPs are counted for.
        batch_size: the training batch B the FLOPs are counted for (it shares
            the position projection; the project's one FLOPs model, as the
            search's cost table, par_search.costs.candidate_costs).
        untrained: None, or why the probabilities are untrained
            (`untrained_reason`).
        architecture: the a/f/i string to describe (None: the argmax of
            `arch_probs`; speed_target.py gives the best one within a budget).
        **flops_kwargs: passed to `model.transformer_xl.flops.forward_flops_per_token`
            (`cluster_mass`, `spans`).

    Returns:
        JSON-serialisable dict:
            architecture: derived a/f/i string.
            counts: block counts per candidate's name (attention, dense,
                identity).
            probabilities: the [num_blocks, C] input as nested lists.
            flops_per_token: forward FLOPs per token of the derived model.
            flops: its per-component breakdown (model/transformer_xl/flops.py keys).
            transformer_xl_flops_per_token: same for "af" * (num_blocks // 2).
            relative_flops: flops_per_token / transformer_xl_flops_per_token.
            speedup: the inverse (> 1 means cheaper than Transformer-XL).
            attention_fraction: attention blocks / num_blocks (PAR reports the
                total:attention ratio, about 5:1, i.e. 0.2).
            attention_flops_fraction: share of the derived model's FLOPs spent
                in attention blocks.
            params, transformer_xl_params: parameter counts.
            seq_len, mem_len, batch_size: what the FLOPs were counted for.
            untrained: True when derived from untrained logits (then
                untrained_reason says why), else False.
        The Transformer-XL fields are None when num_blocks is odd (no
        Transformer-XL has that many blocks).

    Raises:
        ValueError: probabilities of the wrong shape or block count.
    """
    arch = architecture_from_probs(arch_probs, model_config.candidates)
    arch = arch if architecture is None else _check_string(architecture, "architecture")
    if len(arch) != model_config.num_blocks:
        raise ValueError(
            f"got probabilities for {len(arch)} blocks but the model has "
            f"num_blocks={model_config.num_blocks}"
        )
    ours = flops.forward_flops_per_token(
        model_config, arch, seq_len, mem_len, batch_size=batch_size, **flops_kwargs
    )
    report = {
        "architecture": arch,
        "counts": {spec.name: arch.count(spec.letter) for spec in model_config.candidate_specs},
        "probabilities": np.asarray(arch_probs, dtype=np.float64).tolist(),
        "flops_per_token": float(ours["total"]),
        "flops": {k: float(v) for k, v in ours.items()},
        "transformer_xl_flops_per_token": None,
        "relative_flops": None,
        "speedup": None,
        "attention_fraction": arch.count("a") / len(arch),
        "attention_flops_fraction": float(ours.get("attention", 0.0) / ours["total"])
        if ours["total"]
        else 0.0,
        "params": flops.param_count(model_config, arch),
        "transformer_xl_params": None,
        "seq_len": int(seq_len),
        "mem_len": int(mem_len),
        "batch_size": int(batch_size),
        "untrained": bool(untrained),
    }
    if untrained:
        report["untrained_reason"] = str(untrained)
    if model_config.num_blocks % 2 == 0:
        report.update(_against_transformer_xl(model_config, ours["total"], seq_len, mem_len,
                                              batch_size, flops_kwargs))
    return report


def _against_transformer_xl(model_config, total, seq_len, mem_len, batch_size, flops_kwargs):
    """The report's Transformer-XL fields for a derived network of `total` FLOPs per token."""
    reference = "af" * (model_config.num_blocks // 2)
    base = flops.forward_flops_per_token(
        model_config, reference, seq_len, mem_len, batch_size=batch_size, **flops_kwargs
    )
    return {"transformer_xl_flops_per_token": float(base["total"]),
            "relative_flops": float(total / base["total"]),
            "speedup": float(base["total"] / total),
            "transformer_xl_params": flops.param_count(model_config, reference)}


def _write_atomic(path, text):
    run_dir.atomic_write(path, text)


def write_derivation(model_dir, report):
    """Writes `architecture.json` (the report) and `architecture.txt` (the string).

    For an untrained report, architecture.txt starts with a comment line
    (UNTRAINED_HEADER and the reason) before the string.

    Args:
        model_dir: run directory (created if missing).
        report: dict from `derivation_report`.

    Returns:
        (json_path, txt_path).
    """
    arch = _check_string(report.get("architecture"), "report['architecture']")
    model_dir = os.fspath(model_dir)
    os.makedirs(model_dir, exist_ok=True)
    json_path = os.path.join(model_dir, ARCHITECTURE_JSON)
    txt_path = os.path.join(model_dir, ARCHITECTURE_TXT)
    _write_atomic(json_path, json.dumps(report, indent=2, sort_keys=True) + "\n")
    header = ""
    if report.get("untrained"):
        header = f"{UNTRAINED_HEADER} {report.get('untrained_reason', '')}".rstrip() + "\n"
    _write_atomic(txt_path, header + arch + "\n")
    return json_path, txt_path


def _is_arch_string(value):
    return bool(value) and set(value) <= set(blocks.letters())


def _check_string(value, source):
    if not isinstance(value, str) or not _is_arch_string(value.strip()):
        raise ValueError(
            f"{source} is {value!r}, not an architecture string over {blocks.describe()}"
        )
    return value.strip()


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON: {err}") from err
    if not isinstance(data, dict) or "architecture" not in data:
        raise ValueError(f"{path} has no 'architecture' key (write it with write_derivation)")
    if data.get("untrained"):
        _warn_untrained(path, data.get("untrained_reason", ""))
    return _check_string(data["architecture"], f"'architecture' in {path}")


def _read_text(path):
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    comments = [line for line in lines if line.lstrip().startswith("#")]
    if any(line.lstrip().startswith(UNTRAINED_HEADER) for line in comments):
        _warn_untrained(path, "")
    text = "\n".join(line for line in lines if not line.lstrip().startswith("#"))
    return _check_string(text, f"the content of {path}")


def _warn_untrained(path, reason):
    logging.warning("%s was derived from untrained architecture logits%s: it is not a search "
                    "result", path, f" ({reason})" if reason else "")


def read_architecture(value, num_blocks=None):
    """Resolves `--architecture`: an a/f/i string, a run directory or a file.

    Args:
        value: an a/f/i string such as "aafaff"; a run directory holding
            `architecture.json` (or `architecture.txt`) written at the end of a
            search; or a path to such a .json file or a text file holding the
            string (lines starting with "#" are comments). An architecture
            flagged as untrained is returned with a warning.
        num_blocks: if given, the string must have this many letters.

    Returns:
        The a/f/i string.

    Raises:
        ValueError: not a valid string, the file holds no architecture, or the
            length differs from num_blocks.
        FileNotFoundError: a path that does not exist, or a run directory
            without a derived architecture.
    """
    value = os.fspath(value).strip()
    if _is_arch_string(value):
        arch = value
    elif os.path.isdir(value):
        json_path = os.path.join(value, ARCHITECTURE_JSON)
        txt_path = os.path.join(value, ARCHITECTURE_TXT)
        if os.path.isfile(json_path):
            arch = _read_json(json_path)
        elif os.path.isfile(txt_path):
            arch = _read_text(txt_path)
        else:
            raise FileNotFoundError(
                f"{value} holds no {ARCHITECTURE_JSON}: a supernet search writes it when it "
                "finishes; point --architecture at a finished search run or give the string"
            )
    elif os.path.isfile(value):
        if value.endswith(".json"):
            arch = _read_json(value)
        else:
            arch = _read_text(value)
    elif os.sep in value or value.endswith((".json", ".txt")):
        raise FileNotFoundError(f"architecture path {value} does not exist")
    else:
        raise ValueError(
            f"architecture {value!r} is neither a string over {blocks.describe()} nor an "
            "existing run directory or file"
        )
    if num_blocks is not None and len(arch) != num_blocks:
        raise ValueError(
            f"architecture {arch!r} has {len(arch)} blocks but the model has "
            f"num_blocks={num_blocks}"
        )
    return arch
