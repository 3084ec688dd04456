#ifndef PAGODA_COMMON_STATUS_MACROS_H_
#define PAGODA_COMMON_STATUS_MACROS_H_

// PAGODA_ASSIGN_OR_RETURN: the one macro for unwrapping an absl::StatusOr or
// returning its error, shared by every room.

#include <utility>

// Assigns the value of a StatusOr expression to `lhs`, or returns its error
// from the enclosing function.
#define PAGODA_ASSIGN_OR_RETURN(lhs, expr)                    \
  do {                                                        \
    auto pagoda_result_ = (expr);                             \
    if (!pagoda_result_.ok()) return pagoda_result_.status(); \
    lhs = *std::move(pagoda_result_);                         \
  } while (0)

#endif  // PAGODA_COMMON_STATUS_MACROS_H_
