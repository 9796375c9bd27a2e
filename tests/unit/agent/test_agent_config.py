"""Settings: flags > environment > defaults, fail-fast validation, --help."""

from __future__ import annotations

import subprocess

import pytest
from tpcmesh_agent.config import SettingsError, load_settings

from tests.support.paths import VENV_BIN


@pytest.fixture
def token(tmp_path):
    p = tmp_path / "token"
    p.write_text("0123456789abcdef0123\n")
    return p


def test_env_and_flags(token):
    env = {"TPCMESH_AGENT_TOKEN_FILE": str(token), "TPCMESH_AGENT_ADDRESS": "127.0.1.9",
           "TPCMESH_AGENT_BUDGET_BYTES": "8GiB", "TPCMESH_AGENT_PROTOCOLS": "builtin,iperf3",
           "TPCMESH_AGENT_ALLOW_PLAIN_HTTP": "true", "TPCMESH_AGENT_API_PORT": "9000"}
    s = load_settings(["--api-port", "9001"], env)
    assert s.address == "127.0.1.9" and s.api_port == 9001 and s.budget_bytes == 8 * 2**30
    assert s.protocols == ("builtin", "iperf3") and s.token() == "0123456789abcdef0123"
    assert s.port_of("gridftp") == 2811 and s.sets_dir == s.data_dir / "sets"
    s.data_dir = s.data_dir / "moved"  # the derived directories follow it, and cannot be set apart from it
    assert (s.sets_dir, s.incoming_dir) == (s.data_dir / "sets", s.data_dir / "incoming")
    with pytest.raises(AttributeError, match="sets follows data_dir"):
        s.sets_dir = s.data_dir


@pytest.mark.parametrize("env, words", [
    ({"TPCMESH_AGENT_ADDRESS": "nowhere"}, "address 'nowhere' is not an IP address"),
    ({"TPCMESH_AGENT_PROTOCOLS": "builtin,ftp"}, "protocols: unknown ftp"),
    ({"TPCMESH_AGENT_API_PORT": "70000"}, "api_port 70000 is not a TCP port"),
    ({"TPCMESH_AGENT_API_PORT": "x"}, "api_port: cannot read 'x'"),
    ({"TPCMESH_AGENT_ALLOW_PLAIN_HTTP": "false"}, "tls_cert/tls_key are required"),
    ({"TPCMESH_AGENT_TOKEN_FILE": "/nonexistent/token"}, "token_file /nonexistent/token"),
    ({"TPCMESH_AGENT_GRIDFTP_SECURITY": "kerberos"}, "gridftp_security 'kerberos' must be one of gsi, anonymous"),
    ({"TPCMESH_AGENT_ADDRESS6": "v6"}, "address6 'v6' is not an IP address"),
    ({"TPCMESH_AGENT_ADDRESS6": "192.0.2.9"}, "address6 '192.0.2.9' must be IPv6 besides an IPv4 address"),
    ({"TPCMESH_AGENT_ADDRESS": "2001:db8::1", "TPCMESH_AGENT_ADDRESS6": "2001:db8::2"}, "must be IPv6 besides an IPv4"),
    ({"TPCMESH_AGENT_HOST_SAMPLE_INTERVAL": "-1"}, "host_sample_interval -1.0 must be between 0 (off) and 60"),
])
def test_bad_settings_fail_fast_naming_the_setting(token, env, words):
    base = {"TPCMESH_AGENT_TOKEN_FILE": str(token), "TPCMESH_AGENT_ALLOW_PLAIN_HTTP": "1"}
    with pytest.raises(SettingsError) as e:
        load_settings([], {**base, **env})
    assert words in str(e.value)


def test_help_and_bad_setting_exit_code(token):
    out = subprocess.run([str(VENV_BIN / "tpcmesh-agent"), "--help"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and "--token-file" in out.stdout and "TPCMESH_AGENT_" in out.stdout
    bad = subprocess.run([str(VENV_BIN / "tpcmesh-agent"), "--address", "x", "--token-file", str(token)],
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "invalid setting: address 'x'" in bad.stderr


def test_dual_stack_listens_on_both_and_binds_clients_by_the_peers_family(token):
    s = load_settings([], {"TPCMESH_AGENT_TOKEN_FILE": str(token), "TPCMESH_AGENT_ALLOW_PLAIN_HTTP": "1",
                           "TPCMESH_AGENT_ADDRESS": "198.51.100.9", "TPCMESH_AGENT_ADDRESS6": "2001:db8::9"})
    assert s.addresses == ("198.51.100.9", "2001:db8::9")
    assert (s.local_address("2001:db8::a"), s.local_address("198.51.100.10")) == ("2001:db8::9", "198.51.100.9")
    single = load_settings([], {"TPCMESH_AGENT_TOKEN_FILE": str(token), "TPCMESH_AGENT_ALLOW_PLAIN_HTTP": "1"})
    assert single.addresses == ("127.0.0.1",) and single.local_address("2001:db8::a") == "127.0.0.1"


@pytest.mark.parametrize("address, pod_ips, addresses", [
    ("192.0.2.7", "192.0.2.7,2001:db8::7", ("192.0.2.7", "2001:db8::7")),  # the chart: status.podIP, status.podIPs
    ("2001:db8::7", "2001:db8::7,192.0.2.7", ("192.0.2.7", "2001:db8::7")),  # an IPv6-primary cluster
    ("192.0.2.7", "192.0.2.7", ("192.0.2.7",)),  # a node with IPv4 alone
    ("2001:db8::7", "2001:db8::7", ("2001:db8::7",)),  # an IPv6-only node
    ("192.0.2.7", "", ("192.0.2.7",)),
])
def test_pod_ips_of_both_families_make_the_agent_dual_stack(token, address, pod_ips, addresses):
    s = load_settings([], {"TPCMESH_AGENT_TOKEN_FILE": str(token), "TPCMESH_AGENT_ALLOW_PLAIN_HTTP": "1",
                           "TPCMESH_AGENT_ADDRESS": address, "TPCMESH_AGENT_POD_IPS": pod_ips})
    assert s.addresses == addresses


def test_an_explicit_address6_wins_over_pod_ips_and_a_bad_pod_ip_is_named(token):
    base = {"TPCMESH_AGENT_TOKEN_FILE": str(token), "TPCMESH_AGENT_ALLOW_PLAIN_HTTP": "1",
            "TPCMESH_AGENT_ADDRESS": "192.0.2.7"}
    s = load_settings([], {**base, "TPCMESH_AGENT_ADDRESS6": "2001:db8::9",
                           "TPCMESH_AGENT_POD_IPS": "192.0.2.7,2001:db8::7"})
    assert s.addresses == ("192.0.2.7", "2001:db8::9")
    with pytest.raises(SettingsError, match="pod_ips: 'node-a' is not an IP address"):
        load_settings([], {**base, "TPCMESH_AGENT_POD_IPS": "192.0.2.7,node-a"})
