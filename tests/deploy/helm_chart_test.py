"""deploy/helm/pagoda: helm lint, and helm template at server replicas 1 and 3
x tensor-parallel sizes 1, 2 and 4 x cpu and cuda. The rendered manifests are
expanded into the pods Kubernetes would run (a Deployment's N copies, a
StatefulSet's ordinals with their pod-index label, $(VAR) in args), and every
server pod's --worker-addresses is resolved to worker containers: each
replica must get its own tensorParallelSize workers, rank for rank, and no
worker may have two servers. Then the ports, probes, security contexts, the
PodDisruptionBudget, topology spread, NetworkPolicies, ServiceMonitor and
PrometheusRule, and above tensor-parallel size 1 the worker channel's mutual
TLS: its certificates (checked with openssl) and a pagoda-worker started
with them answering the rendered probe."""
import base64
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pagoda_harness as h  # noqa: E402

CHART = os.path.join(h.REPO, "deploy", "helm", "pagoda")
HELM = shutil.which("helm") or "/usr/local/bin/helm"
NAMESPACE = "serving"
SECRET_FILE = "/etc/pagoda/worker-secret/secret"
TLS_DIR = "/etc/pagoda/worker-tls"
TLS_KEYS = {"ca.crt", "worker.crt", "worker.key", "client.crt", "client.key"}


def render(*sets, namespace=NAMESPACE):
    argv = [HELM, "template", "rel", CHART, "--namespace", namespace]
    for item in sets:
        argv += ["--set", item]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise AssertionError(result.stderr)
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def flags_of(args):
    return dict(a.lstrip("-").split("=", 1) for a in args if "=" in a)


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


class Pod:
    """One pod Kubernetes would run: its name, labels, containers with env
    and args expanded as the kubelet does."""

    def __init__(self, workload, name, index):
        self.workload = workload
        self.name = name
        template = workload["spec"]["template"]
        self.spec = template["spec"]
        self.labels = dict(template["metadata"]["labels"])
        if index is not None:  # StatefulSet pod labels.
            self.labels["apps.kubernetes.io/pod-index"] = str(index)
            self.labels["statefulset.kubernetes.io/pod-name"] = name
        self.subdomain = workload["spec"].get("serviceName")
        self.containers = {}
        for c in self.spec.get("initContainers", []) + self.spec["containers"]:
            env = {}
            for e in c.get("env", []):
                if "value" in e:
                    env[e["name"]] = e["value"]
                    continue
                path = e["valueFrom"].get("fieldRef", {}).get("fieldPath")
                label = re.fullmatch(r"metadata\.labels\['(.+)'\]", path or "")
                env[e["name"]] = (self.labels[label.group(1)] if label
                                  else "10.0.0.1" if path == "status.podIP" else "<secret>")
            args = [re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), a)
                    for a in c.get("args", [])]
            self.containers[c["name"]] = dict(c, args=args, expanded_env=env)


def pods_of(manifests):
    pods = []
    for (kind, name), d in manifests.items():
        if kind == "Deployment":
            pods += [Pod(d, f"{name}-{i}", None) for i in range(d["spec"]["replicas"])]
        elif kind == "StatefulSet":
            pods += [Pod(d, f"{name}-{i}", i) for i in range(d["spec"]["replicas"])]
    return pods


