"""The decoder's 100-step sizing run at the byte level (train_decoder: 16 windows of 128
bytes a step, 10 warm-up steps, log every 20 steps), writing config.json and
training_log.log to <out dir>. From the project root:

    PYTHONPATH=. python docs/results/baselines/sizing/time_decoder.py <out dir>
"""

import pathlib
import sys

import data_utils
from experiments import baselines

args = baselines.parse_args(["--data_dir=data/wt2_bytes16", "--tokens_per_step=2048",
                             "--context=128", "--max_steps=100", "--log_interval=20",
                             "--warmup_steps=10"])
out = pathlib.Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
model, config = baselines.train_decoder(args, data_utils.load_meta(args.data_dir), out)
print("parameters", config["parameters"])
