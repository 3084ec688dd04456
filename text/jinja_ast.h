#ifndef PAGODA_TEXT_JINJA_AST_H_
#define PAGODA_TEXT_JINJA_AST_H_

// The syntax tree of jinja_template.h, shared by its parser and renderer.

#include <memory>
#include <string>
#include <vector>

#include "text/jinja_value.h"

namespace pagoda::text::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,      // value
    kName,         // name
    kList,         // args
    kDict,         // args as key, value pairs
    kAttribute,    // args[0].name
    kSubscript,    // args[0][args[1]]
    kSlice,        // args[0][args[1]:args[2]:args[3]] (null Expr = omitted)
    kCall,         // args[0](args[1..]) with keyword names in `keywords`
    kFilter,       // args[0] | name(args[1..])
    kTest,         // args[0] is [not] name(args[1..]); negate
    kUnary,        // op args[0]: "not", "-", "+"
    kBinary,       // args[0] op args[1]
    kConditional,  // args[0] if args[1] else args[2] (null = undefined)
  };
  Kind kind;
  Value value;
  std::string name;  // Name, attribute, filter, test or operator.
  std::vector<ExprPtr> args;
  std::vector<std::string> keywords;  // For kCall: per arg after the callee, "" = positional.
  bool negate = false;
  int line = 0;
};

struct Node {
  enum class Kind { kText, kOutput, kIf, kFor, kSet, kBody };
  Kind kind;
  std::string text;                             // kText.
  ExprPtr expr;                                 // kOutput, kSet value, kFor iterable.
  std::vector<ExprPtr> conditions;              // kIf: one per branch (null = else).
  std::vector<std::unique_ptr<Node>> children;  // kBody items; kIf branches; kFor body, else.
  std::vector<std::string> targets;             // kFor loop variables; kSet name (and attribute).
  ExprPtr filter;                               // kFor `if` filter.
  int line = 0;
};

}  // namespace pagoda::text::jinja

#endif  // PAGODA_TEXT_JINJA_AST_H_
