'use strict';
// Node client of Pagoda's gRPC API (pagoda.v1.Generation): promises for
// unary calls, async-iterable streams with cancel(), typed errors, health.

const path = require('path');
const fs = require('fs');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

// The protos: the repository's own, or the copy `npm pack` puts in proto/.
function protoRoots() {
  const packaged = path.join(__dirname, 'proto');
  if (fs.existsSync(path.join(packaged, 'pagoda', 'v1', 'generation.proto'))) return [packaged];
  return [path.join(__dirname, '..', '..', 'proto'), path.join(__dirname, '..', 'proto')];
}

const definition = protoLoader.loadSync(
    ['pagoda/v1/generation.proto', 'pagoda_health/health.proto'],
    {includeDirs: protoRoots(), keepCase: true, longs: Number, enums: String, defaults: true});
const loaded = grpc.loadPackageDefinition(definition);

class PagodaError extends Error {
  constructor(code, details) {
    super(`${grpc.status[code]}: ${details}`);
    this.name = this.constructor.name;
    this.code = code;          // grpc.status number
    this.codeName = grpc.status[code];
    this.details = details;
  }
}
class InvalidArgumentError extends PagodaError {}
class AlreadyExistsError extends PagodaError {}
class ResourceExhaustedError extends PagodaError {}
class UnavailableError extends PagodaError {}
class CancelledError extends PagodaError {}
class DeadlineExceededError extends PagodaError {}
class UnimplementedError extends PagodaError {}
class UnauthenticatedError extends PagodaError {}

const ERRORS = {
  [grpc.status.INVALID_ARGUMENT]: InvalidArgumentError,
  [grpc.status.ALREADY_EXISTS]: AlreadyExistsError,
  [grpc.status.RESOURCE_EXHAUSTED]: ResourceExhaustedError,
  [grpc.status.UNAVAILABLE]: UnavailableError,
  [grpc.status.CANCELLED]: CancelledError,
  [grpc.status.DEADLINE_EXCEEDED]: DeadlineExceededError,
  [grpc.status.UNIMPLEMENTED]: UnimplementedError,
  [grpc.status.UNAUTHENTICATED]: UnauthenticatedError,
};

function toError(error) {
  const Type = ERRORS[error.code] || PagodaError;
  return new Type(error.code, error.details);
}

const FINISH = {
  FINISH_REASON_UNSPECIFIED: null,
  FINISH_REASON_LENGTH: 'length',
  FINISH_REASON_STOP: 'stop',
  FINISH_REASON_ABORTED: 'abort',
};

// The request options by the message that holds them, in the proto's
// snake_case (options are their camelCase: topK -> top_k). Left out,
// temperature, topK, topP, minP and repetitionPenalty are unset, and the
// server fills them from the model's generation_config.json.
const SAMPLING_FIELDS = new Set(['temperature', 'top_k', 'top_p', 'min_p',
  'repetition_penalty', 'seed', 'n', 'best_of', 'use_beam_search', 'length_penalty',
  'early_stopping', 'presence_penalty', 'frequency_penalty', 'logit_bias',
  'allowed_token_ids', 'bad_words']);
const STOPPING_FIELDS = new Set(['max_tokens', 'min_tokens', 'stop_token_ids', 'ignore_eos',
  'stop', 'include_stop_str_in_output']);
const REQUEST_FIELDS = new Set(['request_id', 'logprobs', 'priority', 'regex', 'grammar',
  'json_object', 'disable_any_whitespace']);

const snakeCase = (name) => name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

