#include "interpreter.h"

#include <new>

#include "jinja/jinja.h"

namespace moelsp::jinja {

namespace {

// Loop iterations + calls per render; a real chat needs thousands. The
// fuzzing build (ASan + UBSan + libFuzzer, ~20× slower) gets fewer, so a
// hostile loop ends within libFuzzer's 10 s timeout rather than as a finding.
#ifdef MOELSP_FUZZING
constexpr int64_t kBudget = 200'000;
#else
constexpr int64_t kBudget = 10'000'000;
#endif
constexpr int kMaxCallDepth = 100;         // nested macro calls
constexpr size_t kMaxOutput = 256u << 20;  // bytes one render may print

// A macro, or the body of a {% call %} block passed to one as `caller`.
class Macro : public Object {
 public:
  Macro(const Stmt& def, std::shared_ptr<Scope> closure) : def_(def), closure_(std::move(closure)) {}
  std::string type_name() const override { return "Macro"; }
  std::string repr() const override { return "<Macro '" + name() + "'>"; }
  bool callable() const override { return true; }

  Value call(Interpreter& in, Args& args) override {
    Interpreter::CallDepth depth(in);
    auto scope = std::make_shared<Scope>();
    scope->parent = closure_;
    bind_params(in, args, *scope);
    return Value(in.capture(def_.body, scope));
  }

 private:
  const Stmt& def_;
  std::shared_ptr<Scope> closure_;

  std::string name() const { return def_.kind == StmtKind::Macro ? def_.text : "caller"; }

  // Positional arguments fill parameters in order, keywords by name,
  // defaults (evaluated now, in the macro's scope) the rest; a parameter
  // left over is undefined. Extras are kept in varargs/kwargs.
  void bind_params(Interpreter& in, Args& args, Scope& scope) const {
    const auto& params = def_.params;
    std::vector<Value> varargs;
    std::vector<std::pair<Value, Value>> kwargs;
    for (size_t i = params.size(); i < args.pos.size(); ++i) varargs.push_back(args.pos[i]);
    for (auto& [k, v] : args.kw) {
      if (k == "caller") {
        scope.vars["caller"] = v;
        continue;
      }
      bool known = false;
      for (size_t i = 0; i < params.size(); ++i)
        if (params[i].name == k) {
          if (i < args.pos.size()) throw Error("macro '" + name() + "' got multiple values for argument '" + k + "'");
          known = true;
        }
      if (!known) kwargs.emplace_back(Value(k), v);
    }
    for (size_t i = 0; i < params.size(); ++i) {
      const Value* given = args.find(i, params[i].name);
      Value v;
      if (given) v = *given;
      else if (params[i].default_value) v = eval_default(in, *params[i].default_value, scope);
      else v = Value::undefined("the argument '" + params[i].name + "' of macro '" + name() + "' was not given");
      scope.vars[params[i].name] = std::move(v);
    }
    scope.vars["varargs"] = Value::tuple(std::move(varargs));
    scope.vars["kwargs"] = Value::dict(std::move(kwargs));
  }

  // Defaults see the parameters bound before them: evaluated in a copy of
  // the scope being filled.
  Value eval_default(Interpreter& in, const Expr& e, const Scope& scope) const {
    return in.eval_in(e, std::make_shared<Scope>(scope));
  }
};

// `loop` inside a for body.
class Loop : public Object {
 public:
  Loop(std::shared_ptr<const std::vector<Value>> items, size_t index) : items_(std::move(items)), i_(index) {}
  std::string type_name() const override { return "LoopContext"; }
  std::string repr() const override {
    return "<LoopContext " + std::to_string(i_ + 1) + "/" + std::to_string(items_->size()) + ">";
  }

  Value attr(std::string_view name) const override {
    const auto n = int64_t(items_->size()), i = int64_t(i_);
    if (name == "index") return Value(i + 1);
    if (name == "index0") return Value(i);
    if (name == "revindex") return Value(n - i);
    if (name == "revindex0") return Value(n - i - 1);
    if (name == "first") return Value(i == 0);
    if (name == "last") return Value(i == n - 1);
    if (name == "length") return Value(n);
    if (name == "depth") return Value(1);
    if (name == "depth0") return Value(0);
    if (name == "previtem") return i > 0 ? (*items_)[i_ - 1] : Value::undefined("there is no previous item");
    if (name == "nextitem") return i + 1 < n ? (*items_)[i_ + 1] : Value::undefined("there is no next item");
    if (name == "cycle") {
      const size_t at = i_;
      return Value::object(std::make_shared<Function>("cycle", [at](Interpreter&, Args& a) {
        if (a.pos.empty()) throw Error("no items for cycling given");
        return a.pos[at % a.pos.size()];
      }));
    }
    return Object::attr(name);
  }

