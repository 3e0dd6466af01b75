"""Hosts sharing one CXL pool: decode steps keep their time until the hosts' combined swap-in traffic reaches
the devices' bandwidth, then stretch so that together they load exactly that (hand computation of the knee)."""
import pytest

from sacmodel.cluster.pool import hosts_per_pool


def test_tbt_rises_once_the_hosts_traffic_exceeds_the_devices_bandwidth():
    r = hosts_per_pool("sac-cluster-4x", hosts=(1, 3, 16), context=32768, output=256, concurrency=64)
    C = r["devices_GBps"]
    assert C == pytest.approx(2 * 22.5)                   # two devices of 22.5 GB/s (sac-cluster-4x.yaml)
    one, three, sixteen = r["rows"]
    d = one["demand_per_host_GBps"]                       # one host alone: bytes per step / step time
    T1 = one["tbt_mean_ms"]
    assert 0 < d < C
    knee = C / d
    assert r["knee_hosts"] == pytest.approx(knee)
    assert 3 < knee < 16                                  # the study brackets it
    # below the knee: 3 hosts ask 3d < C and keep their step time
    assert three["tbt_mean_ms"] == pytest.approx(T1, rel=0.02)
    # far above it: the devices are shared, each host gets C / 16 and its steps stretch by 16 d / C
    assert sixteen["tbt_mean_ms"] == pytest.approx(T1 * 16 * d / C, rel=0.08)
    # the devices are never asked for more than C; the summary divides all hosts' bytes by the busiest host's
    # steps, so a host that loads while another is still taking its requests in may lift it a little above C
    assert sixteen["pool_traffic_GBps"] == pytest.approx(C, rel=0.01) and sixteen["pool_traffic_GBps"] <= C * 1.001
