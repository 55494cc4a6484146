// A recursive-descent parser following jinja2/parser.py rule by rule, so
// precedence and the odd corners (filters binding tighter than `+`, `is`
// tests taking one bare argument, `for … in x if c`) come out the same.
#include <algorithm>
#include <initializer_list>

#include "ast.h"
#include "jinja/builtins.h"
#include "lexer.h"

namespace moelsp::jinja {

namespace {

constexpr int kMaxDepth = 200;  // nesting of expressions and blocks; a deeper template is refused

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  std::unique_ptr<Program> program() {
    auto p = std::make_unique<Program>();
    p->body = subparse({});
    if (cur().type != Tok::Eof) fail("unexpected '" + cur().text + "'");
    return p;
  }

 private:
  std::vector<Token> t_;
  size_t i_ = 0;
  int soft_ = 0;   // inside an `if` or `a if b else c`: unknown filters fail only when run
  int loops_ = 0;  // enclosing for loops (break/continue allowed)
  int depth_ = 0;  // recursion guard
  std::vector<std::pair<std::string, int>> open_;  // open block tags, for "not closed" messages

  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  void next() {
    if (i_ + 1 < t_.size()) ++i_;
  }
  [[noreturn]] void fail(const std::string& msg) const { throw Error(msg, cur().line); }

