// The parsed template: expressions and statements as Jinja2's parser builds
// them (jinja2/nodes.py), each with its source line for error messages.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace moelsp::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct CallArgs {
  std::vector<ExprPtr> pos;
  std::vector<std::pair<std::string, ExprPtr>> kw;
};

enum class ExprKind : uint8_t {
  Literal,  // value
  Name,     // name
  List,     // items (tuple: is_tuple)
  Dict,     // keys/items pairs in `pairs`
  Attr,     // a.name
  Item,     // a[b]
  Slice,    // a[b:c:d] (missing parts null)
  Call,     // a(args)
  Filter,   // a | name(args); `a` null inside {% filter %} and set blocks
  Test,     // a is [not] name(args)
  Unary,    // op: "-", "+", "not"
  Binary,   // op: + - * / // % ** ~ and or
  Compare,  // a op1 b op2 c …
  Cond,     // a if b else c
};

struct Expr {
  ExprKind kind;
  int line = 0;
  Value value;                                     // Literal
  std::string name;                                // Name, Attr, Filter, Test; Unary/Binary op
  std::vector<ExprPtr> items;                      // List; Compare operands; Slice [start, stop, step]
  std::vector<std::pair<ExprPtr, ExprPtr>> pairs;  // Dict
  std::vector<std::string> ops;                    // Compare operators
  ExprPtr a, b, c;                                 // operands, as each kind documents
  CallArgs args;                                   // Call, Filter, Test
  bool is_tuple = false;                           // List
  bool negated = false;                            // Test

  Expr(ExprKind k, int l) : kind(k), line(l) {}
};

enum class StmtKind : uint8_t {
  Text,         // text
  Output,       // {{ expr }}
  If,           // branches (cond, body); else_body
  For,          // targets in expr [if cond]: body [else else_body]
  Set,          // targets (or ns.attr) = expr
  SetBlock,     // {% set name | filters %}body{% endset %}
  Macro,        // {% macro name(params) %}body
  CallBlock,    // {% call(params) expr %}body: expr called with `caller`
  FilterBlock,  // {% filter f %}body
  With,         // {% with assignments %}body
  Break,
  Continue,
};

struct Param {
  std::string name;
  ExprPtr default_value;  // null: required (undefined when missing)
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;                                // Text; SetBlock/Macro name; Set: ns attribute
  ExprPtr expr;                                    // Output, For iterable, Set value, CallBlock call
  ExprPtr cond;                                    // For's `if`
  std::vector<std::string> targets;                // For, Set (several: unpacking), With names
  bool unpack = false;                             // targets written as a tuple
  std::vector<std::pair<ExprPtr, Body>> branches;  // If: if/elif; With: (value, {}) per target
  Body body, else_body;
  std::vector<Param> params;     // Macro, CallBlock
  std::vector<ExprPtr> filters;  // SetBlock, FilterBlock: Filter exprs applied in order

  Stmt(StmtKind k, int l) : kind(k), line(l) {}
};

struct Program {
  Body body;
};

// Parses a template; throws Error with the line for a syntax error or a
// filter/test Jinja does not know (outside `if`, as Jinja checks).
std::unique_ptr<Program> parse(const std::string& source);

}  // namespace moelsp::jinja
