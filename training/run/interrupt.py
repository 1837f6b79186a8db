"""Graceful interruption of training: Ctrl-C, SIGTERM and preemption.

`StopRequests` (a context manager around the training loop) turns the first
SIGINT or SIGTERM into a request: the loop finishes the step it is taking
(an evaluation in progress is abandoned), writes a checkpoint at that step
exactly as the periodic ones, releases the run lock and raises
`TrainingInterrupted`, which train.py turns into the line
`interrupted at step N: checkpoint written; run the same command to resume`
and the exit status 128 + signal (130 for SIGINT, 143 for SIGTERM). Once the
first signal has been seen, the signals are back at their default action:
a second Ctrl-C (or SIGTERM) ends the process at once, like SIGKILL, which
the checkpoints survive (TensorFlow lists a checkpoint only once its files
are complete, and the previous ones are deleted only after that).

Python runs a signal handler between bytecodes of the main thread, so a
signal that arrives during a compiled step (or a checkpoint write) is seen
when it returns; two signals during one step count as one.

Under `--strategy=multi_worker` no worker may save alone (a save is a
collective), so `TfPreemption` hands the decision to TensorFlow's own
mechanism, `tf.distribute.experimental.PreemptionCheckpointHandler`: our
signal handler only sets the request, which the handler polls
(`TerminationConfig.termination_watcher_fn`), agrees with the other workers
on the step at which every worker saves (through the coordination service),
calls our save (`save_fn`) at that step on every worker, then `exit_fn`,
which raises `PreemptionSaved` for the loop to turn into
`TrainingInterrupted`. A signal to any one worker stops the whole job.
"""

import signal
import tempfile
import threading

from absl import logging

INTERRUPT_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class TrainingInterrupted(Exception):
    """Training stopped on a signal after writing a checkpoint at `step`.

    Attributes:
        step: the step the checkpoint holds.
        signum: the signal (SIGINT, SIGTERM).
        checkpoint: the checkpoint prefix (None on a worker that does not write).
        exit_code: 128 + signum, what a shell reports for that signal.
    """

    def __init__(self, step, signum, checkpoint=None):
        self.step = int(step)
        self.signum = int(signum)
        self.checkpoint = checkpoint
        super().__init__(f"interrupted at step {self.step}: checkpoint written; run the same "
                         "command to resume")

    @property
    def exit_code(self):
        return 128 + self.signum


class PreemptionSaved(Exception):
    """Raised by TfPreemption's exit_fn once TensorFlow's handler has saved."""


def signal_name(signum):
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class StopRequests:
    """Catches SIGINT and SIGTERM while training (a context manager).

    The first one sets `signum` (training stops after the step); from then
    on both signals have their default action, so the next one ends the
    process at once. Outside the main thread (where Python cannot install
    handlers) nothing is caught and `signum` stays None.
    """

    def __init__(self):
        self.signum = None
        self._previous = {}

    @property
    def requested(self):
        return self.signum is not None

    def request(self, signum):
        """Records a stop request as the handler does (and re-arms the defaults)."""
        if self.signum is not None:
            return
        self.signum = int(signum)
        if self._previous:
            for sig in INTERRUPT_SIGNALS:
                signal.signal(sig, signal.SIG_DFL)
        logging.warning("%s received: training stops after the current step and writes a "
                        "checkpoint; send it again to stop at once (the checkpoints written "
                        "so far stay intact)", signal_name(signum))

    def _handle(self, signum, frame):
        del frame
        self.request(signum)

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in INTERRUPT_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        else:
            logging.info("training outside the main thread: SIGINT/SIGTERM are not caught")
        return self

    def __exit__(self, *exc_info):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        self._previous = {}


class TfPreemption:
    """Multi-worker stops through `tf.distribute.experimental.PreemptionCheckpointHandler`.

    Args:
        strategy: the tf.distribute strategy (its `cluster_resolver`; none:
            the handler's local mode).
        stop_requests: StopRequests whose signal the handler polls.
        save_fn: () -> None, writes a checkpoint at the current step (a
            collective: every worker calls it at the same step).

    `run(fn, *args)` runs one training step under the handler; it raises
    `PreemptionSaved` once the handler has saved the checkpoint it agreed on.
    The handler gets a throw-away checkpoint manager of its own (nothing of
    the run's is restored or written through it): our `save_fn` writes.
    """

    def __init__(self, strategy, stop_requests, save_fn):
        import tensorflow as tf

        self._directory = tempfile.mkdtemp(prefix="preemption_handler_")
        manager = tf.train.CheckpointManager(tf.train.Checkpoint(), self._directory,
                                             max_to_keep=1)
        config = tf.distribute.experimental.TerminationConfig(
            termination_watcher_fn=lambda: stop_requests.requested,
            exit_fn=self._exit, save_fn=lambda *args, **kwargs: save_fn())
        self.handler = tf.distribute.experimental.PreemptionCheckpointHandler(
            getattr(strategy, "cluster_resolver", None), manager, termination_config=config)
        logging.info("multi-worker: SIGINT/SIGTERM on any worker make every worker save at "
                     "the same step (tf.distribute.experimental.PreemptionCheckpointHandler)")

    @staticmethod
    def _exit():
        raise PreemptionSaved()

    def run(self, fn, *args):
        return self.handler.run(fn, *args)

    def close(self):
        import shutil

        shutil.rmtree(self._directory, ignore_errors=True)


class Terminated(KeyboardInterrupt):
    """SIGTERM turned into an exception by `signals_as_interrupts`."""

    signum = signal.SIGTERM


def interrupt_exit_code(error):
    """128 + the signal of a KeyboardInterrupt (130) or a `Terminated` (143)."""
    return 128 + int(getattr(error, "signum", signal.SIGINT))


class signals_as_interrupts:  # noqa: N801  (used like a function: `with ...:`)
    """For scripts whose writes are all atomic (export, evaluate): SIGTERM raises
    `Terminated` as Ctrl-C raises KeyboardInterrupt, so that the same clean-up
    runs (temporaries removed) and the script can exit with 143. A no-op outside
    the main thread."""

    def __enter__(self):
        self._previous = None
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._raise)
        return self

    @staticmethod
    def _raise(signum, frame):
        del signum, frame
        raise Terminated()

    def __exit__(self, *exc_info):
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)


def run_guarded(body, errors, interrupted="interrupted"):
    """Runs a command-line script's `body()` under `signals_as_interrupts`; what it ends with.

    The one wrapper of generate.py, evaluate.py and export.py: a user-fixable
    error is one `error: ...` line and status 1, an interruption one line and
    128 + the signal (130 for SIGINT, 143 for SIGTERM).

    Args:
        body: the script's work (no arguments; its result is ignored).
        errors: the exception classes that are the user's to fix.
        interrupted: the line for an interruption (e.g. what was not written).

    Returns:
        (exit status, the line for stderr or None): (0, None) when `body` returned.
    """
    try:
        with signals_as_interrupts():
            body()
    except errors as error:
        return 1, f"error: {error}"
    except KeyboardInterrupt as error:
        return interrupt_exit_code(error), interrupted
    return 0, None
