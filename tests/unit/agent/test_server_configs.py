"""The protocol servers' generated configuration and command lines (pure functions, no process)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tpcmesh_agent.cadir import one_line_dn
from tpcmesh_agent.config import Settings
from tpcmesh_agent.daemons import configs
from tpcmesh_agent.daemons.supervisor import missing_message

from tests.support.paths import REPO


def _settings(**kw) -> Settings:
    base = dict(address="127.0.1.7", data_dir=Path("/dev/shm/agent-x"), xrootd_root_port=11094,
                xrootd_https_port=18444, gridftp_port=12811, iperf3_port=15201)
    base.update(kw)
    return Settings(**base)


def _directives(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_public_https_instance_serves_the_sets_read_only_without_the_tpc_handler(tmp_path):
    paths = configs.XrootdPaths(tmp_path, tmp_path / "c.pem", tmp_path / "k.pem", tmp_path / "ca")
    lines = _directives(configs.xrootd_https_config(_settings(), paths))
    assert "xrd.port 18444" in lines
    assert "xrd.protocol XrdHttp:18444 libXrdHttp.so" in lines
    assert f"xrd.tls {tmp_path / 'c.pem'} {tmp_path / 'k.pem'}" in lines
    assert f"xrd.tlsca certdir {tmp_path / 'ca'}" in lines
    assert "oss.localroot /dev/shm/agent-x" in lines
    assert [line for line in lines if line.startswith("all.export")] == ["all.export /sets r/o"]
    assert not [line for line in lines if "exthandler" in line or "TPC" in line]  # nobody makes it copy
    assert f"all.adminpath {tmp_path}" in lines


def test_local_tpc_instance_takes_only_the_agents_own_connections_and_certificate(tmp_path):
    paths = configs.XrootdPaths(tmp_path, tmp_path / "c.pem", tmp_path / "k.pem", tmp_path / "ca")
    lines = _directives(configs.xrootd_tpc_config(_settings(xrootd_tpc_port=18445), paths))
    assert "xrd.port 18445" in lines and "xrd.protocol XrdHttp:18445 libXrdHttp.so" in lines
    assert f"xrd.tls {tmp_path / 'c.pem'} {tmp_path / 'k.pem'}" in lines
    assert "http.exthandler xrdtpc libXrdHttpTPC.so" in lines
    assert [line for line in lines if line.startswith("all.export")] == ["all.export /incoming"]
    assert [line for line in lines if line.startswith("xrd.allow")] == ["xrd.allow host 127.0.1.7",
                                                                         "xrd.allow host 127.0.0.1"]
    assert f"http.gridmap {tmp_path / 'gridmap'}" in lines
    assert "ofs.authorize 1" in lines and f"acc.authdb {tmp_path / 'authdb'}" in lines
    assert configs.xrootd_authdb(_settings()) == "u tpcagent /incoming a\n"
    assert configs.xrootd_gridmap("/O=tpcmesh/CN=node-1") == '"/O=tpcmesh/CN=node-1" tpcagent\n'


def test_a_disk_path_adds_its_sets_and_incoming_under_disk_and_nothing_else(tmp_path):
    """Disk mode: each server's one root (the data dir) reaches the disk path through disk/sets and disk/incoming;
    without a disk path every configuration is as before (the tests above)."""
    s = _settings(disk_dir=Path("/srv/disk"))
    assert configs.disk_links(s) == {Path("/dev/shm/agent-x/disk/sets"): Path("/srv/disk/sets"),
                                     Path("/dev/shm/agent-x/disk/incoming"): Path("/srv/disk/incoming")}
    assert configs.disk_links(_settings()) == {}
    paths = configs.XrootdPaths(tmp_path, tmp_path / "c.pem", tmp_path / "k.pem", tmp_path / "ca")
    exports = {build.__name__: [line for line in _directives(build(s, paths)) if line.startswith("all.export")]
               for build in (configs.xrootd_https_config, configs.xrootd_root_config, configs.xrootd_tpc_config,
                             configs.xrootd_root_tpc_config)}
    assert exports == {"xrootd_https_config": ["all.export /sets r/o", "all.export /disk/sets r/o"],
                       "xrootd_root_config": ["all.export /sets r/o", "all.export /disk/sets r/o"],
                       "xrootd_tpc_config": ["all.export /incoming", "all.export /disk/incoming"],
                       "xrootd_root_tpc_config": ["all.export /incoming", "all.export /disk/incoming"]}
    assert configs.xrootd_authdb(s) == "u tpcagent /incoming a /disk/incoming a\n"
    assert configs.gridftp_restrict_paths(s) == (
        "R/dev/shm/agent-x/sets,RW/dev/shm/agent-x/incoming,W/dev/null,R/dev/shm/agent-x/disk/sets,"
        "R/srv/disk/sets,RW/dev/shm/agent-x/disk/incoming,RW/srv/disk/incoming")


@pytest.mark.parametrize("subject", ["O=tpcmesh, CN=x", "/CN=node$", "/CN=node+", '/CN=a"b', "/CN=a\nb"])
def test_gridmap_refuses_a_subject_it_would_read_as_a_pattern(subject):
    with pytest.raises(ValueError, match="cannot be written into XRootD's gridmap"):
        configs.xrootd_gridmap(subject)


def test_admin_path_can_be_kept_short(tmp_path):
    paths = configs.XrootdPaths(tmp_path / ("long" * 30), admin_dir=Path("/tmp/tpcm-x"))
    lines = _directives(configs.xrootd_root_config(_settings(), paths))
    assert "all.adminpath /tmp/tpcm-x" in lines
    assert len("/tmp/tpcm-x/" + configs.instance_name("xrootd-https", 65535) + "/.xrootd/admin") < 100


@pytest.mark.parametrize("build", [configs.xrootd_https_config, configs.xrootd_tpc_config])
def test_https_configs_refuse_to_run_without_tls(tmp_path, build):
    with pytest.raises(ValueError, match="only with TLS"):
        build(_settings(xrootd_tpc_port=18445), configs.XrootdPaths(tmp_path))


@pytest.mark.parametrize("build, port, exports", [
    (configs.xrootd_root_config, "11094", ["all.export /sets r/o"]),  # public: the sets, read-only
    (configs.xrootd_root_tpc_config, "11095", ["all.export /incoming"]),  # local: where the pulls land
])
def test_root_configs_enable_tpc_with_xrdcp_and_room_for_eleven_files(tmp_path, build, port, exports):
    lines = _directives(build(_settings(xrootd_root_tpc_port=11095), configs.XrootdPaths(tmp_path)))
    assert f"xrd.port {port}" in lines
    assert [line for line in lines if line.startswith("all.export")] == exports
    tpc = [line for line in lines if line.startswith("ofs.tpc ")]
    assert len(tpc) == 1 and tpc[0].endswith("pgm /usr/bin/xrdcp --server")
    words = tpc[0].split()
    assert int(words[words.index("xfr") + 1]) >= 11
    assert not any(line.startswith(("xrd.tls", "xrd.protocol")) for line in lines)
    allowed = [line for line in lines if line.startswith("xrd.allow")]
    assert allowed == ([] if build is configs.xrootd_root_config else
                       ["xrd.allow host 127.0.1.7", "xrd.allow host 127.0.0.1"])
    security = [line for line in lines if line.startswith(("xrootd.seclib", "sec.", "ofs.authorize", "acc."))]
    if build is configs.xrootd_root_config:
        assert security == []  # peers read the sets anonymously
    else:  # only the holder of the agent's sss key, as tpcagent, per the authdb
        keytab = configs.root_tpc_keytab(_settings())
        assert security == ["xrootd.seclib libXrdSec.so", f"sec.protocol sss -s {keytab}", "sec.protbind * only sss",
                            "ofs.authorize 1", f"acc.authdb {tmp_path / 'authdb'}", "acc.audit deny"]


def test_xrootd_argv_drops_root_and_names_the_instance_by_port(tmp_path):
    argv = configs.xrootd_argv("xrootd-root", 11094, configs.XrootdPaths(tmp_path), "nobody")
    assert argv[:3] == ["xrootd", "-R", "nobody"]
    assert argv[argv.index("-n") + 1] == "tpcm-root-11094"
    assert argv[argv.index("-c") + 1] == str(tmp_path / "xrootd.cfg")
    assert "-R" not in configs.xrootd_argv("xrootd-root", 11094, configs.XrootdPaths(tmp_path), None)


@pytest.mark.parametrize("security", ["gsi", "anonymous"])
def test_gridftp_binds_to_the_agent_address(tmp_path, security):
    argv = configs.gridftp_argv(_settings(gridftp_security=security), tmp_path / "g.log", "nobody", "nogroup")
    assert argv[0] == "globus-gridftp-server"
    assert argv[argv.index("-control-interface") + 1] == "127.0.1.7"
    assert argv[argv.index("-data-interface") + 1] == "127.0.1.7"
    assert argv[argv.index("-p") + 1] == "12811"
    assert argv[argv.index("-home-dir") + 1] == "/dev/shm/agent-x"
    # clients reach the sets (read), incoming/ (read-write) and /dev/null (the sink), nothing else of the host
    assert argv[argv.index("-restrict-paths") + 1] == \
        "R/dev/shm/agent-x/sets,RW/dev/shm/agent-x/incoming,W/dev/null"
    # each transfer it serves is logged beside its log (the record that a copy went through this server)
    assert argv[argv.index("-log-transfer") + 1] == str(tmp_path / "transfers.log")
    if security == "anonymous":
        assert "-aa" in argv and argv[argv.index("-anonymous-user") + 1] == "nobody"
    else:  # GSI: no anonymous access; a trusted certificate whose subject is in the grid-mapfile (gridmap.py)
        assert "-aa" not in argv and "-anonymous-user" not in argv
        assert argv[argv.index("-auth-level") + 1] == "1"


def test_a_large_gridftp_transfer_log_is_moved_aside_as_the_server_starts(tmp_path, monkeypatch):
    monkeypatch.setattr(configs, "TRANSFER_LOG_MAX_BYTES", 10)
    assert configs.gridftp_transfer_log(tmp_path) == tmp_path / "transfers.log"  # none yet: nothing to move
    (tmp_path / "transfers.log").write_text("small\n")
    configs.gridftp_transfer_log(tmp_path)
    assert (tmp_path / "transfers.log").read_text() == "small\n" and not (tmp_path / "transfers.log.1").exists()
    (tmp_path / "transfers.log.1").write_text("older\n")
    (tmp_path / "transfers.log").write_text("a line over ten bytes\n")
    configs.gridftp_transfer_log(tmp_path)
    assert not (tmp_path / "transfers.log").exists()
    assert (tmp_path / "transfers.log.1").read_text() == "a line over ten bytes\n"  # the older one replaced


def test_a_dual_stack_agent_runs_a_second_gridftp_server_on_its_ipv6_address(tmp_path):
    from tpcmesh_agent.daemons.supervisor import ServerSupervisor

    dual = _settings(address6="2001:db8::7", protocols=("gridftp", "iperf3"), gridftp_security="anonymous",
                     data_dir=tmp_path)
    specs = {spec.name: spec.host for spec in ServerSupervisor(dual).specs()}
    assert specs == {"gridftp": "127.0.1.7", "gridftp-ipv6": "2001:db8::7", "iperf3": "127.0.1.7",
                     "iperf3-ipv6": "2001:db8::7"}
    argv = configs.gridftp_argv(dual, tmp_path / "g.log", "nobody", "nogroup", "2001:db8::7")
    assert argv[argv.index("-control-interface") + 1] == argv[argv.index("-data-interface") + 1] == "2001:db8::7"
    single = _settings(protocols=("gridftp",), gridftp_security="anonymous", data_dir=tmp_path)
    assert [spec.name for spec in ServerSupervisor(single).specs()] == ["gridftp"]


def test_a_dual_stack_agents_local_tpc_instances_take_its_ipv6_address_too(tmp_path):
    dual = _settings(address6="2001:db8::7", xrootd_root_tpc_port=11095)
    lines = _directives(configs.xrootd_root_tpc_config(dual, configs.XrootdPaths(tmp_path)))
    assert [line for line in lines if line.startswith("xrd.allow")] == [
        "xrd.allow host 127.0.1.7", "xrd.allow host 127.0.0.1", "xrd.allow host [2001:db8::7]"]


def test_gsiftp_environment_names_the_credential_and_the_ca_directory(tmp_path):
    env = configs.gridftp_env(tmp_path / "c.pem", tmp_path / "k.pem", tmp_path / "ca")
    assert env == {"X509_USER_CERT": str(tmp_path / "c.pem"), "X509_USER_KEY": str(tmp_path / "k.pem"),
                   "X509_CERT_DIR": str(tmp_path / "ca")}
    server = configs.gridftp_env(tmp_path / "c.pem", tmp_path / "k.pem", tmp_path / "ca", tmp_path / "grid-mapfile")
    assert server == {**env, "GRIDMAP": str(tmp_path / "grid-mapfile")}


def test_the_gsiftp_server_is_told_the_grid_mapfile_and_anonymous_ftp_has_none(tmp_path):
    from tpcmesh_agent.daemons.supervisor import ServerSupervisor

    gsi = _settings(protocols=("gridftp",), data_dir=tmp_path, tls_cert=tmp_path / "c.pem", tls_key=tmp_path / "k.pem",
                    ca_file=tmp_path / "ca.pem")
    [spec] = ServerSupervisor(gsi).specs()
    assert spec.env is not None and spec.env["GRIDMAP"] == str(tmp_path / "servers" / "grid-mapfile")
    [anonymous] = ServerSupervisor(_settings(protocols=("gridftp",), gridftp_security="anonymous",
                                             data_dir=tmp_path)).specs()
    assert "GRIDMAP" not in (anonymous.env or {})


def test_gsiftp_without_certificates_says_what_to_configure():
    assert "gsiftp needs tls_cert, tls_key and ca_file" in _settings().gsiftp_missing()
    assert "gridftp_security=anonymous" in _settings().gsiftp_missing()
    assert _settings(gridftp_security="anonymous").gsiftp_missing() is None


def test_ca_directory_entries_carry_a_globus_signing_policy(tmp_path):
    from tpcmesh_agent.cadir import write_ca_dir
    from tpcmesh_operator.credentials import pki

    one, two = pki.create_ca("site CA one"), pki.create_ca("site CA two")
    bundle = tmp_path / "bundle.pem"
    bundle.write_bytes(one.cert_pem + two.cert_pem)
    write_ca_dir(bundle, tmp_path / "ca")
    policies = sorted((tmp_path / "ca").glob("*.signing_policy"))
    assert len(policies) == 2
    for policy in policies:
        assert (tmp_path / "ca" / policy.name.replace(".signing_policy", ".0")).is_file()
    text = "".join(p.read_text() for p in policies)
    assert "access_id_CA X509 '/O=tpcmesh/CN=site CA one'" in text
    assert "access_id_CA X509 '/O=tpcmesh/CN=site CA two'" in text
    assert text.count("pos_rights globus CA:sign") == 2 and "cond_subjects globus '\"*\"'" in text


def test_iperf3_binds_to_the_agent_address():
    assert configs.iperf3_argv(_settings()) == ["iperf3", "-s", "-J", "-B", "127.0.1.7", "-p", "15201"]


def test_package_names_match_the_debian_package_list():
    listed = {line.split("\t")[0] for line in (REPO / "hack/debian-packages.txt").read_text().splitlines()
              if line and not line.startswith("#")}
    assert set(configs.PACKAGES.values()) <= listed
    assert "xrootd-server-plugins" in missing_message("libXrdHttpTPC-5.so")


def test_supervised_argv_sets_the_parent_death_signal_and_drops_privileges():
    argv = ["xrootd", "-c", "x.cfg"]
    assert configs.supervised_argv(argv, None, None, "/usr/bin/setpriv") == [
        "/usr/bin/setpriv", "--pdeathsig", "KILL", "xrootd", "-c", "x.cfg"]
    wrapped = configs.supervised_argv(argv, "nobody", "nogroup", "/usr/bin/setpriv")
    assert wrapped[:7] == ["/usr/bin/setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups",
                           "--pdeathsig"]
    assert wrapped[-3:] == argv
    assert configs.supervised_argv(argv, "nobody", "nogroup", None) == argv


def test_one_line_dn_is_what_openssl_prints(tmp_path):
    """XrdHttp matches the gridmap against OpenSSL's one-line subject: the agent's own spelling must be the same."""
    import subprocess

    from tpcmesh_operator.credentials import pki

    ca = pki.create_ca("site CA, with a comma")
    cert = tmp_path / "ca.pem"
    cert.write_bytes(ca.cert_pem)
    openssl = subprocess.run(["openssl", "x509", "-noout", "-subject", "-nameopt", "compat", "-in", str(cert)],
                             capture_output=True, text=True, check=True).stdout.strip().removeprefix("subject=")
    assert one_line_dn(ca.cert_pem) == openssl.strip() == "/O=tpcmesh/CN=site CA, with a comma"


ISSUER = "https://127.0.0.1:8443"


@pytest.mark.parametrize("build", [configs.xrootd_https_config, configs.xrootd_tpc_config])
def test_token_mode_makes_the_scitokens_plugin_the_only_authorization(tmp_path, build):
    paths = configs.XrootdPaths(tmp_path, tmp_path / "c.pem", tmp_path / "k.pem", tmp_path / "ca")
    lines = _directives(build(_settings(xrootd_token_issuer=ISSUER, xrootd_tpc_port=18445), paths))
    assert "http.header2cgi Authorization authz" in lines and "ofs.authorize 1" in lines
    # no '++': a request without a valid token gets no chained default authorization
    assert f"ofs.authlib libXrdAccSciTokens.so config={tmp_path / 'scitokens.cfg'}" in lines
    assert not [line for line in lines if line.startswith(("http.gridmap", "acc.authdb"))]
    without = _directives(build(_settings(xrootd_tpc_port=18445), paths))
    assert not [line for line in without if "SciTokens" in line or "header2cgi" in line]


def test_scitokens_config_names_issuer_audience_and_refuses_requests_without_a_token():
    text = configs.scitokens_config(ISSUER, "https://127.0.1.7:18444")
    assert text == ("[Global]\naudience = https://127.0.1.7:18444\nonmissing = deny\n\n"
                    "[Issuer tpcmesh]\nissuer = https://127.0.0.1:8443\nbase_path = /\n")
    assert _settings().xrootd_audience() == "https://127.0.1.7:18444"
    for bad in ("a b", "x,y", "", "a\n[Global]"):
        with pytest.raises(ValueError, match="cannot be written into the SciTokens configuration"):
            configs.scitokens_config(ISSUER, bad)


def test_token_settings_refuse_an_issuer_that_is_not_https():
    from tpcmesh_agent.config import SettingsError

    for bad in ("http://x:1", "https://x:1/"):
        with pytest.raises(SettingsError, match="xrootd_token_issuer"):
            _settings(xrootd_token_issuer=bad, allow_plain_http=True).validate()


def test_private_ca_wraps_the_server_in_its_own_mount_namespace():
    argv = configs.xrootd_private_ca_argv(Path("/rt/ca-bundle.crt"), ["setpriv", "xrootd", "-c", "x.cfg"])
    assert argv[:4] == ["unshare", "--mount", "--propagation", "private"]
    assert argv[-6:] == ["/rt/ca-bundle.crt", "/etc/ssl/certs/ca-certificates.crt", "setpriv", "xrootd", "-c",
                         "x.cfg"]


def test_bundle_has_finds_a_ca_among_others_whatever_the_layout() -> None:
    """The chart mounts a system bundle with the agents' CA appended; then no private mount namespace is needed."""
    from tpcmesh_operator.credentials import pki

    ca, other = pki.create_ca("agents CA").cert_pem, pki.create_ca("another CA").cert_pem
    bundle = b"# a comment\n" + other + b"\n\n" + ca.replace(b"\n", b"\r\n")
    assert configs.bundle_has(bundle, ca)
    assert not configs.bundle_has(other, ca)
    assert not configs.bundle_has(bundle, b"not a certificate")


def test_a_running_gridftp_servers_transfer_log_is_emptied_once_too_large(tmp_path, monkeypatch):
    """The log lives on the memory-backed volume and a server may run for months: each GridFTP test empties one
    over the limit in place (the server keeps writing to it); a small one and other files are left alone."""
    monkeypatch.setattr(configs, "TRANSFER_LOG_MAX_BYTES", 10)
    v4, v6 = tmp_path / "servers" / "gridftp", tmp_path / "servers" / "gridftp6"
    for d in (v4, v6):
        d.mkdir(parents=True)
    (v4 / "transfers.log").write_text("x" * 11)
    (v6 / "transfers.log").write_text("small")
    (v4 / "gridftp.log").write_text("y" * 11)
    configs.trim_gridftp_transfer_logs(tmp_path)
    assert (v4 / "transfers.log").read_text() == "" and (v6 / "transfers.log").read_text() == "small"
    assert (v4 / "gridftp.log").read_text() == "y" * 11
    configs.trim_gridftp_transfer_logs(tmp_path / "nowhere")  # no servers yet: nothing to do
