"""deploy/helm/pagoda with inferencePool.enabled: helm lint; the rendered
InferencePool (inference.networking.k8s.io/v1) and the endpoint picker's
objects pass JSON-schema checks of their fields (schemas written here from
the InferencePool v1 CRD's and the picker's published field tables, with
python3-jsonschema), and are wired to each other and to the server pods:
the pool selects exactly the server pods, targets their HTTP port, names the
picker's Service and port; the picker watches this pool in this namespace,
scrapes the servers' metrics port (where vLLM's names are, docs/metrics.md),
reads a mounted EndpointPickerConfig, and may read pods and pools."""
import os
import subprocess
import sys
import unittest

import jsonschema
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from helm_chart_test import CHART, HELM, NAMESPACE, flags_of, render, selects  # noqa: E402

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
PORT = {"type": "integer", "minimum": 1, "maximum": 65535}

# inference.networking.k8s.io/v1 InferencePool, spec as the v1 CRD defines it
# (unknown fields refused, as the API server prunes them silently).
INFERENCE_POOL = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "inference.networking.k8s.io/v1"},
        "kind": {"const": "InferencePool"},
        "metadata": {"type": "object", "required": ["name"],
                     "properties": {"name": {"type": "string", "pattern": DNS_LABEL,
                                             "maxLength": 253}}},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["selector", "targetPorts", "endpointPickerRef"],
            "properties": {
                "selector": {
                    "type": "object", "additionalProperties": False,
                    "required": ["matchLabels"],
                    "properties": {"matchLabels": {
                        "type": "object", "minProperties": 1,
                        "additionalProperties": {"type": "string", "maxLength": 63,
                                                 "pattern": LABEL_VALUE}}}},
                "targetPorts": {
                    "type": "array", "minItems": 1, "maxItems": 1,
                    "items": {"type": "object", "additionalProperties": False,
                              "required": ["number"], "properties": {"number": PORT}}},
                "endpointPickerRef": {
                    "type": "object", "additionalProperties": False, "required": ["name"],
                    "properties": {
                        "group": {"type": "string", "maxLength": 253},
                        "kind": {"type": "string", "minLength": 1, "maxLength": 63,
                                 "pattern": r"^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$"},
                        "name": {"type": "string", "minLength": 1, "maxLength": 253},
                        "port": {"type": "object", "additionalProperties": False,
                                 "required": ["number"], "properties": {"number": PORT}},
                        "failureMode": {"enum": ["FailOpen", "FailClose"]},
                    }},
            },
        },
    },
}

# The picker's plugins file (EndpointPickerConfig, inference.networking.x-k8s.io/v1alpha1).
PICKER_CONFIG = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "plugins", "schedulingProfiles"],
    "properties": {
        "apiVersion": {"const": "inference.networking.x-k8s.io/v1alpha1"},
        "kind": {"const": "EndpointPickerConfig"},
        "plugins": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["type"], "additionalProperties": False,
            "properties": {"type": {"type": "string"}, "name": {"type": "string"},
                           "parameters": {"type": "object"}}}},
        "schedulingProfiles": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["name", "plugins"], "additionalProperties": False,
            "properties": {"name": {"type": "string"}, "plugins": {"type": "array", "items": {
                "type": "object", "required": ["pluginRef"], "additionalProperties": False,
                "properties": {"pluginRef": {"type": "string"},
                               "weight": {"type": "integer", "minimum": 0}}}}}}},
    },
}

# The fields of the picker's Deployment and Service this chart relies on.
CONTAINER_PORT = {"type": "object", "required": ["name", "containerPort"],
                  "properties": {"name": {"type": "string", "maxLength": 15},
                                 "containerPort": PORT}}
