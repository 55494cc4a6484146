// The filters, tests, globals and methods templates can call: what Jinja2
// 3.1 provides, with HuggingFace's additions for chat templates
// (raise_exception, strftime_now, its own tojson).
#pragma once

#include <ctime>
#include <optional>
#include <string>
#include <string_view>

#include "value.h"

namespace moelsp::jinja {

// Filter and test lookup for the parser's check and the interpreter.
bool has_filter(std::string_view name);
bool has_test(std::string_view name);
// Why a filter/test cannot run: unknown to Jinja, or known to Jinja but not
// implemented here.
std::string missing_filter_message(std::string_view name);
std::string missing_test_message(std::string_view name);

Value apply_filter(Interpreter& in, std::string_view name, const Value& input, Args& args);
bool apply_test(Interpreter& in, std::string_view name, const Value& input, Args& args);

// Globals of every render: range, dict, namespace, joiner, cycler,
// raise_exception, strftime_now.
Value make_global(std::string_view name);

// `obj.name` and `obj[key]` as Jinja's sandbox resolves them (methods of
// str, dict and list, dict keys, list indices); undefined when absent.
Value get_attr(const Value& obj, std::string_view name);
Value get_item(const Value& obj, const Value& key);

// The clock strftime_now reads: the given time (seconds since the epoch,
// shown in UTC) for reproducible output, else the local time.
struct Clock {
  std::optional<int64_t> fixed_utc;
};

// The call of an object that may be a builtin function, macro or method.
Value call_value(Interpreter& in, const Value& callee, Args& args);

}  // namespace moelsp::jinja
