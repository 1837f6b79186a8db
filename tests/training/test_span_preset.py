"""--preset=adaptive_span_small: the adaptive-span reference's recipe trains."""

import pytest

from tests.helpers.trainers import SPAN_TINY


@pytest.mark.slow
def test_preset_brings_the_reference_recipe_trains_and_spans_move(tiny_data, tmp_path):
    from absl import flags as absl_flags

    import train as train_cli
    from training.optimizers import get_optimizer
    from training.run.loop import read_training_log, train

    fv = train_cli.define_flags(absl_flags.FlagValues())
    fv(["train.py", f"--data_dir={tiny_data}", f"--model_dir={tmp_path / 'run'}", *SPAN_TINY,
        "--max_steps=24", "--eval_interval=24", "--eval_max_records=4", "--sample_tokens=0",
        "--log_interval=4", f"--logdir={tmp_path / 'logs'}"])  # not the repository's logs/
    config = train_cli.config_from_flags(fv)[0]
    # The preset's training defaults: the reference's Adagrad, no global clip.
    assert (config.optimizer, config.clip_norm, config.learning_rate, config.epsilon,
            config.lr_schedule) == ("adagrad_clip", 0.0, 0.07, 1e-10, "constant")
    assert get_optimizer(config.optimizer).make(0.07, config).tensor_clip_norm == 0.03
    model = config.model
    assert (model.attention, model.span_positions, model.init, model.span_init,
            model.dropout) == ("adaptive_span", "learned", "pytorch", 0.0, 0.0)
    metrics = train(config)
    losses = [row["loss"] for row in read_training_log(tmp_path / "run" / "training_log.log")]
    assert losses[-1] < losses[0] - 0.5, losses
    spans = [z for layer in metrics["spans"]["per_layer"] for z in layer]
    assert max(spans) > 0.1, spans  # they start at 0 (span_init) and grow where it pays