 private:
  std::shared_ptr<const std::vector<Value>> items_;
  size_t i_;
};

}  // namespace

Scope::~Scope() {
  DeferredRelease release;
  for (auto& [name, v] : vars) release.add(v);
}

const Value* Scope::find(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent.get()) {
    const auto it = s->vars.find(name);
    if (it != s->vars.end()) return &it->second;
  }
  return nullptr;
}

Interpreter::Interpreter(const Program& program, std::shared_ptr<Scope> globals, Clock clock)
    : program_(program), scope_(std::move(globals)), clock_(clock), budget_(kBudget) {}

Interpreter::CallDepth::CallDepth(Interpreter& i) : in(i) {
  if (++in.call_depth_ > kMaxCallDepth) {
    --in.call_depth_;
    throw Error("macro calls nest deeper than " + std::to_string(kMaxCallDepth));
  }
  in.charge();
}

Interpreter::CallDepth::~CallDepth() { --in.call_depth_; }

void Interpreter::charge(int64_t units) {
  budget_ -= units;
  if (budget_ < 0) throw Error("the template takes too long to run (over " + std::to_string(kBudget) + " steps)");
}

std::string Interpreter::render() {
  // The template's top level runs in a scope of its own above the globals,
  // so its `set`s do not change the caller's variables.
  auto top = std::make_shared<Scope>();
  top->parent = scope_;
  try {
    std::string out = capture(program_.body, top);
    break_cycles();
    return out;
  } catch (...) {
    break_cycles();
    throw;
  }
}

void Interpreter::break_cycles() {
  // Everything is held while being emptied, so no emptying frees a chain.
  std::vector<std::shared_ptr<Scope>> scopes;
  std::vector<std::shared_ptr<DictData>> dicts;
  for (const auto& w : closures_)
    if (auto s = w.lock()) scopes.push_back(std::move(s));
  for (const auto& w : namespaces_)
    if (auto d = w.lock()) dicts.push_back(std::move(d));
  closures_.clear();
  namespaces_.clear();
  DeferredRelease release;
  for (auto& s : scopes)
    for (auto& [name, v] : s->vars) release.add(v);
  for (auto& d : dicts)
    for (auto& [k, v] : d->items) {
      release.add(k);
      release.add(v);
    }
  for (auto& s : scopes) s->vars.clear();
  for (auto& d : dicts) d->items.clear();
}

std::string Interpreter::capture(const Body& body, std::shared_ptr<Scope> scope) {
  std::string buf;
  std::string* saved_out = out_;
  std::shared_ptr<Scope> saved_scope = std::move(scope_);
  out_ = &buf;
  scope_ = std::move(scope);
  try {
    exec(body);
  } catch (...) {
    out_ = saved_out;
    scope_ = std::move(saved_scope);
    throw;
  }
  out_ = saved_out;
  scope_ = std::move(saved_scope);
  return buf;
}

Value Interpreter::eval_in(const Expr& e, std::shared_ptr<Scope> scope) {
  std::shared_ptr<Scope> saved = std::move(scope_);
  scope_ = std::move(scope);
  try {
    Value v = eval(e);
    scope_ = std::move(saved);
    return v;
  } catch (...) {
    scope_ = std::move(saved);
    throw;
  }
}