// A GenerateRequest from the options: prompt or tokenIds (exactly one), the
// fields above, jsonSchema (an object or JSON text), choice (strings).
function buildRequest(options) {
  const {prompt, tokenIds, jsonSchema, choice, ...rest} = options;
  if ((prompt === undefined) === (tokenIds === undefined)) {
    throw new TypeError('give exactly one of prompt or tokenIds');
  }
  const request = {sampling: {}, stopping: {}};
  if (prompt !== undefined) request.prompt = prompt; else request.prompt_token_ids = tokenIds;
  for (const [name, value] of Object.entries(rest)) {
    if (value === undefined) continue;
    const field = snakeCase(name);
    if (SAMPLING_FIELDS.has(field)) request.sampling[field] = value;
    else if (STOPPING_FIELDS.has(field)) request.stopping[field] = value;
    else if (REQUEST_FIELDS.has(field)) request[field] = value;
    else throw new TypeError(`unknown request option ${name}`);
  }
  if (jsonSchema !== undefined) {
    request.json_schema = typeof jsonSchema === 'string' ? jsonSchema : JSON.stringify(jsonSchema);
  }
  if (choice !== undefined) request.choice = {choices: choice};
  return request;
}

function toOutput(output) {
  return {
    index: output.index,
    tokenIds: output.token_ids,
    text: output.text,
    finishReason: FINISH[output.finish_reason] ?? 'unknown',
    cumulativeLogprob: output.cumulative_logprob,
    logprobs: output.logprobs.map((t) => ({
      tokenId: t.token_id, logprob: t.logprob,
      top: t.top.map((x) => ({tokenId: x.token_id, logprob: x.logprob})),
    })),
  };
}

// Async-iterates the SequenceOutput deltas of a GenerateStream call. Each
// item carries only a sequence's new tokens; its last item has finishReason.
// cancel() ends the call; iteration then stops quietly.
class Stream {
  constructor(call) {
    this.call = call;
    this.cancelled = false;
    this.requestId = null;
  }

  async *[Symbol.asyncIterator]() {
    try {
      for await (const response of this.call) {
        this.requestId = response.request_id;
        for (const output of response.outputs) yield toOutput(output);
      }
    } catch (error) {
      if (this.cancelled && error.code === grpc.status.CANCELLED) return;
      throw toError(error);
    }
  }

  cancel() {
    this.cancelled = true;
    this.call.cancel();
  }
}

// A connection to a pagoda-server: new Client('127.0.0.1:50051', {timeoutMs, apiKey}).
class Client {
  constructor(target, options = {}) {
    const credentials = options.credentials || grpc.credentials.createInsecure();
    this.stub = new loaded.pagoda.v1.Generation(target, credentials);
    this.health_ = new loaded.grpc.health.v1.Health(target, credentials);
    this.timeoutMs = options.timeoutMs;
    this.metadata = new grpc.Metadata();
    if (options.apiKey) this.metadata.set('authorization', `Bearer ${options.apiKey}`);
  }

  callOptions() {
    return this.timeoutMs ? {deadline: new Date(Date.now() + this.timeoutMs)} : {};
  }

  unary(stub, method, request) {
    return new Promise((resolve, reject) => {
      stub[method](request, this.metadata, this.callOptions(), (error, response) => {
        if (error) reject(toError(error)); else resolve(response);
      });
    });
  }

  // The whole result: {requestId, promptTokenCount, outputs: [...]}.
  async generate(options) {
    const response = await this.unary(this.stub, 'Generate', buildRequest(options));
    return {
      requestId: response.request_id,
      promptTokenCount: response.prompt_token_count,
      outputs: response.outputs.map(toOutput),
    };
  }

  // A Stream of deltas; same options as generate().
  stream(options) {
    const request = buildRequest(options);
    return new Stream(this.stub.GenerateStream(request, this.metadata, this.callOptions()));
  }

  async modelInfo() {
    return this.unary(this.stub, 'GetModelInfo', {});
  }

  // 'SERVING', 'NOT_SERVING', ... from grpc.health.v1.
  async health(service = '') {
    return (await this.unary(this.health_, 'Check', {service})).status;
  }

  close() {
    this.stub.close();
    this.health_.close();
  }
}

module.exports = {
  Client, Stream, PagodaError, InvalidArgumentError, AlreadyExistsError,
  ResourceExhaustedError, UnavailableError, CancelledError, DeadlineExceededError,
  UnimplementedError, UnauthenticatedError,
};
