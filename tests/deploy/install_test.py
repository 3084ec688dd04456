"""`cmake --install` yields a tree that runs the service on its own: the
server and the worker it spawns come from the prefix, the tokenizer's shim
from prefix/lib, and a request is answered. This is what the images hold."""
import fnmatch
import os
import re
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pagoda_harness as h  # noqa: E402


def debian_owners(libraries):
    """The Debian package of each library that one owns, from a single
    `dpkg -S` over every spelling of every path (one call per library took
    most of this test's 30 s). dpkg knows one spelling: /lib or /usr/lib
    (merged /usr), or the target of an alternatives link."""
    spellings = {library: (library, library.removeprefix("/usr"), "/usr" + library,
                           os.path.realpath(library)) for library in libraries}
    paths = sorted({path for candidates in spellings.values() for path in candidates})
    listing = subprocess.run(["dpkg", "-S", *paths], capture_output=True, text=True).stdout
    package_of = {}
    for line in listing.splitlines():  # "libc6:amd64: /lib/x86_64-linux-gnu/libc.so.6"
        if line.startswith("diversion "):
            continue  # "diversion by X from: /path": not an owner.
        packages, _, path = line.rpartition(": ")
        package_of[path] = packages.split(",")[0].split(":")[0].strip()
    owners = {}
    for library, candidates in spellings.items():
        found = [package_of[path] for path in candidates if path in package_of]
        if found:
            owners[library] = found[0]
    return owners


class InstallTest(unittest.TestCase):

    def test_installed_prefix_serves_alone(self):
        with tempfile.TemporaryDirectory() as tmp:
            prefix = os.path.join(tmp, "prefix")
            subprocess.run(["cmake", "--install", os.environ["PAGODA_BUILD_DIR"], "--prefix",
                            prefix], check=True, stdout=subprocess.DEVNULL)
            for path in ("bin/pagoda-server", "bin/pagoda-worker", "bin/pagoda-cli",
                         "lib/libpagoda_sentencepiece_shim.so",
                         "share/pagoda/proto/pagoda/v1/generation.proto"):
                self.assertTrue(os.path.exists(os.path.join(prefix, path)), path)
            model = h.make_model(os.path.join(tmp, "model"))
            env = {"PATH": "/usr/bin:/bin"}  # Nothing from the build tree.
            server = h.Server(model, server_binary=os.path.join(prefix, "bin", "pagoda-server"),
                              env=env)
            with server:
                worker_pid = int(subprocess.run(["pgrep", "-P", str(server.process.pid)],
                                                capture_output=True, text=True).stdout.split()[0])
                self.assertEqual(os.readlink(f"/proc/{worker_pid}/exe"),
                                 os.path.join(prefix, "bin", "pagoda-worker"))
                with open(f"/proc/{server.process.pid}/maps") as maps:
                    shims = {line.split()[-1] for line in maps if "sentencepiece_shim" in line}
                self.assertEqual(shims, {os.path.join(prefix, "lib",
                                                      "libpagoda_sentencepiece_shim.so")})
                result = subprocess.run(
                    [os.path.join(prefix, "bin", "pagoda-cli"), "--server", server.address,
                     "generate", "--prompt", "hello", "--max-tokens", "4", "--ignore-eos"],
                    capture_output=True, text=True, timeout=60, env=env)
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertIn("finish_reason: FINISH_REASON_LENGTH", result.stdout)


    def test_image_runtime_stage_installs_every_linked_library(self):
        """The images' final stage gets its libraries from the apt line of
        Dockerfile.cpu/.cuda: each library the installed binaries load must
        come from a listed package or one of their dependencies."""
        binaries = [h.binary(n) for n in ("pagoda-server", "pagoda-worker", "pagoda-cli")]
        libraries = set()
        for path in binaries:
            for line in subprocess.run(["ldd", path], capture_output=True,
                                       text=True).stdout.splitlines():
                if m := re.search(r"=> (/\S+)", line):
                    libraries.add(m.group(1))
        needed = set()
        # With nvcc the worker links the CUDA toolkit's runtime (cudart,
        # cuBLAS/cuBLASLt, NCCL): no Debian package has it, Dockerfile.cuda
        # copies it from the toolkit image into the runtime stage.
        toolkit = {lib for lib in libraries if lib.startswith("/usr/local/cuda")}
        if toolkit:
            with open(os.path.join(h.REPO, "deploy", "docker", "Dockerfile.cuda")) as f:
                cuda_runtime = f.read().split("AS runtime", 1)[1]
            patterns = [os.path.basename(word) for line in cuda_runtime.splitlines()
                        if line.startswith("COPY --from=cuda-toolkit")
                        for word in line.split()[2:-1]]
            for library in toolkit:
                self.assertTrue(any(fnmatch.fnmatch(os.path.basename(library), p)
                                    for p in patterns), (library, patterns))
        owners = debian_owners(libraries - toolkit)
        for library in libraries - toolkit:
            if library not in owners:
                self.fail(f"no Debian package owns {library}")
            needed.add(owners[library])
        closures = {}
        for dockerfile in ("Dockerfile.cpu", "Dockerfile.cuda"):
            with self.subTest(dockerfile=dockerfile):
                with open(os.path.join(h.REPO, "deploy", "docker", dockerfile)) as f:
                    text = f.read()
                runtime = text[text.index("AS runtime"):]
                block = runtime[runtime.index("--no-install-recommends"):runtime.index("&& rm")]
                listed = re.findall(r"[a-z0-9][a-z0-9.+-]+", block.replace(
                    "--no-install-recommends", ""))
                key = tuple(sorted(listed))
                closure = closures.get(key) or set(subprocess.run(
                    ["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests",
                     "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances",
                     *listed], capture_output=True, text=True).stdout.split())
                closures[key] = closure
                missing = {p for p in needed if p not in closure and p.split(":")[0] not in
                           {c.split(":")[0] for c in closure}}
                self.assertEqual(missing, set())
                self.assertIn("USER 10001", runtime)
                self.assertIn("COPY --from=build /opt/pagoda /opt/pagoda", runtime)


if __name__ == "__main__":
    unittest.main()
