"""`helm install` end to end on the real control plane: the chart's DaemonSet places agents on the fast nodes, real
agents answer on those nodes' addresses, the operator runs with the chart's ServiceAccount token and environment
(RBAC real) and, as the CA, signs each agent's CSR through its kopf handler; the agents serve with those
certificates and the operator verifies them with its published CA bundle; the dashboard runs the chart's own init
and web commands, and the quick example benchmark's measurements arrive in the dashboard.

Stand-ins, because there is no kubelet or container runtime here: pods are marked Running by the test (as a kubelet
would), the agent, operator and dashboard run as local processes from the virtualenv with the env the chart gives
their containers (file paths remapped to temp files; the dashboard on SQLite instead of the bundled PostgreSQL;
the agent's CSR step called in-process with a token bound to its DaemonSet pod).
"""

from __future__ import annotations

import copy
import os
import secrets
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import yaml
from kubernetes import client
from tpcmesh_agent import csr as agent_csr

from tests.support import agents as agent_support
from tests.support.controlplane import K8S_VERSION, free_port
from tests.support.paths import REPO, VENV_BIN

pytestmark = pytest.mark.cluster

CHART = REPO / "charts" / "tpcmesh"
NS = "tpcmesh-e2e"
RELEASE = "mesh"
G, V = "tpcmesh.io", "v1alpha1"


def wait_for(what: str, fn, timeout: float, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last}")


def rendered(control_plane, *sets: str) -> list[dict]:
    out = control_plane.helm("template", RELEASE, str(CHART), "--namespace", NS, "--kube-version",
                             K8S_VERSION.lstrip("v"), *sets)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def container(docs: list[dict], kind: str, name: str, cname: str, init: bool = False) -> dict:
    obj = next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)
    spec = obj["spec"]["template"]["spec"]
    return next(c for c in spec["initContainers" if init else "containers"] if c["name"] == cname)


def plain_env(c: dict, remap: dict[str, str]) -> dict[str, str]:
    """A container's literal env values with in-container paths remapped to local files."""
    env = {}
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = remap.get(e["value"], e["value"])
    return env


