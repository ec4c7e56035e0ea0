"""Zero copy for frameworks: DistributedOptimizer keeps every gradient in
one strata_alloc block, in registration order, so over shm the aggregators
read each partition in place, here models of 6 partitions (4 KB) that span
tensors, on two aggregators, pushed tensor by tensor from backward's hooks
(a push completes only once its whole partition is pushed and reduced; a
wrapper that waited on one before posting the rest would wait until the
timeout). The model stays exact: against the single-process reference
within 1e-5, bit-identical across workers."""

import pytest

from conftest import both, facts, run_scenarios


@pytest.fixture(scope="module")
def results(build, tmp_path_factory):
    return run_scenarios(build, tmp_path_factory.mktemp("zcopy"),
                         only=["zcopy", "zcopy_sum"], aggregators=2,
                         timeout=170)


@pytest.mark.parametrize("scenario", ["zcopy", "zcopy_sum"])
def test_every_pushed_byte_is_read_in_place_and_the_model_exact(results,
                                                                scenario):
    w0, w1 = both(results, scenario)
    assert w0["params"] == w1["params"]
    for w, r in zip((0, 1), (w0, w1)):
        assert r["registered_bytes"] > 4 * 4096, f"worker {w}: {facts(r)}"
        assert r["grads_in_block"], f"worker {w}: {facts(r)}"
        assert r["bytes_pushed"] == 0, f"worker {w}: {facts(r)}"
        assert r["in_place_bytes"] == r["clock"] * r["registered_bytes"], \
            f"worker {w}: {facts(r)}"
        assert r["ref_diff"] < 1e-5, f"worker {w}: {facts(r)}"
