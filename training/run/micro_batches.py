"""Gradient accumulation: one replica's rows as K micro-batches, one after another.

With `--batch_split=K` a replica runs its rows as K micro-batches of
consecutive rows, each with its own rows of the model state, in a
`tf.while_loop` with `parallel_iterations=1`: micro-batch k+1 runs after
micro-batch k has finished (its activations are freed), and the body is
traced once whatever K is. The losses, NLL sums and gradients are summed; the
new state is the micro-batches' new rows in order, so checkpoints do not
depend on K (the trainer's docstring, step 2, gives the loss terms).

Size glossary: K micro-batches, m = rows / K rows each.
"""

import tensorflow as tf


def accumulate(forward_backward, k, variables, inputs, targets, model_state):
    """`forward_backward` over rows [i*m, (i+1)*m) for i < k, summed.

    Args:
        forward_backward: (inputs, targets, state) -> (loss, nll_sum,
            gradients of `variables`, new_state) of one micro-batch.
        k: K >= 2.
        variables: the variables the gradients are of (for their zeros).
        inputs, targets: int32 [K*m, T].
        model_state: list of [K*m, ...] state tensors.

    Returns:
        (loss, nll_sum, gradients, new_state) summed over the micro-batches,
        new_state [K*m, ...] in row order.
    """
    rows = int(inputs.shape[0]) // k

    def split(x):  # [k*m, ...] -> [k, m, ...]
        return tf.reshape(x, [k, rows] + x.shape[1:].as_list())

    inputs, targets = split(inputs), split(targets)
    model_state = [split(s) for s in model_state]

    def body(i, loss, nll_sum, grads, new_state):
        micro_loss, micro_nll, micro_grads, micro_state = forward_backward(
            inputs[i], targets[i], [s[i] for s in model_state])
        return (i + 1, loss + micro_loss, nll_sum + micro_nll,
                # Some gradients (trimmed adaptive spans) lose their
                # static shape; the loop needs it.
                [tf.ensure_shape(a + g, a.shape) for a, g in zip(grads, micro_grads)],
                [t.write(i, s) for t, s in zip(new_state, micro_state)])

    start = (tf.constant(0), tf.constant(0.0), tf.constant(0.0),
             [tf.zeros(v.shape, v.dtype) for v in variables],
             [tf.TensorArray(s.dtype, size=k, element_shape=s.shape[1:])
              for s in model_state])
    _, loss, nll_sum, grads, new_state = tf.while_loop(
        lambda i, *_: i < k, body, start, parallel_iterations=1, maximum_iterations=k)
    new_state = [tf.reshape(t.stack(), [k * rows] + s.shape[2:].as_list())
                 for t, s in zip(new_state, model_state)]
    return loss, nll_sum, grads, new_state
