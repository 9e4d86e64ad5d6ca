// torchtitan's config_registry.py (its train configs since February 2026: one Python
// function per config returning Trainer.Config) read without running Python: the chosen
// function's literal keyword arguments, and the attribute assignments of a function that
// starts from another one, become the job config's TOML sections, which the TOML reader
// then reads, so both forms share one set of rules and refusals.
#include "torchtitan_registry.hpp"

#include <cctype>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/core/input_limits.hpp"
#include "torchtitan_rules.hpp"

namespace tessel::interop::detail {

namespace {

// A Python value as written: a call (dotted name, positional and keyword arguments), a
// literal, a list, or an expression tessel does not evaluate (`opaque`, its text kept).
struct PyValue {
  enum Kind { call, string, number, boolean, none, list, name, opaque } kind = opaque;
  std::string text;  // call: the callee; string/name/opaque: the text; number: as written
  std::vector<PyValue> args;
  struct Keyword;  // a struct, not std::pair: pair may not hold the still incomplete PyValue
  std::vector<Keyword> kwargs;

  static PyValue of(Kind kind, std::string text);
  PyValue* keyword(const std::string& key);
};

struct PyValue::Keyword {
  std::string key;
  PyValue value;
};

PyValue PyValue::of(Kind kind, std::string text) {
  PyValue value;
  value.kind = kind, value.text = std::move(text);
  return value;
}

PyValue* PyValue::keyword(const std::string& key) {
  for (auto& [k, v] : kwargs)
    if (k == key) return &v;
  return nullptr;
}

struct Token {
  enum Kind { name, number, string, op, newline, end } kind;
  std::string text;
  int line;
};

class RegistryReader {
 public:
  RegistryReader(const std::string& text, const ImportContext& context, std::vector<std::string>& ignored)
      : text_(text), context_(context), ignored_(ignored) {}

  std::string to_toml();

 private:
  [[noreturn]] void refuse(const std::string& where, const std::string& message) const {
    throw Error(fmt::format("{}: {}: {}", context_.source_name, where, message));
  }
  std::vector<Token> tokens_of(const std::string& body, int first_line) const;
  std::map<std::string, std::pair<std::string, int>> functions() const;  // name -> (body, first line)
  std::string function_names() const;  // the file's functions, for a refusal
  PyValue evaluate_function(const std::string& name, int depth);
  PyValue parse_value(const std::vector<Token>& t, std::size_t& i, const std::map<std::string, PyValue>& locals);
  PyValue parse_primary(const std::vector<Token>& t, std::size_t& i, const std::map<std::string, PyValue>& locals);
  void write_section(const std::string& section, PyValue& call, std::map<std::string, std::string>& out);
  void read_batch(PyValue& config, std::map<std::string, std::string>& sections);
  std::string scalar_of(const std::string& field, const PyValue& value) const;
  std::int64_t whole_number(const std::string& field, const PyValue* value, std::int64_t fallback) const;
  void expect(const std::vector<Token>& t, std::size_t& i, const std::string& close) const {
    if (t[i].text != close) refuse(fmt::format("{}(), line {}", function_, t[i].line), "'" + close + "' expected");
    ++i;
  }

