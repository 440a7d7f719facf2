from kvcast.simulator.config import NetworkConfig
from kvcast.simulator.network import Network

GB = 10**9


def test_tier_follows_topology_groups() -> None:
    net = Network(NetworkConfig(nodes_per_host=2, nodes_per_rack=4, nodes_per_zone=8), 16)
    assert net.tier(0, 1) == "same_host"
    assert net.tier(0, 3) == "rack"
    assert net.tier(0, 7) == "datacenter"
    assert net.tier(0, 8) == "cross_zone"


def test_transfer_time_is_latency_plus_bytes_over_effective_bandwidth() -> None:
    net = Network(NetworkConfig(), 2)
    link = net.link(0, 1)
    expected = link.latency_us / 1e3 + GB / (100e9 / 8 * 0.87 / 1e3)
    assert abs(net.estimate_ms(0, 1, GB, 0.0) - expected) < 1e-9


def test_160_mib_block_moves_in_3_to_7_ms_over_rack_rdma() -> None:
    net = Network(NetworkConfig(nodes_per_rack=2), 2)
    assert 3.0 <= net.estimate_ms(0, 1, 160 * 2**20, 0.0) <= 7.0


def test_concurrent_transfers_from_one_node_share_its_bandwidth() -> None:
    net = Network(NetworkConfig(), 3)
    one = net.duration_ms(0, 1, GB)
    first = net.reserve(0, 1, GB, 0.0)
    second = net.reserve(0, 2, GB, 0.0)
    assert abs(first - one) < 1e-9 and abs(second - 2 * one) < 1e-9


def test_estimate_does_not_reserve_and_sees_queued_transfers() -> None:
    net = Network(NetworkConfig(), 2)
    one = net.duration_ms(0, 1, GB)
    assert net.estimate_ms(0, 1, GB, 0.0) == net.estimate_ms(0, 1, GB, 0.0)
    net.reserve(0, 1, GB, 0.0)
    assert abs(net.estimate_ms(0, 1, GB, 0.0) - 2 * one) < 1e-9


def test_local_transfer_costs_nothing() -> None:
    net = Network(NetworkConfig(), 2)
    assert net.reserve(1, 1, GB, 5.0) == 5.0 and net.bytes_moved == 0
