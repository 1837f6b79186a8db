"""sizing.json: seconds per step of each model's 100-step sizing run, from the CPU-time
samples cputime.py took at its logged steps 20 and 100 (80 steps after tracing and the
first interval), and each model's parameters. From the project root:

    PYTHONPATH=. python docs/results/baselines/sizing/summarize_sizing.py
"""

import json
import pathlib

HERE = pathlib.Path(__file__).resolve().parent
TOKENS_PER_STEP = 2048


def parameters(name):
    """The model's parameter count: the decoder's config.json; a train.py run's built model."""
    config = json.loads((HERE / name / "config.json").read_text(encoding="utf-8"))
    if "parameters" in config:
        return config["parameters"]
    from model.families import build_model
    from training.config import TrainConfig

    return int(build_model(TrainConfig.load(str(HERE / name)).model).count_params())


def main():
    table = {}
    for name in ("decoder", "sha_rnn", "lstm"):
        rows = json.loads((HERE / f"{name}_cpu.json").read_text(encoding="utf-8"))["rows"]
        first, last = rows[0], rows[-1]
        steps = int(last["line"].split()[0][5:]) - int(first["line"].split()[0][5:])
        cpu = (last["cpu_seconds"] - first["cpu_seconds"]) / steps
        wall = (last["wall"] - first["wall"]) / steps
        table[name] = dict(parameters=parameters(name), steps_timed=steps,
                           cpu_seconds_per_step=round(cpu, 4), wall_seconds_per_step=round(wall, 4),
                           cpu_tokens_per_sec=round(TOKENS_PER_STEP / cpu, 1),
                           wall_tokens_per_sec=round(TOKENS_PER_STEP / wall, 1))
    (HERE / "sizing.json").write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(table, indent=1))


if __name__ == "__main__":
    main()
