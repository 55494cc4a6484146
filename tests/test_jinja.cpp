// The Jinja interpreter (jinja/) against Python's Jinja2: the language
// pieces one by one (expected values are what Jinja2 3.1 prints in
// HuggingFace's environment), errors with their lines, and the real chat
// templates in tests/data/templates rendered for every conversation and
// compared with the outputs tools/jinja_expect.py recorded from Jinja2.
#include <filesystem>
#include <string>

#include <catch2/catch.hpp>

#include "engine/chat.h"
#include "jinja/jinja.h"
#include "test_data.h"

using namespace moelsp;
using jinja::Value;

namespace {

constexpr int64_t kNow = 1736944496;  // 2025-01-15 12:34:56 UTC, as in tools/jinja_expect.py

// `src` rendered with the variables of the JSON object `vars`.
std::string render(const std::string& src, const std::string& vars = "{}") {
  std::unordered_map<std::string, Value> v;
  const Value parsed = jinja::from_json(vars);
  for (const auto& [k, x] : parsed.dict().items) v[k.str()] = x;
  return jinja::Template(src).render(std::move(v), jinja::Clock{kNow});
}

// The error `src` fails with, as "line N: message".
std::string failure(const std::string& src, const std::string& vars = "{}") {
  try {
    render(src, vars);
  } catch (const jinja::Error& e) {
    return "line " + std::to_string(e.line) + ": " + e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("expressions follow Python and Jinja's precedence") {
  CHECK(render("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ -1 ** 2 }}") == "7 9 64 1");  // ** is left-assoc
  CHECK(render("{{ 10 / 4 }} {{ 10 // 4 }} {{ -10 // 4 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 4 / 2 }}") ==
        "2.5 2 -3 2 -2 2.0");
  CHECK(render("{{ 2 * 3 ~ 4 }}") == "64");  // ~ binds looser than *, tighter than +
  CHECK(failure("{{ 2 * 3 ~ 4 + 1 }}") == "line 1: can only concatenate str (not \"int\") to str");
  CHECK(render("{{ 'a' ~ 1 ~ none ~ true ~ 1.0 ~ [1] ~ undefined_name }}") == "a1NoneTrue1.0[1]");
  CHECK(render("{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ 1 == true }} {{ [1, 2] == [1, 2] }}") ==
        "True False True True True");
  CHECK(render("{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ none or [] }} {{ not 0 }}") == "x b [] True");
  CHECK(render("{{ 'a' in 'abc' }} {{ 'z' not in ['a'] }} {{ 'k' in {'k': 1} }} {{ 1 in [true] }}") ==
        "True True True True");
  CHECK(render("{{ 'yes' if 1 else 'no' }}|{{ 'yes' if 0 }}|{{ 'a' 'b' \"c\" }}") == "yes||abc");
  CHECK(render("{{ messages|length - 1 }}", R"({"messages": [1, 2, 3]})") == "2");  // filters bind before -
  CHECK(render("{{ 'ab' * 2 }} {{ [0] * 2 }} {{ [1] + [2] }} {{ (1,) + (2,) }} {{ true + true }}") ==
        "abab [0, 0] [1, 2] (1, 2) 2");
  CHECK(render("{{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ 1_000 }} {{ 1/3 }}") ==
        "0.30000000000000004 1e+16 1000000000000000.0 0.0001 1e-05 1000 0.3333333333333333");
  CHECK(render("{{ '%s-%05d|%.2f' % ('a', 42, 3.14159) }} {{ '%(k)s!' % {'k': 1} }}") == "a-00042|3.14 1!");
}

TEST_CASE("strings count code points and print as Python does") {
  const std::string s = R"({"s": "héllo wörld"})";
  CHECK(render("{{ s[1:] }}|{{ s[-3:] }}|{{ s[::-1] }}|{{ s|length }}|{{ s[1] }}", s) ==
        "éllo wörld|rld|dlröw olléh|11|é");
  CHECK(render(R"({{ ['it\'s', 'q"', 'a\nb', 'é'] }} {{ {'k': none, 'n': 1.5} }} {{ (1,) }})") ==
        R"(["it's", 'q"', 'a\nb', 'é'] {'k': None, 'n': 1.5} (1,))");
  CHECK(render(R"({{ '\x41\u00e9\101\q\\' }})") ==
        "Aé"
        "A\\q\\");
  CHECK(render("{{ '  a  b '.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a b c'.rsplit(' ', 1) }}") ==
        "['a', 'b'] ['a', 'b', '', 'c'] ['a b', 'c']");
  CHECK(render("{{ 'xxaxx'.strip('x') }} {{ '\\n\\nq\\n'.rstrip('\\n') }} {{ 'abc'.startswith(('x', 'a')) }} "
               "{{ 'str'.startswith('s', 1) }} {{ 'aXbX'.replace('X', '-', 1) }} {{ 'aé'.find('é') }}") ==
        "a \n\nq True False a-bX 1");
  CHECK(render("{{ '{} and {name}'.format(1, name='x') }} {{ ', '.join(['a', 'b']) }} {{ 'hello world'.title() }}") ==
        "1 and x a, b Hello World");
}

TEST_CASE("whitespace control matches trim_blocks and lstrip_blocks") {
  CHECK(render("a\n  {# c #}\nb\n  {% if true %}\n  x\n  {% endif %}\n  y {{ 1 }}\n  z\n") == "a\nb\n  x\n  y 1\n  z");
  CHECK(render("x   {{- 'a' -}}   \n   {{ 'b' }}") == "xab");
  CHECK(render("{% if true -%}\n   a\n{%- endif %}") == "a");
  CHECK(render("  {%+ if true %}b{% endif %}\n{%- if true %}c{% endif +%}\nd") == "  bc\nd");
  CHECK(render("a  {% raw %}{{ x }}{% endraw %}  b") == "a  {{ x }}  b");
  CHECK(render("x\r\ny\n") == "x\ny");  // newlines normalised, the last one dropped
}

TEST_CASE("for loops with loop variables and filtering and else and break/continue and scoping") {
  CHECK(render("{% for x in [1, 2, 3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}"
               "{{ loop.last }}{{ loop.length }}{{ loop.cycle('a', 'b') }} {% endfor %}") ==
        "103TrueFalse3a 212FalseFalse3b 321FalseTrue3a ");
  CHECK(render("{% for x in [3, 1, 2] %}{{ loop.previtem is defined }}{{ loop.nextitem }},{% endfor %}") ==
        "False1,True2,True,");
  CHECK(render("{% for a, b in [[1, 2], [3, 4]] if a > 1 %}{{ a }}{{ b }}{{ loop.length }}{% else %}none"
               "{% endfor %}{% for x in [] %}x{% else %}empty{% endfor %}") == "341empty");
  CHECK(render("{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{{ i }}{% if i == 3 %}{% break %}"
               "{% endif %}{% endfor %}") == "023");
  CHECK(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}{% for c in 'ab' %}{{ c }}"
               "{% endfor %}{% for k in {'x': 1} %}{{ k }}{% endfor %}{% for u in nothing %}never{% endfor %}") ==
        "a=1;b=2;abx");
  // A set inside a loop stays in its iteration; namespace() carries values out.
  CHECK(render("{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = x + 1 %}{{ x }}|{% endfor %}{{ x }}") ==
        "12|12|1");
  CHECK(render("{% set ns = namespace(a=1) %}{% for i in [1, 2] %}{% set ns.a = ns.a + i %}{% endfor %}{{ ns.a }}") ==
        "4");
  CHECK(render("{% if true %}{% set y = 2 %}{% endif %}{{ y }}") == "2");  // if bodies share the scope
}

TEST_CASE("set blocks and macros and call/filter/with blocks") {
  CHECK(render("{%- set x -%}\n  hello {{ 1 }}\n{%- endset -%}\n[{{ x }}]{% set y | upper %}abc{% endset %}{{ y }}") ==
        "[hello 1]ABC");
  CHECK(render("{% set a, b = 1, 2 %}{{ a }}{{ b }}") == "12");
  CHECK(render("{% macro f(a, b=2, c=a) %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ f(1) }}|{{ f(1, c=9) }}|"
               "{{ f(b=5, a=0) }}") == "121|129|050");
  CHECK(render("{% macro r(n) %}{% if n > 0 %}{{ n }}{{ r(n - 1) }}{% endif %}{% endmacro %}{{ r(3) }}") == "321");
  // A macro sees the template's variables as they are when it runs, not the caller's loop variables.
  CHECK(render("{% macro m() %}[{{ y }}]{% endmacro %}{% for y in [1] %}{{ m() }}{% endfor %}{% set y = 5 %}"
               "{{ m() }}") == "[][5]");
  CHECK(render("{% macro outer() %}[{{ caller() }}]{% endmacro %}{% call outer() %}inside{% endcall %}") == "[inside]");
  CHECK(render("{% filter upper %}abc{{ 'd' }}{% endfilter %}{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}"
               "{{ a }}") == "ABCD3");
  CHECK(render("{% generation %}kept{% endgeneration %}") == "kept");
}

TEST_CASE("filters") {
  CHECK(render("{{ '  Hi  '|trim }}|{{ 'aXa'|trim('a') }}|{{ 'ab'|upper }}{{ 'AB'|lower }}{{ 'hELLO'|capitalize }}"
               "{{ 'a-b c'|title }}|{{ 'ab'|replace('b', 'c') }}") == "Hi|X|ABabHelloA-B C|ac");
  CHECK(render("{{ [3, 1, 2]|sort }}{{ [3, 1, 2]|sort(reverse=true) }}{{ ['b', 'A', 'a']|sort }}"
               "{{ ['b', 'A', 'a']|unique|list }}{{ {'b': 1, 'a': 2}|dictsort }}") ==
        "[1, 2, 3][3, 2, 1]['A', 'a', 'b']['b', 'A'][('a', 2), ('b', 1)]");
  CHECK(render("{{ [1, 2, 3]|select('odd')|list }}{{ [{'r': 'u'}, {'r': 'a'}]|selectattr('r', 'equalto', 'u')|list }}"
               "{{ [{'r': 'u'}, {'r': 'a'}]|map(attribute='r')|join(',') }}{{ ['a']|map('upper')|first }}"
               "{{ [{'r': 1}, {}]|rejectattr('r', 'defined')|list }}") == "[1, 3][{'r': 'u'}]u,aA[{}]");
  CHECK(render("{{ 3.7|int }}{{ '42'|int }}{{ '4.5'|int }}{{ 'x'|int }}{{ '3'|float }}{{ 2.5|round }}"
               "{{ 3.14159|round(2) }}{{ 2.567|round(1, 'floor') }}{{ -3|abs }}") == "342403.02.03.142.53");
  CHECK(render("{{ '  x\\n y\\n\\nz'|indent(2) }}|{{ 'x\\ny'|indent(2, true) }}") == "  x\n   y\n\n  z|  x\n  y");
  CHECK(render("{{ x|default('d') }}{{ none|default('d') }}{{ none|default('d', true) }}{{ ''|d('e', true) }}") ==
        "dNonede");
  CHECK(render("{{ [1, 2]|first }}{{ [1, 2]|last }}{{ []|first }}{{ 'abc'|list }}{{ {'b': 1}|list }}"
               "{{ [1, 2]|reverse|list }}{{ 'abc'|reverse }}{{ [1, 2, 3]|sum }}{{ [3, 1]|max }}{{ [3, 1]|min }}") ==
        "12['a', 'b', 'c']['b'][2, 1]cba631");
  CHECK(render("{{ {'a': 1}|items|list }}{{ nothing|items|list }}{{ [1, 2, 3]|batch(2)|list }}{{ 'x'|string }}"
               "{{ 1|string }}{{ [1]|join }}{{ 'hello'|center(9) }}|{{ 'a b c d e f g h'|truncate(9) }}") ==
        "[('a', 1)][][[1, 2], [3]]x11  hello  |a b c...");
  // A generator (map, select, …) is always true and has no len(), as in Python.
  CHECK(render("{% if []|select %}true{% endif %}") == "true");
  CHECK(failure("{{ [0, 1]|select|length }}") == "line 1: object of type 'generator' has no len()");
  // markupsafe: adding plain text to a safe string escapes the text.
  CHECK(render("{{ ('x'|safe) + \"<'\" }}|{{ '<' + ('x'|safe) }}|{{ 'a' ~ ('<'|safe) }}|{{ '<&>'|e }}") ==
        "x&lt;&#39;|&lt;x|a<|&lt;&amp;&gt;");
}

TEST_CASE("tojson is HuggingFace's json.dumps") {
  CHECK(render(R"({{ {'a': 1.5, 'b': [true, none, 'x"y\né']}|tojson }})") ==
        R"({"a": 1.5, "b": [true, null, "x\"y\né"]})");
  CHECK(render("{{ {'a': [1, {}], 'b': []}|tojson(indent=2) }}") ==
        "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": []\n}");
  CHECK(render("{{ ['é']|tojson(ensure_ascii=true) }}{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}"
               "{{ [1, 2]|tojson(separators=(',', ':')) }}{{ {1: 'a', none: 'b'}|tojson }}{{ 1.0|tojson }}") ==
        R"(["\u00e9"]{"a": 2, "b": 1}[1,2]{"1": "a", "null": "b"}1.0)");
  CHECK(failure("{{ nothing|tojson }}") == "line 1: Object of type Undefined is not JSON serializable");
}

TEST_CASE("tests and undefined values and attribute access") {
  CHECK(render("{{ d is sequence }}{{ d is iterable }}{{ d is mapping }}{{ 1 is number }}{{ true is integer }}"
               "{{ 1.0 is integer }}{{ 1.0 is float }}{{ none is none }}{{ 'a' is string }}{{ false is false }}"
               "{{ false is boolean }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 'a' is in 'abc' }}"
               "{{ 2 is eq 2 }}{{ 'ab' is lower }}{{ x is undefined }}{{ range is callable }}",
               R"({"d": {"a": 1}})") ==
        "TrueTrueTrueTrueFalseFalseTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrue"
        "True");
  // Undefined prints as nothing and iterates as nothing; using its attributes is an error.
  CHECK(render("[{{ nothing }}]{{ nothing|length }}{{ nothing is defined }}{{ n.foo }}{{ n.foo is defined }}",
               R"({"n": null})") == "[]0FalseFalse");
  CHECK(failure("{{ nothing.foo }}") == "line 1: 'nothing' is undefined");
  CHECK(failure("\n{{ nothing + 'a' }}") == "line 2: 'nothing' is undefined");
  // d.items is the method (Python's getattr comes first); d['items'] is the key.
  CHECK(render("{{ d.get('a') }}{{ d.get('z') }}{{ d.get('z', 5) }}{{ d['items'] }}{{ d.a }}{{ d.zz is defined }}"
               "{{ d.keys()|list }}",
               R"({"d": {"a": 1, "items": "key"}})") == "1None5key1False['a', 'items']");
  CHECK(render("{{ [1, 2][5] is defined }}{{ [1, 2, 3][-2:] }}{{ [1, 2, 3][::2] }}{{ 'Hello'[1:3] }}") ==
        "False[2, 3][1, 3]el");
  CHECK(render("{{ strftime_now('%Y-%m-%d %H:%M, %d %b %Y') }}") == "2025-01-15 12:34, 15 Jan 2025");
  CHECK(render("{{ dict(a=1) }}{{ namespace(x=1) }}{{ range(2, 7, 2)|list }}") ==
        "{'a': 1}<Namespace {'x': 1}>[2, 4, 6]");
}

TEST_CASE("errors name the construct and the line") {
  CHECK(failure("a\n{{ x | nosuch }}") == "line 2: unknown filter 'nosuch'");
  CHECK(failure("{% if x %}\n{{ x is nosuch }}{% endif %}", R"({"x": 1})") == "line 2: unknown test 'nosuch'");
  CHECK(render("{% if false %}{{ x|from_json }}{% endif %}ok") == "ok");  // Jinja checks filters in `if` when run
  CHECK(failure("{% for x in [] %}\n{{ x|from_json }}{% endfor %}") == "line 2: unknown filter 'from_json'");
  CHECK(failure("{{ x|urlize }}") == "line 1: filter 'urlize' is not supported by moelsp's Jinja");
  CHECK(failure("{% for x in y %}\n\n{{ x }}") ==
        "line 3: unexpected end of template, expected 'endfor' (the 'for' on line 1 is not closed)");
  CHECK(failure("{% include 'x.jinja' %}") ==
        "line 1: 'include' is not supported in chat templates (there is nothing to load)");
  CHECK(failure("{% do x %}") == "line 1: unknown tag 'do'");
  CHECK(failure("{{ 1 +\n}}") == "line 2: unexpected end of print statement");
  CHECK(failure("{{ 'abc }}") == "line 1: a string literal is not closed");
  CHECK(failure("x\n{% break %}") == "line 2: 'break' outside a loop");
  CHECK(failure("\n\n{{ raise_exception('no system role') }}") ==
        "line 3: the template raised an error: no system role");
  CHECK(failure("{{ 'a' + 1 }}") == "line 1: can only concatenate str (not \"int\") to str");
  CHECK(failure("{{ 1 // 0 }}") == "line 1: division by zero");
  // HuggingFace's sandbox makes lists immutable: templates that append fail there too.
  CHECK(failure("{% set ns = namespace(ids=[]) %}\n{% set _ = ns.ids.append(1) %}") ==
        "line 2: access to attribute 'append' of 'list' object is unsafe (the sandbox HuggingFace runs chat "
        "templates in makes lists and dicts immutable)");
  CHECK(failure("{% set x = 1 %}{% set x.a = 2 %}") == "line 1: cannot assign attribute on non-namespace object");
}

TEST_CASE("a hostile template is stopped rather than obeyed") {
  CHECK(failure("{% macro r() %}{{ r() }}{% endmacro %}{{ r() }}") == "line 1: macro calls nest deeper than 100");
  CHECK(failure("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}")
            .find("takes too long") != std::string::npos);
  CHECK(failure("{{ range(1000000) }}") == "line 1: range too big, the sandbox allows 100000 items");
  CHECK(failure("{{ " + std::string(500, '(') + "1" + std::string(500, ')') + " }}") ==
        "line 1: the template nests too deeply");
}

TEST_CASE("numbers from a template cannot overflow, exhaust memory or crash the interpreter") {
  // Each input is one a fuzzer found (tests/fuzz); Python's result where it is small.
  const auto fails_with = [](const std::string& src, const std::string& what) {
    const std::string f = failure(src);
    INFO(src << " -> " << f);
    CHECK(f.rfind("line 1: ", 0) == 0);
    CHECK(f.find(what) != std::string::npos);
  };
  const std::string too_big = "larger than 256 MiB, the limit on one value in a template";
  fails_with("{{ (-9223372036854775807 - 1) | abs }}", "integer overflow");
  CHECK(render("{{ (-9223372036854775807) | abs }} {{ -3 | abs }}") == "9223372036854775807 3");
  fails_with("{{ 'x'.center(9223372036854775807) }}", "the padded string would be " + too_big);
  fails_with("{{ 'x'.ljust(300000000) }}", too_big);
  fails_with("{{ 'x'.zfill(300000000) }}", too_big);
  fails_with("{{ 'x' | center(9223372036854775807) }}", too_big);
  fails_with("{{ 'x'.center(5, 'ab') }}", "The fill character must be exactly one character long");
  CHECK(render("{{ 'x'.center(5, '-') }}|{{ 'x' | center(4) }}|{{ '7'.zfill(3) }}") == "--x--| x  |007");
  fails_with("{{ 'a' | indent(x) }}", "'x' is undefined");
  fails_with("{{ 'a' | indent(1.5) }}", "can't multiply sequence by non-int of type 'float'");
  fails_with("{{ 'a' | indent(1000000000) }}", "the indent width would be " + too_big);
  CHECK(render("{{ 'a\nb' | indent(2) }}|{{ 'a\nb' | indent('> ') }}") == "a\n  b|a\n> b");
  fails_with("{{ ([0] * 1000000000) | length }}", "the repeated list would be " + too_big);
  fails_with("{{ ('x' * 100000000000) | length }}", "the repeated str would be " + too_big);
  fails_with("{% set s = 'x' * 140000000 %}{{ (s ~ s) | length }}", "the string would be " + too_big);
  fails_with("{{ [1] | batch(1000000000, 0) | list }}", too_big);
  CHECK(render("{{ [1] | batch(9223372036854775807) | list }} {{ [1, 2, 3] | batch(2, 0) | list }}") ==
        "[[1]] [[1, 2], [3, 0]]");
  CHECK(render("{{ ('ab' * 3) | length }} {{ [1, 2] * 2 }} {{ 'x' * -1 }}|{{ [0] * 0 }}") == "6 [1, 2, 1, 2] |[]");
  fails_with("{{ '%.2147483647f' % 1.0 }}", "precision too big");
  fails_with("{{ '%-9223372036854775808s' % 'x' }}", "width too big");
  fails_with("{{ '%200000000s' % ('x' * 70000000) }}", "the formatted string would be " + too_big);
  fails_with("{{ '%d' % (1e300) }}", "integer overflow");
  fails_with("{{ '%d' % (1e308 * 10) }}", "cannot convert float infinity to integer");
  CHECK(render("{{ '%.3f|%5.1f|%-4s|%.2s|%d' % (3.14159, 2.25, 'ab', 'xyz', 2.9) }}") == "3.142|  2.2|ab  |xy|2");
  CHECK(render("{{ '%.60f' % 1.0 }}") == "1." + std::string(60, '0'));  // longer than a fixed buffer
  CHECK(render("{{ range(-9223372036854775807 - 1, 9223372036854775807, 4611686018427387904) | list }}") ==
        "[-9223372036854775808, -4611686018427387904, 0, 4611686018427387904]");
  CHECK(render("{{ range(9223372036854775807, -9223372036854775807 - 1, -9223372036854775807 - 1) | list }}") ==
        "[9223372036854775807, -1]");
  CHECK(render("{{ range(10, 0, -3) | list }} {{ range(0) | list }} {{ range(5, 1) | list }}") ==
        "[10, 7, 4, 1] [] []");
  fails_with("{{ range(-9223372036854775807 - 1, 9223372036854775807) | list }}", "range too big");
  CHECK(render("{{ 'abc'[1::9223372036854775807] }}|{{ 'abc'[1::-9223372036854775807 - 1] }}|{{ [1, 2, 3][::-2] }}") ==
        "b|b|[3, 1]");
  fails_with("{{ 'ab'.split('') }}", "empty separator");
  fails_with("{{ 'ab'.rsplit('') }}", "empty separator");
  fails_with("{{ 'ab'.partition('') }}", "empty separator");
  CHECK(render("{{ 'ab'.replace('', '-') }} {{ 'ab'.count('') }} {{ 'ab'.find('') }} {{ 'ab'.rfind('') }} "
               "{{ 'ab'.replace('', '-', 1) }} {{ 'ab' | replace('', '.') }}") == "-a-b- 3 0 2 -ab .a.b.");
  fails_with("{% set s = 'x' * 100000 %}{{ s.replace('', s) | length }}", "the replaced string would be " + too_big);
  fails_with("{% set s = 'x' * 100000 %}{{ s | replace('x', s) | length }}", "the replaced string would be " + too_big);
  fails_with("{% set s = 'x' * 100000 %}{{ s.join(['a'] * 10000) | length }}", "the joined string would be " + too_big);
  fails_with("{% set s = 'x' * 100000 %}{{ (['a'] * 10000) | join(s) | length }}",
             "the joined string would be " + too_big);
  CHECK(render("{{ '-'.join(['a', 'b']) }} {{ ['a', 'b'] | join('+') }} {{ 'aXbX'.replace('X', '--') }}") ==
        "a-b a+b a--b--");
  fails_with("{{ 1 | tojson(indent=1.5) }}", "can't multiply sequence by non-int of type 'float'");
  fails_with("{{ [1] | tojson(indent=1000000000) }}", too_big);
  CHECK(render("{{ [1] | tojson(indent=1) }}|{{ [1] | tojson(indent='\t') }}") == "[\n 1\n]|[\n\t1\n]");
  fails_with("{{ '{99999999999999999999}'.format(1) }}", "no argument for {99999999999999999999}");
  CHECK(render("{{ [{'a': 1}] | map(attribute='99999999999999999999') | list }}") == "[Undefined]");
  fails_with("{{ '1' | int(base=1) }}", "int() base must be >= 2 and <= 36, or 0");
  CHECK(render("{{ 'abc def' | truncate(9223372036854775807, leeway=9223372036854775807) }}") == "abc def");
  fails_with("{{ [1][2,:] }}", "a slice inside a tuple subscript ([a, b:c]) is not supported");
  fails_with("{{ [1][:, 0] }}", "a slice inside a tuple subscript");
  CHECK(render("{{ [1, 2, 3][1:] }} {{ {(1, 2): 'x'}[1, 2] }}") == "[2, 3] x");
  fails_with("{{ 'a' is divisibleby 2 }}", "not all arguments converted during string formatting");
}

TEST_CASE("values that hold themselves or nest deeply print and compare without recursing forever") {
  // Python prints a container met again as [...] / {...}.
  CHECK(render("{% set ns = namespace() %}{% set ns.self = ns %}{{ ns }}") ==
        "<Namespace {'self': <Namespace {...}>}>");
  CHECK(render("{% set ns = namespace() %}{% set ns.l = [ns, 1] %}{{ ns.l }} {{ ns }}") ==
        "[<Namespace {'l': [...]}>, 1] <Namespace {'l': [<Namespace {...}>, 1]}>");
  CHECK(render("{% set ns = namespace() %}{% set ns.d = {'k': ns} %}{{ ns.d }}|{{ [ns] == [ns] }}|{{ ns == ns }}") ==
        "{'k': <Namespace {'d': {...}}>}|True|True");
  CHECK(failure("{% set ns = namespace() %}{% set ns.self = ns %}{{ ns | tojson }}") ==
        "line 1: Object of type Namespace is not JSON serializable");
  // Nested a million levels deep through namespaces (each level a new list):
  // printing, comparing and tojson stop at a depth limit; freeing it does
  // not recurse.
  const std::string deep =
      "{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% for j in range(10) %}"
      "{% set ns.x = [ns.x] %}{% endfor %}{% endfor %}";
  CHECK(render(deep + "{{ ns.x | length }}") == "1");
  CHECK(failure(deep + "{{ ns.x }}") == "line 1: maximum recursion depth exceeded while getting the repr of an object");
  CHECK(failure(deep + "{{ ns.x == ns.x[0] }}") == "line 1: maximum recursion depth exceeded in comparison");
  CHECK(failure(deep + "{{ ns.x < ns.x[0] }}") == "line 1: maximum recursion depth exceeded in comparison");
  CHECK(failure(deep + "{{ ns.x | tojson }}") ==
        "line 1: maximum recursion depth exceeded while encoding a JSON object");
  CHECK(render(deep + "{% set ns.x = 0 %}{{ ns.x }}") == "0");
  // A chain of namespaces, each holding the next, freed when the render ends.
  CHECK(render("{% set ns = namespace(head=namespace()) %}{% set ns.cur = ns.head %}"
               "{% for i in range(100000) %}{% for j in range(3) %}{% set c = ns.cur %}{% set n = namespace() %}"
               "{% set c.next = n %}{% set ns.cur = n %}{% endfor %}{% endfor %}{% set ns.head = none %}ok") == "ok");
  CHECK(failure("{{ dict(a=1) | tojson(indent=x) }}") == "line 1: 'x' is undefined");
}

// ---- the real templates ------------------------------------------------------

namespace {

struct Case {
  std::string conversation;
  bool add_generation_prompt = false;
  std::optional<bool> enable_thinking;
};

// "tool_call add_generation_prompt=true enable_thinking=false" → its parts.
Case parse_case(const std::string& name) {
  Case c;
  c.conversation = name.substr(0, name.find(' '));
  c.add_generation_prompt = name.find("add_generation_prompt=true") != std::string::npos;
  if (name.find("enable_thinking=true") != std::string::npos) c.enable_thinking = true;
  if (name.find("enable_thinking=false") != std::string::npos) c.enable_thinking = false;
  return c;
}

std::string token(const Value& entry, const char* key) {
  const Value* v = entry.dict().find_str(key);
  return v && v->is_string() ? v->str() : "";
}

}  // namespace

TEST_CASE("the chat templates of real models render exactly as Python's Jinja2 renders them") {
  const std::string root = test::data_path("templates");
  const Value manifest = jinja::from_json(test::read_file(root + "/manifest.json"));
  const jinja::JsonOptions compact;
  int compared = 0, refused = 0;
  for (const auto& [name, entry] : manifest.dict().find_str("templates")->dict().items) {
    const std::string source = test::read_file(root + "/" + token(entry, "file"));
    const ChatTemplate tmpl(
        source, "", {.bos = token(entry, "bos_token"), .eos = token(entry, "eos_token"), .tokenizer_adds_bos = false});
    const Value expected = jinja::from_json(test::read_file(root + "/expected/" + name.str() + ".json"));
    REQUIRE(!expected.dict().items.empty());
    for (const auto& [case_name, want] : expected.dict().items) {
      const Case c = parse_case(case_name.str());
      const Value conv = jinja::from_json(test::read_file(root + "/conversations/" + c.conversation + ".json"));
      ChatOptions opt;
      opt.add_generation_prompt = c.add_generation_prompt;
      opt.enable_thinking = c.enable_thinking;
      opt.now = kNow;
      if (const Value* tools = conv.dict().find_str("tools")) opt.tools_json = jinja::to_json(*tools, compact);
      const std::string messages = jinja::to_json(*conv.dict().find_str("messages"), compact);
      INFO(name.str() << ": " << case_name.str());
      if (want.is_mapping()) {
        // Jinja2 refused this conversation: so must we, with the template's own words if it raised them.
        const std::string error = jinja::to_str(*want.dict().find_str("error"));
        INFO("Jinja2: " << error);
        const std::string raised = error.rfind("TemplateError: ", 0) == 0 ? error.substr(15) : "";
        CHECK_THROWS_WITH(tmpl.apply_json(messages, opt), Catch::Contains(raised));
        ++refused;
      } else {
        CHECK(tmpl.apply_json(messages, opt) == want.str());
        ++compared;
      }
    }
  }
  CHECK(compared > 400);
  CHECK(refused > 20);
}
