import numpy as np
import pytest

from course_utils import costmodel as cm


def test_amdahl_limits():
    assert cm.amdahl_speedup(1.0, 8) == pytest.approx(8)
    assert cm.amdahl_speedup(0.0, 8) == pytest.approx(1)
    s = cm.amdahl_speedup(0.9, np.array([1, 10, 10**6]))
    assert s[0] == pytest.approx(1) and s[-1] < 10 and s[-1] == pytest.approx(10, rel=1e-4)
    with pytest.raises(ValueError):
        cm.amdahl_speedup(1.5, 2)
    with pytest.raises(ValueError):
        cm.amdahl_speedup(0.5, 0)


def test_ring_allreduce_terms():
    # latency term: 2(n-1) alpha
    assert cm.ring_allreduce_time(0, 2, 1.0, 0.0) == pytest.approx(2)
    assert cm.ring_allreduce_time(0, 8, 1.0, 0.0) == pytest.approx(14)
    # bandwidth term: 2(n-1)/n S beta -> 2 S beta
    assert cm.ring_allreduce_time(100, 2, 0.0, 1.0) == pytest.approx(100)
    assert cm.ring_allreduce_time(100, 1000, 0.0, 1.0) == pytest.approx(199.8)
    assert cm.ring_allreduce_time(100, 1, 1.0, 1.0) == 0


def test_fit_recovers_parameters_from_noisy_data():
    rng = np.random.default_rng(0)
    x = np.logspace(12, 26, 15, base=2)
    t = cm.ring_allreduce_time(x, 4, 1e-4, 1e-9) * rng.uniform(0.95, 1.05, x.size)
    fit = cm.fit_alpha_beta(x, t, 4)
    assert fit.alpha == pytest.approx(1e-4, rel=0.15)
    assert fit.beta == pytest.approx(1e-9, rel=0.15)
    assert fit.bandwidth == pytest.approx(1e9, rel=0.15)
    with pytest.raises(ValueError):
        cm.fit_alpha_beta([1], [1], 2)


def test_bus_bandwidth_definition():
    algbw, busbw = cm.bus_bandwidth(1e9, 1.0, 8)
    assert algbw == 1e9 and busbw == pytest.approx(1.75e9)


def test_memory_per_param_and_bubble():
    assert cm.memory_per_param("fp32", "adam") == 16
    assert cm.memory_per_param("amp", "adam") == 16
    assert cm.memory_per_param("fp32", "sgd") == 8
    with pytest.raises(ValueError, match="unknown combination"):
        cm.memory_per_param("int8", "adam")
    assert cm.pipeline_bubble(4, 1) == pytest.approx(0.75)
    assert cm.pipeline_bubble(4, 29) == pytest.approx(3 / 32)
    assert cm.pipeline_bubble(1, 8) == 0


def test_data_parallel_step_time():
    assert cm.data_parallel_step_time(1.0, 0, 4, 0.0, 1.0) == pytest.approx(0.25)
    assert cm.data_parallel_step_time(1.0, 100, 2, 0.0, 0.01, overlap=1.0) == pytest.approx(0.5)


def test_more_messages_pay_more_latency():
    one = cm.data_parallel_step_time(0.0, 1000, 4, 1.0, 0.0, messages=1)
    assert cm.data_parallel_step_time(0.0, 1000, 4, 1.0, 0.0, messages=5) == pytest.approx(5 * one)
    with pytest.raises(ValueError):
        cm.data_parallel_step_time(1.0, 10, 2, 0.0, 0.0, messages=0)


def test_zero_bytes_per_rank_follows_the_zero_paper():
    # ZeRO paper, Fig. 1: 7.5B params, 64 ranks, mixed precision + Adam (2 + 2 + 12 bytes per param)
    psi, n = 7.5e9, 64
    assert cm.zero_bytes_per_rank(psi, n, 0, "amp") == pytest.approx(120e9)
    assert cm.zero_bytes_per_rank(psi, n, 1, "amp") == pytest.approx(4 * psi + 12 * psi / n)    # 31.4 GB
    assert cm.zero_bytes_per_rank(psi, n, 2, "amp") == pytest.approx(2 * psi + 14 * psi / n)    # 16.6 GB
    assert cm.zero_bytes_per_rank(psi, n, 3, "amp") == pytest.approx(16 * psi / n)              # 1.9 GB
    assert cm.zero_bytes_per_rank(1000, 1, 3) == cm.zero_bytes_per_rank(1000, 1, 0) == 16000
    for bad in ({"stage": 4}, {"stage": 1, "world_size": 0}, {"stage": 1, "optimizer": "lamb"}):
        with pytest.raises(ValueError):
            cm.zero_bytes_per_rank(1000, **{"world_size": 2, **bad})


def test_collective_time_is_the_ring_model_per_kind():
    """An all-reduce sending 2(n-1)/n of its bytes is ring_allreduce_time; the others send n - 1
    messages; the kinds are commcount's (which says how many bytes each sends)."""
    from course_utils import commcount

    x, n, alpha, beta = 1e6, 4, 1e-5, 1e-9
    assert cm.collective_time("all_reduce", 2 * (n - 1) / n * x, n, alpha, beta) == pytest.approx(
        float(cm.ring_allreduce_time(x, n, alpha, beta)))
    for kind in ("all_gather", "reduce_scatter", "all_to_all"):
        assert cm.collective_time(kind, 0.0, n, alpha, beta) == pytest.approx((n - 1) * alpha)
    assert cm.collective_time("all_gather", x, 1, alpha, beta) == 0.0
    assert set(cm.RING_MESSAGES) == {"all_reduce", "all_gather", "reduce_scatter", "all_to_all"}
    assert all(commcount.ring_bytes_sent(kind, 1, n) > 0 for kind in cm.RING_MESSAGES)
    with pytest.raises(ValueError, match="unknown collective"):
        cm.collective_time("broadcast", x, n, alpha, beta)
