"""The ports rule: Slurm's reservation, --port-base, or a window below the ephemeral range."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tfslurm_entry.errors import ConfigError
from tfslurm_entry.resolve import ports

LINUX_EPHEMERAL = range(32768, 61000)  # net.ipv4.ip_local_port_range's default, 32768-60999
BATCH_STEP = 4294967294


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("12005-12009", [range(12005, 12010)]),
        ("12999,12000-12001", [range(12999, 13000), range(12000, 12002)]),
        ("8080", [range(8080, 8081)]),
    ],
)
def test_parse_ranges(text, expected):
    assert ports.parse_ranges(text) == expected


@pytest.mark.parametrize("text", ["", "12009-12005", "a-b", "0-4", "65000-70000", "1,,2", "-5"])
def test_parse_ranges_refuses_what_is_not_a_port_list(text):
    with pytest.raises(ValueError):
        ports.parse_ranges(text)


@given(st.lists(st.integers(1, 65535), unique=True, max_size=40))
def test_format_ranges_round_trips(numbers):
    text = ports.format_ranges(numbers)
    assert [p for r in ports.parse_ranges(text) for p in r] == numbers if numbers else text == ""


def test_every_default_window_lies_below_linuxs_ephemeral_range():
    for window in range(ports.WINDOWS):
        first = ports.DEFAULT_RANGE.start + window * ports.WINDOW
        last = first + ports.WINDOW - 1
        assert last < LINUX_EPHEMERAL.start and last in ports.DEFAULT_RANGE


@pytest.mark.parametrize("job", [0, 1, 4242, 10**9, 2**32 - 1])
@pytest.mark.parametrize("step", [0, 3, BATCH_STEP])
def test_default_base_is_deterministic_and_a_window_start(job, step):
    base = ports.default_base(job, step)
    assert base == ports.default_base(job, step)
    assert (base - ports.DEFAULT_RANGE.start) % ports.WINDOW == 0
    assert base + ports.WINDOW - 1 in ports.DEFAULT_RANGE


def test_steps_of_a_job_and_jobs_with_close_ids_get_different_windows():
    span = ports.WINDOWS // ports.STEPS_PER_JOB  # jobs this far apart, 16 steps each
    bases = [
        ports.default_base(job, step) for job in range(7000, 7000 + span) for step in range(16)
    ]
    assert len(set(bases)) == len(bases)


def test_choose_prefers_the_option_then_the_reservation_then_the_window():
    reserved = tuple(range(12005, 12010))
    assert ports.choose(3, 20000, reserved, 7, 0).numbers == (20000, 20001, 20002)
    chosen = ports.choose(3, None, reserved, 7, 0)
    assert (chosen.numbers, chosen.kind) == ((12005, 12006, 12007), ports.SLURM)
    window = ports.choose(3, None, None, 7, 0)
    assert window.kind == ports.DEFAULT and window.numbers[0] == ports.default_base(7, 0)
    assert "default window" in window.source


def test_port_base_overflow_says_which_base_fits():
    with pytest.raises(ConfigError, match=r"reaches port 65537.*65532 or lower"):
        ports.choose(4, 65534, None, 7, 0)


def test_more_tasks_on_a_node_than_a_window_holds_is_refused():
    with pytest.raises(ConfigError, match=r"needs 65 ports.*holds 64.*MpiParams=ports"):
        ports.choose(65, None, None, 7, 0)
    assert len(ports.choose(65, None, tuple(range(12000, 12100)), 7, 0).numbers) == 65


def test_needed_counts_the_busiest_node_and_rank_0s_control_port():
    assert ports.needed([3, 1], 1) == 3
    assert ports.needed([3, 1], 3) == 4


def test_ephemeral_clash_leaves_out_the_kernels_reserved_ports():
    window = range(30000, 30004)
    assert ports.ephemeral_clash(window, LINUX_EPHEMERAL) == []
    low = range(15000, 61000)
    assert ports.ephemeral_clash(window, low) == [30000, 30001, 30002, 30003]
    assert ports.ephemeral_clash(window, low, [range(30000, 30002)]) == [30002, 30003]
