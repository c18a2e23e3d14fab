"""Stage 2: place ranks on hosts exactly as Slurm did.

Slurm numbers ranks in nodelist order (never sorted) and deals them out by the node-level
distribution method. Getting this wrong tells a task it lives on another host.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import ConfigError

# Laid out as block: "*" is Slurm's placeholder for its default; "pack" and "nopack" alone are
# node-packing flags with no method (srun -m pack, or SelectTypeParameters=CR_PACK_NODES with
# no -m), which Slurm 22.05, 24.11 and 26.05 export as SLURM_DISTRIBUTION=pack or nopack.
BLOCK_NAMES = ("", "*", "block", "pack", "nopack")


def place_ranks(
    counts: Sequence[int], distribution: str = "", plane_size: int | None = None
) -> list[int]:
    """Return, for each rank, the index of its entry in the step nodelist.

    ``counts[i]`` is how many tasks entry ``i`` holds (SLURM_STEP_TASKS_PER_NODE).
    """
    if distribution in BLOCK_NAMES:
        return [i for i, count in enumerate(counts) for _ in range(count)]
    if distribution == "cyclic":
        return _deal(counts, 1)
    if distribution == "plane":
        if plane_size is None:
            raise ConfigError(
                "SLURM_DISTRIBUTION is plane but SLURM_DIST_PLANESIZE is not set",
                "pass --distribution=plane=N to srun so Slurm sets both",
            )
        return _deal(counts, plane_size)
    raise ConfigError(
        f"SLURM_DISTRIBUTION node method {distribution!r} is not supported",
        "use srun --distribution=block, cyclic or plane=N (or leave it unset)",
    )


def _deal(counts: Sequence[int], chunk: int) -> list[int]:
    """Round-robin ``chunk`` ranks at a time over the entries that still have room."""
    left = list(counts)
    active = [i for i, count in enumerate(left) if count > 0]
    slots: list[int] = []
    while active:
        for i in active:
            take = min(chunk, left[i])
            slots.extend([i] * take)
            left[i] -= take
        active = [i for i in active if left[i] > 0]
    return slots


def local_indices(hosts: Sequence[str], slots: Sequence[int]) -> list[int]:
    """Each rank's position among the ranks on the same host, in ascending rank order.

    Counted per host name, so a host listed twice in the nodelist never hands out a
    local index (and so a port) twice.
    """
    seen: dict[str, int] = {}
    out = []
    for slot in slots:
        host = hosts[slot]
        out.append(seen.get(host, 0))
        seen[host] = out[-1] + 1
    return out
