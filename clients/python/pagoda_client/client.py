"""Blocking client of pagoda.v1.Generation."""
import grpc

from pagoda_client import errors
from pagoda_client._stubs import health_pb2, health_pb2_grpc, pb, pb_grpc
from pagoda_client.types import build_request, model_info_dict, to_result, to_sequence_output


class Stream:
    """Iterates the SequenceOutput deltas of a GenerateStream call.

    Each item carries only the new tokens of one sequence; the last item of a
    sequence has its finish_reason. cancel() ends the call (the server frees
    the request's KV blocks); iteration then stops quietly.
    """

    def __init__(self, call):
        self._call = call
        self._cancelled = False
        self.request_id = None

    def __iter__(self):
        try:
            for response in self._call:
                self.request_id = response.request_id
                for output in response.outputs:
                    yield to_sequence_output(output)
        except grpc.RpcError as error:
            if self._cancelled and error.code() == grpc.StatusCode.CANCELLED:
                return
            raise errors.from_rpc_error(error) from None

    def cancel(self):
        self._cancelled = True
        self._call.cancel()


class Client:
    """A connection to a pagoda-server, e.g. Client("127.0.0.1:50051").

    timeout: seconds per call (None = no deadline). api_key: sent as a bearer
    token. Safe to share between threads (gRPC channels are). Use as a
    context manager or call close().
    """

    def __init__(self, target, *, timeout=None, api_key=None, credentials=None):
        self._channel = (grpc.secure_channel(target, credentials) if credentials
                         else grpc.insecure_channel(target))
        self._stub = pb_grpc.GenerationStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)
        self._timeout = timeout
        self._metadata = (("authorization", f"Bearer {api_key}"),) if api_key else None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self._channel.close()

    def _call(self, method, request):
        try:
            return method(request, timeout=self._timeout, metadata=self._metadata)
        except grpc.RpcError as error:
            raise errors.from_rpc_error(error) from None

    def generate(self, prompt=None, token_ids=None, **params):
        """The whole result. params: see types.build_request."""
        return to_result(self._call(self._stub.Generate, build_request(prompt, token_ids,
                                                                        **params)))

    def stream(self, prompt=None, token_ids=None, **params):
        """A Stream of deltas; same arguments as generate()."""
        request = build_request(prompt, token_ids, **params)
        return Stream(self._stub.GenerateStream(request, timeout=self._timeout,
                                                metadata=self._metadata))

    def model_info(self):
        """ModelInfo as a dict (model_name, vocab_size, free_gpu_blocks, ...)."""
        return model_info_dict(self._call(self._stub.GetModelInfo, pb.GetModelInfoRequest()))

    def health(self, service=""):
        """"SERVING", "NOT_SERVING", ... from grpc.health.v1."""
        response = self._call(self._health.Check, health_pb2.HealthCheckRequest(service=service))
        return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
