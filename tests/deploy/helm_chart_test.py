"""deploy/helm/pagoda: helm lint, and helm template at tensor-parallel sizes
1, 2 and 4 on cpu and cuda, with checks on the rendered manifests."""
import base64
import os
import shutil
import subprocess
import sys
import unittest

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pagoda_harness as h  # noqa: E402

CHART = os.path.join(h.REPO, "deploy", "helm", "pagoda")
HELM = shutil.which("helm") or "/usr/local/bin/helm"


def render(*sets, namespace="serving"):
    argv = [HELM, "template", "rel", CHART, "--namespace", namespace]
    for item in sets:
        argv += ["--set", item]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise AssertionError(result.stderr)
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def args_of(container):
    return dict(a.lstrip("-").split("=", 1) for a in container["args"] if "=" in a)


class HelmChartTest(unittest.TestCase):

    def test_lint(self):
        for device in ("cpu", "cuda"):
            result = subprocess.run([HELM, "lint", "--strict", CHART, "--set",
                                     f"device={device}"], capture_output=True, text=True)
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_tensor_parallel_sizes_and_devices(self):
        for size in (1, 2, 4):
            for device in ("cpu", "cuda"):
                with self.subTest(size=size, device=device):
                    self.check_release(size, device)

    def check_release(self, size, device):
        m = render(f"tensorParallelSize={size}", f"device={device}")
        workers = m[("StatefulSet", "rel-pagoda-worker")]
        headless = m[("Service", "rel-pagoda-worker")]
        server = m[("Deployment", "rel-pagoda-server")]
        policy = m[("NetworkPolicy", "rel-pagoda-worker")]
        self.assertEqual(workers["spec"]["replicas"], size)
        self.assertEqual(workers["spec"]["serviceName"], "rel-pagoda-worker")
        self.assertEqual(headless["spec"]["clusterIP"], "None")

        server_container = server["spec"]["template"]["spec"]["containers"][0]
        args = args_of(server_container)
        expected = [f"rel-pagoda-worker-{rank}.rel-pagoda-worker.serving.svc.cluster.local:50061"
                    for rank in range(size)]
        self.assertEqual(args["worker-addresses"].split(","), expected)
        self.assertEqual(args["tensor-parallel-size"], str(size))
        self.assertEqual(args["device"], device)
        self.assertEqual(args["model"], "/models/model")

        worker_container = workers["spec"]["template"]["spec"]["containers"][0]
        self.assertIn("--rank=\"${HOSTNAME##*-}\"", worker_container["args"][0])
        self.assertIn("--listen=0.0.0.0:50061", worker_container["args"][0])
        gpus = worker_container["resources"].get("limits", {}).get("nvidia.com/gpu")
        self.assertEqual(gpus, 1 if device == "cuda" else None)

        for container, port in ((server_container, 50051), (worker_container, 50061)):
            for probe in ("livenessProbe", "readinessProbe"):
                self.assertEqual(container[probe]["grpc"]["port"], port)
            self.assertFalse(container["securityContext"]["allowPrivilegeEscalation"])
        for pod in (server, workers):
            self.assertTrue(pod["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"])

        # Only the server's pods reach the workers' port.
        self.assertEqual(policy["spec"]["podSelector"]["matchLabels"],
                         workers["spec"]["selector"]["matchLabels"])
        rule, peers = policy["spec"]["ingress"]
        self.assertEqual(rule["from"][0]["podSelector"]["matchLabels"],
                         server["spec"]["selector"]["matchLabels"])
        self.assertEqual(rule["ports"], [{"protocol": "TCP", "port": 50061}])
        # Tensor-parallel peers reach each other's collectives; they meet at
        # the server's rendezvous store, on its pod IP.
        self.assertEqual(peers["from"][0]["podSelector"]["matchLabels"],
                         workers["spec"]["selector"]["matchLabels"])
        self.assertNotIn("ports", peers)
        self.assertEqual(args["rendezvous-host"], "$(POD_IP)")
        self.assertEqual(args["rendezvous-port"], "50071")
        self.assertIn("--collective-host=\"$POD_IP\"", worker_container["args"][0])
        for container in (server_container, worker_container):
            env = {e["name"]: e for e in container["env"]}
            self.assertEqual(env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"], "status.podIP")

        # Both sides read the same worker secret, mounted from one Secret.
        secret = m[("Secret", "rel-pagoda-worker-secret")]
        self.assertGreaterEqual(len(base64.b64decode(secret["data"]["secret"])), 32)
        self.assertEqual(args["worker-secret-file"], "/etc/pagoda/worker-secret/secret")
        self.assertIn("--secret-file=/etc/pagoda/worker-secret/secret", worker_container["args"][0])
        for pod in (server, workers):
            volumes = {v["name"]: v for v in pod["spec"]["template"]["spec"]["volumes"]}
            self.assertEqual(volumes["worker-secret"]["secret"]["secretName"],
                             "rel-pagoda-worker-secret")

        annotations = server["spec"]["template"]["metadata"]["annotations"]
        self.assertEqual(annotations["prometheus.io/scrape"], "true")
        self.assertEqual(annotations["prometheus.io/port"], "9400")
        self.assertNotIn(("ServiceMonitor", "rel-pagoda"), m)

    def test_every_server_flag_is_a_real_flag(self):
        server = render()[("Deployment", "rel-pagoda-server")]
        flags = args_of(server["spec"]["template"]["spec"]["containers"][0])
        help_text = subprocess.run([h.binary("pagoda-server"), "--help"], capture_output=True,
                                   text=True).stdout
        for flag in flags:
            self.assertIn(f"--{flag} ", help_text)

    def test_options(self):
        m = render("metrics.serviceMonitor.enabled=true", "networkPolicy.enabled=false",
                   "model.source=hostPath", "model.hostPath.path=/data/llama",
                   "server.extraArgs={--enable-prefix-caching}")
        monitor = m[("ServiceMonitor", "rel-pagoda")]
        self.assertEqual(monitor["spec"]["endpoints"][0]["port"], "metrics")
        self.assertNotIn(("NetworkPolicy", "rel-pagoda-worker"), m)
        server = m[("Deployment", "rel-pagoda-server")]["spec"]["template"]["spec"]
        self.assertEqual(server["volumes"][0]["hostPath"]["path"], "/data/llama")
        self.assertIn("--enable-prefix-caching", server["containers"][0]["args"])
        with self.assertRaises(AssertionError):
            render("model.source=s3")


if __name__ == "__main__":
    unittest.main()
