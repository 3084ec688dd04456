"""Plain Python results and the request builder shared by both clients."""
import dataclasses
from typing import List, Optional, Sequence

from pagoda_client._stubs import pb

_FINISH_REASONS = {
    pb.FINISH_REASON_UNSPECIFIED: None,
    pb.FINISH_REASON_LENGTH: "length",
    pb.FINISH_REASON_STOP: "stop",
    pb.FINISH_REASON_ABORTED: "abort",
}


@dataclasses.dataclass
class TokenLogprob:
    token_id: int
    logprob: float
    top: List[tuple]  # (token_id, logprob) pairs, best first.


@dataclasses.dataclass
class SequenceOutput:
    """One sequence of a result, or the new part of it in a stream chunk."""
    index: int
    token_ids: List[int]
    text: str
    finish_reason: Optional[str]  # None while a stream is still running.
    cumulative_logprob: float
    logprobs: List[TokenLogprob]


@dataclasses.dataclass
class GenerateResult:
    request_id: str
    outputs: List[SequenceOutput]
    prompt_token_count: int


def build_request(prompt=None, token_ids: Optional[Sequence[int]] = None, *, max_tokens=0,
                  min_tokens=0, temperature=0.0, top_k=0, top_p=0.0, seed=0,
                  stop_token_ids=(), ignore_eos=False, logprobs=0, request_id=""):
    """A GenerateRequest; exactly one of prompt / token_ids must be given."""
    if (prompt is None) == (token_ids is None):
        raise ValueError("give exactly one of prompt or token_ids")
    request = pb.GenerateRequest(request_id=request_id, logprobs=logprobs)
    if prompt is not None:
        request.prompt = prompt
    else:
        request.prompt_token_ids.extend(token_ids)
    request.sampling.temperature = temperature
    request.sampling.top_k = top_k
    request.sampling.top_p = top_p
    request.sampling.seed = seed
    request.stopping.max_tokens = max_tokens
    request.stopping.min_tokens = min_tokens
    request.stopping.stop_token_ids.extend(stop_token_ids)
    request.stopping.ignore_eos = ignore_eos
    return request


def to_sequence_output(message):
    return SequenceOutput(
        index=message.index,
        token_ids=list(message.token_ids),
        text=message.text,
        finish_reason=_FINISH_REASONS.get(message.finish_reason, "unknown"),
        cumulative_logprob=message.cumulative_logprob,
        logprobs=[TokenLogprob(t.token_id, t.logprob, [(x.token_id, x.logprob) for x in t.top])
                  for t in message.logprobs])


def to_result(response):
    return GenerateResult(request_id=response.request_id,
                          outputs=[to_sequence_output(o) for o in response.outputs],
                          prompt_token_count=response.prompt_token_count)


def model_info_dict(info):
    return {field.name: getattr(info, field.name) for field in info.DESCRIPTOR.fields}
