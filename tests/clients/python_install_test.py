"""The Python client installs offline as clients/python/README.md says: its
two install lines, run as written (on a copy of the tree, so the build's
leftovers land there), with every network route closed, give a venv whose
pagoda_client imports with its generated gRPC modules; and what the build
leaves in the tree is ignored by git."""
import os
import re
import shutil
import subprocess
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
README = os.path.join(REPO, "clients", "python", "README.md")
# Any download would go through this proxy, which nothing serves.
OFFLINE = {"http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9",
           "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9",
           "PIP_RETRIES": "0", "PIP_TIMEOUT": "2"}


def install_lines():
    """The README's venv and pip lines (indented code)."""
    with open(README) as f:
        code = [line.strip() for line in f if line.startswith("    ")]
    venv = [line for line in code if line.startswith("python3 -m venv")]
    pip = [line for line in code if "pip install" in line]
    return venv, pip


class PythonInstallTest(unittest.TestCase):

    def test_readme_install_works_offline(self):
        venv_lines, pip_lines = install_lines()
        self.assertEqual(len(venv_lines), 1, "the README gives one venv line")
        self.assertEqual(len(pip_lines), 1, "the README gives one pip line")
        self.assertIn("--no-build-isolation", pip_lines[0])
        with tempfile.TemporaryDirectory() as tmp:
            tree = os.path.join(tmp, "tree")
            for part in ("clients/python", "clients/proto", "proto"):
                shutil.copytree(os.path.join(REPO, part), os.path.join(tree, part),
                                ignore=shutil.ignore_patterns("build", "*.egg-info",
                                                              "_generated", "__pycache__"))
            # Debian's python3 first (not a pyenv's or a venv's), and no pip
            # settings of this machine (a local wheel folder, say).
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith("PIP_") and k not in ("VIRTUAL_ENV", "PYTHONPATH")}
            env.update(HOME=tmp, PATH="/usr/bin:/bin", PIP_CONFIG_FILE=os.devnull, **OFFLINE)
            for line in venv_lines + pip_lines:
                result = subprocess.run(["bash", "-c", line], cwd=tree, env=env,
                                        capture_output=True, text=True, timeout=240)
                self.assertEqual(result.returncode, 0,
                                 f"{line}\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
            venv = re.search(r"(\S+)$", venv_lines[0]).group(1).replace("~", tmp)
            python = os.path.join(venv, "bin", "python")
            # From elsewhere, without PAGODA_CLIENT_STUBS: the installed
            # package and the modules generated at build time.
            imported = subprocess.run(
                [python, "-c", "import pagoda_client, pagoda_client._stubs as s; "
                               "print(pagoda_client.__file__); print(s._stub_dir)"],
                cwd=tmp, env={k: v for k, v in env.items() if k != "PAGODA_CLIENT_STUBS"},
                capture_output=True, text=True, timeout=60)
            self.assertEqual(imported.returncode, 0, imported.stderr)
            module, stubs = imported.stdout.split()
            self.assertTrue(module.startswith(venv), module)
            self.assertTrue(os.path.isfile(os.path.join(stubs, "pagoda", "v1",
                                                        "generation_pb2_grpc.py")), stubs)

            # What the build left beside the sources, as a path in the
            # repository: git must ignore each.
            leftovers = [os.path.join("clients", "python", name)
                         for name in os.listdir(os.path.join(tree, "clients", "python"))
                         if name not in os.listdir(os.path.join(REPO, "clients", "python"))
                         or name in ("build",) or name.endswith(".egg-info")]
            self.assertTrue(leftovers, "the in-tree build left nothing (no check made)")
            for path in leftovers:
                with self.subTest(path=path):
                    ignored = subprocess.run(["git", "check-ignore", "-q", "--no-index",
                                              path + "/x"], cwd=REPO)
                    self.assertEqual(ignored.returncode, 0, f"{path} is not ignored by git")


if __name__ == "__main__":
    unittest.main()