def test_helm_install_to_measurements_in_the_dashboard(control_plane, tmp_path):
    api = control_plane.client()
    core = client.CoreV1Api(api)
    control_plane.start_controller_manager()
    control_plane.start_scheduler()
    control_plane.ensure_namespace(NS)

    # The two Secrets the chart can take from outside (agent control API token, dashboard ingest token).
    agent_token, results_key = secrets.token_hex(24), secrets.token_hex(20)
    for name, value in (("e2e-agent-token", agent_token), ("e2e-results-token", results_key)):
        core.create_namespaced_secret(NS, client.V1Secret(metadata=client.V1ObjectMeta(name=name),
                                                          string_data={"token": value}))
    token_file = tmp_path / "agent-token"
    token_file.write_text(agent_token + "\n")
    results_file = tmp_path / "results-token"
    results_file.write_text(results_key + "\n")

    # One fast node per agent-to-be (its own loopback address), plus a node without the label.
    if agent_support._POOL is None:
        agent_support._POOL = agent_support._AddressPool()
    # (the agents' own address pool, so parallel sessions never share an address; released at the end)
    needed = agent_support._ports_needed(("builtin", "gridftp", "iperf3"))  # XRootD's get ports of their own
    nodes = {f"e2e-dtn-{i}": agent_support._POOL.acquire(needed) for i in range(2)}
    for node, address in nodes.items():
        control_plane.create_node(node, address, {"tpcmesh.io/fast-network": "true"})
    control_plane.create_node("e2e-worker", "127.0.40.9")
    # tokens.mode off: the agents here run outside pods, where the issuer's Service name does not resolve; the
    # chart's token path (its default) runs on real nodes in test_real_cluster_e2e.py.
    sets = ["--set", "agent.token.existingSecret=e2e-agent-token", "--set",
            "resultsToken.existingSecret=e2e-results-token", "--set", "image.registry=example.invalid/tpcmesh",
            "--set", "tokens.mode=off",
            # no kubelet runs the CRD hook Job here (helm would wait for it): test_crds_hook.py runs its command
            "--set", "crds.upgradeJob=false"]
    procs: list[subprocess.Popen] = []
    agents: list = []
    logs = {}
    try:
        out = control_plane.helm("install", RELEASE, str(CHART), "--namespace", NS, *sets, check=False)
        assert out.returncode == 0, out.stderr
        selector = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=agent"

        def bound_pods() -> list | None:
            bound = [p for p in core.list_namespaced_pod(NS, label_selector=selector).items if p.spec.node_name]
            return bound if len(bound) >= 2 else None

        pods = wait_for("two agent pods bound to nodes", bound_pods, timeout=60)
        assert sorted(p.spec.node_name for p in pods) == sorted(nodes)

        docs = rendered(control_plane, *sets)
        fullname = f"{RELEASE}-tpcmesh"

        # The dashboard: the chart's init container (migrate + register the ingest token), then its web command.
        dash_port = free_port()
        init = container(docs, "Deployment", f"{fullname}-dashboard", "migrate", init=True)
        web = container(docs, "Deployment", f"{fullname}-dashboard", "dashboard")
        env = {**os.environ, **plain_env(web, {}), "PATH": f"{VENV_BIN}:{os.environ['PATH']}",
               "DATABASE_URL": f"sqlite:///{tmp_path / 'dashboard.sqlite3'}", "PYTHONUNBUFFERED": "1"}
        init_cmd = [a.replace("/etc/tpcmesh/results-token/token", str(results_file)) for a in init["command"]]
        r = subprocess.run(init_cmd, env=env, cwd=REPO / "dashboard", capture_output=True, text=True, timeout=180)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
        web_cmd = [a.replace("0.0.0.0:8000", f"127.0.0.1:{dash_port}") for a in web["command"]]
        assert web_cmd[0] == "gunicorn"
        logs["dashboard"] = tmp_path / "dashboard.log"
        with open(logs["dashboard"], "wb") as f:
            procs.append(subprocess.Popen([str(VENV_BIN / "gunicorn"), "--chdir", str(REPO / "dashboard"),
                                           *web_cmd[1:]], env=env, stdout=f, stderr=subprocess.STDOUT,
                                          start_new_session=True))
        dash = f"http://127.0.0.1:{dash_port}"
        wait_for("the dashboard", lambda: _ok(f"{dash}/healthz"), timeout=60)

        # The operator: the chart's command and environment, authenticated as the chart's ServiceAccount.
        op = container(docs, "Deployment", f"{fullname}-operator", "operator")
        health = free_port()
        op_env = {k: v for k, v in os.environ.items() if not k.startswith("TPCMESH_OPERATOR_")}
        bundle_file = tmp_path / "ca-bundle.crt"  # the chart mounts the operator's CA bundle ConfigMap here
        op_env.update(plain_env(op, {"/var/run/tpcmesh/agent-token/token": str(token_file),
                                     "/var/run/tpcmesh/ca/ca.crt": str(bundle_file)}))
        op_env.update(KUBECONFIG=str(control_plane.kubeconfig_for(f"{fullname}-operator", NS)),
                      PATH=f"{VENV_BIN}:{os.environ['PATH']}", TPCMESH_OPERATOR_METRICS_PORT="0",
                      TPCMESH_OPERATOR_TIMER_INTERVAL="1", TPCMESH_OPERATOR_POLL_INTERVAL="0.2",
                      PYTHONUNBUFFERED="1")
        op_cmd = [a.replace("0.0.0.0:8080", f"127.0.0.1:{health}") for a in op["command"]]
        assert op_cmd[0] == "tpcmesh-operator"
        logs["operator"] = tmp_path / "operator.log"
        with open(logs["operator"], "wb") as f:
            procs.append(subprocess.Popen([str(VENV_BIN / op_cmd[0]), *op_cmd[1:]], env=op_env, stdout=f,
                                          stderr=subprocess.STDOUT, start_new_session=True))
        wait_for("the operator's liveness endpoint", lambda: _ok(f"http://127.0.0.1:{health}/healthz"), timeout=60)
        # Peering is active: the operator announces itself in the chart's KopfPeering (one active operator).
        peerings = client.CustomObjectsApi(api)
        wait_for("the operator in the chart's KopfPeering", lambda: peerings.get_namespaced_custom_object(
            "kopf.dev", "v1", NS, "kopfpeerings", fullname).get("status") or None, timeout=30)

        # The operator is the CA: it publishes its bundle, then signs each agent pod's CSR (what the chart's
        # `certificate` init container does, with a token bound to that pod, as the kubelet would project it).
        bundle = wait_for("the CA bundle ConfigMap", lambda: _configmap(core, f"{fullname}-ca-bundle"), timeout=30)
        bundle_file.write_text(bundle)
        csr_env = {e["name"]: e.get("value") for e in container(docs, "DaemonSet", f"{fullname}-agent",
                                                                "certificate", init=True)["env"]}
        pod_of = {p.spec.node_name: p for p in pods}

        class CsrPKI:
            """Host certificates for the agents through the CSR flow, in the shape tests.support.agents expects."""

            ca_file = ca_dir = bundle_file
            directory = tmp_path

            def host_cert(self, node: str, addresses: list[str]) -> tuple:
                pod = pod_of[node]
                token = core.create_namespaced_service_account_token(
                    f"{fullname}-agent", NS, client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(
                        audiences=["https://kubernetes.default.svc"], expiration_seconds=3600,
                        bound_object_ref=client.V1BoundObjectReference(
                            kind="Pod", api_version="v1", name=pod.metadata.name, uid=pod.metadata.uid))))
                sa_token = tmp_path / f"{node}.sa-token"
                sa_token.write_text(token.status.token)
                tls = tmp_path / f"{node}-tls"
                agent_csr.obtain(agent_csr.ApiServer(control_plane.server, sa_token, control_plane.ca_cert),
                                 agent_csr.Request(node, tuple(addresses), csr_env["TPCMESH_CSR_SIGNER_NAME"],
                                                   int(csr_env["TPCMESH_CSR_LIFETIME_SECONDS"])), tls, timeout=30)
                return tls / "tls.crt", tls / "tls.key"

        played = control_plane.play_kubelet(NS, selector)
        assert {p.spec.node_name: p.status.pod_ip for p in played} == nodes
        # The real agent of each pod: the DaemonSet's command and env (fieldRefs from the pod, paths remapped), with
        # the host certificate its `certificate` init container obtained through the CSR flow.
        daemon = container(docs, "DaemonSet", f"{fullname}-agent", "agent")
        assert daemon["command"] == ["tpcmesh-agent"]
        for pod in played:
            cert, key = CsrPKI().host_cert(pod.spec.node_name, [pod.status.pod_ip])
            agents.append(start_chart_agent(daemon, pod, tmp_path, {
                "/etc/tpcmesh/token/token": str(token_file), "/etc/tpcmesh/ca/ca.crt": str(bundle_file),
                "/var/run/tpcmesh/tls/tls.crt": str(cert), "/var/run/tpcmesh/tls/tls.key": str(key)}))
        for a in agents:
            agent_support.wait_ready(a)
            info = a.get("/api/v1/info").json()  # the chart's settings reached the agent
            assert info["node"] == a.name and info["protocols"]["builtin"]["available"], info
            assert a.settings["TPCMESH_AGENT_GRIDFTP_SECURITY"] == "gsi"
            assert a.settings["TPCMESH_AGENT_BUDGET_BYTES"] == "23000000000"

        # The quick example benchmark, made small for the test, reporting to the dashboard.
        tb = yaml.safe_load((REPO / "manifests" / "examples" / "quick-benchmark.yaml").read_text())
        tb = copy.deepcopy(tb)
        tb["spec"].update(protocols=["builtin"], streams=[1], concurrency=2, fileSet={"count": 2, "size": "1MB"},
                          latency={"enabled": True, "count": 2}, timeoutSeconds=60, retries=0,
                          results={"url": dash, "tokenSecret": {"name": "e2e-results-token"}})
        objs = client.CustomObjectsApi(api)
        objs.create_namespaced_custom_object(G, V, NS, "transferbenchmarks", tb)

        def delivered():
            r = httpx.get(f"{dash}/api/v1/measurements/", params={"limit": 100}, timeout=10)
            if r.status_code != 200:
                return None
            body = r.json()
            results = body.get("results", body) if isinstance(body, dict) else body
            return results if len(results) >= 4 else None

        measured = wait_for("measurements in the dashboard", delivered, timeout=120, interval=1.0)
        pairs = {(m["source"], m["destination"], m["protocol"]) for m in measured}
        a, b = sorted(nodes)
        for src, dst in ((a, b), (b, a)):
            assert (src, dst, "builtin") in pairs
            assert (src, dst, "rtt") in pairs
        assert all(m["status"] == "succeeded" for m in measured), measured
        run = wait_for("a succeeded TransferRun", lambda: next(
            (r for r in objs.list_namespaced_custom_object(G, V, NS, "transferruns")["items"]
             if (r.get("status") or {}).get("phase") == "Succeeded"), None), timeout=60)
        assert run["status"]["failed"] == 0
        wait_for("an empty outbox (all delivered)", lambda: not objs.get_namespaced_custom_object(
            G, V, NS, "transferruns", run["metadata"]["name"])["status"].get("outbox"), timeout=60)

        # `helm test`: the chart's test pod script, pointed at the live dashboard instead of the Service name.
        test_pod = next(d for d in docs if d["kind"] == "Pod"
                        and d["metadata"].get("annotations", {}).get("helm.sh/hook") == "test")
        script = test_pod["spec"]["containers"][0]["command"]
        service_url = f"http://{fullname}-dashboard.{NS}.svc:80"
        assert script[:2] == ["python3", "-c"] and service_url in script[2]
        ok = subprocess.run([str(VENV_BIN / "python3"), "-c", script[2].replace(service_url, dash)],
                            capture_output=True, text=True, timeout=60)
        assert ok.returncode == 0 and "dashboard API answered" in ok.stdout, ok.stdout + ok.stderr
        down = subprocess.run([str(VENV_BIN / "python3"), "-c", script[2].replace(
            service_url, f"http://127.0.0.1:{free_port()}")], capture_output=True, text=True, timeout=60)
        assert down.returncode != 0  # and it fails when the dashboard does not answer
    except BaseException:
        for name, path in logs.items():
            print(f"----- {name} log -----\n{path.read_text(errors='replace')[-6000:]}")
        raise
    finally:
        if os.environ.get("TPCMESH_E2E_LOGS"):
            for name, path in logs.items():
                print(f"----- {name} log -----\n{path.read_text(errors='replace')[-20000:]}")
        for h in agents:
            h.stop()
            agent_support._cleanup(h)
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        control_plane.helm("uninstall", RELEASE, "--namespace", NS, check=False)
        control_plane.delete_nodes()
        for address in nodes.values():
            agent_support._POOL.release(address)


