// pagoda-tokenizer-tool: runs Pagoda's tokenizer over a batch of inputs so
// that tests can compare it with a reference implementation.
//
//   tokenizer_tool MODEL_DIR < request.json > response.json
//
// request:  {"encode": ["text", ...], "decode": [[ids], ...],
//            "stream": [[ids], ...]}
// response: {"kind": "...", "vocab_size": N, "bos_token_to_add": id or -1, "encode": [[ids] or
// {"error": msg}],
//            "decode": [text or {"error": msg}],
//            "stream": [[hex piece, ...], ...]}
// "stream" feeds ids one at a time to the server's incremental detokenizer
// and returns the pieces it emits (the last is the Flush). Texts in the
// request are JSON strings; an encode text may be given as {"hex": "..."}
// to pass bytes that are not valid UTF-8.
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "scheduler/api/request_detokenizer.h"
#include "text/tokenizer.h"

namespace {

using nlohmann::json;

std::string FromHex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  }
  return out;
}

json Encode(const pagoda::Tokenizer& tokenizer, const json& text) {
  const std::string input =
      text.is_object() ? FromHex(text.value("hex", "")) : text.get<std::string>();
  auto ids = tokenizer.Encode(input);
  if (!ids.ok()) return json{{"error", std::string(ids.status().message())}};
  return json(*ids);
}

json Decode(const pagoda::Tokenizer& tokenizer, const json& ids) {
  auto text = tokenizer.Decode(ids.get<std::vector<int>>());
  if (!text.ok()) return json{{"error", std::string(text.status().message())}};
  return json(*text);
}

std::string ToHex(const std::string& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char byte : bytes) {
    out += kDigits[byte >> 4];
    out += kDigits[byte & 15];
  }
  return out;
}

// Pieces as hex, so that a broken UTF-8 piece reaches the test as it is.
json Stream(const pagoda::Tokenizer& tokenizer, const json& ids) {
  pagoda::scheduler::RequestDetokenizer detokenizer(&tokenizer);
  json pieces = json::array();
  for (int id : ids.get<std::vector<int>>()) pieces.push_back(ToHex(detokenizer.Append({id})));
  pieces.push_back(ToHex(detokenizer.Flush()));
  return pieces;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: tokenizer_tool MODEL_DIR < request.json\n";
    return 2;
  }
  auto loaded = pagoda::Tokenizer::Load(argv[1]);
  if (!loaded.ok() || *loaded == nullptr) {
    std::cerr << "cannot load a tokenizer from " << argv[1] << ": "
              << (loaded.ok() ? "none found" : loaded.status().ToString()) << "\n";
    return 1;
  }
  const pagoda::Tokenizer& tokenizer = **loaded;
  const std::string input((std::istreambuf_iterator<char>(std::cin)),
                          std::istreambuf_iterator<char>());
  const json request = json::parse(input);
  json response = {{"kind", tokenizer.kind()},
                   {"vocab_size", tokenizer.vocab_size()},
                   {"bos_token_to_add", tokenizer.bos_token_to_add().value_or(-1)}};
  response["encode"] = json::array();
  for (const json& text : request.value("encode", json::array())) {
    response["encode"].push_back(Encode(tokenizer, text));
  }
  response["decode"] = json::array();
  for (const json& ids : request.value("decode", json::array())) {
    response["decode"].push_back(Decode(tokenizer, ids));
  }
  response["stream"] = json::array();
  for (const json& ids : request.value("stream", json::array())) {
    response["stream"].push_back(Stream(tokenizer, ids));
  }
  std::cout << response.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
  return 0;
}
