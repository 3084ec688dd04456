"""Installs pagoda_client; generates its gRPC modules from the repository's
protos at build time (needs protoc and grpc_python_plugin: Debian's
protobuf-compiler and protobuf-compiler-grpc)."""
import os
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


class BuildWithStubs(build_py):

    def run(self):
        super().run()
        out = os.path.join(self.build_lib, "pagoda_client", "_generated")
        subprocess.run(["bash", os.path.join(HERE, "generate_stubs.sh"), out], check=True)


setup(name="pagoda-client", version="0.1.0",
      description="Python client of Pagoda's gRPC API (pagoda.v1.Generation)",
      packages=["pagoda_client"], python_requires=">=3.9",
      install_requires=["grpcio>=1.51", "protobuf>=3.21"],
      cmdclass={"build_py": BuildWithStubs})