def start_chart_agent(daemon: dict, pod, tmp_path, remap: dict[str, str]) -> agent_support.AgentHandle:
    """`tpcmesh-agent` as the DaemonSet's container runs it on the pod's node: its env with fieldRefs taken from the
    pod and in-container paths remapped. XRootD listens on every address of a host, so on this one machine each
    agent gets XRootD ports of its own (the test's benchmark uses the built-in mover)."""
    node, address = pod.spec.node_name, pod.status.pod_ip
    data_dir = tmp_path / f"{node}-data"
    data_dir.mkdir()
    # status.podIPs comes comma-separated from the downward API (agent.dualStack)
    fields = {"spec.nodeName": node, "status.podIP": address,
              "status.podIPs": ",".join(ip.ip for ip in pod.status.pod_ips or []) or address}
    env = {k: v for k, v in os.environ.items() if not k.startswith("TPCMESH_AGENT_")}
    for e in daemon["env"]:
        env[e["name"]] = fields[e["valueFrom"]["fieldRef"]["fieldPath"]] if "valueFrom" in e else \
            {**remap, "/data": str(data_dir)}.get(e["value"], e["value"])
    env["TPCMESH_AGENT_XROOTD_ROOT_PORT"], env["TPCMESH_AGENT_XROOTD_HTTPS_PORT"] = str(free_port()), str(free_port())
    log_file = tmp_path / f"{node}-agent.log"
    with open(log_file, "wb") as out:
        proc = subprocess.Popen([str(VENV_BIN / daemon["command"][0]), *daemon["command"][1:]], env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    ports = {f"{k.removeprefix('TPCMESH_AGENT_').lower()}": int(v) for k, v in env.items()
             if k.startswith("TPCMESH_AGENT_") and k.endswith("_PORT")}
    token_file = Path(env["TPCMESH_AGENT_TOKEN_FILE"])
    return agent_support.AgentHandle(
        name=node, address=address, ports=ports, token=token_file.read_text().strip(), token_file=token_file,
        ca_file=Path(env["TPCMESH_AGENT_CA_FILE"]), cert_file=Path(env["TPCMESH_AGENT_TLS_CERT"]),
        key_file=Path(env["TPCMESH_AGENT_TLS_KEY"]), data_dir=data_dir, log_file=log_file, process=proc,
        settings={k: v for k, v in env.items() if k.startswith("TPCMESH_AGENT_")})


def _configmap(core, name: str) -> str | None:
    try:
        return core.read_namespaced_config_map(name, NS).data["ca.crt"]
    except client.ApiException:
        return None


def _ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
