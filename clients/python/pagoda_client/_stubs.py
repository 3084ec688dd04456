"""Loads the generated protobuf/gRPC modules.

They are generated at install time (setup.py) into pagoda_client/_generated,
or by generate_stubs.sh into a folder named by PAGODA_CLIENT_STUBS (tests).
"""
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
_stub_dir = os.environ.get("PAGODA_CLIENT_STUBS") or os.path.join(_here, "_generated")
if not os.path.isdir(os.path.join(_stub_dir, "pagoda", "v1")):
    raise ImportError(
        f"pagoda_client: generated stubs not found in {_stub_dir}; install the package "
        "(setup.py generates them) or run clients/python/generate_stubs.sh DIR and set "
        "PAGODA_CLIENT_STUBS=DIR")
if _stub_dir not in sys.path:
    sys.path.insert(0, _stub_dir)

from pagoda.v1 import generation_pb2 as pb  # noqa: E402
from pagoda.v1 import generation_pb2_grpc as pb_grpc  # noqa: E402
from pagoda_health import health_pb2  # noqa: E402
from pagoda_health import health_pb2_grpc  # noqa: E402

__all__ = ["pb", "pb_grpc", "health_pb2", "health_pb2_grpc"]
