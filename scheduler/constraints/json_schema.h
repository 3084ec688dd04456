#ifndef PAGODA_SCHEDULER_CONSTRAINTS_JSON_SCHEMA_H_
#define PAGODA_SCHEDULER_CONSTRAINTS_JSON_SCHEMA_H_

// JSON Schema to a grammar of the JSON texts that validate against it.
//
// Supported (anything else is refused by name, never loosened):
// - type (one or a list), enum, const;
// - objects: properties, required, additionalProperties;
// - arrays: items, prefixItems, minItems, maxItems;
// - strings: minLength, maxLength, pattern, format (json_primitives.h);
// - integers and numbers: minimum, maximum, exclusiveMinimum,
//   exclusiveMaximum;
// - anyOf; oneOf when its branches cannot both match (different types, or
//   objects told apart by a required property's const or enum values);
//   allOf of one schema; local $ref ("#", "#/$defs/...", any JSON pointer
//   into the document), recursion included;
// - annotations are ignored (title, description, default, examples,
//   $schema, $id, $comment, deprecated, readOnly, writeOnly, $defs,
//   definitions).
//
// The grammar may be narrower than the schema, never wider: properties come
// in the schema's order; an object with `properties` gets no property
// beyond them (additionalProperties absent or true allows more, and none is
// what is written), an object without `properties` any members; a schema
// without `type` takes the type its keywords imply; number ranges have
// integer ends (a fractional minimum is rounded up, a fractional maximum
// down, exclusive ends move to the next integer inside); numbers and blanks
// have the bounds of json_primitives.h; enum and const values are written
// in compact JSON.

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "scheduler/constraints/grammar_builder.h"
#include "scheduler/constraints/json_primitives.h"

namespace pagoda::constraints {

// Bounds on a schema's shape: past them, INVALID_ARGUMENT.
inline constexpr int kMaxSchemaDepth = 32;      // Nested subschemas.
inline constexpr int kMaxSchemaProperties = 256;  // Per object.
inline constexpr int kMaxSchemaCount = 4096;  // minItems, maxItems, minLength, maxLength.

// Adds to `g` the grammar of `schema` (parsed keeping key order, which is
// the order properties are written in) and makes it the root.
// INVALID_ARGUMENT says where ("at /properties/name: ...") and what.
absl::Status BuildJsonSchemaGrammar(const nlohmann::ordered_json& schema, const JsonGrammarOptions& options,
                                    GrammarBuilder& g);

// Adds to `g` the grammar of any JSON object (OpenAI's json_object) and
// makes it the root.
void BuildJsonObjectGrammar(const JsonGrammarOptions& options, GrammarBuilder& g);

}  // namespace pagoda::constraints

#endif  // PAGODA_SCHEDULER_CONSTRAINTS_JSON_SCHEMA_H_
