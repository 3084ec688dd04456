"""Plain Python results and the request builder shared by both clients."""
import dataclasses
import json
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


# build_request's keyword arguments, by the message that holds them. Those
# whose default is None are proto3 `optional`: left out, the server fills them
# from the model's generation_config.json (--generation-config auto).
_SAMPLING_FIELDS = {
    "temperature": None, "top_k": None, "top_p": None, "min_p": None,
    "repetition_penalty": None, "seed": 0, "n": 0, "best_of": 0, "use_beam_search": False,
    "length_penalty": 0.0, "early_stopping": False, "presence_penalty": 0.0,
    "frequency_penalty": 0.0, "allowed_token_ids": (), "bad_words": (),
}
_STOPPING_FIELDS = {
    "max_tokens": 0, "min_tokens": 0, "stop_token_ids": (), "ignore_eos": False, "stop": (),
    "include_stop_str_in_output": False,
}
_REQUEST_FIELDS = {
    "request_id": "", "logprobs": 0, "priority": 0, "regex": None, "grammar": None,
    "json_object": None, "disable_any_whitespace": False, "lora_name": "",
}


def _fill(message, defaults, values):
    for name, default in defaults.items():
        value = values.pop(name, default)
        if value is None:
            continue
        if isinstance(default, tuple):
            getattr(message, name).extend(value)
        else:
            setattr(message, name, value)


def build_request(prompt=None, token_ids: Optional[Sequence[int]] = None, *, logit_bias=None,
                  json_schema=None, choice=None, **params):
    """A GenerateRequest; exactly one of prompt / token_ids must be given.

    params: the fields of SamplingParams (temperature, top_k, top_p, min_p,
    seed, n, best_of, use_beam_search, length_penalty, early_stopping,
    presence_penalty, frequency_penalty, repetition_penalty,
    allowed_token_ids, bad_words), of StoppingCriteria (max_tokens,
    min_tokens, stop, stop_token_ids, ignore_eos, include_stop_str_in_output)
    and of GenerateRequest (request_id, logprobs, priority, regex, grammar,
    json_object, disable_any_whitespace, lora_name: a served LoRA adapter),
    by their proto names. logit_bias:
    {token_id: bias}. json_schema: a dict or JSON text. choice: a list of
    strings. Zero / empty values are the server's defaults.
    """
    if (prompt is None) == (token_ids is None):
        raise ValueError("give exactly one of prompt or token_ids")
    request = pb.GenerateRequest()
    if prompt is not None:
        request.prompt = prompt
    else:
        request.prompt_token_ids.extend(token_ids)
    _fill(request.sampling, _SAMPLING_FIELDS, params)
    _fill(request.stopping, _STOPPING_FIELDS, params)
    _fill(request, _REQUEST_FIELDS, params)
    if params:
        raise TypeError(f"unknown request arguments: {', '.join(sorted(params))}")
    for token, bias in (logit_bias or {}).items():
        request.sampling.logit_bias[int(token)] = bias
    if json_schema is not None:
        request.json_schema = (json_schema if isinstance(json_schema, str)
                               else json.dumps(json_schema))
    if choice is not None:
        request.choice.choices.extend(choice)
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


def model_info_dict(message):
    """ModelInfo as a dict, its messages (engine_stats, sampling_defaults) as
    dicts too; an unset optional field is left out (sampling_defaults holds
    only the defaults in force)."""
    out = {}
    for field in message.DESCRIPTOR.fields:
        if field.has_presence and not message.HasField(field.name):
            continue
        value = getattr(message, field.name)
        if field.label == field.LABEL_REPEATED:
            value = list(value)
        elif field.message_type is not None:
            value = model_info_dict(value)
        out[field.name] = value
    return out
