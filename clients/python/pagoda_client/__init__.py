"""Python client of Pagoda's gRPC API (pagoda.v1.Generation): blocking
(Client) and asyncio (AsyncClient), streaming iterators, typed errors and a
health check."""
from pagoda_client.aio import AsyncClient, AsyncStream
from pagoda_client.client import Client, Stream
from pagoda_client.errors import (AlreadyExistsError, CancelledError, DeadlineExceededError,
                                  InvalidArgumentError, PagodaError, ResourceExhaustedError,
                                  UnauthenticatedError, UnavailableError, UnimplementedError)
from pagoda_client.types import GenerateResult, SequenceOutput, TokenLogprob

__all__ = [
    "AsyncClient", "AsyncStream", "Client", "Stream", "PagodaError", "InvalidArgumentError",
    "AlreadyExistsError", "ResourceExhaustedError", "UnavailableError", "CancelledError",
    "DeadlineExceededError", "UnimplementedError", "UnauthenticatedError", "GenerateResult",
    "SequenceOutput", "TokenLogprob",
]
