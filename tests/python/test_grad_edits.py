"""Gradients edited between backward and step(), as Horovod users clip them:
opt.synchronize(), an edit, then step() under opt.skip_synchronize(). With
zero copy the aggregators read each gradient where it lies from the moment
backward's hook pushed it until the clock ends, so an edit is safe only
after synchronize() (sum mode), or with push_in_backward=False (the
aggregators' SGD), and under esync and fedavg (gradients stay local); an
edit made while the aggregators may read raises, naming the tensor. One
job of two workers and one aggregator (tests/python/jobs/scenarios.py).
Tolerances: fp32 parameters after 6 steps within 1e-5 of the reference,
bit-identical across workers."""

import pytest

from conftest import both, facts, run_scenarios

MAX_NORM = 0.25  # scenarios.MAX_NORM


@pytest.fixture(scope="module")
def results(build, tmp_path_factory):
    return run_scenarios(build, tmp_path_factory.mktemp("edits"),
                         only=["clip_sum", "clip_local", "clip_fedavg",
                               "edit_unsynced"], timeout=170)


@pytest.mark.parametrize("scenario", ["clip_sum", "clip_local",
                                      "clip_fedavg"])
def test_clipping_matches_the_single_process_reference(results, scenario):
    w0, w1 = both(results, scenario)
    assert w0["params"] == w1["params"]  # bit-identical
    for w, r in zip((0, 1), (w0, w1)):
        assert r["ref_diff"] < 1e-5, f"worker {w}: {facts(r)}"
        # every step clipped: the edit mattered
        assert min(r["norms"]) > MAX_NORM, f"worker {w}: {facts(r)}"


def test_synchronize_puts_every_workers_mean_into_the_gradients(results):
    # the norm each worker clipped is the mean's, the reference's, not its
    # own gradient's; one clock a step (and one at wrapping) whether step()
    # ran under skip_synchronize(), without it, or was skipped
    w0, w1 = both(results, "clip_sum")
    for r in (w0, w1):
        assert r["norms"] == pytest.approx(r["ref_norms"], rel=1e-5), facts(r)
        assert r["clock"] == 1 + r["steps"], facts(r)
    assert w0["norms"] == w1["norms"]


@pytest.mark.parametrize("scenario", ["clip_sum", "clip_local"])
def test_edits_keep_zero_copy(results, scenario):
    for w, r in zip((0, 1), both(results, scenario)):
        assert r["grads_in_block"] and r["bytes_pushed"] == 0, \
            f"worker {w}: {facts(r)}"
        assert r["in_place_bytes"] == r["clock"] * r["registered_bytes"], \
            f"worker {w}: {facts(r)}"


def test_rounds_average_the_clipped_local_models(results):
    w0, w1 = both(results, "clip_fedavg")
    assert w0["synced"] and w1["synced"]


def test_an_edit_before_synchronize_raises_naming_the_tensors(results):
    for r in both(results, "clip_sum"):
        err = r["unsynced_clip"]
        assert "'fc1.weight'" in err and "'fc2.bias'" in err, err
        assert "written between backward and step()" in err, err
        assert "opt.synchronize()" in err and "was not applied" in err, err
        # the clock ended (the workers stay together), the step was dropped
        assert r["clock_after_errors"] == r["clock"] + 1, facts(r)
        assert r["unsynced_clip_diff"] == 0.0, facts(r)
        assert "without synchronize()" in r["unsynced_skip"], facts(r)


def test_an_edit_under_the_aggregators_sgd_raises_naming_the_tensors(
        results):
    for r in both(results, "edit_unsynced"):
        assert "'fc1.weight'" in r["clipped"], r
        assert "push_in_backward=False" in r["clipped"], r
        assert "'fc2.bias' (p.grad replaced)" in r["replaced"], r
        assert "'fc1" not in r["replaced"], r  # only what was edited
        assert r["plain"] == "accepted" and r["clock"] == 3, r


def test_synchronize_under_the_aggregators_sgd_says_why_not(results):
    for r in both(results, "clip_local"):
        assert "synchronize() with STRATA_POLICY=bsp" in r["synchronize"], r
        assert "STRATA_OPTIMIZER=sum" in r["synchronize"], r