class HelmChartTest(unittest.TestCase):

    def test_lint(self):
        for sets in (["device=cpu"], ["device=cuda", "tensorParallelSize=2", "server.replicas=3"],
                     ["metrics.serviceMonitor.enabled=true", "metrics.prometheusRule.enabled=true",
                      "apiKey.existingSecret=keys"],
                     ["lora.enabled=true", "lora.modules[0].name=sql", "lora.modules[0].path=sql"]):
            argv = [HELM, "lint", "--strict", CHART]
            for item in sets:
                argv += ["--set", item]
            result = subprocess.run(argv, capture_output=True, text=True)
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_replicas_tensor_parallel_sizes_and_devices(self):
        for replicas in (1, 3):
            for size in (1, 2, 4):
                for device in ("cpu", "cuda"):
                    with self.subTest(replicas=replicas, size=size, device=device):
                        self.check_release(replicas, size, device)

    def resolve(self, pods, server_pod, address):
        """The (pod, container) that serves `address` for `server_pod`."""
        host, port = address.rsplit(":", 1)
        if host == "127.0.0.1":
            candidates = [server_pod]
        else:
            pod_name, service, namespace, rest = host.split(".", 3)
            self.assertEqual((namespace, rest), (NAMESPACE, "svc.cluster.local"))
            candidates = [p for p in pods if p.name == pod_name and p.subdomain == service]
            self.assertEqual(len(candidates), 1, address)
            headless = self.manifests[("Service", service)]
            self.assertEqual(headless["spec"]["clusterIP"], "None")
            self.assertTrue(selects(headless["spec"]["selector"], candidates[0].labels))
        pod = candidates[0]
        # A sidecar (127.0.0.1) listens on loopback alone, where the secret
        # is checked before a message is read; other workers on the pod IP.
        listen_host = "127.0.0.1" if host == "127.0.0.1" else "0.0.0.0"
        listening = [c for c in pod.containers.values()
                     if f"--listen={listen_host}:{port}" in c["args"]]
        self.assertEqual(len(listening), 1, address)
        return pod, listening[0]

    def check_release(self, replicas, size, device):
        m = self.manifests = render(f"server.replicas={replicas}", f"tensorParallelSize={size}",
                                    f"device={device}")
        pods = pods_of(m)
        server_pods = [p for p in pods if "server" in p.containers]
        worker_pods = [p for p in pods if "server" not in p.containers]
        self.assertEqual(len(server_pods), replicas)
        sidecar = size == 1
        self.assertEqual(len(worker_pods), 0 if sidecar else replicas * size)
        self.assertEqual(len({p.name for p in pods}), len(pods))
        kind = "Deployment" if sidecar else "StatefulSet"
        self.assertIn((kind, "rel-pagoda-server"), m)

        # Each server resolves its own workers, rank for rank; no worker is
        # claimed twice, and none is left without a server.
        claimed = []
        for pod in server_pods:
            args = flags_of(pod.containers["server"]["args"])
            self.assertEqual(args["tensor-parallel-size"], str(size))
            self.assertEqual(args["device"], device)
            self.assertEqual(args["model"], "/models/model")
            self.assertEqual(args["worker-secret-file"], SECRET_FILE)
            addresses = args["worker-addresses"].split(",")
            self.assertEqual(len(addresses), size)
            for rank, address in enumerate(addresses):
                worker_pod, worker = self.resolve(pods, pod, address)
                claimed.append((worker_pod.name, worker["name"]))
                worker_args = flags_of(worker["args"])
                self.assertEqual(worker_args["rank"], str(rank))
                self.assertEqual(worker_args["secret-file"], SECRET_FILE)
                if sidecar:
                    self.assertIs(worker_pod, pod)
                    self.assertEqual(worker["restartPolicy"], "Always")  # Native sidecar.
                    self.assertNotIn("rendezvous-host", args)
                else:
                    self.assertEqual(worker_args["collective-host"], "10.0.0.1")
                    self.assertEqual(args["rendezvous-host"], "10.0.0.1")
                    self.assertEqual(args["rendezvous-port"], "50071")
                    # Replica r's workers are StatefulSet worker-r's pods.
                    replica = pod.labels["apps.kubernetes.io/pod-index"]
                    self.assertEqual(worker_pod.workload["metadata"]["name"],
                                     f"rel-pagoda-worker-{replica}")
                    self.assertEqual(worker_pod.labels["pagoda/replica"], replica)
                gpus = worker["resources"].get("limits", {}).get("nvidia.com/gpu")
                self.assertEqual(gpus, 1 if device == "cuda" else None)
        self.assertEqual(len(claimed), replicas * size)
        self.assertEqual(len(set(claimed)), len(claimed), "a worker has two servers")
        if not sidecar:
            self.assertEqual({name for name, _ in claimed}, {p.name for p in worker_pods})

        self.check_pods(m, pods, server_pods)
        self.check_network_policies(m, pods, server_pods, worker_pods, sidecar)

        # Both sides read the same worker secret, mounted from one Secret.
        secret = m[("Secret", "rel-pagoda-worker-secret")]
        self.assertGreaterEqual(len(base64.b64decode(secret["data"]["secret"])), 32)
        for pod in pods:
            volumes = {v["name"]: v for v in pod.spec["volumes"]}
            self.assertEqual(volumes["worker-secret"]["secret"]["secretName"],
                             "rel-pagoda-worker-secret")

        self.check_worker_tls(m, pods, server_pods, sidecar)

        # One PodDisruptionBudget over every pod of the release.
        pdb = m[("PodDisruptionBudget", "rel-pagoda")]
        self.assertEqual(pdb["spec"]["maxUnavailable"], 1)
        for pod in pods:
            self.assertTrue(selects(pdb["spec"]["selector"]["matchLabels"], pod.labels))

        service = m[("Service", "rel-pagoda")]
        self.assertEqual({p["name"]: p["port"] for p in service["spec"]["ports"]},
                         {"grpc": 50051, "http": 8000, "metrics": 9400})
        for pod in server_pods:
            self.assertTrue(selects(service["spec"]["selector"], pod.labels))
        for pod in worker_pods:
            self.assertFalse(selects(service["spec"]["selector"], pod.labels))
        annotations = server_pods[0].workload["spec"]["template"]["metadata"]["annotations"]
        self.assertEqual(annotations["prometheus.io/scrape"], "true")
        self.assertEqual(annotations["prometheus.io/port"], "9400")
        for pod in worker_pods:
            annotations = pod.workload["spec"]["template"]["metadata"]["annotations"]
            self.assertEqual(annotations["prometheus.io/scrape"], "true")
            self.assertEqual(annotations["prometheus.io/port"], "9401")
        self.assertNotIn(("ServiceMonitor", "rel-pagoda"), m)
        self.assertNotIn(("PodMonitor", "rel-pagoda-worker"), m)
        self.assertNotIn(("PrometheusRule", "rel-pagoda"), m)

    def check_pods(self, m, pods, server_pods):
        for pod in pods:
            security = pod.spec["securityContext"]
            self.assertTrue(security["runAsNonRoot"])
            self.assertEqual(security["seccompProfile"], {"type": "RuntimeDefault"})
            volumes = {v["name"]: v for v in pod.spec["volumes"]}
            self.assertIn("emptyDir", volumes["tmp"])
            for container in pod.containers.values():
                context = container["securityContext"]
                self.assertTrue(context["readOnlyRootFilesystem"])
                self.assertFalse(context["allowPrivilegeEscalation"])
                self.assertEqual(context["capabilities"]["drop"], ["ALL"])
                self.assertIn({"name": "tmp", "mountPath": "/tmp"}, container["volumeMounts"])
            # Spread over nodes, counting pods like this one.
            spread = pod.spec["topologySpreadConstraints"]
            self.assertEqual(spread[0]["topologyKey"], "kubernetes.io/hostname")
            self.assertTrue(selects(spread[0]["labelSelector"]["matchLabels"], pod.labels))
            for container in pod.containers.values():
                if container["name"] != "worker":
                    continue
                sidecar = "--listen=127.0.0.1:50061" in container["args"]
                for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                    if sidecar:
                        # The kubelet cannot reach loopback: pagoda-cli asks
                        # from inside the pod, within the probe's timeout.
                        self.assertEqual(container[probe]["exec"]["command"],
                                         ["pagoda-cli", "--server=127.0.0.1:50061", "--timeout=2",
                                          "health"])
                        self.assertGreater(container[probe]["timeoutSeconds"], 2)
                    else:
                        # Plain gRPC probes speak no TLS: pagoda-cli with
                        # the worker's own certificate, over loopback.
                        self.assertEqual(container[probe]["exec"]["command"],
                                         ["pagoda-cli", "--server=127.0.0.1:50061",
                                          f"--ssl-ca-certs={TLS_DIR}/ca.crt",
                                          f"--ssl-certfile={TLS_DIR}/worker.crt",
                                          f"--ssl-keyfile={TLS_DIR}/worker.key", "--timeout=2",
                                          "health"])
                # A sidecar's gRPC port is loopback's; every worker's
                # /metrics is on the pod IP, for Prometheus.
                ports = {p["name"]: p["containerPort"] for p in container["ports"]}
                self.assertEqual(ports, {"worker-metrics": 9401} if sidecar
                                 else {"worker": 50061, "worker-metrics": 9401})
                args = flags_of(container["args"])
                self.assertEqual(args["metrics-port"], "9401")
                self.assertEqual(args["metrics-host"], "0.0.0.0")
        for pod in server_pods:
            server = pod.containers["server"]
            args = flags_of(server["args"])
            self.assertEqual(args["http-port"], "8000")
            self.assertEqual(args["metrics-port"], "9400")
            self.assertEqual(args["cpu-threads"], "2")
            self.assertEqual({p["name"]: p["containerPort"] for p in server["ports"]
                              if p["name"] != "rendezvous"},
                             {"grpc": 50051, "http": 8000, "metrics": 9400})
            # Liveness does not ask gRPC health (NOT_SERVING while workers
            # recover); readiness and start-up do.
            self.assertNotIn("grpc", server["livenessProbe"])
            self.assertEqual(server["livenessProbe"]["httpGet"],
                             {"path": "/metrics", "port": "metrics"})
            self.assertEqual(server["readinessProbe"]["grpc"]["port"], 50051)
            self.assertEqual(server["startupProbe"]["grpc"]["port"], 50051)
            self.assertNotIn("PAGODA_API_KEY", server["expanded_env"])

    def check_worker_tls(self, m, pods, server_pods, sidecar):
        """Above size 1: every worker serves mutual TLS from the chart's
        Secret, every server dials with its client certificate and checks
        the fixed name pagoda-worker; a sidecar (loopback) needs none."""
        self.assertEqual(("Secret", "rel-pagoda-worker-tls") in m, not sidecar)
        for pod in pods:
            volumes = {v["name"]: v for v in pod.spec["volumes"]}
            self.assertEqual("worker-tls" in volumes, not sidecar)
            if sidecar:
                for container in pod.containers.values():
                    self.assertFalse([a for a in container["args"] if "ssl" in a])
                continue
            secret = volumes["worker-tls"]["secret"]
            self.assertEqual(secret["secretName"], "rel-pagoda-worker-tls")
            self.assertEqual(secret["defaultMode"], 0o400)
            own = "client" if "server" in pod.containers else "worker"
            self.assertEqual({i["key"] for i in secret["items"]},
                             {"ca.crt", f"{own}.crt", f"{own}.key"})
            container = pod.containers["server" if own == "client" else "worker"]
            self.assertIn({"name": "worker-tls", "mountPath": TLS_DIR, "readOnly": True},
                          container["volumeMounts"])
            args = flags_of(container["args"])
            prefix = "worker-ssl-" if own == "client" else "ssl-"
            self.assertEqual(args[prefix + "certfile"], f"{TLS_DIR}/{own}.crt")
            self.assertEqual(args[prefix + "keyfile"], f"{TLS_DIR}/{own}.key")
            self.assertEqual(args[prefix + "ca-certs"], f"{TLS_DIR}/ca.crt")
            if own == "client":
                self.assertEqual(args["worker-ssl-server-name"], "pagoda-worker")

    def test_worker_tls_certificates_serve_the_rendered_probe(self):
        """The chart's generated certificates, as gRPC takes them: the CA
        signed both, the worker's names pagoda-worker and 127.0.0.1, and a
        pagoda-worker started with the rendered flags answers the rendered
        probe (which presents the worker's own certificate), but not a
        client without a certificate."""
        m = render("tensorParallelSize=2")
        data = m[("Secret", "rel-pagoda-worker-tls")]["data"]
        self.assertEqual(set(data), TLS_KEYS)
        worker_pod = [p for p in pods_of(m) if "worker" in p.containers][0]
        worker = worker_pod.containers["worker"]
        with tempfile.TemporaryDirectory() as tmp:
            for key, value in data.items():
                path = os.path.join(tmp, key)
                with open(path, "wb") as f:
                    f.write(base64.b64decode(value))
                os.chmod(path, 0o600)
            openssl = lambda *argv: subprocess.run(["openssl", *argv], capture_output=True,
                                                   text=True, cwd=tmp)
            self.assertEqual(openssl("verify", "-CAfile", "ca.crt", "worker.crt",
                                     "client.crt").returncode, 0)
            names = openssl("x509", "-in", "worker.crt", "-noout", "-ext",
                            "subjectAltName").stdout
            self.assertIn("DNS:pagoda-worker", names)
            self.assertIn("IP Address:127.0.0.1", names)
            with open(os.path.join(tmp, "secret"), "w") as f:
                f.write("chart-worker-secret-0123456789abcdef")
            os.chmod(os.path.join(tmp, "secret"), 0o600)
            port, metrics_port = h.free_port(), h.free_port()
            local = lambda arg: arg.replace(TLS_DIR, tmp).replace(SECRET_FILE, tmp + "/secret") \
                .replace("0.0.0.0:50061", f"127.0.0.1:{port}") \
                .replace("127.0.0.1:50061", f"127.0.0.1:{port}") \
                .replace("--metrics-port=9401", f"--metrics-port={metrics_port}") \
                .replace("--metrics-host=0.0.0.0", "--metrics-host=127.0.0.1")
            args = [local(a) for a in worker["args"]
                    if not a.startswith(("--rank", "--collective-host"))]
            process = subprocess.Popen([h.binary("pagoda-worker"), *args],
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                self.assertIn("PAGODA_WORKER_LISTENING", process.stdout.readline())
                probe = [local(a) for a in worker["readinessProbe"]["exec"]["command"]]
                probe[0] = h.binary("pagoda-cli")
                answered = subprocess.run(probe, capture_output=True, text=True, timeout=10)
                self.assertEqual(answered.returncode, 0, answered.stdout + answered.stderr)
                # (A refused handshake waits out the call's deadline.)
                anonymous = [a.replace("--timeout=2", "--timeout=0.5") for a in probe
                             if not a.startswith(("--ssl-certfile", "--ssl-keyfile"))]
                refused = subprocess.run(anonymous, capture_output=True, text=True, timeout=10)
                self.assertNotEqual(refused.returncode, 0, refused.stdout)
            finally:
                process.terminate()
                process.communicate(timeout=10)

    def test_worker_tls_options(self):
        # Off: plaintext on the pod IPs, probed by the kubelet's gRPC probes.
        m = render("tensorParallelSize=2", "workerTls.enabled=false")
        self.assertNotIn(("Secret", "rel-pagoda-worker-tls"), m)
        for pod in pods_of(m):
            for container in pod.containers.values():
                self.assertFalse([a for a in container["args"] if "ssl" in a])
            if "worker" in pod.containers:
                self.assertEqual(pod.containers["worker"]["readinessProbe"]["grpc"]["port"],
                                 50061)
        # A Secret of one's own: the chart makes none and mounts it.
        m = render("tensorParallelSize=2", "workerTls.existingSecret=mine")
        self.assertNotIn(("Secret", "rel-pagoda-worker-tls"), m)
        for pod in pods_of(m):
            volumes = {v["name"]: v for v in pod.spec["volumes"]}
            self.assertEqual(volumes["worker-tls"]["secret"]["secretName"], "mine")

    def check_network_policies(self, m, pods, server_pods, worker_pods, sidecar):
        policies = [d for (kind, _), d in m.items() if kind == "NetworkPolicy"]
        server_policy = m[("NetworkPolicy", "rel-pagoda-server")]
        for pod in server_pods:
            self.assertTrue(selects(server_policy["spec"]["podSelector"]["matchLabels"],
                                    pod.labels))
        public, *rest = server_policy["spec"]["ingress"]
        self.assertNotIn("from", public)
        # A sidecar worker's /metrics is on its server's pod.
        self.assertEqual({p["port"] for p in public["ports"]},
                         {50051, 8000, 9400} | ({9401} if sidecar else set()))
        self.assertEqual(len(rest), 0 if sidecar else 1)
        self.assertEqual(len(policies), 1 if sidecar else 1 + len(server_pods))
        # Replica r's workers: from server-r (worker port) and replica r's
        # workers (collectives) only.
        for pod in worker_pods:
            mine = [p for p in policies
                    if selects(p["spec"]["podSelector"]["matchLabels"], pod.labels)]
            self.assertEqual(len(mine), 1, pod.name)
            callers, peers, scrapers = mine[0]["spec"]["ingress"]
            self.assertNotIn("from", scrapers)
            self.assertEqual(scrapers["ports"], [{"protocol": "TCP", "port": 9401}])
            allowed = [p.name for p in pods
                       if selects(callers["from"][0]["podSelector"]["matchLabels"], p.labels)]
            self.assertEqual(allowed, [f"rel-pagoda-server-{pod.labels['pagoda/replica']}"])
            self.assertEqual(callers["ports"], [{"protocol": "TCP", "port": 50061}])
            allowed = {p.name for p in pods
                       if selects(peers["from"][0]["podSelector"]["matchLabels"], p.labels)}
            self.assertEqual(allowed, {p.name for p in worker_pods
                                       if p.labels["pagoda/replica"] == pod.labels["pagoda/replica"]})

    def test_every_flag_is_a_real_flag(self):
        for size in (1, 2):
            pods = pods_of(render(f"tensorParallelSize={size}", "apiKey.existingSecret=keys"))
            for name in ("server", "worker"):
                help_text = subprocess.run([h.binary(f"pagoda-{name}"), "--help"],
                                           capture_output=True, text=True).stdout
                for pod in pods:
                    if name not in pod.containers:
                        continue
                    for flag in flags_of(pod.containers[name]["args"]):
                        with self.subTest(size=size, binary=name, flag=flag):
                            self.assertIn(f"--{flag} ", help_text)
            # pagoda-server reads the key from PAGODA_API_KEY.
            server = [p for p in pods if "server" in p.containers][0].containers["server"]
            key = {e["name"]: e for e in server["env"]}["PAGODA_API_KEY"]
            self.assertEqual(key["valueFrom"]["secretKeyRef"], {"name": "keys", "key": "api-key"})
        server_help = subprocess.run([h.binary("pagoda-server"), "--help"], capture_output=True,
                                     text=True).stdout
        self.assertIn("PAGODA_API_KEY", server_help)

    def test_monitoring_objects_match_the_chart_labels(self):
        m = render("metrics.serviceMonitor.enabled=true", "metrics.prometheusRule.enabled=true",
                   "server.replicas=3", "tensorParallelSize=2")
        service = m[("Service", "rel-pagoda")]
        monitor = m[("ServiceMonitor", "rel-pagoda")]
        self.assertTrue(selects(monitor["spec"]["selector"]["matchLabels"],
                                service["metadata"]["labels"]))
        # Only the server Service: no target is scraped twice.
        for (kind, name), d in m.items():
            if kind == "Service" and name != "rel-pagoda":
                self.assertFalse(selects(monitor["spec"]["selector"]["matchLabels"],
                                         d["metadata"]["labels"]))
        self.assertEqual(monitor["spec"]["endpoints"][0]["port"], "metrics")
        self.assertIn("metrics", [p["name"] for p in service["spec"]["ports"]])
        # The workers' /metrics: a PodMonitor over every pod with a
        # worker-metrics port, here the worker pods (the servers' have none).
        pod_monitor = m[("PodMonitor", "rel-pagoda-worker")]
        self.assertEqual(pod_monitor["spec"]["podMetricsEndpoints"][0]["port"], "worker-metrics")
        scraped = [p.name for p in pods_of(m)
                   if selects(pod_monitor["spec"]["selector"]["matchLabels"], p.labels)
                   and any(port["name"] == "worker-metrics" for c in p.containers.values()
                           for port in c.get("ports", []))]
        self.assertEqual(len(scraped), 3 * 2)
        self.assertTrue(all("-worker-" in name for name in scraped))
        # The Prometheus Operator labels targets job=<the Service's jobLabel
        # label>, namespace and service; every alert selects exactly those.
        job = service["metadata"]["labels"][monitor["spec"]["jobLabel"]]
        self.assertEqual(job, "pagoda")
        rule = m[("PrometheusRule", "rel-pagoda")]
        rules = [r for g in rule["spec"]["groups"] for r in g["rules"]]
        self.assertEqual({r["alert"] for r in rules},
                         {"PagodaServerDown", "PagodaServerAbsent", "PagodaWorkerDown",
                          "PagodaKvCacheExhausted", "PagodaQueueGrowing",
                          "PagodaWorkerRestartStorm"})
        expected = f'{{job="{job}", namespace="{NAMESPACE}", service="rel-pagoda"}}'
        for r in rules:
            with self.subTest(alert=r["alert"]):
                selectors = re.findall(r"\{[^}]*\}", r["expr"])
                self.assertTrue(selectors)
                self.assertEqual(set(selectors), {expected})
                self.assertIn(r["labels"]["severity"], ("critical", "warning"))
                self.assertTrue(r["annotations"]["summary"])
        # The static rules are the chart's with job="pagoda" alone.
        with open(os.path.join(h.REPO, "deploy", "prometheus", "pagoda-alerts.yml")) as f:
            static = yaml.safe_load(f)
        static_rules = {r["alert"]: r for g in static["groups"] for r in g["rules"]}
        for r in rules:
            self.assertEqual(static_rules[r["alert"]]["expr"].replace(
                '{job="pagoda"}', expected).split(), r["expr"].split())

    def test_schema_refuses_bad_values(self):
        """values.schema.json: helm lint and helm template refuse each bad
        value with a line naming it, before anything is rendered."""
        bad = {
            "tensorParallelSize=0": "tensorParallelSize",
            "server.metricsPort=0": "server.metricsPort",
            "server.port=70000": "server.port",
            "server.httpPort=-1": "server.httpPort",
            "worker.port=0": "worker.port",
            "worker.metricsPort=65536": "worker.metricsPort",
            "server.replicas=0": "server.replicas",
            "server.maxNumSeqs=0": "server.maxNumSeqs",
            "server.gpuMemoryUtilization=1.5": "server.gpuMemoryUtilization",
            "server.cpuKvCacheSpace=0": "server.cpuKvCacheSpace",
            "server.preemptionMode=sometimes": "server.preemptionMode",
            "device=tpu": "device",
            "image.pullPolicy=Sometimes": "image.pullPolicy",
            "clusterDomain=-bad.": "clusterDomain",
            "imagePullSecrets[0].name=Bad_Name": "imagePullSecrets.0.name",
            "tensorParalelSize=2": "tensorParalelSize",  # A typo is no value at all.
        }
        for item, field in bad.items():
            with self.subTest(value=item):
                for command in (["template", "rel"], ["lint", "--strict"]):
                    result = subprocess.run([HELM, *command, CHART, "--set", item],
                                            capture_output=True, text=True, timeout=60)
                    self.assertNotEqual(result.returncode, 0, result.stdout)
                    output = result.stdout + result.stderr
                    self.assertIn("schema", output)
                    self.assertIn(field, output)

    def test_pod_identity_and_registry_credentials(self):
        """Every pod runs as the chart's ServiceAccount with no API token
        mounted, and pulls with the given imagePullSecrets; the endpoint
        picker (which does call the API) keeps its own account."""
        for size in (1, 2):
            m = render(f"tensorParallelSize={size}", "imagePullSecrets[0].name=registry",
                       "inferencePool.enabled=true", "serviceAccount.annotations.team=ml")
            account = m[("ServiceAccount", "rel-pagoda")]
            self.assertIs(account["automountServiceAccountToken"], False)
            self.assertEqual(account["metadata"]["annotations"], {"team": "ml"})
            pods = pods_of(m)
            self.assertEqual(len(pods), 2 if size == 1 else 4)  # The picker's among them.
            for pod in pods:
                with self.subTest(size=size, pod=pod.name):
                    self.assertEqual(pod.spec["imagePullSecrets"], [{"name": "registry"}])
                    if "epp" in pod.containers:
                        self.assertEqual(pod.spec["serviceAccountName"], "rel-pagoda-epp")
                        continue
                    self.assertEqual(pod.spec["serviceAccountName"], "rel-pagoda")
                    self.assertIs(pod.spec["automountServiceAccountToken"], False)
        # An account of one's own, or the namespace's default: none is made.
        for sets, name in ((["serviceAccount.create=false", "serviceAccount.name=mine"], "mine"),
                           (["serviceAccount.create=false"], "default")):
            m = render(*sets)
            self.assertFalse([k for k in m if k[0] == "ServiceAccount"])
            for pod in pods_of(m):
                self.assertEqual(pod.spec["serviceAccountName"], name)
                self.assertIs(pod.spec["automountServiceAccountToken"], False)
                self.assertNotIn("imagePullSecrets", pod.spec)

    def test_placement(self):
        """worker.* places the pods that hold a worker (at size 1 the
        server's, which holds it); server.* the server pods above size 1."""
        sets = []
        for role in ("server", "worker"):
            sets += [f"{role}.nodeSelector.pool={role}s",
                     f"{role}.tolerations[0].key={role}-only",
                     f"{role}.tolerations[0].operator=Exists",
                     f"{role}.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"
                     f"[0].weight=1",
                     f"{role}.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"
                     f"[0].preference.matchExpressions[0].key={role}-zone",
                     f"{role}.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"
                     f"[0].preference.matchExpressions[0].operator=Exists"]
        for size in (1, 2):
            for pod in pods_of(render(f"tensorParallelSize={size}", *sets)):
                role = "server" if "server" in pod.containers and size > 1 else "worker"
                with self.subTest(size=size, pod=pod.name):
                    self.assertEqual(pod.spec["nodeSelector"], {"pool": f"{role}s"})
                    self.assertEqual(pod.spec["tolerations"],
                                     [{"key": f"{role}-only", "operator": "Exists"}])
                    preferred = pod.spec["affinity"]["nodeAffinity"][
                        "preferredDuringSchedulingIgnoredDuringExecution"]
                    self.assertEqual(preferred[0]["preference"]["matchExpressions"][0]["key"],
                                     f"{role}-zone")
        for pod in pods_of(render("tensorParallelSize=2")):
            for key in ("nodeSelector", "tolerations", "affinity"):
                self.assertNotIn(key, pod.spec)

    def test_cluster_domain(self):
        m = render("tensorParallelSize=2", "clusterDomain=corp.example")
        for pod in pods_of(m):
            if "server" not in pod.containers:
                continue
            addresses = flags_of(pod.containers["server"]["args"])["worker-addresses"]
            for address in addresses.split(","):
                self.assertTrue(address.endswith(f".{NAMESPACE}.svc.corp.example:50061"), address)
        with open(os.path.join(CHART, "templates", "_helpers.tpl")) as f:
            self.assertNotIn("cluster.local", f.read())

    def test_secrets_stay_the_same_from_render_to_render(self):
        """A render without a cluster (helm template, GitOps) cannot look up
        the Secrets it made before: with existingSecret it makes none, so
        two renders are identical; without, each makes its own (helm
        install/upgrade keep the first by lookup)."""
        sets = ["tensorParallelSize=2", "workerSecret.existingSecret=pagoda-worker-secret",
                "workerTls.existingSecret=pagoda-worker-tls"]
        first, second = render(*sets), render(*sets)
        self.assertEqual(first, second)
        self.assertFalse([k for k in first if k[0] == "Secret"])
        for pod in pods_of(first):
            volumes = {v["name"]: v for v in pod.spec["volumes"]}
            self.assertEqual(volumes["worker-secret"]["secret"]["secretName"],
                             "pagoda-worker-secret")
            self.assertEqual(volumes["worker-tls"]["secret"]["secretName"], "pagoda-worker-tls")
        made = render("tensorParallelSize=2")
        self.assertIn(("Secret", "rel-pagoda-worker-secret"), made)
        for name in ("worker-secret.yaml", "worker-tls-secret.yaml"):
            with open(os.path.join(CHART, "templates", name)) as f:
                self.assertIn('lookup "v1" "Secret"', f.read())

    def test_worker_metrics_options(self):
        # Off: no flag, no port, no annotation, no PodMonitor, no policy rule.
        for size in (1, 2):
            m = render(f"tensorParallelSize={size}", "worker.metricsPort=0",
                       "metrics.serviceMonitor.enabled=true")
            self.assertNotIn(("PodMonitor", "rel-pagoda-worker"), m)
            for pod in pods_of(m):
                worker = pod.containers["worker"] if "worker" in pod.containers else None
                if worker is None:
                    continue
                self.assertNotIn("metrics-port", flags_of(worker["args"]))
                self.assertNotIn("worker-metrics",
                                 [p["name"] for p in worker.get("ports", [])])
        # At size 1 the PodMonitor finds the sidecar on the server pods.
        m = render("metrics.serviceMonitor.enabled=true", "server.replicas=2")
        monitor = m[("PodMonitor", "rel-pagoda-worker")]
        scraped = [p for p in pods_of(m)
                   if selects(monitor["spec"]["selector"]["matchLabels"], p.labels)
                   and any(port["name"] == "worker-metrics"
                           for port in p.containers["worker"].get("ports", []))]
        self.assertEqual(len(scraped), 2)
        # Its targets carry no service label: the server alerts never count them.
        self.assertNotIn("jobLabel", monitor["spec"])

    def test_api_key_and_options(self):
        m = render("apiKey.existingSecret=keys", "apiKey.key=token", "server.httpPort=0",
                   "networkPolicy.enabled=false", "podDisruptionBudget.enabled=false",
                   "topologySpread.enabled=false", "model.source=hostPath",
                   "model.hostPath.path=/data/llama", "server.extraArgs={--enable-prefix-caching}",
                   "worker.cpuThreads=6")
        server = m[("Deployment", "rel-pagoda-server")]["spec"]["template"]["spec"]
        container = server["containers"][0]
        env = {e["name"]: e for e in container["env"]}
        self.assertEqual(env["PAGODA_API_KEY"]["valueFrom"]["secretKeyRef"],
                         {"name": "keys", "key": "token"})
        args = flags_of(container["args"])
        self.assertNotIn("http-port", args)
        self.assertEqual(args["cpu-threads"], "6")
        self.assertNotIn("http", [p["name"] for p in container["ports"]])
        self.assertNotIn("http", [p["name"] for p in m[("Service", "rel-pagoda")]["spec"]["ports"]])
        self.assertNotIn("topologySpreadConstraints", server)
        for kind in ("NetworkPolicy", "PodDisruptionBudget"):
            self.assertFalse([k for k in m if k[0] == kind])
        self.assertEqual(server["volumes"][0]["hostPath"]["path"], "/data/llama")
        self.assertIn("--enable-prefix-caching", container["args"])
        with self.assertRaises(AssertionError):
            render("model.source=s3")


    def test_lora_mounts_the_adapters_and_sets_the_flags(self):
        """lora.*: off by default; on, the adapters' volume is mounted
        read-only at /models/lora in the server and every worker (the
        workers read adapter files when they fill a slot), and the server
        gets --enable-lora, the limits, --lora-modules under the mount and
        --lora-dir (runtime loads confined to the mount), each a real flag."""
        for pod in pods_of(render("tensorParallelSize=2")):
            for container in pod.containers.values():
                self.assertNotIn("--enable-lora", container["args"])
                self.assertNotIn("lora", [m["name"] for m in container["volumeMounts"]])
        server_help = subprocess.run([h.binary("pagoda-server"), "--help"], capture_output=True,
                                     text=True).stdout
        lora = ["lora.enabled=true", "lora.maxLoras=2", "lora.maxLoraRank=32",
                "lora.maxCpuLoras=8", "lora.maxTrainableTokens=4", "lora.modules[0].name=sql",
                "lora.modules[0].path=sql-lora", "lora.modules[1].name=chat",
                "lora.modules[1].path=/chat"]
        for size in (1, 2):
            pods = pods_of(render(f"tensorParallelSize={size}", *lora))
            containers = [c for p in pods for c in p.containers.values()]
            self.assertEqual(sorted({c["name"] for c in containers}), ["server", "worker"])
            for pod in pods:
                volumes = {v["name"]: v for v in pod.spec["volumes"]}
                self.assertEqual(volumes["lora"]["persistentVolumeClaim"],
                                 {"claimName": "pagoda-lora", "readOnly": True})
                for container in pod.containers.values():
                    mounts = {m["name"]: m for m in container["volumeMounts"]}
                    self.assertEqual(mounts["lora"], {"name": "lora", "mountPath": "/models/lora",
                                                      "readOnly": True})
            server = [c for c in containers if c["name"] == "server"][0]
            self.assertIn("--enable-lora", server["args"])
            flags = flags_of(server["args"])
            self.assertEqual(flags["max-loras"], "2")
            self.assertEqual(flags["max-lora-rank"], "32")
            self.assertEqual(flags["max-cpu-loras"], "8")
            self.assertEqual(flags["max-lora-trainable-tokens"], "4")
            self.assertEqual(flags["lora-modules"], "sql=/models/lora/sql-lora chat=/models/lora/chat")
            self.assertEqual(flags["lora-dir"], "/models/lora")
            for flag in ("enable-lora", *[f for f in flags if "lora" in f]):
                self.assertIn(f"--{flag} ", server_help)
        closed = pods_of(render("lora.enabled=true", "lora.runtimeLoading=false",
                                "lora.source=hostPath", "lora.hostPath.path=/srv/adapters"))
        self.assertNotIn("lora-dir", flags_of(closed[0].containers["server"]["args"]))
        self.assertEqual({v["name"]: v for v in closed[0].spec["volumes"]}["lora"]["hostPath"],
                         {"path": "/srv/adapters", "type": "Directory"})
        with self.assertRaises(AssertionError) as refused:
            render("lora.enabled=true", "device=cuda")
        self.assertIn("device: cpu", str(refused.exception))
        for item in ("lora.maxLoras=0", "lora.maxLoraRank=600", "lora.modules[0].name=a b",
                     "lora.source=s3"):
            with self.subTest(value=item), self.assertRaises(AssertionError) as bad:
                render("lora.enabled=true", item, "lora.modules[0].path=x")
            self.assertIn("schema", str(bad.exception))

if __name__ == "__main__":
    unittest.main()
