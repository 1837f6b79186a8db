r"""The PAR pipeline over seeds: one row per seed of `./base_model.sh --pipeline` runs, as JSON.

    python -m tools.pipeline_seeds runs/pipe_st_s --seeds=0,1,2 \
        --out=docs/results/par_pipeline/seeds.json

Seed s's pipeline trained its search in `<PREFIX><s>`, the derived network in
`<PREFIX><s>_retrain`, and logged both to `<PREFIX><s>.console.log` (how
docs/results/par_pipeline/seeds.sh runs them). A row holds the seed, the retrained
architecture, its test perplexity at the best valid step, the whole command's running
minutes (`tools.wall_time` on the console log: search, retrain, evaluations and export) and
`wall_ratio_at_equal_speed`: those minutes over what the two 20-epoch stages would take at
this run's own speeds, the retrain's epochs of training at the search's median tokens/s plus
the same at the retrain's (training alone, so the ratio is if anything too high). The JSON
also holds each row's speeds and the spread the PAR issue asks about: the mean test
perplexity against the best seed's.
"""

import argparse
import json
import pathlib
import statistics
import sys

from tools import wall_time


def _read_json(path):
    try:
        return json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ValueError(f"{path}: {error}") from None


def seed_row(prefix, seed):
    """The row of seed `seed` of the pipelines under `prefix`; ValueError naming what is
    missing when its runs are not finished."""
    search = pathlib.Path(f"{prefix}{seed}")
    retrain = pathlib.Path(f"{prefix}{seed}_retrain")
    console = pathlib.Path(f"{prefix}{seed}.console.log")
    for path in (search / "training_log.log", retrain / "training_log.log", console):
        if not path.is_file():
            raise ValueError(f"seed {seed}: {path} is missing (has its pipeline run?)")
    metrics = _read_json(retrain / "metrics.json")
    if "test" not in metrics.get("best", {}):
        raise ValueError(f"seed {seed}: {retrain / 'metrics.json'} has no test perplexity "
                         "yet (is its retrain finished?)")
    config = _read_json(retrain / "config.json")
    steps = int(metrics["planned_steps"])
    tokens = steps * int(config["batch_size"]) * int(config["seq_len"])
    search_tps = wall_time.median_tokens_per_sec(search / "training_log.log")
    retrain_tps = wall_time.median_tokens_per_sec(retrain / "training_log.log")
    two_stages = tokens * (1 / search_tps + 1 / retrain_tps) / 60
    minutes = wall_time.wall_time(console)["running_minutes"]
    return {"seed": seed, "architecture": metrics["architecture"],
            "test_ppl": round(metrics["best"]["test"]["perplexity"], 4),
            "wall_min": minutes,
            "wall_ratio_at_equal_speed": round(minutes / two_stages, 3),
            "retrain_steps": steps, "search_tokens_per_s": search_tps,
            "retrain_tokens_per_s": retrain_tps,
            "two_stages_at_these_speeds_min": round(two_stages, 2)}


def summary(prefix, seeds, command):
    """seeds.json's content: the rows and the spread of their test perplexities."""
    rows = [seed_row(prefix, seed) for seed in seeds]
    ppl = [row["test_ppl"] for row in rows]
    best = min(ppl)
    return {"command": command, "seeds": rows,
            "mean_test_ppl": round(statistics.mean(ppl), 4), "best_test_ppl": best,
            "mean_over_best_percent": round((statistics.mean(ppl) / best - 1) * 100, 3),
            "max_wall_ratio_at_equal_speed": max(r["wall_ratio_at_equal_speed"] for r in rows)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prefix", help="the pipelines' model_dir without the seed "
                                       "(runs/pipe_st_s for runs/pipe_st_s0, ...)")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds")
    parser.add_argument("--command", default="", help="the pipelines' command, for the JSON")
    parser.add_argument("--out", default="", help="write the JSON here instead of printing")
    args = parser.parse_args(argv)
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        print(f"error: --seeds={args.seeds} is not a comma-separated list of integers",
              file=sys.stderr)
        return 2
    try:
        result = summary(args.prefix, seeds, args.command)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    text = json.dumps(result, indent=1) + "\n"
    if args.out:
        pathlib.Path(args.out).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
