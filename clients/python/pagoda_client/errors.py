"""Typed errors: one class per gRPC status that Pagoda returns."""
import grpc


class PagodaError(Exception):
    """A failed call. `code` is the grpc.StatusCode, `details` the server's message."""

    def __init__(self, code, details):
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


class InvalidArgumentError(PagodaError):
    """The request was refused as malformed (the message names the field)."""


class AlreadyExistsError(PagodaError):
    """A request with this request_id is already in flight."""


class ResourceExhaustedError(PagodaError):
    """The server's queue is full; retry later."""


class UnavailableError(PagodaError):
    """The server is draining, a worker is down, or it cannot be reached."""


class CancelledError(PagodaError):
    """The call was cancelled."""


class DeadlineExceededError(PagodaError):
    """The call's timeout passed."""


class UnimplementedError(PagodaError):
    """The server does not support this feature yet."""


class UnauthenticatedError(PagodaError):
    """The API key was missing or wrong."""


class NotFoundError(PagodaError):
    """The request named a LoRA adapter (lora_name) the server does not serve."""


_BY_CODE = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.CANCELLED: CancelledError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.UNIMPLEMENTED: UnimplementedError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
}


def from_rpc_error(error):
    """Maps a grpc.RpcError (sync or asyncio) to the matching PagodaError."""
    code = error.code()
    return _BY_CODE.get(code, PagodaError)(code, error.details())
