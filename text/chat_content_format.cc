#include "text/chat_content_format.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pagoda::text {
namespace {

using jinja::Expr;
using jinja::Node;

// `expr` reads variable `name` (with `key`: its item or attribute `key`),
// through filters, tests and slices, as vLLM's _is_var_or_elems_access.
bool ReadsVariable(const Expr& expr, const std::string& name, const std::string& key) {
  switch (expr.kind) {
    case Expr::Kind::kFilter:
    case Expr::Kind::kTest:
    case Expr::Kind::kSlice:
      return !expr.args.empty() && expr.args[0] != nullptr &&
             ReadsVariable(*expr.args[0], name, key);
    default:
      break;
  }
  if (key.empty()) return expr.kind == Expr::Kind::kName && expr.name == name;
  if (expr.args.empty() || expr.args[0] == nullptr || expr.args[0]->kind != Expr::Kind::kName ||
      expr.args[0]->name != name) {
    return false;
  }
  if (expr.kind == Expr::Kind::kAttribute) return expr.name == key;
  return expr.kind == Expr::Kind::kSubscript && expr.args.size() == 2 && expr.args[1] != nullptr &&
         expr.args[1]->kind == Expr::Kind::kLiteral && expr.args[1]->value.is_string() &&
         expr.args[1]->value.str() == key;
}

void ForEachNode(const Node& node, const std::function<void(const Node&)>& visit) {
  visit(node);
  for (const std::unique_ptr<Node>& child : node.children) {
    if (child != nullptr) ForEachNode(*child, visit);
  }
}

// The variables that hold `messages` or part of it (`set m = messages[1:]`,
// and variables set from those), as vLLM's _iter_nodes_assign_var_or_elems.
std::vector<std::string> MessagesVariables(const Node& root) {
  std::vector<std::string> names = {"messages"};
  std::deque<std::string> pending = {"messages"};
  while (!pending.empty()) {
    const std::string name = pending.front();
    pending.pop_front();
    ForEachNode(root, [&](const Node& node) {
      if (node.kind != Node::Kind::kSet || node.targets.size() != 1 || node.expr == nullptr ||
          !ReadsVariable(*node.expr, name, "")) {
        return;
      }
      const std::string& target = node.targets[0];
      if (std::find(names.begin(), names.end(), target) == names.end()) {
        names.push_back(target);
        pending.push_back(target);
      }
    });
  }
  return names;
}

// The loop variables of loops over any of `sources` (with `key`: over their
// `key`); false when such a loop binds several variables (vLLM's detection
// fails there and falls back to the string format).
bool LoopVariables(const Node& root, const std::vector<std::string>& sources,
                   const std::string& key, std::vector<std::string>* out) {
  bool ok = true;
  ForEachNode(root, [&](const Node& node) {
    if (node.kind != Node::Kind::kFor || node.expr == nullptr) return;
    for (const std::string& source : sources) {
      if (!ReadsVariable(*node.expr, source, key)) continue;
      if (node.targets.size() != 1) ok = false;
      if (!node.targets.empty()) out->push_back(node.targets[0]);
      break;
    }
  });
  return ok;
}

}  // namespace

absl::StatusOr<std::optional<ChatContentFormat>> ParseChatContentFormat(const std::string& name) {
  if (name == "auto") return std::optional<ChatContentFormat>();
  if (name == "string") return std::optional<ChatContentFormat>(ChatContentFormat::kString);
  if (name == "openai") return std::optional<ChatContentFormat>(ChatContentFormat::kOpenAi);
  return absl::InvalidArgumentError(absl::StrCat("--chat-template-content-format ", name,
                                                 " is not a format: expected auto, string or "
                                                 "openai"));
}

const char* ChatContentFormatName(ChatContentFormat format) {
  return format == ChatContentFormat::kOpenAi ? "openai" : "string";
}

ChatContentFormat DetectChatContentFormat(const Node& root) {
  std::vector<std::string> messages;
  if (!LoopVariables(root, MessagesVariables(root), "", &messages)) {
    return ChatContentFormat::kString;
  }
  std::vector<std::string> parts;
  LoopVariables(root, messages, "content", &parts);
  return parts.empty() ? ChatContentFormat::kString : ChatContentFormat::kOpenAi;
}

}  // namespace pagoda::text
