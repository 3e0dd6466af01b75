"""The cluster's fluid network: transfers and streams share resources max-min, hand-computed."""
import pytest

from sacmodel.cluster.fabric import Fabric


def _run(fabric, flows, until=1e9):
    done = {}
    for name, start, nbytes, lat, res in flows:
        fabric.transfer(start, nbytes, lat, res, lambda t, name=name: done.__setitem__(name, t))
    fabric.advance(until)
    return done


def test_one_transfer_alone_runs_at_its_bottleneck_after_its_latency():
    done = _run(Fabric({"a": 10.0, "b": 5.0}), [("x", 1.0, 50.0, 0.5, ("a", "b"))])
    assert done["x"] == pytest.approx(1.0 + 0.5 + 50.0 / 5.0)


def test_transfers_share_a_link_and_the_survivor_speeds_up():
    # 10 and 30 bytes from t=0 on a 10 B/s link: 5 B/s each until the first ends at 2 s, then 10 B/s
    done = _run(Fabric({"nic": 10.0}), [("a", 0.0, 10.0, 0.0, ("nic",)), ("b", 0.0, 30.0, 0.0, ("nic",))])
    assert done["a"] == pytest.approx(2.0) and done["b"] == pytest.approx(4.0)
    # a third transfer on another link does not slow them
    done3 = _run(Fabric({"nic": 10.0, "other": 1.0}), [("a", 0.0, 10.0, 0.0, ("nic",)),
                                                        ("b", 0.0, 30.0, 0.0, ("nic",)),
                                                        ("c", 0.0, 10.0, 0.0, ("other",))])
    assert done3["a"] == pytest.approx(2.0) and done3["b"] == pytest.approx(4.0) and done3["c"] == pytest.approx(10.0)


def test_bytes_per_resource_are_counted_and_no_transfer_beats_the_link():
    f = Fabric({"x": 1.0, "y": 1.0})
    done = _run(f, [("a", 0.0, 7.0, 0.0, ("x", "y")), ("b", 0.5, 3.0, 0.0, ("y",))])
    assert f.bytes_by == {"x": 7.0, "y": 10.0}
    assert max(done.values()) >= 10.0 - 1e-9          # all ten bytes cross y at 1 B/s


def test_streams_get_their_demand_until_the_devices_saturate_then_a_fair_share():
    f = Fabric({"dev": 45.0})
    assert f.stream("h1", 0.0, 20.0, ("dev",)) == 20.0        # alone: what it asks
    assert f.stream("h2", 0.0, 20.0, ("dev",)) == 20.0        # 40 of 45: still everything
    assert f.stream("h3", 0.0, 30.0, ("dev",)) == pytest.approx(15.0)   # 45 / 3 each
    # a transfer on the devices takes its share from the streams
    f.transfer(0.0, 15.0, 0.0, ("dev",), lambda t: None)
    f.advance(0.0)                                            # it starts: four users of 45 B/s
    assert f.next_time() == pytest.approx(15.0 / (45.0 / 4))
    assert f.stream("h3", 0.0, 0.0, ("dev",)) == 0.0          # a stream that stops frees its share


def test_a_transfer_shorter_than_the_clocks_resolution_still_ends():
    # at t = 1e9 s a double cannot step by less than ~1e-7 s; a transfer needing 1e-12 s must end, not spin
    done = _run(Fabric({"nic": 1e12}), [("x", 1e9, 1.0, 0.0, ("nic",))], until=2e9)
    assert done["x"] == pytest.approx(1e9)
