"""What a block costs: measured training time against the FLOPs model.

The search prices a block by its forward FLOPs (model/transformer_xl/flops.py, the
project's one FLOPs model, counted for the training batch). Whether time follows FLOPs is
measured: points of one width but different attention and dense counts, timed interleaved
in one process (experiments/frontier.py), fit

    time per token = fixed + n_attention * t_attention + n_dense * t_dense

(identity free) by least squares. Dividing by the fitted time of the reference
(`afafaf`) makes the three times comparable with the FLOPs model's shares of the
reference (`fit_block_times` on the FLOPs themselves recovers those exactly). Pure
arithmetic: numpy and the FLOPs model, no TensorFlow.
"""

import numpy as np

REFERENCE = "afafaf"
UNKNOWNS = ("fixed", "attention", "dense")


def fit_block_times(rows, reference=REFERENCE):
    """Least-squares fixed, attention and dense time per token, relative to the reference's.

    Args:
        rows: iterable of (architecture, tokens_per_s): an a/f/i string and the measured
            training tokens/s of that network (several rows may share an architecture,
            e.g. one per seed). Every network must have the same width (d_model, d_ffn,
            heads) and run at the same batch, segment and memory.
        reference: the architecture the times are relative to (need not be a row).

    Returns:
        dict fixed, attention, dense: each time divided by the fitted time per token of
        `reference` (fixed + its attention count * t_attention + its dense count *
        t_dense), so `reference`'s counts weight them to 1.

    Raises:
        ValueError: a bad architecture or tokens/s, fewer distinct architectures than the
            three unknowns, or architectures whose attention and dense counts cannot
            separate them (e.g. only Transformer-XLs, always as many of each).
    """
    rows = [(str(arch), float(speed)) for arch, speed in rows]
    for arch, speed in rows + [(reference, 1.0)]:
        if not arch or set(arch) - set("afi") or not speed > 0:
            raise ValueError(f"row ({arch!r}, {speed}): give an a/f/i architecture and its "
                             "tokens/s > 0")
    distinct = sorted({arch for arch, _ in rows})
    if len(distinct) < len(UNKNOWNS):
        raise ValueError(f"fitting {len(UNKNOWNS)} times ({', '.join(UNKNOWNS)}) needs at least "
                         f"{len(UNKNOWNS)} distinct architectures, got {len(distinct)} "
                         f"({', '.join(distinct) or 'none'}): measure more points")
    design = np.array([_counts(arch) for arch, _ in rows], np.float64)
    times = np.array([1.0 / speed for _, speed in rows], np.float64)
    solution, _, rank, _ = np.linalg.lstsq(design, times, rcond=None)
    if rank < len(UNKNOWNS):
        raise ValueError(f"the architectures {', '.join(distinct)} do not separate the "
                         f"{len(UNKNOWNS)} times (their attention and dense counts are "
                         "collinear): add a point with another attention:dense mix")
    base = float(np.dot(_counts(reference), solution))
    return {name: float(value) / base for name, value in zip(UNKNOWNS, solution)}


def _counts(arch):
    return (1.0, float(arch.count("a")), float(arch.count("f")))


def relative_flops(models, seq_len, batch_size, reference=REFERENCE):
    """Forward FLOPs per token of each network relative to the reference's (the one FLOPs
    model, at each network's memory and the runs' segment and training batch).

    Args:
        models: name -> ModelConfig (its architecture and sizes), `reference` among them.
        seq_len, batch_size: the runs' segment length T and training batch B.

    Returns:
        name -> float (1.0 for the reference).
    """
    from model.transformer_xl import flops

    def total(model):
        return flops.forward_flops_per_token(model, None, seq_len, model.mem_len,
                                             batch_size=batch_size)["total"]

    base = total(models[reference])
    return {name: total(model) / base for name, model in models.items()}


def block_costs(networks, reference=REFERENCE):
    """Measured block times next to the FLOPs model's, for the report.

    Args:
        networks: name -> (architecture, tokens_per_s, relative FLOPs), networks of one
            width.

    Returns:
        dict: points (names fitted), measured and flops (`fit_block_times` of the
        tokens/s and of the FLOPs, or None) and error (why not fitted, or None).
    """
    names = sorted(networks)
    try:
        measured = fit_block_times([networks[n][:2] for n in names], reference)
        counted = fit_block_times([(networks[n][0], 1.0 / networks[n][2]) for n in names],
                                  reference)
    except ValueError as error:
        return dict(points=names, measured=None, flops=None, error=str(error))
    return dict(points=names, measured=measured, flops=counted, error=None)


def describe(costs, reference=REFERENCE):
    """One Markdown paragraph for `block_costs`' result."""
    if costs["error"]:
        return f"Block times not fitted: {costs['error']}."

    def times(fit):
        return ", ".join(f"{name} {fit[name]:.3f}" for name in ("attention", "dense", "fixed"))

    return (f"Time per token against blocks, least squares over the {len(costs['points'])} "
            f"points of {reference}'s width ({', '.join(costs['points'])}; time = fixed + "
            "attention blocks x t_attention + dense blocks x t_dense), relative to "
            f"{reference}'s time: measured {times(costs['measured'])}; the FLOPs model "
            f"{times(costs['flops'])} (fixed: embedding and softmax for FLOPs; everything "
            "outside the blocks for time).")
