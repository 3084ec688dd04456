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

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "text/jinja_value.h"

namespace pagoda::text::jinja {

struct Node;

// A parsed template. Immutable and thread-safe after Parse.
class Template {
 public:
  // INVALID_ARGUMENT with the line of the first construct outside the subset.
  static absl::StatusOr<Template> Parse(const std::string& source);
  // Renders with the variables of `context` (a dict). raise_exception() and
  // type errors are INVALID_ARGUMENT.
  absl::StatusOr<std::string> Render(const Value& context) const;

 private:
  std::shared_ptr<const Node> root_;
};

}  // namespace pagoda::text::jinja

#endif  // PAGODA_TEXT_JINJA_TEMPLATE_H_
