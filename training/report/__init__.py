"""What a run tells: console summary, training log, TensorBoard, ETA, samples.

    summary     the end-of-run summary (best metrics, yardsticks, next commands).
    notes       the prompt the summary suggests, from the valid split.
    log         the training log file (training_log.log).
    tensorboard TensorBoard writers (plug-ins write their own tags through them).
    eta         the time left, from the steps' recent pace.
    samples     text samples during training.
"""
