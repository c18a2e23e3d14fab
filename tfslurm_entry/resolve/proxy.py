"""Keep TensorFlow's gRPC between a step's tasks off the site's HTTP proxy.

gRPC, TensorFlow's transport between tasks, sends every connection through an HTTP CONNECT
proxy when grpc_proxy, https_proxy or http_proxy is set (the first that has a value; gRPC reads
the lowercase names only), except to hosts listed in no_grpc_proxy, else no_proxy (again the
first that has a value). Sites export these on login nodes for pip and git, srun passes them
into every task, and a proxy that cannot reach the compute nodes, or does not answer, makes
every connection between the tasks hang without an error.

So a step's own hosts are added to no_grpc_proxy, and nothing else changes: the user's proxy
still serves every other host, for gRPC and everything else (pip, requests and curl read
no_proxy, which is left as it was). no_grpc_proxy starts from the list gRPC was using, so the
user's own exemptions are kept. Pure: the environment in, the variables to set out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from .roles import host_of

PROXY_VARS = ("grpc_proxy", "https_proxy", "http_proxy")
EXEMPT_VARS = ("no_grpc_proxy", "no_proxy")
EXEMPT_VAR = "no_grpc_proxy"  # the one the kit sets: gRPC reads it first, others never do


class Bypass(NamedTuple):
    """What the kit does about a proxy gRPC would use."""

    proxy_var: str
    """the variable gRPC takes its proxy from"""
    added: tuple[str, ...]
    """the step's hosts that were not exempt yet"""
    env: dict[str, str]
    """the variables to set in the role's environment (empty when nothing is missing)"""


def _first(environ: Mapping[str, str], names: Iterable[str]) -> str | None:
    """The first of names that has a value, as gRPC picks it."""
    return next((name for name in names if environ.get(name)), None)


def bypass(environ: Mapping[str, str], hosts: Iterable[str]) -> Bypass | None:
    """no_grpc_proxy with the step's hosts added, if gRPC would use a proxy; else None."""
    proxy_var = _first(environ, PROXY_VARS)
    if proxy_var is None:
        return None
    exempt_var = _first(environ, EXEMPT_VARS)
    entries = [e.strip() for e in environ[exempt_var].split(",")] if exempt_var else []
    entries = [e for e in entries if e]
    if "*" in entries:  # gRPC's "no proxy for any host"
        return Bypass(proxy_var, (), {})
    known = set(entries)
    added = tuple(h for h in dict.fromkeys(hosts) if h not in known)
    env = {EXEMPT_VAR: ",".join(entries + list(added))} if added else {}
    return Bypass(proxy_var, added, env)


def for_tasks(environ: Mapping[str, str], tasks: Iterable) -> Bypass | None:
    """bypass() for a step's tasks (resolve.Task), by the hosts of their addresses."""
    return bypass(environ, step_hosts(t.address for t in tasks))


def step_hosts(addresses: Iterable[str]) -> list[str]:
    """The hosts of "host:port" addresses, each once, in order."""
    return list(dict.fromkeys(host_of(address) for address in addresses))


def describe(found: Bypass | None) -> str | None:
    """--explain's line on the proxy, if gRPC would use one."""
    if found is None:
        return None
    if not found.added:
        return (
            f"proxy: {found.proxy_var} is set; every host of the step is already exempt "
            "(no_grpc_proxy/no_proxy): TensorFlow's gRPC between the tasks does not use it"
        )
    shown = ",".join(found.added[:4]) + (",..." if len(found.added) > 4 else "")
    return (
        f"proxy: {found.proxy_var} is set; the step's {len(found.added)} hosts ({shown}) are "
        f"added to {EXEMPT_VAR} so that TensorFlow's gRPC between the tasks does not go "
        "through it; every other host still does"
    )