  const std::string& text_;
  const ImportContext& context_;
  std::vector<std::string>& ignored_;
  std::string function_;
  std::map<std::string, std::pair<std::string, int>> functions_;  // set by to_toml
};

std::vector<Token> RegistryReader::tokens_of(const std::string& body, int first_line) const {
  std::vector<Token> out;
  int line = first_line, depth = 0;
  for (std::size_t i = 0; i < body.size();) {
    const char c = body[i];
    if (c == '\n') {
      if (depth == 0 && !out.empty() && out.back().kind != Token::newline) out.push_back({Token::newline, "", line});
      ++line, ++i;
    } else if (c == '#') {
      while (i < body.size() && body[i] != '\n') ++i;
    } else if (std::isspace(static_cast<unsigned char>(c)) || c == '\\') {
      ++i;
    } else if (c == '"' || c == '\'') {
      const bool triple = body.compare(i, 3, std::string(3, c)) == 0;
      const std::string quote = triple ? std::string(3, c) : std::string(1, c);
      const std::size_t close = body.find(quote, i + quote.size());
      if (close == std::string::npos) refuse(fmt::format("line {}", line), "a string that does not close");
      const std::string value = body.substr(i + quote.size(), close - i - quote.size());
      for (char v : value) line += v == '\n';
      out.push_back({Token::string, value, line});
      i = close + quote.size();
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t j = i;
      while (j < body.size() && (std::isalnum(static_cast<unsigned char>(body[j])) || body[j] == '_')) ++j;
      out.push_back({Token::name, body.substr(i, j - i), line});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      std::size_t j = i;
      while (j < body.size() && (std::isalnum(static_cast<unsigned char>(body[j])) || body[j] == '.' || body[j] == '_'))
        ++j;
      out.push_back({Token::number, body.substr(i, j - i), line});
      i = j;
    } else {
      const std::string two = body.substr(i, 2);
      const bool pair = two == "->" || two == "==" || two == "!=" || two == "<=" || two == ">=" || two == "**" ||
                        two == "//";
      if (c == '(' || c == '[' || c == '{') ++depth;
      if (depth > 32) refuse(fmt::format("line {}", line), "brackets nested more than 32 deep");
      if (c == ')' || c == ']' || c == '}') --depth;
      out.push_back({Token::op, pair ? two : std::string(1, c), line});
      i += pair ? 2 : 1;
    }
  }
  out.push_back({Token::newline, "", line});
  out.push_back({Token::end, "", line});
  return out;
}

// The module's top-level functions: each `def name(` at column 0 and the indented lines after it.
std::map<std::string, std::pair<std::string, int>> RegistryReader::functions() const {
  std::map<std::string, std::pair<std::string, int>> out;
  std::string current, body;
  int first = 0, line = 0;
  std::size_t start = 0;
  auto close = [&] {
    if (!current.empty()) out[current] = {body, first};
    current.clear(), body.clear();
  };
  while (start <= text_.size()) {
    std::size_t end = text_.find('\n', start);
    if (end == std::string::npos) end = text_.size();
    const std::string row = text_.substr(start, end - start);
    ++line;
    const bool top = !row.empty() && !std::isspace(static_cast<unsigned char>(row[0])) && row[0] != '#' &&
                     row[0] != ')';
    if (top) close();
    if (top && row.rfind("def ", 0) == 0) {
      const std::size_t paren = row.find('(');
      current = row.substr(4, paren == std::string::npos ? std::string::npos : paren - 4);
      const std::size_t colon = row.rfind(':');
      body = colon == std::string::npos ? "" : row.substr(colon + 1) + "\n";
      first = line;
    } else if (!current.empty()) {
      body += row + "\n";
    }
    start = end + 1;
  }
  close();
  return out;
}

PyValue RegistryReader::parse_primary(const std::vector<Token>& t, std::size_t& i,
                                      const std::map<std::string, PyValue>& locals) {
  const Token& token = t[i];
  PyValue value;
  if (token.kind == Token::string) {
    ++i;
    value.kind = PyValue::string, value.text = token.text;
  } else if (token.kind == Token::number || (token.text == "-" && t[i + 1].kind == Token::number)) {
    const bool negative = token.text == "-";
    i += negative ? 2 : 1;
    value.kind = PyValue::number, value.text = (negative ? "-" : "") + t[i - 1].text;
  } else if (token.kind == Token::op && (token.text == "[" || token.text == "(")) {
    const std::string close = token.text == "[" ? "]" : ")";
    ++i;
    value.kind = PyValue::list;
    while (t[i].text != close && t[i].kind != Token::end) {
      value.args.push_back(parse_value(t, i, locals));
      if (t[i].text == ",") ++i;
    }
    expect(t, i, close);
    // Parentheses, not a tuple. Moved out first: assigning from its own element frees it mid-copy.
    if (close == ")" && value.args.size() == 1) value = PyValue(std::move(value.args[0]));
  } else if (token.kind == Token::name && token.text == "lambda") {
    int depth = 0;  // skip to the end of the lambda's expression
    while (t[i].kind != Token::end && !(depth == 0 && (t[i].text == "," || t[i].text == ")"))) {
      if (t[i].text == "(" || t[i].text == "[") ++depth;
      if (t[i].text == ")" || t[i].text == "]") --depth;
      ++i;
    }
    value.text = "lambda";
  } else if (token.kind == Token::name) {
    std::string dotted = token.text;
    ++i;
    while (t[i].text == "." && t[i + 1].kind == Token::name) dotted += "." + t[i + 1].text, i += 2;
    if (t[i].text == "(") {
      ++i;
      value.kind = PyValue::call, value.text = dotted;
      while (t[i].text != ")" && t[i].kind != Token::end) {
        if (t[i].kind == Token::name && t[i + 1].text == "=") {
          const std::string key = t[i].text;
          i += 2;
          value.kwargs.push_back({key, parse_value(t, i, locals)});
        } else {
          value.args.push_back(parse_value(t, i, locals));
        }
        if (t[i].text == ",") ++i;
      }
      expect(t, i, ")");
      while (t[i].text == "." && t[i + 1].kind == Token::name) {  // an attribute of the call's result
        value = PyValue::of(PyValue::opaque, dotted + "(...)." + t[i + 1].text);
        i += 2;
      }
    } else if (dotted == "True" || dotted == "False") {
      value.kind = PyValue::boolean, value.text = dotted == "True" ? "true" : "false";
    } else if (dotted == "None") {
      value.kind = PyValue::none;
    } else if (auto local = locals.find(dotted); local != locals.end()) {
      value = local->second;
    } else {
      value.kind = PyValue::name, value.text = dotted;
    }
    if (t[i].text == "[") {  // a subscript: not evaluated
      int depth = 0;
      do {
        depth += t[i].text == "[" ? 1 : t[i].text == "]" ? -1 : 0;
        ++i;
      } while (depth > 0 && t[i].kind != Token::end);
      value.kind = PyValue::opaque, value.text = dotted + "[...]";
    }
  } else if (token.kind == Token::end || token.kind == Token::newline) {
    refuse(fmt::format("{}(), line {}", function_, token.line), "the function ends inside a bracket that does not close");
  } else {
    refuse(fmt::format("{}(), line {}", function_, token.line), fmt::format("'{}' is not a value tessel reads", token.text));
  }
  return value;
}

// A value: products of whole numbers are evaluated (8 * 2048); anything else with an
// operator is kept as opaque, and refused where a priced field needs it.
PyValue RegistryReader::parse_value(const std::vector<Token>& t, std::size_t& i,
                                    const std::map<std::string, PyValue>& locals) {
  PyValue value = parse_primary(t, i, locals);
  static const std::set<std::string> kOperators{"*", "+", "-", "/", "//", "%", "**", "==", "!=", "<", ">", "<=", ">="};
  while (t[i].kind == Token::op && kOperators.count(t[i].text)) {
    const std::string op = t[i++].text;
    const PyValue right = parse_primary(t, i, locals);
    const bool whole = value.kind == PyValue::number && right.kind == PyValue::number &&
                       value.text.find_first_not_of("0123456789") == std::string::npos &&
                       right.text.find_first_not_of("0123456789") == std::string::npos;
    if (whole && op == "*" && value.text.size() + right.text.size() < 18) {
      value.text = std::to_string(std::stoll(value.text) * std::stoll(right.text));
    } else {
      value = PyValue::of(PyValue::opaque, "expression");
    }
  }
  if (t[i].kind == Token::name && (t[i].text == "and" || t[i].text == "or" || t[i].text == "in" ||
                                   t[i].text == "if" || t[i].text == "not")) {
    while (t[i].kind != Token::end && t[i].text != "," && t[i].text != ")" && t[i].kind != Token::newline) ++i;
    value = PyValue::of(PyValue::opaque, "expression");
  }
  return value;
}

// Runs the statements of function `name`: locals, `config = other()` and attribute
// assignments onto it, and the returned Trainer.Config.
PyValue RegistryReader::evaluate_function(const std::string& name, int depth) {
  auto it = functions_.find(name);
  if (it == functions_.end() || depth > 8)
    refuse(fmt::format("config function '{}'", name), fmt::format("not a function of the file ({})", function_names()));
  const std::string saved = function_;
  function_ = name;
  const std::vector<Token> t = tokens_of(it->second.first, it->second.second);
  std::map<std::string, PyValue> locals;
  std::optional<PyValue> result;
  for (std::size_t i = 0; t[i].kind != Token::end;) {
    const int line = t[i].line;
    const std::string where = fmt::format("{}(), line {}", name, line);
    if (t[i].kind == Token::newline || t[i].kind == Token::string) {  // blank, docstring
      while (t[i].kind != Token::newline) ++i;
      ++i;
      continue;
    }
    if (t[i].text == "assert" || t[i].text == "from" || t[i].text == "import") {
      while (t[i].kind != Token::newline) ++i;
      ++i;
      continue;
    }
    if (t[i].text == "return") {
      ++i;
      result = parse_value(t, i, locals);
    } else if (t[i].kind == Token::name && t[i + 1].text == "=" ) {
      const std::string target = t[i].text;
      i += 2;
      if (t[i].kind == Token::name && functions_.count(t[i].text) && t[i + 1].text == "(" && t[i + 2].text == ")") {
        locals[target] = evaluate_function(t[i].text, depth + 1);
        i += 3;
      } else {
        locals[target] = parse_value(t, i, locals);
      }
    } else if (t[i].kind == Token::name && t[i + 1].text == ".") {
      std::vector<std::string> path{t[i].text};
      ++i;
      while (t[i].text == "." && t[i + 1].kind == Token::name) path.push_back(t[i + 1].text), i += 2;
      if (t[i].text != "=" || !locals.count(path[0]) || locals[path[0]].kind != PyValue::call)
        refuse(where, "a statement tessel does not read (it reads assignments to the config's fields)");
      ++i;
      PyValue assigned = parse_value(t, i, locals);
      PyValue* node = &locals[path[0]];
      for (std::size_t k = 1; k < path.size(); ++k) {
        PyValue* child = node->keyword(path[k]);
        if (k + 1 == path.size()) {
          if (child) *child = assigned;
          else node->kwargs.push_back({path[k], assigned});
          break;
        }
        if (!child) node->kwargs.push_back({path[k], PyValue::of(PyValue::call, path[k])});
        node = child ? child : &node->kwargs.back().value;
        if (node->kind != PyValue::call) refuse(where, fmt::format("config.{} is not a config object", path[k]));
      }
    } else {
      refuse(where, "a statement tessel does not read (it reads assignments to the config's fields)");
    }
    if (t[i].kind != Token::newline) refuse(where, fmt::format("'{}' after a statement tessel reads", t[i].text));
    ++i;
  }
  function_ = saved;
  if (!result) refuse(name + "()", "returns no config");
  if (result->kind != PyValue::call || result->text != "Trainer.Config")
    refuse(name + "()", "does not return Trainer.Config(...)");
  return *result;
}

std::int64_t RegistryReader::whole_number(const std::string& field, const PyValue* value, std::int64_t fallback) const {
  if (value == nullptr) return fallback;
  const std::string& text = value->text;
  const std::size_t digits = text.find_first_not_of("0123456789", text.starts_with("-") ? 1 : 0);
  if (value->kind != PyValue::number || digits != std::string::npos || text.size() > 12 || text == "-" || text.empty())
    refuse(field, fmt::format("must be a whole number written in the file, got '{}'", text));
  return std::stoll(text);
}

std::string RegistryReader::scalar_of(const std::string& field, const PyValue& value) const {
  switch (value.kind) {
    case PyValue::string: return "\"" + value.text + "\"";
    case PyValue::number:
    case PyValue::boolean: return value.text;
    case PyValue::list: {
      std::string out = "[";
      for (const PyValue& item : value.args) out += (out.size() > 1 ? ", " : "") + scalar_of(field, item);
      return out + "]";
    }
    default: refuse(field, fmt::format("'{}' is computed in code, which tessel does not run; write the value", value.text));
  }
}

// Keyword arguments named as the job config's options, written to `section`.
void RegistryReader::write_section(const std::string& section, PyValue& call, std::map<std::string, std::string>& out) {
  for (auto& [key, value] : call.kwargs)
    out[section] += key + " = " + scalar_of("Trainer.Config." + section + "." + key, value) + "\n";
}

// The batch. TrainingConfig counts tokens: per data-parallel rank and step a pipeline runs
// parallelism.num_pp_microbatches micro-batches of num_tokens_per_microbatch_per_dp_rank
// tokens, which the TOML spells as a local batch of them all, split in pipeline micro-batches
// of one. torchtitan 0.3.0's registry still counted sequences (local_batch_size, seq_len, and
// pipeline_parallel_microbatch_size): those pass through as they are.
void RegistryReader::read_batch(PyValue& config, std::map<std::string, std::string>& sections) {
  static const PyValue kDefault = PyValue::of(PyValue::call, "TrainingConfig");
  PyValue* training = config.keyword("training");
  PyValue* parallelism = config.keyword("parallelism");
  if (parallelism && parallelism->kind != PyValue::call) refuse("Trainer.Config.parallelism", "expected a config object");
  if (training && training->kind != PyValue::call) refuse("Trainer.Config.training", "expected a config object");
  PyValue defaults = kDefault;
  PyValue& value = training ? *training : defaults;
  const std::string field = "Trainer.Config.training";
  PyValue* tokens = value.keyword("num_tokens_per_microbatch_per_dp_rank");
  PyValue* context_length = value.keyword("max_context_length");
  PyValue* step_tokens = value.keyword("num_tokens_per_train_step");
  const bool sequence_form = value.keyword("local_batch_size") || value.keyword("seq_len");
  if (sequence_form && (tokens || context_length || step_tokens))
    refuse(field, "counts both sequences (local_batch_size, seq_len) and tokens; give one form");
  if (sequence_form) return;
  const std::int64_t length = whole_number(field + ".max_context_length", context_length, 2048);
  auto sequences = [&](const char* option, PyValue* count, std::int64_t fallback) {
    const std::int64_t n = whole_number(field + "." + option, count, fallback);
    if (n <= 0 || length <= 0 || n % length != 0)
      refuse(field + "." + option, fmt::format("{} tokens is not a whole number of {}-token sequences", n, length));
    return n / length;
  };
  const std::int64_t micro = sequences("num_tokens_per_microbatch_per_dp_rank", tokens, 16384);
  PyValue* degree = parallelism ? parallelism->keyword("pipeline_parallel_degree") : nullptr;
  PyValue* count = parallelism ? parallelism->keyword("num_pp_microbatches") : nullptr;
  const bool piped = whole_number("Trainer.Config.parallelism.pipeline_parallel_degree", degree, 1) > 1;
  const std::int64_t microbatches = whole_number("Trainer.Config.parallelism.num_pp_microbatches", count, 1);
  if (microbatches < 1 || microbatches > limits::kMaxGlobalBatch || micro > limits::kMaxGlobalBatch)
    refuse("Trainer.Config.parallelism.num_pp_microbatches",
           fmt::format("{} micro-batches of {} sequences: each must be 1 to {}", microbatches, micro,
                       limits::kMaxGlobalBatch));
  sections["training"] += fmt::format("local_batch_size = {}\nseq_len = {}\n", piped ? micro * microbatches : micro, length);
  if (piped) sections["parallelism"] += fmt::format("pipeline_parallel_microbatch_size = {}\n", micro);
  if (count && !piped) ignored_.push_back("Trainer.Config.parallelism.num_pp_microbatches: no pipeline");
  if (step_tokens && whole_number(field + ".num_tokens_per_train_step", step_tokens, -1) != -1)
    sections["training"] += fmt::format("global_batch_size = {}\n", sequences("num_tokens_per_train_step", step_tokens, 0));
  std::erase_if(value.kwargs, [](const auto& kv) {
    return kv.key == "num_tokens_per_microbatch_per_dp_rank" || kv.key == "max_context_length" ||
           kv.key == "num_tokens_per_train_step";
  });
  if (parallelism) std::erase_if(parallelism->kwargs, [](const auto& kv) { return kv.key == "num_pp_microbatches"; });
}

std::string RegistryReader::function_names() const {
  std::string names;
  for (const auto& [function, body] : functions_) names += (names.empty() ? "" : ", ") + function;
  return names;
}

std::string RegistryReader::to_toml() {
  functions_ = functions();  // split once: evaluate_function recurses through `config = other()`
  if (context_.script_args.empty()) {
    const std::string names = function_names();
    refuse("(config function)", fmt::format("name the function torchtitan's --config would run after the file's "
                                            "arguments (--import FILE -- NAME): {}",
                                            names));
  }
  PyValue config = evaluate_function(context_.script_args[0], 0);
  // The model family is the package's: `from .model import Llama3Model` in the package's
  // registry, `from torchtitan.models.llama3 import model_registry` in a module elsewhere.
  std::string family;
  auto word_after = [&](std::size_t at, bool underscore) {
    std::string word;
    for (std::size_t i = at; i < text_.size(); ++i) {
      const char c = text_[i];
      if (!std::isalnum(static_cast<unsigned char>(c)) && !(underscore && c == '_')) break;
      word += char(std::tolower(static_cast<unsigned char>(c)));
    }
    return word;
  };
  static const std::string kRelative = "from .model import ", kAbsolute = "from torchtitan.models.";
  if (const std::size_t import = text_.find(kRelative); import != std::string::npos) {
    family = word_after(import + kRelative.size(), false);
    if (family.ends_with("model")) family.resize(family.size() - 5);
  } else {
    for (std::size_t at = text_.find(kAbsolute); at != std::string::npos && family.empty(); at = text_.find(kAbsolute, at + 1)) {
      const std::string package = word_after(at + kAbsolute.size(), true);
      if (text_.compare(at + kAbsolute.size() + package.size(), 22, " import model_registry") == 0) family = package;
    }
  }
  if (family.empty())
    refuse("from .model import",
           "the model family is not named (e.g. Llama3Model, or from torchtitan.models.llama3 import model_registry)");
  std::map<std::string, std::string> sections;
  read_batch(config, sections);
  for (auto& [key, value] : config.kwargs) {
    const std::string field = "Trainer.Config." + key;
    if (torchtitan_part_is_cost_neutral(key, &TorchtitanNeutralPart::registry_field)) {
      ignored_.push_back(field);
      continue;
    }
    if (key == "model_spec") {
      if (value.kind != PyValue::call || value.text != "model_registry" || value.args.size() != 1 ||
          value.args[0].kind != PyValue::string)
        refuse(field, "expected model_registry(\"FLAVOR\", ...)");
      sections["model"] += fmt::format("name = \"{}\"\nflavor = \"{}\"\n", family, value.args[0].text);
      for (auto& [option, setting] : value.kwargs) {
        if (option != "converters" || setting.kind != PyValue::list)
          refuse(field + "." + option, "a model variant tessel does not model (it reads converters)");
        for (const PyValue& converter : setting.args) {
          if (!torchtitan_float8_linear(converter.text))
            refuse(field + ".converters", torchtitan_converter_refusal(converter.text));
          // Its scaling settings are priced as per-tensor scaling, as the TOML reader does.
          for (const auto& [option, flag] : converter.kwargs) {
            const bool on = !(flag.kind == PyValue::boolean && flag.text == "false");
            if (option == "enable_fsdp_float8_all_gather" && on)
              sections["quantize.linear.float8"] += "enable_fsdp_float8_all_gather = true\n";
            if (option == "emulate" && on)
              refuse(field + ".converters.emulate", kTorchtitanEmulatedFloat8);
          }
        }
        if (!setting.args.empty()) sections["model"] += "converters = [\"float8\"]\n";
      }
    } else if (key == "training") {
      write_section("training", value, sections);
    } else if (key == "parallelism" || key == "compile") {
      if (value.kind != PyValue::call) refuse(field, "expected a config object");
      if (PyValue* async_tp = key == "compile" ? value.keyword("enable_async_tensor_parallel") : nullptr) {
        sections["parallelism"] += "enable_async_tensor_parallel = " + scalar_of(field, *async_tp) + "\n";
        std::erase_if(value.kwargs, [](const auto& kv) { return kv.key == "enable_async_tensor_parallel"; });
      }
      write_section(key, value, sections);
      sections[key] += "";
    } else if (key == "optimizer") {
      if (value.kind != PyValue::call || value.text != "default_adamw")
        refuse(field, fmt::format("'{}' is not an optimizer tessel reads (default_adamw)", value.text));
      sections["optimizer"] += "name = \"AdamW\"\n";
    } else if (key == "activation_checkpoint") {
      if (value.kind == PyValue::none) sections["activation_checkpoint"] += "mode = \"none\"\n";
      else if (value.text == "FullAC.Config") sections["activation_checkpoint"] += "mode = \"full\"\n";
      else if (value.text == "SelectiveAC.Config")  // the op-level policy: the save list, no per-layer option
        sections["activation_checkpoint"] += "mode = \"selective\"\nselective_ac_option = \"op\"\n";
      else refuse(field, fmt::format("'{}' is not modelled (tessel models FullAC and SelectiveAC)", value.text));
      write_section("activation_checkpoint", value, sections);
    } else {
      refuse(field, "not an option tessel's reader knows, so it cannot tell whether it changes the cost");
    }
  }
  if (!sections.count("model")) refuse("Trainer.Config.model_spec", "missing; a config names its model");
  if (!sections.count("activation_checkpoint") && !config.keyword("activation_checkpoint"))  // Trainer.Config's default
    sections["activation_checkpoint"] += "mode = \"selective\"\nselective_ac_option = \"op\"\n";
  std::string toml;
  for (const auto& [section, body] : sections) toml += "[" + section + "]\n" + body;
  return toml;
}

}  // namespace

std::string torchtitan_registry_as_toml(const std::string& text, const ImportContext& context,
                                       std::vector<std::string>& ignored) {
  return RegistryReader(text, context, ignored).to_toml();
}

}  // namespace tessel::interop::detail
