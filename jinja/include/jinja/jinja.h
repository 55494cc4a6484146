// A Jinja2 interpreter for chat templates: parse once, render with
// variables. Behaves as Jinja2 3.1 in the environment HuggingFace
// transformers renders chat templates with (docs/chat-templates.md).
#pragma once

#include <memory>
#include <string>
#include <unordered_map>

#include "builtins.h"
#include "value.h"

namespace moelsp::jinja {

struct Program;

class Template {
 public:
  // Throws Error (with the line) when the template does not parse.
  explicit Template(const std::string& source);
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;
  ~Template();

  // Throws Error (with the line) when the template fails while running.
  std::string render(std::unordered_map<std::string, Value> variables, Clock clock = {}) const;

 private:
  std::unique_ptr<Program> program_;
};

}  // namespace moelsp::jinja
