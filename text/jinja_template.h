#ifndef PAGODA_TEXT_JINJA_TEMPLATE_H_
#define PAGODA_TEXT_JINJA_TEMPLATE_H_

// An interpreter for the subset of Jinja that model chat templates use
// (Llama 3 and 3.1, Qwen2/3, Mistral): {{ }}, {% if/elif/else %}, {% for %} (with
// `loop`, tuple targets, an `if` filter and `else`), {% set %} (including
// namespace attributes), comments, whitespace control (`-`) and the
// trim_blocks/lstrip_blocks settings that transformers renders with;
// expressions with literals, lists, dicts, attributes, subscripts and
// slices, + - * / // % ~, comparisons, in, and/or/not, conditional
// expressions, filters (trim, tojson, length, upper, lower, first, last,
// join, default, list, string, int, reverse, items, capitalize, replace,
// select and reject naming a test in quotes), tests (defined, undefined,
// none, string, number, mapping, sequence, iterable, true, false, boolean,
// integer, even, odd, equalto/eq), string methods
// (strip, lstrip, rstrip, split, startswith, endswith, upper, lower,
// replace, title, format-free), dict methods (items, keys, values, get),
// and the globals namespace(), raise_exception() and range().
// Anything else is a parse error naming it, so an unsupported template is
// refused when the server starts, not at a request.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "text/jinja_value.h"

namespace pagoda::text::jinja {

struct Node;

// The work one render may do, charged by the interpreter for every value an
// expression yields (1, plus 16 bytes of a string, which every copy
// copies, plus the items of a list it built) and by every loop iteration;
// past it the render is INVALID_ARGUMENT. Loops nest as deep as the
// template, over data a request sends, and appending to a list copies it:
// the chat_template fuzzer found nested loops appending to one list that
// rendered for 6 s (and strings that double at each iteration grow without
// bound). The default is about 0.1 s; the real Llama 3, 3.1 and Qwen3
// templates take at most 427 units on tests/chat_template's conversations,
// and 0.52 to 0.64 million on 500 messages of 4 KB (a 2 MB prompt); what a
// render prints is charged too (a unit per 16 bytes), 0.13 million more for
// that prompt.
inline constexpr int64_t kDefaultMaxRenderWork = int64_t{1} << 22;

// A parsed template. Immutable and thread-safe after Parse.
class Template {
 public:
  // INVALID_ARGUMENT with the line of the first construct outside the subset.
  // Each render may do `max_render_work` units (kDefaultMaxRenderWork).
  static absl::StatusOr<Template> Parse(const std::string& source,
                                        int64_t max_render_work = kDefaultMaxRenderWork);
  // Renders with the variables of `context` (a dict). raise_exception() and
  // type errors are INVALID_ARGUMENT.
  absl::StatusOr<std::string> Render(const Value& context) const;
  // The syntax tree (jinja_ast.h), for what reads a template without
  // rendering it (chat_content_format.h).
  const Node& root() const { return *root_; }

 private:
  std::shared_ptr<const Node> root_;
  int64_t max_render_work_ = kDefaultMaxRenderWork;
};

}  // namespace pagoda::text::jinja

#endif  // PAGODA_TEXT_JINJA_TEMPLATE_H_
