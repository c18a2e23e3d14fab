"""The step's hosts exempted from the proxy gRPC would use, and nothing else changed."""

from __future__ import annotations

import pytest

from tfslurm_entry.resolve import proxy

HOSTS = ["c1", "c2"]


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        # gRPC's order: grpc_proxy, https_proxy, http_proxy; then no_grpc_proxy, no_proxy
        ({"http_proxy": "http://p:3128"}, "c1,c2"),
        ({"https_proxy": "http://p:3128", "no_proxy": "localhost,.site"}, "localhost,.site,c1,c2"),
        ({"grpc_proxy": "http://p:1", "no_grpc_proxy": "a", "no_proxy": "b"}, "a,c1,c2"),
        ({"http_proxy": "http://p:1", "no_grpc_proxy": "", "no_proxy": "b"}, "b,c1,c2"),
        ({"http_proxy": "http://p:1", "no_proxy": " c2 , x ,"}, "c2,x,c1"),
    ],
)
def test_the_steps_hosts_join_the_list_grpc_was_using(environ, expected):
    found = proxy.bypass(environ, HOSTS)
    assert found.env == {"no_grpc_proxy": expected}
    assert "no_proxy" not in found.env  # what pip, curl and requests read stays as it was


@pytest.mark.parametrize(
    "environ",
    [
        {},
        {"HTTP_PROXY": "http://p:3128", "HTTPS_PROXY": "http://p:3128"},  # gRPC reads lowercase
        {"http_proxy": ""},
        {"no_proxy": "c1"},
    ],
)
def test_no_proxy_that_grpc_would_use_changes_nothing(environ):
    assert proxy.bypass(environ, HOSTS) is None


def test_hosts_already_exempt_are_not_added_again():
    found = proxy.bypass({"http_proxy": "http://p:1", "no_proxy": "*"}, HOSTS)
    assert found.env == {} and found.added == ()
    found = proxy.bypass({"http_proxy": "http://p:1", "no_grpc_proxy": "c2,c1"}, HOSTS)
    assert found.env == {} and found.added == ()
    assert "already exempt" in proxy.describe(found)


def test_step_hosts_are_each_host_once_in_order():
    assert proxy.step_hosts(["c2:1", "c1:1", "c2:2", "10.0.0.1:5"]) == ["c2", "c1", "10.0.0.1"]


def test_explain_names_the_variable_and_the_hosts():
    line = proxy.describe(proxy.bypass({"https_proxy": "http://p:1"}, [f"n{i}" for i in range(9)]))
    assert line.startswith("proxy: https_proxy is set; the step's 9 hosts (n0,n1,n2,n3,...)")
    assert "no_grpc_proxy" in line
    assert proxy.describe(None) is None
