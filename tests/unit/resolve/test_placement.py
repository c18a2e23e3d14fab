"""Rule 2: ranks are placed on hosts the way Slurm places them."""

import pytest

from tfslurm_entry.errors import ConfigError
from tfslurm_entry.resolve.placement import local_indices, place_ranks

HOSTS = ("a", "b", "c")


def hosts_of(counts, distribution="", plane_size=None, hosts=HOSTS):
    return [hosts[i] for i in place_ranks(counts, distribution, plane_size)]


@pytest.mark.parametrize("distribution", ["", "block", "*"])
def test_block_is_contiguous_in_nodelist_order(distribution):
    assert hosts_of([2, 3, 1], distribution) == ["a", "a", "b", "b", "b", "c"]


def test_cyclic_deals_round_robin_skipping_full_hosts():
    assert hosts_of([2, 2, 2], "cyclic") == ["a", "b", "c", "a", "b", "c"]
    assert hosts_of([3, 1, 2], "cyclic") == ["a", "b", "c", "a", "c", "a"]


def test_plane_deals_blocks_and_a_host_takes_fewer_when_it_has_fewer_left():
    assert hosts_of([4, 4], "plane", 2) == ["a", "a", "b", "b", "a", "a", "b", "b"]
    assert hosts_of([3, 5, 1], "plane", 2) == ["a", "a", "b", "b", "c", "a", "b", "b", "b"]


def test_plane_needs_its_size():
    with pytest.raises(ConfigError, match="SLURM_DIST_PLANESIZE is not set"):
        place_ranks([2, 2], "plane", None)


@pytest.mark.parametrize("distribution", ["arbitrary", "Cyclic", "packed"])
def test_other_distributions_are_refused(distribution):
    with pytest.raises(ConfigError, match=f"{distribution!r} is not supported"):
        place_ranks([2, 2], distribution)


def test_local_index_is_position_among_the_hosts_ranks():
    slots = place_ranks([3, 2], "cyclic")  # a b a b a
    assert local_indices(("a", "b"), slots) == [0, 0, 1, 1, 2]


def test_host_listed_twice_gets_distinct_local_indices():
    slots = place_ranks([2, 2], "")
    assert local_indices(("n1", "n1"), slots) == [0, 1, 2, 3]
