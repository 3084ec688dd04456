#ifndef PAGODA_SCHEDULER_API_REQUEST_LOG_H_
#define PAGODA_SCHEDULER_API_REQUEST_LOG_H_

// vLLM's request log (--enable-log-requests, --enable-log-outputs,
// --max-log-len; vllm/entrypoints/serve/utils/request_logger.py), written
// by the one request path of every front door. Off by default: prompts and
// outputs are the users' data. The lines read as vLLM's:
//   Received request ID: params: SamplingParams(n=1, ...), lora_request: None.
//   Request ID details: prompt: 'text', prompt_token_ids: [1, 2], prompt_embeds shape: None.
//   Generated response ID: output: 'text', finish_reason: stop
// the second only at vLLM's DEBUG level (VLLM_LOGGING_LEVEL=DEBUG), with the
// prompt decoded from its token ids. --max-log-len cuts the prompt's ids,
// its text and the output text to that many (ids, characters).

#include <string>

#include "pagoda/v1/generation.pb.h"
#include "scheduler/api/request_validation.h"
#include "text/tokenizer.h"

namespace pagoda::scheduler {

struct RequestLogOptions {
  bool requests = false;  // "Received request" lines.
  bool details = false;   // And the prompt (vLLM's DEBUG level).
  bool outputs = false;   // "Generated response" lines.
  int max_log_len = -1;   // -1: uncut.
};

// "Received request ...": the request's options as vLLM's SamplingParams
// repr names them, with the values Pagoda holds (the seed in use, bad words
// as token ids).
std::string ReceivedRequestLine(const ValidatedRequest& request);

// "Request ... details": the prompt, decoded when `tokenizer` is set.
std::string RequestDetailsLine(const ValidatedRequest& request, const Tokenizer* tokenizer,
                               int max_log_len);

// "Generated response ...": one sequence's whole text and finish reason.
std::string GeneratedResponseLine(const std::string& request_id, const std::string& text,
                                  pagoda::v1::FinishReason reason, int max_log_len);

// `text` as Python's repr() writes a str: quoted, with \\, \n, \r, \t and
// other control characters escaped.
std::string PythonRepr(const std::string& text);

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_REQUEST_LOG_H_
