"""Pagoda's alert rules under promtool: `promtool check rules` and `promtool
test rules` for deploy/prometheus/pagoda-alerts.yml (tests/deploy/alerts/
pagoda-alerts.test.yml) and for the Helm chart's PrometheusRule, rendered for
release "rel" in namespace "serving" (tests/deploy/alerts/
chart-alerts.test.yml, series labelled as the chart's ServiceMonitor labels
them). Every alert must be seen firing, and not firing, in both."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pagoda_harness as h  # noqa: E402

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
HELM = shutil.which("helm") or "/usr/local/bin/helm"
ALERTS = os.path.join(h.REPO, "tests", "deploy", "alerts")
STATIC_RULES = os.path.join(h.REPO, "deploy", "prometheus", "pagoda-alerts.yml")
CHART = os.path.join(h.REPO, "deploy", "helm", "pagoda")


def promtool(*argv):
    result = subprocess.run([PROMTOOL, *argv], capture_output=True, text=True, timeout=120)
    return result.returncode, result.stdout + result.stderr


def alert_names(rules_file):
    with open(rules_file) as f:
        return {r["alert"] for g in yaml.safe_load(f)["groups"] for r in g["rules"]}


class AlertRulesTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        rendered = subprocess.run(
            [HELM, "template", "rel", CHART, "--namespace", "serving", "--set",
             "metrics.prometheusRule.enabled=true", "--show-only",
             "templates/prometheusrule.yaml"], capture_output=True, text=True, timeout=60)
        if rendered.returncode != 0:
            raise AssertionError(rendered.stderr)
        rule = yaml.safe_load(rendered.stdout)
        assert rule["kind"] == "PrometheusRule"
        cls.chart_rules = os.path.join(cls.tmp.name, "chart-alerts.rules.yml")
        with open(cls.chart_rules, "w") as f:
            yaml.safe_dump(rule["spec"], f, width=10000)
        shutil.copy(os.path.join(ALERTS, "chart-alerts.test.yml"), cls.tmp.name)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_rules_are_valid(self):
        for rules in (STATIC_RULES, self.chart_rules):
            rc, out = promtool("check", "rules", rules)
            self.assertEqual(rc, 0, out)
            self.assertIn("SUCCESS: 6 rules found", out)

    def test_static_rules(self):
        rc, out = promtool("test", "rules", os.path.join(ALERTS, "pagoda-alerts.test.yml"))
        self.assertEqual(rc, 0, out)

    def test_chart_rules(self):
        rc, out = promtool("test", "rules", os.path.join(self.tmp.name, "chart-alerts.test.yml"))
        self.assertEqual(rc, 0, out)

    def test_every_alert_is_tested_firing_and_quiet(self):
        names = alert_names(STATIC_RULES)
        self.assertEqual(names, alert_names(self.chart_rules))
        self.assertEqual(names, {"PagodaServerDown", "PagodaServerAbsent", "PagodaWorkerDown",
                                 "PagodaKvCacheExhausted", "PagodaQueueGrowing",
                                 "PagodaWorkerRestartStorm"})
        for test_file in ("pagoda-alerts.test.yml", "chart-alerts.test.yml"):
            with open(os.path.join(ALERTS, test_file)) as f:
                tests = yaml.safe_load(f)["tests"]
            cases = [c for t in tests for c in t["alert_rule_test"]]
            for name in names:
                with self.subTest(test_file=test_file, alert=name):
                    self.assertTrue([c for c in cases if c["alertname"] == name and c["exp_alerts"]])
                    self.assertTrue([c for c in cases
                                     if c["alertname"] == name and not c["exp_alerts"]])

    def test_a_wrong_selector_is_caught(self):
        # The chart's rules with the selector promtool's tests depend on
        # dropped: the other release's series then fire rel's alerts.
        with open(self.chart_rules) as f:
            text = f.read()
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "chart-alerts.rules.yml"), "w") as f:
                f.write(text.replace(', service="rel-pagoda"', ""))
            shutil.copy(os.path.join(ALERTS, "chart-alerts.test.yml"), tmp)
            rc, out = promtool("test", "rules", os.path.join(tmp, "chart-alerts.test.yml"))
            self.assertNotEqual(rc, 0, out)


if __name__ == "__main__":
    unittest.main()