DEPLOYMENT = {
    "type": "object", "required": ["apiVersion", "kind", "spec"],
    "properties": {
        "apiVersion": {"const": "apps/v1"}, "kind": {"const": "Deployment"},
        "spec": {"type": "object", "required": ["replicas", "selector", "template"],
                 "properties": {
                     "replicas": {"type": "integer", "minimum": 1},
                     "template": {"type": "object", "required": ["metadata", "spec"],
                                  "properties": {"spec": {
                                      "type": "object",
                                      "required": ["serviceAccountName", "containers"],
                                      "properties": {"containers": {
                                          "type": "array", "minItems": 1,
                                          "items": {"type": "object",
                                                    "required": ["name", "image", "args",
                                                                 "ports"],
                                                    "properties": {"ports": {
                                                        "type": "array",
                                                        "items": CONTAINER_PORT}}}}}}}}}},
    },
}
SERVICE = {
    "type": "object", "required": ["apiVersion", "kind", "spec"],
    "properties": {
        "apiVersion": {"const": "v1"}, "kind": {"const": "Service"},
        "spec": {"type": "object", "required": ["selector", "ports"], "properties": {
            "ports": {"type": "array", "minItems": 1, "items": {
                "type": "object", "required": ["name", "port", "targetPort"],
                "properties": {"port": PORT, "protocol": {"enum": ["TCP", "UDP", "SCTP"]},
                               "targetPort": {"type": ["integer", "string"]}}}}}},
    },
}


def server_workload(m):
    return m.get(("StatefulSet", "rel-pagoda-server")) or m[("Deployment", "rel-pagoda-server")]


def server_args(m):
    return next(c for c in server_workload(m)["spec"]["template"]["spec"]["containers"]
                if c["name"] == "server")["args"]


