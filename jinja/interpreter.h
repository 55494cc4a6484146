// Runs a parsed template. Scoping follows Jinja2: a for loop's body and a
// macro's body get scopes of their own (a `set` inside them is not seen
// outside, hence namespace()), `if` bodies do not; a macro sees the scope
// it was defined in as it is when the macro runs.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ast.h"
#include "jinja/builtins.h"
#include "jinja/value.h"

namespace moelsp::jinja {

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
  ~Scope();  // releases its values without recursion (DeferredRelease)

  const Value* find(const std::string& name) const;
};

// A builtin function or method: a name and what calling it does.
class Function : public Object {
 public:
  using Fn = std::function<Value(Interpreter&, Args&)>;
  Function(std::string name, Fn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  std::string type_name() const override { return "builtin_function_or_method"; }
  std::string repr() const override { return "<built-in function " + name_ + ">"; }
  bool callable() const override { return true; }
  Value call(Interpreter& in, Args& args) override { return fn_(in, args); }

 private:
  std::string name_;
  Fn fn_;
};

class Interpreter {
 public:
  // `globals` holds the render's variables (messages, tools, …).
  Interpreter(const Program& program, std::shared_ptr<Scope> globals, Clock clock);

  std::string render();

  Value eval(const Expr& e);
  Value eval_in(const Expr& e, std::shared_ptr<Scope> scope);
  // Runs `body` in `scope` and returns what it printed.
  std::string capture(const Body& body, std::shared_ptr<Scope> scope);
  const Clock& clock() const { return clock_; }
  // Counts work (loop iterations, calls) so a hostile template cannot run
  // forever, and nested calls so it cannot exhaust the stack.
  void charge(int64_t units = 1);
  // A namespace can end up holding itself; the render empties it at the end.
  void track_namespace(const Value& ns) { namespaces_.push_back(ns.dict_ref()); }
  struct CallDepth {
    Interpreter& in;
    explicit CallDepth(Interpreter& i);
    ~CallDepth();
  };

 private:
  enum class Flow { Normal, Break, Continue };

  const Program& program_;
  std::shared_ptr<Scope> scope_;
  std::string* out_ = nullptr;
  Clock clock_;
  int64_t budget_;
  int call_depth_ = 0;
  // A macro holds the scope it was defined in, which holds the macro: these
  // cycles (and namespaces holding themselves) are broken when the render
  // ends, or every render of such a template would leak them.
  std::vector<std::weak_ptr<Scope>> closures_;
  std::vector<std::weak_ptr<DictData>> namespaces_;
  void break_cycles();

  Flow exec(const Body& body);
  Flow exec(const Stmt& s);
  Flow exec_for(const Stmt& s);
  void exec_set(const Stmt& s);
  void exec_call_block(const Stmt& s);
  std::string apply_filters(const std::vector<ExprPtr>& filters, std::string text);
  Flow in_child_scope(const Body& body);
  void bind(const Stmt& s, const Value& v);

  Value eval_inner(const Expr& e);
  Value eval_call(const Expr& e);
  Value eval_compare(const Expr& e);
  Args eval_args(const CallArgs& a);
  Value lookup(const std::string& name) const;
};

// Binary operators and comparisons as Python applies them.
Value binary_op(const std::string& op, const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);
Value slice(const Value& v, const Value& start, const Value& stop, const Value& step);

}  // namespace moelsp::jinja
