"""runstore.checkpoints on damaged files: which checkpoint is good, which save never ended."""

import os

import pytest


@pytest.fixture
def three_saves(tmp_path):
    """ckpt-1..3 of two variables, saved by a CheckpointManager (listed in `checkpoint`)."""
    import numpy as np
    import tensorflow as tf

    checkpoint = tf.train.Checkpoint(a=tf.Variable(np.arange(5000, dtype=np.float32)),
                                     b=tf.Variable([1.0, 2.0]))
    manager = tf.train.CheckpointManager(checkpoint, str(tmp_path), max_to_keep=5,
                                         checkpoint_name="ckpt")
    for step in (1, 2, 3):
        manager.save(checkpoint_number=step)
    return tmp_path


def _corrupt(path):
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.seek(size // 2)
        chunk = f.read(8)
        f.seek(size // 2)
        f.write(bytes(b ^ 0xFF for b in chunk))


def test_the_newest_good_checkpoint_and_the_damaged_file_by_name(three_saves):
    from runstore import checkpoints

    run = three_saves
    _corrupt(run / "ckpt-3.index")
    with open(run / "ckpt-2.data-00000-of-00001", "r+b") as f:
        f.truncate(100)
    path, damaged = checkpoints.find_good(str(run))
    assert path == str(run / "ckpt-1")
    assert [p for p, _ in damaged] == [str(run / "ckpt-3"), str(run / "ckpt-2")]
    assert damaged[0][1].startswith(f"{run}/ckpt-3.index is damaged (")
    assert damaged[1][1].startswith(f"{run}/ckpt-2.data-00000-of-00001 is damaged (")
    found, warnings = checkpoints.resolve_checkpoint(str(run), "latest")
    assert found == str(run / "ckpt-1") and len(warnings) == 2
    assert warnings[0].startswith(f"skipping ckpt-3: {run}/ckpt-3.index is damaged")
    with pytest.raises(checkpoints.CheckpointError, match=r"ckpt-3\.index is damaged"):
        checkpoints.resolve_checkpoint(str(run), str(run / "ckpt-3"))
    moved = checkpoints.set_aside(str(run / "ckpt-3"))
    assert [os.path.basename(m) for m in moved] == [
        "ckpt-3.data-00000-of-00001.damaged", "ckpt-3.index.damaged"]
    checkpoints.rewrite_list(str(run))
    assert checkpoints.listed_steps(str(run)) == [1, 2]
    # A manager made afterwards deletes the listed ones in turn (--keep_checkpoints).
    import tensorflow as tf

    manager = tf.train.CheckpointManager(tf.train.Checkpoint(c=tf.Variable(1.0)), str(run),
                                         max_to_keep=2, checkpoint_name="ckpt")
    for step in (4, 5):
        manager.save(checkpoint_number=step)
    assert checkpoints.listed_steps(str(run)) == [4, 5]
    assert sorted(n for n in os.listdir(run) if n.endswith(".index")) == [
        "ckpt-4.index", "ckpt-5.index"]


def test_a_save_that_never_completed_is_told_from_a_damaged_one(three_saves):
    from runstore import checkpoints

    run = three_saves
    (run / "ckpt-4.index").write_bytes(b"half an index")  # newer than every listed one
    assert checkpoints.listed_steps(str(run)) == [1, 2, 3]
    assert checkpoints.checkpoints(str(run))[0] == str(run / "ckpt-4")
    assert checkpoints.unfinished(str(run), str(run / "ckpt-4"), [1, 2, 3])
    assert not checkpoints.unfinished(str(run), str(run / "ckpt-3"), [1, 2, 3])
    assert checkpoints.remove_partial(str(run), 4) == ["ckpt-4.index"]
    # No list at all: no save ever completed. A damaged list: nothing can be told.
    os.remove(run / "checkpoint")
    assert checkpoints.listed_steps(str(run)) == []
    (run / "checkpoint").write_text('model_checkpoint_path: "ckpt-3\n{{')
    assert checkpoints.listed_steps(str(run)) is None
    assert not checkpoints.unfinished(str(run), str(run / "ckpt-3"), None)
    # The files still say which checkpoints there are.
    assert checkpoints.checkpoints(str(run)) == [str(run / f"ckpt-{s}") for s in (3, 2, 1)]
