#include "json.h"

#include <cstdlib>
#include <cstring>

namespace nexar_fr {
namespace {

class Parser {
 public:
  explicit Parser(const std::string &s) : s_(s) {}

  bool document(Json *out) {
    if (!value(out, 0)) return false;
    space();
    return pos_ == s_.size() || fail("trailing characters");
  }
  std::string error() const { return error_ + " at byte " + std::to_string(pos_); }

 private:
  static constexpr int kMaxDepth = 64;

  bool fail(const char *what) {
    if (error_.empty()) error_ = what;
    return false;
  }
  void space() {
    while (pos_ < s_.size() && strchr(" \t\r\n", s_[pos_]))
      ++pos_;
  }
  bool literal(const char *word) {
    const size_t n = strlen(word);
    if (s_.compare(pos_, n, word) != 0) return fail("unknown literal");
    pos_ += n;
    return true;
  }
  bool value(Json *out, int depth) {
    if (depth > kMaxDepth) return fail("nested too deeply");
    space();
    if (pos_ >= s_.size()) return fail("unexpected end");
    const char c = s_[pos_];
    if (c == '{') return object(out, depth);
    if (c == '[') return array(out, depth);
    if (c == '"') {
      out->type = Json::Type::String;
      return string(&out->text);
    }
    if (c == 't' || c == 'f') {
      out->type = Json::Type::Bool;
      out->boolean = c == 't';
      return literal(c == 't' ? "true" : "false");
    }
    if (c == 'n') return literal("null");
    return number(out);
  }
  bool number(Json *out) {
    const char *start = s_.c_str() + pos_;
    char *end = nullptr;
    out->number = strtod(start, &end);
    if (end == start) return fail("expected a value");
    out->type = Json::Type::Number;
    pos_ += static_cast<size_t>(end - start);
    return true;
  }
  bool string(std::string *out) {
    ++pos_;  // the opening quote
    while (pos_ < s_.size()) {
      const char c = s_[pos_++];
      if (c == '"') return true;
      if (c != '\\') {
        *out += c;
        continue;
      }
      if (pos_ >= s_.size()) break;
      const char e = s_[pos_++];
      switch (e) {
        case 'n':
          *out += '\n';
          break;
        case 't':
          *out += '\t';
          break;
        case 'r':
          *out += '\r';
          break;
        case 'b':
          *out += '\b';
          break;
        case 'f':
          *out += '\f';
          break;
        case 'u': {
          if (pos_ + 4 > s_.size()) return fail("short \\u escape");
          const unsigned long code = strtoul(s_.substr(pos_, 4).c_str(), nullptr, 16);
          pos_ += 4;
          // The dumps escape only control characters; others pass as '?'.
          *out += code < 0x80 ? static_cast<char>(code) : '?';
          break;
        }
        default:
          *out += e;
      }
    }
    return fail("unterminated string");
  }
  bool array(Json *out, int depth) {
    out->type = Json::Type::Array;
    ++pos_;
    space();
    if (pos_ < s_.size() && s_[pos_] == ']') {
      ++pos_;
      return true;
    }
    for (;;) {
      out->items.emplace_back();
      if (!value(&out->items.back(), depth + 1)) return false;
      space();
      if (pos_ >= s_.size()) return fail("unterminated array");
      const char c = s_[pos_++];
      if (c == ']') return true;
      if (c != ',') return fail("expected , or ]");
    }
  }
  bool object(Json *out, int depth) {
    out->type = Json::Type::Object;
    ++pos_;
    space();
    if (pos_ < s_.size() && s_[pos_] == '}') {
      ++pos_;
      return true;
    }
    for (;;) {
      space();
      if (pos_ >= s_.size() || s_[pos_] != '"') return fail("expected a member name");
      std::string key;
      if (!string(&key)) return false;
      space();
      if (pos_ >= s_.size() || s_[pos_++] != ':') return fail("expected :");
      if (!value(&out->fields[key], depth + 1)) return false;
      space();
      if (pos_ >= s_.size()) return fail("unterminated object");
      const char c = s_[pos_++];
      if (c == '}') return true;
      if (c != ',') return fail("expected , or }");
    }
  }

  const std::string &s_;
  size_t pos_ = 0;
  std::string error_;
};

}  // namespace

const Json &Json::operator[](const std::string &key) const {
  static const Json null_value;
  auto it = fields.find(key);
  return it == fields.end() ? null_value : it->second;
}

bool parse_json(const std::string &text, Json *out, std::string *error) {
  Parser p(text);
  *out = Json();
  if (p.document(out)) return true;
  *error = p.error();
  return false;
}

}  // namespace nexar_fr
