"""examples/torch/fashion_mnist.py's data and pacing. The driver
decompresses the data set once into the job's directory and the ranks map
it (each rank decompressing and normalizing all 60,000 images took minutes
on a loaded 2-core machine); a rank converts only its shard. On a small
stand-in data set in IDX format, both ways give the same tensors as
normalizing it whole and indexing the shard. The x1 step time allows for
the workers that compute at once, not those that mostly sleep."""

import argparse
import gzip
import sys
import time

import numpy as np
import pytest
import torch

from conftest import SOURCE

sys.path.insert(0, str(SOURCE / "examples" / "torch"))
import fashion_mnist as fm  # noqa: E402


def write_idx(path, array):
    header = bytes([0, 0, 8, array.ndim]) + b"".join(
        int(d).to_bytes(4, "big") for d in array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def stand_in(directory, train=40, test=12):
    rng = np.random.default_rng(5)
    sets = {"train-images-idx3-ubyte": rng.integers(0, 256, (train, 28, 28)),
            "train-labels-idx1-ubyte": rng.integers(0, 10, train),
            "t10k-images-idx3-ubyte": rng.integers(0, 256, (test, 28, 28)),
            "t10k-labels-idx1-ubyte": rng.integers(0, 10, test)}
    for name, array in sets.items():
        write_idx(directory / (name + ".gz"), array)
    return sets


def reference(sets, args, worker, workers):
    def norm(a):
        x = torch.from_numpy(a.astype(np.uint8)).float()
        return ((x / 255.0 - 0.2860) / 0.3530).unsqueeze(1)
    x = norm(sets["train-images-idx3-ubyte"])
    y = torch.from_numpy(sets["train-labels-idx1-ubyte"].astype(np.uint8))
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(
        args.seed))[:args.train_size or None]
    mine = order[worker::workers]
    return (x[mine], y[mine].long(),
            norm(sets["t10k-images-idx3-ubyte"])[:args.test_size],
            torch.from_numpy(sets["t10k-labels-idx1-ubyte"].astype(
                np.uint8)).long()[:args.test_size])


def test_prepared_and_archived_data_give_the_same_shards(tmp_path,
                                                         monkeypatch):
    archives, job = tmp_path / "archives", tmp_path / "job"
    archives.mkdir()
    job.mkdir()
    sets = stand_in(archives)
    args = argparse.Namespace(data=str(archives), seed=3, train_size=30,
                              test_size=10)
    monkeypatch.delenv("STRATA_EXT_PY_EXAMPLE_DIR", raising=False)
    from_archives = [fm.load_data(args, w, 3, torch) for w in range(3)]

    fm.prepare_data(str(archives), str(job))
    monkeypatch.setenv("STRATA_EXT_PY_EXAMPLE_DIR", str(job))
    args.data = str(tmp_path / "absent")  # the archives are not read
    from_job = [fm.load_data(args, w, 3, torch) for w in range(3)]

    for w in range(3):
        want = reference(sets, args, w, 3)
        for got in (from_archives[w], from_job[w]):
            assert len(got) == len(want)
            for g, e in zip(got, want):
                assert g.dtype == e.dtype and torch.equal(g, e)
    assert sum(len(s[1]) for s in from_job) == 30


def test_the_x1_step_allows_for_the_workers_that_compute():
    # four x1 workers on two cores share them two to a core; two more at
    # 117x (asleep 116/117 of the time) add next to nothing
    assert fm.core_share([1, 1, 1, 1], 2) == 2.0
    assert fm.core_share([1, 1, 1, 1, 117, 117], 2) < 2.01
    assert fm.core_share([1, 8], 2) == 1.0


def test_the_slowest_worker_evaluates_when_it_sleeps():
    # its sleep stands for compute it lacks: evaluating there takes no step
    # from the others; with no worker slowed, worker 0 evaluates (pausing)
    assert fm.evaluator([1, 1, 1, 16]) == 3
    assert fm.evaluator([16, 1, 16, 1]) == 0
    assert fm.evaluator([1, 4, 2]) == 1
    assert fm.evaluator([1, 1, 1]) == 0
    assert fm.evaluator([2, 2]) == 0


def test_the_idle_evaluation_scores_its_copy_piece_by_piece():
    torch.manual_seed(4)
    model = fm.make_model("lenet", torch)
    tx, ty = torch.randn(300, 1, 28, 28), torch.randint(0, 10, (300,))
    idle = fm.IdleEvaluation(model, tx, ty, torch)
    assert idle.advance(float("inf")) is None  # nothing taken
    want = fm.evaluate(model, tx, ty, torch)
    idle.take(model, (12.5, 40, 7))
    with torch.no_grad():  # training goes on: the copy is not the model
        for p in model.parameters():
            p.add_(1.0)
    assert idle.advance(0.0) is None and idle.done == 0  # no time: no piece
    pieces = 0
    while (got := idle.advance(time.monotonic() + 0.05)) is None:
        assert 0 < idle.done < 300 or pieces == 0
        pieces += 1
        assert pieces < 10000
    acc, loss, at = got
    assert at == (12.5, 40, 7)
    assert acc == want[0] and abs(loss - want[1]) < 1e-4 * abs(want[1])
    assert idle.at is None and idle.advance(float("inf")) is None
    moved = fm.evaluate(model, tx, ty, torch)
    assert moved != want
    idle.take(model, (20.0, 64, 11))  # the last one: all in one go
    assert idle.advance(float("inf"))[:2] == moved[:1] + (
        pytest.approx(moved[1], rel=1e-4),)


def test_bsp_short_of_the_target_is_modelled_from_its_measured_steps():
    # the step time runs from the first evaluation to the last: the first
    # steps' start-up (30 s here) is left out
    evals = [{"t": 30.0, "steps": 1}, {"t": 38.4, "steps": 3},
             {"t": 72.0, "steps": 11}]
    assert fm.step_time(evals) == pytest.approx(4.2)
    assert fm.step_time(evals[:1]) is None
    args = argparse.Namespace(bsp_steps=250)
    short = {"policy": "bsp", "reached_s": None, "step_s": 4.2}
    reached = dict(short, reached_s=99.0)
    other = dict(short, policy="esync")
    fm.model_bsp(args, [short, reached, other])
    assert short["modelled_s"] == pytest.approx(1050.0)
    assert "modelled_s" not in reached and "modelled_s" not in other
    args.bsp_steps = 0  # not counted: nothing to model
    unmodelled = {"policy": "bsp", "reached_s": None, "step_s": 4.2}
    fm.model_bsp(args, [unmodelled])
    assert "modelled_s" not in unmodelled