class InferencePoolChartTest(unittest.TestCase):

    def test_lint(self):
        result = subprocess.run([HELM, "lint", CHART, "--set", "inferencePool.enabled=true",
                                 "--set", "kvEvents.endpoint=tcp://indexer:5557"],
                                capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_off_by_default(self):
        kinds = {kind for kind, _ in render()}
        self.assertNotIn("InferencePool", kinds)
        self.assertNotIn("Role", kinds)

    def test_needs_the_http_port(self):
        with self.assertRaises(AssertionError) as raised:
            render("inferencePool.enabled=true", "server.httpPort=0")
        self.assertIn("inferencePool.enabled needs server.httpPort", str(raised.exception))

    def test_pool_and_picker_pass_their_schemas_and_wiring(self):
        for replicas, size in ((1, 1), (3, 2)):
            with self.subTest(replicas=replicas, tensor_parallel=size):
                self.check(render("inferencePool.enabled=true", f"server.replicas={replicas}",
                                  f"tensorParallelSize={size}"))

    def check(self, m):
        pool = m[("InferencePool", "rel-pagoda")]
        jsonschema.validate(pool, INFERENCE_POOL)
        server = server_workload(m)
        server_labels = server["spec"]["template"]["metadata"]["labels"]
        self.assertTrue(selects(pool["spec"]["selector"]["matchLabels"], server_labels))
        # Workers and the picker are not pool members.
        for (kind, name), d in m.items():
            if kind in ("StatefulSet", "Deployment") and d is not server:
                labels = d["spec"]["template"]["metadata"]["labels"]
                self.assertFalse(selects(pool["spec"]["selector"]["matchLabels"], labels), name)
        container = next(c for c in server["spec"]["template"]["spec"]["containers"]
                         if c["name"] == "server")
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        self.assertEqual(pool["spec"]["targetPorts"][0]["number"], ports["http"])

        ref = pool["spec"]["endpointPickerRef"]
        service = m[("Service", ref["name"])]
        jsonschema.validate(service, SERVICE)
        picker = m[("Deployment", ref["name"])]
        jsonschema.validate(picker, DEPLOYMENT)
        pod = picker["spec"]["template"]
        self.assertTrue(selects(service["spec"]["selector"], pod["metadata"]["labels"]))
        self.assertTrue(selects(picker["spec"]["selector"]["matchLabels"],
                                pod["metadata"]["labels"]))
        epp = pod["spec"]["containers"][0]
        epp_ports = {p["name"]: p["containerPort"] for p in epp["ports"]}
        ext_proc = next(p for p in service["spec"]["ports"] if p["port"] == ref["port"]["number"])
        self.assertEqual(epp_ports[ext_proc["targetPort"]], 9002)

        flags = flags_of(epp["args"])
        self.assertEqual(flags["pool-name"], pool["metadata"]["name"])
        self.assertEqual(flags["pool-namespace"], NAMESPACE)
        self.assertEqual(int(flags["grpc-port"]), 9002)
        self.assertEqual(int(flags["model-server-metrics-port"]), ports["metrics"])
        self.assertEqual(flags["model-server-metrics-path"], "/metrics")
        mount = next(v for v in epp["volumeMounts"] if flags["config-file"].startswith(
            v["mountPath"] + "/"))
        volume = next(v for v in pod["spec"]["volumes"] if v["name"] == mount["name"])
        config_map = m[("ConfigMap", volume["configMap"]["name"])]
        config = yaml.safe_load(config_map["data"][os.path.basename(flags["config-file"])])
        jsonschema.validate(config, PICKER_CONFIG)
        declared = {p["type"] for p in config["plugins"]}
        for profile in config["schedulingProfiles"]:
            for plugin in profile["plugins"]:
                self.assertIn(plugin["pluginRef"], declared)
        self.assertIn("kv-cache-utilization-scorer", declared)
        self.assertIn("queue-scorer", declared)

        account = pod["spec"]["serviceAccountName"]
        self.assertIn(("ServiceAccount", account), m)
        binding = next(d for (kind, _), d in m.items() if kind == "RoleBinding" and any(
            s["name"] == account for s in d["subjects"]))
        role = m[("Role", binding["roleRef"]["name"])]
        granted = {(g, r) for rule in role["rules"] if {"get", "list", "watch"} <= set(
            rule["verbs"]) for g in rule["apiGroups"] for r in rule["resources"]}
        self.assertIn(("", "pods"), granted)
        self.assertIn(("inference.networking.k8s.io", "inferencepools"), granted)

        policy = m[("NetworkPolicy", ref["name"])]
        self.assertTrue(selects(policy["spec"]["podSelector"]["matchLabels"],
                                pod["metadata"]["labels"]))
        allowed = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
        self.assertEqual(allowed, {9002, 9090})

    def test_lora_adds_the_adapter_affinity_scorer(self):
        """lora.enabled: the picker reads vllm:lora_requests_info (the
        servers export it with LoRA on) and scores adapter affinity; off, it
        is told there is no such metric."""
        for lora in (False, True):
            m = render("inferencePool.enabled=true", f"lora.enabled={str(lora).lower()}",
                       "inferencePool.endpointPicker.weights.loraAffinity=5")
            self.check(m)
            picker = m[("Deployment", "rel-pagoda-epp")]["spec"]["template"]["spec"]
            flags = flags_of(picker["containers"][0]["args"])
            self.assertEqual(flags["lora-info-metric"], "vllm:lora_requests_info" if lora else "")
            config = yaml.safe_load(m[("ConfigMap", "rel-pagoda-epp")]["data"]["pagoda-plugins.yaml"])
            weights = {p["pluginRef"]: p["weight"] for p in config["schedulingProfiles"][0]["plugins"]}
            self.assertEqual(weights.get("lora-affinity-scorer"), 5 if lora else None)

    def test_kv_events_endpoint_reaches_the_server(self):
        self.assertIn("--kv-events-endpoint=tcp://indexer:5557",
                      server_args(render("kvEvents.endpoint=tcp://indexer:5557")))
        self.assertFalse(any(a.startswith("--kv-events-endpoint") for a in server_args(render())))


if __name__ == "__main__":
    unittest.main()
