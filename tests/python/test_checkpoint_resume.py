"""Resuming from a checkpoint as a fresh program does: define the job functions, load the
checkpoint before their first call, continue. With Adam and a step-dependent schedule the
losses must equal those of uninterrupted training exactly (the step count is checkpointed as
OneFlow's System-Train-TrainStep-<job> variable)."""
import json

import numpy as np
import pytest

import actorflow as flow
import actorflow.typing as tp

B, D, C = 8, 6, 4


def make_job():
    @flow.global_function(type="train")
    def resume_job(x: tp.Numpy.Placeholder((B, D)), y: tp.Numpy.Placeholder((B,), dtype=flow.int32)) -> tp.Numpy:
        hidden = flow.layers.dense(x, 16, activation=flow.nn.tanh, kernel_initializer=flow.truncated_normal(0.3),
                                   name="h")
        logits = flow.layers.dense(hidden, C, kernel_initializer=flow.truncated_normal(0.3), name="o")
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(y, logits)
        scheduler = flow.optimizer.PiecewiseConstantScheduler([2, 4], [0.05, 0.02, 0.01])
        flow.optimizer.Adam(scheduler).minimize(loss)
        return loss
    return resume_job


def data(step):
    rng = np.random.default_rng(100 + step)
    return rng.standard_normal((B, D)).astype(np.float32), rng.integers(0, C, B).astype(np.int32)


def test_load_before_first_call_resumes_exactly(tmp_path):
    flow.random.seed(7)
    job = make_job()
    uninterrupted = [job(*data(s)).tolist() for s in range(6)]

    flow.clear_default_session()
    flow.random.seed(7)  # the same initialization as the uninterrupted run
    job = make_job()
    for s in range(3):
        job(*data(s))
    path = str(tmp_path / "ckpt")
    flow.checkpoint.save(path)
    saved = flow.checkpoint.get(path)
    assert saved["System-Train-TrainStep-resume_job"].tolist() == [3]
    assert {"h-weight", "h-weight-m", "h-weight-v", "o-bias"} <= set(saved)

    flow.clear_default_session()
    flow.random.seed(999)  # a different initialization: only the checkpoint can make this match
    job = make_job()
    flow.load_variables(flow.checkpoint.get(path))  # before the first call: no variable exists yet
    resumed = [job(*data(s)).tolist() for s in range(3, 6)]
    assert resumed == uninterrupted[3:]

    # the older spelling, into existing variables
    flow.train.CheckPoint().load(path)
    assert [job(*data(s)).tolist() for s in range(3, 6)] == uninterrupted[3:]


def test_loaded_value_that_does_not_fit_names_the_variable(tmp_path):
    job = make_job()
    job(*data(0))
    path = str(tmp_path / "ckpt")
    flow.train.CheckPoint().save(path)
    values = flow.checkpoint.get(path)
    values["h-weight"] = np.zeros((3, 3), np.float32)

    flow.clear_default_session()
    job = make_job()
    flow.load_variables(values)
    with pytest.raises(ValueError, match=r"h-weight.*\(16, 6\).*\(3, 3\)"):
        job(*data(0))


def test_corrupt_variable_file_is_a_clear_error(tmp_path):
    job = make_job()
    job(*data(0))
    path = tmp_path / "ckpt"
    flow.checkpoint.save(str(path))
    victim = path / json.loads((path / "manifest.json").read_text())["variables"]["o-bias"]["file"]
    victim.write_bytes(b"not an npy file")
    with pytest.raises(ValueError, match="o-bias"):
        flow.checkpoint.get(str(path))


def test_saving_over_a_checkpoint_replaces_it_whole(tmp_path):
    job = make_job()
    job(*data(0))
    path = tmp_path / "ckpt"
    flow.checkpoint.save(str(path))
    first = flow.checkpoint.get(str(path))
    job(*data(1))
    flow.checkpoint.save(str(path))  # swapped in atomically; the previous one is removed
    second = flow.checkpoint.get(str(path))
    assert second["System-Train-TrainStep-resume_job"].tolist() == [2]
    assert not np.array_equal(first["h-weight"], second["h-weight"])
    np.testing.assert_array_equal(second["h-weight"], flow.get_all_variables()["h-weight"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
