"""strata.torch.DistributedOptimizer under every policy, in one job of two
workers and one aggregator (tests/python/jobs/scenarios.py runs each
scenario as a job of its own, in the same processes). Tolerances: fp32
parameters after 8 steps within 1e-5 of the reference (the aggregators sum
in another order than torch), bit-identical across workers."""

import pytest

from conftest import both, facts, run_scenarios


@pytest.fixture(scope="module")
def results(build, tmp_path_factory):
    return run_scenarios(build, tmp_path_factory.mktemp("scenarios"))


def test_bsp_matches_the_single_process_reference(results):
    w0, w1 = both(results, "bsp")
    assert w0["initial_diff"] == 0.0 and w1["initial_diff"] == 0.0
    assert w0["params"] == w1["params"]  # bit-identical
    assert w0["ref_diff"] < 1e-5 and w1["ref_diff"] < 1e-5
    assert w0["clock"] == 8


@pytest.mark.parametrize("scenario", ["bsp", "sum"])
def test_aggregators_read_the_gradients_in_place(results, scenario):
    # Zero copy over shm: the gradients live in one strata_alloc block, so
    # every pushed byte (every clock, the model's every tensor) is read in
    # place, none copied; with the aggregators' SGD the parameters live in
    # another block, which the model is written into.
    for w, r in zip((0, 1), both(results, scenario)):
        assert r["grads_in_block"], f"worker {w}: {facts(r)}"
        assert r["bytes_pushed"] == 0, f"worker {w}: {facts(r)}"
        assert r["in_place_bytes"] == r["clock"] * r["registered_bytes"], \
            f"worker {w}: {facts(r)}"
        assert r["params_in_block"] or scenario == "sum", \
            f"worker {w}: {facts(r)}"


def test_unused_parameters_do_not_hang_the_step(results):
    # the layer the forward pass never touches was pushed (as zeros)
    w0, w1 = both(results, "bsp")
    assert w0["unused_grad_is_buffer"] and w0["clock"] == 8


def test_zero_grad_set_to_none_and_two_backward_passes(results):
    # steps 1, 4, 7 used set_to_none=True; every step two backward passes:
    # the reference (which accumulates both passes) still matches
    w0, _ = both(results, "bsp")
    assert w0["ref_diff"] < 1e-5


def test_a_backward_pass_too_many_raises_naming_the_tensor(results):
    for r in both(results, "extra_pass"):
        assert "computed 2 times before step()" in r["extra_pass"], r
        assert "backward_passes_per_step=1" in r["extra_pass"], r
        assert "'fc" in r["extra_pass"], r
        assert r["clock"] == 1  # step() still ended the clock


def test_evaluation_between_steps(results):
    w0, w1 = both(results, "bsp")
    assert len(w0["evals"]) == 2 and w0["evals"] == w1["evals"]


@pytest.mark.parametrize("what,says", [
    ("lr", ["lr=0.5", "STRATA_LR=0.05"]),
    ("momentum", ["momentum=0.5", "STRATA_MOMENTUM=0.9"]),
    ("weight_decay", ["weight_decay=0 ", "STRATA_WEIGHT_DECAY=0.001"]),
    ("nesterov", ["nesterov, dampening and maximize"]),
    ("adam", ["wrap torch.optim.SGD (got Adam)", "STRATA_OPTIMIZER=sum"])])
def test_mismatched_optimizers_are_refused_by_name(results, what, says):
    # the aggregators' SGD: the wrapped optimizer must be the job's
    w0, _ = both(results, "bsp")
    for text in says:
        assert text in w0["mismatch_" + what], w0["mismatch_" + what]


def test_a_refused_wrapping_leaves_the_model_in_its_own_memory(results):
    w0, _ = both(results, "bsp")
    assert "longer than 255 bytes" in w0["long_name"], w0["long_name"]
    assert w0["long_name_diff"] == 0.0 and w0["long_name_no_grads"]


def test_checkpoint_loaded_before_wrapping_is_everyones_start(results):
    w0, w1 = both(results, "resume")
    assert w0["loaded_diff"] == 0.0 and w1["loaded_diff"] == 0.0
    assert w0["after_step"] == w1["after_step"]


def test_state_dict_after_finalize_is_the_trained_model(results):
    for r in both(results, "resume"):
        assert r["after_finalize"] == r["after_step"]
        assert r["left_strata_memory"]
        assert r["acc_after_finalize"] >= 0.0  # a forward pass still runs


def test_lr_scheduler_reaches_the_aggregators(results):
    # StepLR halved the rate after steps 2, 4, 6 (strata_set_lr); without the
    # change reaching the aggregators the model would drift from this
    w0, w1 = both(results, "lr_schedule")
    assert w0["lr"] == pytest.approx(0.1 * 0.5 ** 3)
    assert w0["params"] == w1["params"]
    assert w0["ref_diff"] < 1e-5 and w1["ref_diff"] < 1e-5


def test_sum_mode_local_adam_param_groups_scheduler_batchnorm(results):
    w0, w1 = both(results, "sum")
    assert w0["initial_diff"] == 0.0
    assert w0["params"] == w1["params"] and w0["bn_stats"] == w1["bn_stats"]
    assert w0["ref_diff"] < 1e-5 and w0["bn_ref_diff"] < 1e-5
    assert w0["lr"] == pytest.approx([0.01 * 0.25, 0.003 * 0.25])
    assert w0["state_steps"] and set(w0["state_steps"]) == {7.0}


def test_hundreds_of_outstanding_requests(results):
    w0, w1 = both(results, "many_requests")
    assert w0["outstanding"] == 600
    assert w0["all_summed"] and w1["all_summed"]


@pytest.mark.parametrize("policy", ["ssp", "asp", "gssp", "gssp_gdtopk",
                                    "esync", "fedavg"])
def test_policy_trains_and_converges(results, policy):
    for w, r in zip((0, 1), both(results, policy)):
        assert r["acc_after"] > 0.8, f"worker {w}: {facts(r)}"
        assert r["acc_after"] > r["acc_before"] + 0.3, \
            f"worker {w}: {facts(r)}"


def test_rounds_average_batchnorm_statistics(results):
    # fedavg's model has BatchNorm; its last step ended a round, after which
    # every worker holds the averaged running statistics
    w0, w1 = both(results, "fedavg")
    assert w0["synced"] and w1["synced"]
    assert w0["bn_stats"] == w1["bn_stats"]