Interpreter::Flow Interpreter::exec(const Body& body) {
  for (const StmtPtr& s : body) {
    const Flow f = exec(*s);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Interpreter::Flow Interpreter::in_child_scope(const Body& body) {
  auto child = std::make_shared<Scope>();
  child->parent = scope_;
  std::shared_ptr<Scope> saved = scope_;
  scope_ = child;
  try {
    const Flow f = exec(body);
    scope_ = saved;
    return f;
  } catch (...) {
    scope_ = saved;
    throw;
  }
}

Interpreter::Flow Interpreter::exec(const Stmt& s) {
  try {
    switch (s.kind) {
      case StmtKind::Text: *out_ += s.text; break;
      case StmtKind::Output: *out_ += to_str(eval(*s.expr)); break;
      case StmtKind::If:
        for (const auto& [cond, body] : s.branches)
          if (truthy(eval(*cond))) return exec(body);
        return exec(s.else_body);
      case StmtKind::For: return exec_for(s);
      case StmtKind::Set: exec_set(s); break;
      case StmtKind::SetBlock: {
        auto child = std::make_shared<Scope>();
        child->parent = scope_;
        scope_->vars[s.text] = Value(apply_filters(s.filters, capture(s.body, child)));
        break;
      }
      case StmtKind::Macro:
        scope_->vars[s.text] = Value::object(std::make_shared<Macro>(s, scope_));
        closures_.push_back(scope_);
        break;
      case StmtKind::CallBlock: exec_call_block(s); break;
      case StmtKind::FilterBlock: {
        auto child = std::make_shared<Scope>();
        child->parent = scope_;
        *out_ += apply_filters(s.filters, capture(s.body, child));
        break;
      }
      case StmtKind::With: {
        auto child = std::make_shared<Scope>();
        child->parent = scope_;
        for (size_t i = 0; i < s.targets.size(); ++i) child->vars[s.targets[i]] = eval(*s.branches[i].first);
        *out_ += capture(s.body, child);
        break;
      }
      case StmtKind::Break: return Flow::Break;
      case StmtKind::Continue: return Flow::Continue;
    }
  } catch (Error& e) {
    if (e.line == 0) e.line = s.line;
    throw;
  } catch (const std::bad_alloc&) {
    // A safety net: every allocation a template can size is checked first.
    throw Error("out of memory", s.line);
  } catch (const std::exception& e) {
    throw Error(std::string("internal error: ") + e.what(), s.line);
  }
  if (out_->size() > kMaxOutput) throw Error("the template's output is larger than 256 MiB", s.line);
  return Flow::Normal;
}

void Interpreter::bind(const Stmt& s, const Value& v) {
  if (!s.unpack) {
    scope_->vars[s.targets[0]] = v;
    return;
  }
  if (v.is_undefined()) fail_undefined(v);
  const std::vector<Value> parts = iterate(v);
  if (parts.size() != s.targets.size())
    throw Error(parts.size() > s.targets.size()
                    ? "too many values to unpack (expected " + std::to_string(s.targets.size()) + ")"
                    : "not enough values to unpack (expected " + std::to_string(s.targets.size()) + ", got " +
                          std::to_string(parts.size()) + ")");
  for (size_t i = 0; i < parts.size(); ++i) scope_->vars[s.targets[i]] = parts[i];
}

Interpreter::Flow Interpreter::exec_for(const Stmt& s) {
  const Value seq = eval(*s.expr);
  if (seq.is_none() || seq.type() == Type::Namespace || seq.type() == Type::Object || seq.is_number())
    throw Error("'" + type_name(seq) + "' object is not iterable");
  std::vector<Value> all = iterate(seq);
  std::shared_ptr<Scope> saved = scope_;
  auto items = std::make_shared<std::vector<Value>>();
  try {
    // `for x in xs if cond`: filtered first, so loop.length/last count the kept items.
    for (Value& v : all) {
      charge();
      if (s.cond) {
        scope_ = std::make_shared<Scope>();
        scope_->parent = saved;
        bind(s, v);
        const bool keep = truthy(eval(*s.cond));
        scope_ = saved;
        if (!keep) continue;
      }
      items->push_back(std::move(v));
    }
    if (items->empty()) {
      scope_ = saved;
      return in_child_scope(s.else_body);
    }
    for (size_t i = 0; i < items->size(); ++i) {
      charge();
      scope_ = std::make_shared<Scope>();  // each iteration starts from the enclosing scope
      scope_->parent = saved;
      bind(s, (*items)[i]);
      scope_->vars["loop"] = Value::object(std::make_shared<Loop>(items, i));
      if (exec(s.body) == Flow::Break) break;
    }
  } catch (...) {
    scope_ = saved;
    throw;
  }
  scope_ = saved;
  return Flow::Normal;
}

void Interpreter::exec_set(const Stmt& s) {
  Value v = eval(*s.expr);
  if (s.text.empty()) {
    bind(s, v);
    return;
  }
  const Value target = lookup(s.targets[0]);  // {% set ns.attr = v %}
  if (target.type() != Type::Namespace) throw Error("cannot assign attribute on non-namespace object");
  target.dict().set(Value(s.text), std::move(v));
}

void Interpreter::exec_call_block(const Stmt& s) {
  const Expr& call = *s.expr;
  Value callee = eval(*call.a);
  Args args = eval_args(call.args);
  args.kw.emplace_back("caller", Value::object(std::make_shared<Macro>(s, scope_)));
  closures_.push_back(scope_);
  *out_ += to_str(call_value(*this, callee, args));
}

std::string Interpreter::apply_filters(const std::vector<ExprPtr>& filters, std::string text) {
  Value v(std::move(text));
  for (const ExprPtr& f : filters) {
    Args args = eval_args(f->args);
    v = apply_filter(*this, f->name, v, args);
  }
  return to_str(v);
}

Value Interpreter::lookup(const std::string& name) const {
  if (const Value* v = scope_->find(name)) return *v;
  Value g = make_global(name);
  if (!g.is_undefined()) return g;
  return Value::undefined("'" + name + "' is undefined");
}

Value Interpreter::eval(const Expr& e) {
  try {
    return eval_inner(e);
  } catch (Error& err) {
    if (err.line == 0) err.line = e.line;
    throw;
  }
}

Args Interpreter::eval_args(const CallArgs& a) {
  Args args;
  for (const ExprPtr& p : a.pos) args.pos.push_back(eval(*p));
  for (const auto& [k, v] : a.kw) args.kw.emplace_back(k, eval(*v));
  return args;
}

Value Interpreter::eval_compare(const Expr& e) {
  Value left = eval(*e.a);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value right = eval(*e.items[i]);
    const std::string& op = e.ops[i];
    bool ok;
    if (op == "==") ok = equal(left, right);
    else if (op == "!=") ok = !equal(left, right);
    else if (op == "<") ok = less(left, right);
    else if (op == ">") ok = less(right, left);
    else if (op == "<=") ok = !less(right, left);
    else if (op == ">=") ok = !less(left, right);
    else if (op == "in") ok = contains(right, left);
    else ok = !contains(right, left);  // not in
    if (!ok) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

Value Interpreter::eval_inner(const Expr& e) {
  switch (e.kind) {
    case ExprKind::Literal: return e.value;
    case ExprKind::Name: return lookup(e.name);
    case ExprKind::List: {
      std::vector<Value> items;
      for (const ExprPtr& x : e.items) items.push_back(eval(*x));
      return e.is_tuple ? Value::tuple(std::move(items)) : Value::list(std::move(items));
    }
    case ExprKind::Dict: {
      Value d = Value::dict({});
      for (const auto& [k, v] : e.pairs) d.dict().set(eval(*k), eval(*v));
      return d;
    }
    case ExprKind::Attr: return get_attr(eval(*e.a), e.name);
    case ExprKind::Item: return get_item(eval(*e.a), eval(*e.b));
    case ExprKind::Slice: {
      const auto part = [&](size_t i) { return e.items[i] ? eval(*e.items[i]) : Value::none(); };
      return slice(eval(*e.a), part(0), part(1), part(2));
    }
    case ExprKind::Call: {
      Value callee = eval(*e.a);
      Args args = eval_args(e.args);
      return call_value(*this, callee, args);
    }
    case ExprKind::Filter: {
      Value input = eval(*e.a);
      Args args = eval_args(e.args);
      return apply_filter(*this, e.name, input, args);
    }
    case ExprKind::Test: {
      Value input = eval(*e.a);
      Args args = eval_args(e.args);
      return Value(apply_test(*this, e.name, input, args) != e.negated);
    }
    case ExprKind::Unary: {
      Value v = eval(*e.a);
      if (e.name == "not") return Value(!truthy(v));
      if (v.is_undefined()) fail_undefined(v);
      if (!v.is_number()) throw Error("bad operand type for unary " + e.name + ": '" + type_name(v) + "'");
      if (e.name == "+") return v.type() == Type::Bool ? Value(v.as_int()) : v;
      if (v.type() == Type::Float) return Value(-v.as_float());
      if (v.as_int() == INT64_MIN) throw Error("integer overflow: the result does not fit in 64 bits");
      return Value(-v.as_int());
    }
    case ExprKind::Binary: {
      if (e.name == "and" || e.name == "or") {
        Value a = eval(*e.a);
        if (truthy(a) == (e.name == "or")) return a;
        return eval(*e.b);
      }
      Value a = eval(*e.a);
      return binary_op(e.name, a, eval(*e.b));
    }
    case ExprKind::Compare: return eval_compare(e);
    case ExprKind::Cond:
      if (truthy(eval(*e.b))) return eval(*e.a);
      if (e.c) return eval(*e.c);
      return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined");
  }
  return Value();
}

}  // namespace moelsp::jinja

namespace moelsp::jinja {

Template::Template(const std::string& source) : program_(parse(source)) {}
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;
Template::~Template() = default;

std::string Template::render(std::unordered_map<std::string, Value> variables, Clock clock) const {
  auto globals = std::make_shared<Scope>();
  globals->vars = std::move(variables);
  return Interpreter(*program_, std::move(globals), clock).render();
}

}  // namespace moelsp::jinja
