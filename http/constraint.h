// Output constraints as each API asks for them, compiled for the engine
// (engine/grammar.h, assist/json_schema.h). A grammar or schema that cannot
// be compiled is the client's mistake: a 400 naming the field and the
// problem. Internal to http/.
#pragma once

#include "engine/grammar.h"
#include "fields.h"

namespace moelsp::http {

// llama.cpp's /completion fields: `grammar` (GBNF text) or `json_schema`
// (a schema object); both at once is refused.
OutputConstraint llama_constraint(const json& j, const std::string& body);

// OpenAI chat's `response_format`: {type: text}, {type: json_object} (any
// object; llama.cpp's {type: json_object, schema} too) or {type:
// json_schema, json_schema: {name, schema, strict}}.
OutputConstraint response_format(const json& j, const std::string& body);

// Responses' `text.format`: {type: text | json_object | json_schema, name, schema, strict}.
OutputConstraint responses_text_format(const json& j, const std::string& body);

// `j` is the parsed body, `body` its text: a schema is read from the text
// again, keeping its properties in the order the client wrote them (json
// sorts keys; the order is the order the model writes them in, which
// matters to a schema that asks for reasoning before an answer).

}  // namespace moelsp::http
