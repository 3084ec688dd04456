"""asyncio client of pagoda.v1.Generation (grpc.aio)."""
import asyncio

import grpc

from pagoda_client import errors
from pagoda_client._stubs import health_pb2, health_pb2_grpc, pb, pb_grpc
from pagoda_client.types import build_request, model_info_dict, to_result, to_sequence_output


class AsyncStream:
    """Async-iterates the SequenceOutput deltas of a GenerateStream call;
    cancel() ends it and iteration stops quietly."""

    def __init__(self, call):
        self._call = call
        self._cancelled = False
        self.request_id = None

    def __aiter__(self):
        return self._iterate()

    async def _iterate(self):
        try:
            async for response in self._call:
                self.request_id = response.request_id
                for output in response.outputs:
                    yield to_sequence_output(output)
        except asyncio.CancelledError:
            if not self._cancelled:
                raise
        except grpc.RpcError as error:
            if self._cancelled and error.code() == grpc.StatusCode.CANCELLED:
                return
            raise errors.from_rpc_error(error) from None

    def cancel(self):
        self._cancelled = True
        self._call.cancel()


class AsyncClient:
    """Like Client, for asyncio: `async with AsyncClient(target) as client:`."""

    def __init__(self, target, *, timeout=None, api_key=None, credentials=None):
        self._channel = (grpc.aio.secure_channel(target, credentials) if credentials
                         else grpc.aio.insecure_channel(target))
        self._stub = pb_grpc.GenerationStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)
        self._timeout = timeout
        self._metadata = (("authorization", f"Bearer {api_key}"),) if api_key else None

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    async def close(self):
        await self._channel.close()

    async def _call(self, method, request):
        try:
            return await method(request, timeout=self._timeout, metadata=self._metadata)
        except grpc.RpcError as error:
            raise errors.from_rpc_error(error) from None

    async def generate(self, prompt=None, token_ids=None, **params):
        return to_result(await self._call(self._stub.Generate,
                                          build_request(prompt, token_ids, **params)))

    def stream(self, prompt=None, token_ids=None, **params):
        request = build_request(prompt, token_ids, **params)
        return AsyncStream(self._stub.GenerateStream(request, timeout=self._timeout,
                                                     metadata=self._metadata))

    async def model_info(self):
        return model_info_dict(await self._call(self._stub.GetModelInfo,
                                                pb.GetModelInfoRequest()))

    async def health(self, service=""):
        response = await self._call(self._health.Check,
                                    health_pb2.HealthCheckRequest(service=service))
        return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
