#include "scheduler/api/request_log.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "scheduler/engine/finish_reason.h"

namespace pagoda::scheduler {
namespace {

// Python's str() of a float: "1.0", not "1".
std::string PythonFloat(float value) {
  std::string text = absl::StrCat(value);
  if (text.find_first_of(".en") == std::string::npos) text += ".0";
  return text;
}

const char* PythonBool(bool value) { return value ? "True" : "False"; }

// The first `max_chars` characters (code points) of UTF-8 `text`; all for -1.
std::string FirstChars(const std::string& text, int max_chars) {
  if (max_chars < 0) return text;
  int chars = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const bool starts_char = (static_cast<unsigned char>(text[i]) & 0xC0) != 0x80;
    if (starts_char && chars++ == max_chars) return text.substr(0, i);
  }
  return text;
}

template <typename Int>
std::string PythonList(const std::vector<Int>& values) {
  return absl::StrCat("[", absl::StrJoin(values, ", "), "]");
}

std::string StopList(const std::vector<std::string>& stop) {
  std::vector<std::string> quoted;
  for (const std::string& text : stop) quoted.push_back(PythonRepr(text));
  return absl::StrCat("[", absl::StrJoin(quoted, ", "), "]");
}

std::string BadWords(const std::vector<std::vector<int32_t>>& words) {
  std::vector<std::string> lists;
  for (const std::vector<int32_t>& ids : words) lists.push_back(PythonList(ids));
  return absl::StrCat("[", absl::StrJoin(lists, ", "), "]");
}

std::string SamplingParamsRepr(const ValidatedRequest& request) {
  const SamplingOptions& s = request.sampling;
  const StoppingOptions& stop = request.stopping;
  return absl::StrCat(
      "SamplingParams(n=", s.n, ", presence_penalty=", PythonFloat(s.presence_penalty),
      ", frequency_penalty=", PythonFloat(s.frequency_penalty),
      ", repetition_penalty=", PythonFloat(s.repetition_penalty),
      ", temperature=", PythonFloat(s.temperature), ", top_p=", PythonFloat(s.top_p),
      ", top_k=", s.top_k, ", min_p=", PythonFloat(s.min_p), ", seed=", s.seed,
      ", stop=", StopList(request.stop_strings),
      ", stop_token_ids=", PythonList(stop.stop_token_ids),
      ", bad_words=", BadWords(s.bad_words_token_ids),
      ", include_stop_str_in_output=", PythonBool(request.include_stop_str_in_output),
      ", ignore_eos=", PythonBool(stop.ignore_eos), ", max_tokens=", stop.max_tokens,
      ", min_tokens=", stop.min_tokens,
      ", logprobs=", s.num_logprobs > 0 ? absl::StrCat(s.num_logprobs) : "None",
      ", prompt_logprobs=",
      s.wants_prompt_logprobs() ? absl::StrCat(s.num_prompt_logprobs) : "None",
      ", structured_outputs=", s.grammar != nullptr ? "set" : "None",
      ", use_beam_search=", PythonBool(s.use_beam_search), ")");
}

}  // namespace

std::string PythonRepr(const std::string& text) {
  const bool single = text.find('\'') == std::string::npos || text.find('"') != std::string::npos;
  const char quote = single ? '\'' : '"';
  std::string out(1, quote);
  for (const char c : text) {
    const unsigned char byte = static_cast<unsigned char>(c);
    if (c == '\\' || c == quote) {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (byte < 0x20 || byte == 0x7F) {
      out += absl::StrFormat("\\x%02x", byte);
    } else {
      out += c;
    }
  }
  out += quote;
  return out;
}

std::string ReceivedRequestLine(const ValidatedRequest& request) {
  const std::string lora =
      request.lora_name.empty()
          ? "None"
          : absl::StrCat("LoRARequest(lora_name=", PythonRepr(request.lora_name), ")");
  return absl::StrCat("Received request ", request.request_id,
                      ": params: ", SamplingParamsRepr(request), ", lora_request: ", lora, ".");
}

std::string RequestDetailsLine(const ValidatedRequest& request, const Tokenizer* tokenizer,
                               int max_log_len) {
  std::vector<int> ids(request.prompt_token_ids.begin(), request.prompt_token_ids.end());
  if (max_log_len >= 0 && ids.size() > static_cast<size_t>(max_log_len)) ids.resize(max_log_len);
  std::string prompt = "None";
  if (tokenizer != nullptr) {
    if (absl::StatusOr<std::string> text = tokenizer->Decode(ids); text.ok()) {
      prompt = PythonRepr(FirstChars(*text, max_log_len));
    }
  }
  return absl::StrCat("Request ", request.request_id, " details: prompt: ", prompt,
                      ", prompt_token_ids: ", PythonList(ids), ", prompt_embeds shape: None.");
}

std::string GeneratedResponseLine(const std::string& request_id, const std::string& text,
                                  pagoda::v1::FinishReason reason, int max_log_len) {
  const std::string name(FinishReasonName(reason));
  return absl::StrCat("Generated response ", request_id,
                      ": output: ", PythonRepr(FirstChars(text, max_log_len)),
                      ", finish_reason: ", name.empty() ? std::string("None") : name);
}

}  // namespace pagoda::scheduler