  bool is_op(std::string_view op) const { return cur().type == Tok::Op && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().type == Tok::Name && cur().text == n; }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case Tok::Eof: return "end of template";
      case Tok::BlockEnd: return "end of statement block";
      case Tok::VarEnd: return "end of print statement";
      case Tok::Text: return "template text";
      case Tok::String: return "string";
      default: return "'" + t.text + "'";
    }
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail("expected '" + std::string(op) + "', got " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().type != Tok::Name) fail("expected a name, got " + describe(cur()));
    std::string n = cur().text;
    next();
    return n;
  }
  void expect(Tok type, const char* what) {
    if (cur().type != type) fail(std::string("expected ") + what + ", got " + describe(cur()));
    next();
  }

  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxDepth) p.fail("the template nests too deeply");
    }
    ~DepthGuard() { --p.depth_; }
  };

  ExprPtr make(ExprKind k) const { return std::make_unique<Expr>(k, cur().line); }

  // ---- statements -------------------------------------------------------

  // Statements up to a block tag whose name is in `ends` (left unconsumed:
  // the current token is that name) or the end of the template.
  Body subparse(std::initializer_list<std::string_view> ends) {
    Body body;
    while (cur().type != Tok::Eof) {
      if (cur().type == Tok::Text) {
        auto s = std::make_unique<Stmt>(StmtKind::Text, cur().line);
        s->text = cur().text;
        body.push_back(std::move(s));
        next();
      } else if (cur().type == Tok::VarBegin) {
        next();
        auto s = std::make_unique<Stmt>(StmtKind::Output, cur().line);
        s->expr = tuple_expr(true, {}, false);
        expect(Tok::VarEnd, "'}}'");
        body.push_back(std::move(s));
      } else if (cur().type == Tok::BlockBegin) {
        next();
        if (cur().type == Tok::Name && std::find(ends.begin(), ends.end(), cur().text) != ends.end()) return body;
        body.push_back(statement());
        expect(Tok::BlockEnd, "'%}'");
      } else {
        fail("unexpected " + describe(cur()));
      }
    }
    if (ends.size() != 0) {
      std::string msg = "unexpected end of template, expected '" + std::string(*ends.begin()) + "'";
      if (!open_.empty())
        msg += " (the '" + open_.back().first + "' on line " + std::to_string(open_.back().second) + " is not closed)";
      throw Error(msg, t_.back().line);
    }
    return body;
  }

  // After a statement's header: its `%}`, then its body up to one of `ends`.
  Body block_body(std::initializer_list<std::string_view> ends) {
    expect(Tok::BlockEnd, "'%}'");
    return subparse(ends);
  }

  StmtPtr statement() {
    DepthGuard guard(*this);
    if (cur().type != Tok::Name) fail("expected a statement name, got " + describe(cur()));
    const std::string tag = cur().text;
    const int line = cur().line;
    open_.emplace_back(tag, line);
    next();
    StmtPtr s;
    if (tag == "if") s = if_stmt(line);
    else if (tag == "for") s = for_stmt(line);
    else if (tag == "set") s = set_stmt(line);
    else if (tag == "macro") s = macro_stmt(line);
    else if (tag == "call") s = call_block(line);
    else if (tag == "filter") s = filter_block(line);
    else if (tag == "with") s = with_stmt(line);
    else if (tag == "generation") s = generation_block(line);
    else if (tag == "break" || tag == "continue") s = loop_control(tag, line);
    else if (tag == "include" || tag == "import" || tag == "from" || tag == "extends" || tag == "block")
      throw Error("'" + tag + "' is not supported in chat templates (there is nothing to load)", line);
    else if (tag.rfind("end", 0) == 0 || tag == "elif" || tag == "else") throw Error("unexpected '" + tag + "'", line);
    else throw Error("unknown tag '" + tag + "'", line);
    open_.pop_back();
    return s;
  }

  StmtPtr if_stmt(int line) {
    auto s = std::make_unique<Stmt>(StmtKind::If, line);
    ++soft_;  // Jinja checks filters inside `if` only when they run
    while (true) {
      ExprPtr cond = tuple_expr(false, {}, false);
      Body body = block_body({"elif", "else", "endif"});
      s->branches.emplace_back(std::move(cond), std::move(body));
      if (skip_name("elif")) continue;
      if (skip_name("else")) {
        s->else_body = block_body({"endif"});
        next();
      } else {
        next();  // endif
      }
      break;
    }
    --soft_;
    return s;
  }

  // Runs `f` for a body that Jinja compiles in a frame of its own: outside
  // the `if` softness, and (for macros) outside enclosing loops.
  template <class F>
  auto inner_frame(bool new_loop_scope, F f) {
    const int soft = soft_, loops = loops_;
    soft_ = 0;
    if (new_loop_scope) loops_ = 0;
    auto r = f();
    soft_ = soft;
    loops_ = loops;
    return r;
  }

  StmtPtr for_stmt(int line) {
    auto s = std::make_unique<Stmt>(StmtKind::For, line);
    assign_targets(*s, "in");
    if (!skip_name("in")) fail("expected 'in', got " + describe(cur()));
    s->expr = tuple_expr(false, {"recursive"}, false);
    if (skip_name("if")) s->cond = expression(true);
    if (is_name("recursive")) fail("recursive loops are not supported");
    ++loops_;
    s->body = inner_frame(false, [&] { return block_body({"endfor", "else"}); });
    --loops_;
    if (skip_name("else")) {
      s->else_body = inner_frame(false, [&] { return block_body({"endfor"}); });
    }
    next();  // endfor
    return s;
  }

  // Names, or a tuple of names, to assign to; `end` ends a bare tuple.
  void assign_targets(Stmt& s, std::string_view end) {
    bool parens = skip_op("(");
    while (true) {
      if (cur().type != Tok::Name) fail("expected a name to assign to, got " + describe(cur()));
      s.targets.push_back(expect_name());
      if (!skip_op(",")) break;
      s.unpack = true;
      if (is_name(end) || is_op("=") || is_op(")")) break;
    }
    if (parens) {
      expect_op(")");
      s.unpack = true;
    }
    for (const auto& n : s.targets)
      if (n == "true" || n == "false" || n == "none" || n == "True" || n == "False" || n == "None")
        fail("cannot assign to '" + n + "'");
  }

  StmtPtr set_stmt(int line) {
    auto s = std::make_unique<Stmt>(StmtKind::Set, line);
    if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == ".") {
      s->targets.push_back(expect_name());
      next();                   // .
      s->text = expect_name();  // {% set ns.attr = value %}
      expect_op("=");
      s->expr = tuple_expr(true, {}, false);
      return s;
    }
    assign_targets(*s, "");
    if (skip_op("=")) {
      s->expr = tuple_expr(true, {}, false);
      return s;
    }
    if (s->unpack || s->targets.size() != 1) fail("a set block assigns one name");
    s->kind = StmtKind::SetBlock;
    s->text = s->targets[0];
    if (is_op("|")) filter_chain(*s);
    s->body = inner_frame(false, [&] { return block_body({"endset"}); });
    next();
    return s;
  }

  // `| f(args) | g …` with no input, for set and filter blocks.
  void filter_chain(Stmt& s) {
    do {
      s.filters.push_back(filter(nullptr));
    } while (is_op("|"));
  }

  std::vector<Param> signature() {
    std::vector<Param> params;
    expect_op("(");
    while (!skip_op(")")) {
      if (!params.empty()) expect_op(",");
      if (skip_op(")")) break;
      Param p;
      p.name = expect_name();
      if (skip_op("=")) p.default_value = expression(true);
      params.push_back(std::move(p));
    }
    return params;
  }

  StmtPtr macro_stmt(int line) {
    auto s = std::make_unique<Stmt>(StmtKind::Macro, line);
    s->text = expect_name();
    s->params = signature();
    s->body = inner_frame(true, [&] { return block_body({"endmacro"}); });
    next();
    return s;
  }

  StmtPtr call_block(int line) {
    auto s = std::make_unique<Stmt>(StmtKind::CallBlock, line);
    if (is_op("(")) s->params = signature();
    s->expr = expression(true);
    if (s->expr->kind != ExprKind::Call) fail("expected a call after 'call'");
    s->body = inner_frame(true, [&] { return block_body({"endcall"}); });
    next();
    return s;
  }

  StmtPtr filter_block(int line) {
    auto s = std::make_unique<Stmt>(StmtKind::FilterBlock, line);
    s->filters.push_back(filter_body(nullptr));
    while (is_op("|")) s->filters.push_back(filter(nullptr));
    s->body = inner_frame(false, [&] { return block_body({"endfilter"}); });
    next();
    return s;
  }

  StmtPtr with_stmt(int line) {
    auto s = std::make_unique<Stmt>(StmtKind::With, line);
    while (cur().type != Tok::BlockEnd) {
      if (!s->targets.empty()) expect_op(",");
      s->targets.push_back(expect_name());
      expect_op("=");
      s->branches.emplace_back(expression(true), Body());
    }
    s->body = inner_frame(false, [&] { return block_body({"endwith"}); });
    next();
    return s;
  }

  // HuggingFace's {% generation %} marks the assistant's text for training
  // masks; for rendering it is its body.
  StmtPtr generation_block(int line) {
    auto s = std::make_unique<Stmt>(StmtKind::With, line);
    s->body = block_body({"endgeneration"});
    next();
    return s;
  }

  StmtPtr loop_control(const std::string& tag, int line) {
    if (loops_ == 0) throw Error("'" + tag + "' outside a loop", line);
    return std::make_unique<Stmt>(tag == "break" ? StmtKind::Break : StmtKind::Continue, line);
  }

  // ---- expressions ------------------------------------------------------

  // An expression, or several separated by commas (a tuple). `ends` are
  // names that end a bare tuple (`recursive`); `parens` allows `()`.
  ExprPtr tuple_expr(bool with_cond, std::initializer_list<std::string_view> ends, bool parens) {
    auto tuple = make(ExprKind::List);
    tuple->is_tuple = true;
    bool is_tuple = false;
    while (true) {
      if (!tuple->items.empty()) expect_op(",");
      if (cur().type == Tok::VarEnd || cur().type == Tok::BlockEnd || is_op(")")) break;
      if (cur().type == Tok::Name && std::find(ends.begin(), ends.end(), cur().text) != ends.end()) break;
      tuple->items.push_back(expression(with_cond));
      if (is_op(",")) is_tuple = true;
      else break;
    }
    if (!is_tuple) {
      if (!tuple->items.empty()) return std::move(tuple->items[0]);
      if (!parens) fail("expected an expression, got " + describe(cur()));
    }
    return tuple;
  }

  ExprPtr expression(bool with_cond) { return with_cond ? cond_expr() : or_expr(); }

  ExprPtr cond_expr() {
    DepthGuard guard(*this);
    ExprPtr e = or_expr();
    while (is_name("if")) {
      auto c = make(ExprKind::Cond);
      next();
      ++soft_;
      c->b = or_expr();
      if (skip_name("else")) c->c = cond_expr();
      --soft_;
      c->a = std::move(e);
      e = std::move(c);
    }
    return e;
  }

  ExprPtr or_expr() {
    ExprPtr e = and_expr();
    while (is_name("or")) {
      auto b = make(ExprKind::Binary);
      next();
      b->name = "or";
      b->a = std::move(e);
      b->b = and_expr();
      e = std::move(b);
    }
    return e;
  }

  ExprPtr and_expr() {
    ExprPtr e = not_expr();
    while (is_name("and")) {
      auto b = make(ExprKind::Binary);
      next();
      b->name = "and";
      b->a = std::move(e);
      b->b = not_expr();
      e = std::move(b);
    }
    return e;
  }

  ExprPtr not_expr() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      auto u = make(ExprKind::Unary);
      next();
      u->name = "not";
      u->a = not_expr();
      return u;
    }
    return compare();
  }

  ExprPtr compare() {
    ExprPtr first = math1();
    auto c = make(ExprKind::Compare);
    while (true) {
      static const char* const kOps[] = {"==", "!=", "<", "<=", ">", ">="};
      std::string op;
      for (const char* o : kOps)
        if (is_op(o)) op = o;
      if (!op.empty()) next();
      else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && peek().type == Tok::Name && peek().text == "in") {
        next();
        next();
        op = "not in";
      } else break;
      c->ops.push_back(op);
      c->items.push_back(math1());
    }
    if (c->ops.empty()) return first;
    c->a = std::move(first);
    return c;
  }

  ExprPtr binary(ExprPtr lhs, std::string op, ExprPtr rhs) {
    auto b = std::make_unique<Expr>(ExprKind::Binary, lhs->line);
    b->name = std::move(op);
    b->a = std::move(lhs);
    b->b = std::move(rhs);
    return b;
  }

  ExprPtr math1() {
    ExprPtr e = concat();
    while (is_op("+") || is_op("-")) {
      std::string op = cur().text;
      next();
      e = binary(std::move(e), op, concat());
    }
    return e;
  }

  ExprPtr concat() {
    ExprPtr e = math2();
    while (skip_op("~")) e = binary(std::move(e), "~", math2());
    return e;
  }

  ExprPtr math2() {
    ExprPtr e = power();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().text;
      next();
      e = binary(std::move(e), op, power());
    }
    return e;
  }

  ExprPtr power() {
    ExprPtr e = unary(true);
    while (skip_op("**")) e = binary(std::move(e), "**", unary(true));
    return e;
  }

  ExprPtr unary(bool with_filter) {
    DepthGuard guard(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = make(ExprKind::Unary);
      e->name = cur().text;
      next();
      e->a = unary(false);
    } else {
      e = primary();
    }
    e = postfix(std::move(e));
    return with_filter ? filter_tests(std::move(e)) : std::move(e);
  }

  ExprPtr primary() {
    const Token& t = cur();
    if (t.type == Tok::Name) {
      auto e = make(ExprKind::Literal);
      if (t.text == "true" || t.text == "True") e->value = Value(true);
      else if (t.text == "false" || t.text == "False") e->value = Value(false);
      else if (t.text == "none" || t.text == "None") e->value = Value::none();
      else {
        e->kind = ExprKind::Name;
        e->name = t.text;
      }
      next();
      return e;
    }
    if (t.type == Tok::String) {
      auto e = make(ExprKind::Literal);
      std::string s;
      while (cur().type == Tok::String) {  // adjacent literals join, as in Python
        s += cur().text;
        next();
      }
      e->value = Value(std::move(s));
      return e;
    }
    if (t.type == Tok::Int || t.type == Tok::Float) {
      auto e = make(ExprKind::Literal);
      e->value = t.type == Tok::Int ? Value(t.int_value) : Value(t.float_value);
      next();
      return e;
    }
    if (skip_op("(")) {
      ExprPtr e = tuple_expr(true, {}, true);
      expect_op(")");
      return e;
    }
    if (is_op("[")) return list_literal();
    if (is_op("{")) return dict_literal();
    fail("unexpected " + describe(t));
  }

  ExprPtr list_literal() {
    auto e = make(ExprKind::List);
    expect_op("[");
    while (!skip_op("]")) {
      if (!e->items.empty()) expect_op(",");
      if (skip_op("]")) break;
      e->items.push_back(expression(true));
    }
    return e;
  }

  ExprPtr dict_literal() {
    auto e = make(ExprKind::Dict);
    expect_op("{");
    while (!skip_op("}")) {
      if (!e->pairs.empty()) expect_op(",");
      if (skip_op("}")) break;
      ExprPtr k = expression(true);
      expect_op(":");
      e->pairs.emplace_back(std::move(k), expression(true));
    }
    return e;
  }

  ExprPtr postfix(ExprPtr e) {
    while (true) {
      if (is_op(".")) {
        next();
        if (cur().type == Tok::Name) {
          auto a = make(ExprKind::Attr);
          a->name = expect_name();
          a->a = std::move(e);
          e = std::move(a);
        } else if (cur().type == Tok::Int) {  // x.0 is x[0]
          auto g = make(ExprKind::Item);
          auto k = make(ExprKind::Literal);
          k->value = Value(cur().int_value);
          next();
          g->a = std::move(e);
          g->b = std::move(k);
          e = std::move(g);
        } else {
          fail("expected a name or number after '.', got " + describe(cur()));
        }
      } else if (is_op("[")) {
        e = subscript(std::move(e));
      } else if (is_op("(")) {
        e = call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr subscript(ExprPtr obj) {
    const int line = cur().line;
    expect_op("[");
    std::vector<ExprPtr> parts;
    while (!skip_op("]")) {
      if (!parts.empty()) expect_op(",");
      parts.push_back(subscribed());
    }
    if (parts.empty()) fail("expected a subscript");
    auto g = std::make_unique<Expr>(ExprKind::Item, line);
    if (parts.size() == 1 && parts[0]->kind == ExprKind::Slice) {
      parts[0]->a = std::move(obj);
      return std::move(parts[0]);
    }
    if (parts.size() > 1)
      for (const ExprPtr& p : parts)  // x[1, :] indexes with a tuple holding a slice: nothing a template needs
        if (p->kind == ExprKind::Slice) fail("a slice inside a tuple subscript ([a, b:c]) is not supported");
    if (parts.size() == 1) {
      g->b = std::move(parts[0]);
    } else {
      g->b = std::make_unique<Expr>(ExprKind::List, line);
      g->b->is_tuple = true;
      g->b->items = std::move(parts);
    }
    g->a = std::move(obj);
    return g;
  }

  // One subscript: an expression or a slice `a:b:c` (parts optional).
  ExprPtr subscribed() {
    ExprPtr start;
    if (!is_op(":")) {
      start = expression(true);
      if (!is_op(":")) return start;
    }
    auto s = make(ExprKind::Slice);
    s->items.resize(3);
    s->items[0] = std::move(start);
    next();  // :
    if (!is_op("]") && !is_op(",") && !is_op(":")) s->items[1] = expression(true);
    if (skip_op(":") && !is_op("]") && !is_op(",")) s->items[2] = expression(true);
    return s;
  }

  void call_args(CallArgs& args) {
    expect_op("(");
    while (!skip_op(")")) {
      if (!args.pos.empty() || !args.kw.empty()) {
        expect_op(",");
        if (skip_op(")")) break;
      }
      if (is_op("*") || is_op("**")) fail("*args and **kwargs in calls are not supported");
      if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == "=") {
        std::string key = expect_name();
        next();  // =
        args.kw.emplace_back(std::move(key), expression(true));
      } else {
        if (!args.kw.empty()) fail("a positional argument follows keyword arguments");
        args.pos.push_back(expression(true));
      }
    }
  }

  ExprPtr call(ExprPtr callee) {
    auto c = make(ExprKind::Call);
    call_args(c->args);
    c->a = std::move(callee);
    return c;
  }

  ExprPtr filter_tests(ExprPtr e) {
    while (true) {
      if (is_op("|")) e = filter(std::move(e));
      else if (is_name("is")) e = test(std::move(e));
      else if (is_op("(")) e = call(std::move(e));
      else return e;
    }
  }

  ExprPtr filter(ExprPtr input) {
    expect_op("|");
    return filter_body(std::move(input));
  }

  ExprPtr filter_body(ExprPtr input) {
    auto f = make(ExprKind::Filter);
    f->name = expect_name();
    while (skip_op(".")) f->name += "." + expect_name();
    if (is_op("(")) call_args(f->args);
    if (soft_ == 0 && !has_filter(f->name)) throw Error(missing_filter_message(f->name), f->line);
    f->a = std::move(input);
    return f;
  }

  ExprPtr test(ExprPtr input) {
    auto t = make(ExprKind::Test);
    next();  // is
    t->negated = skip_name("not");
    t->name = expect_name();
    while (skip_op(".")) t->name += "." + expect_name();
    if (is_op("(")) {
      call_args(t->args);
    } else if ((cur().type == Tok::Name || cur().type == Tok::String || cur().type == Tok::Int ||
                cur().type == Tok::Float || is_op("(") || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail("tests cannot be chained with 'is'");
      t->args.pos.push_back(postfix(primary()));  // `x is divisibleby 3`: one bare argument
    }
    if (soft_ == 0 && !has_test(t->name)) throw Error(missing_test_message(t->name), t->line);
    t->a = std::move(input);
    return t;
  }
};

}  // namespace

std::unique_ptr<Program> parse(const std::string& source) { return Parser(lex(source)).program(); }

}  // namespace moelsp::jinja
