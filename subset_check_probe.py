import os, sys
os.environ["PAR_HARD_ROWS"] = "0.5"
sys.path.insert(0, "."); sys.path.insert(0, "tests/model")
import numpy as np, tensorflow as tf
import test_stochastic_block as t
B, T, M, D = 4, 5, 3, t.D
rng = np.random.default_rng(0)
x = tf.constant(rng.normal(size=(B, T, D)), tf.float32); mem = tf.constant(rng.normal(size=(B, M, D)), tf.float32)
block = t.make_block(search_mode="hard", hard_gradient="all")
target = tf.constant(rng.normal(size=(B, T, D)), tf.float32)
outs = [block.attention_layer(x, mem, training=True).numpy(), block.dense_layer(x, training=True).numpy(), x.numpy()]
for step in range(6):
    with tf.GradientTape() as tape:
        y = block(x, mem, tau=0.7, step=step, training=True)
        loss = tf.reduce_sum(y * target)
    g = tape.gradient(loss, block.arch_logits).numpy()
    w = block.mixing_weights(0.7, step, True).numpy(); k = int(np.argmax(w))
    assert np.array_equal(y.numpy(), outs[k]), step
    key = tf.random.experimental.stateless_fold_in(tf.constant([block.seed, 1000 + block.block_index], tf.int64), tf.constant(step, tf.int64))
    idx = np.sort(tf.math.top_k(tf.random.stateless_uniform([B], key), 2).indices.numpy())
    dl = np.array([np.sum(outs[j] * target.numpy()) if j == k else 2 * np.sum(outs[j][idx] * target.numpy()[idx]) for j in range(3)])
    jac = (np.diag(w) - np.outer(w, w)) / 0.7
    np.testing.assert_allclose(g, dl @ jac, rtol=1e-4, atol=1e-6)
    print(step, k, idx, "ok")
