// A small JSON reader for nexar-fr: enough for the flight recorder's dumps
// (objects, arrays, strings, numbers, true, false, null).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace nexar_fr {

struct Json {
  enum class Type { Null, Bool, Number, String, Array, Object };
  Type type = Type::Null;
  bool boolean = false;
  double number = 0;
  std::string text;
  std::vector<Json> items;
  std::map<std::string, Json> fields;

  // The member named key, or a null value.
  const Json &operator[](const std::string &key) const;
  long long as_int(long long fallback = 0) const {
    return type == Type::Number ? static_cast<long long>(number) : fallback;
  }
  std::string as_string() const { return type == Type::String ? text : std::string(); }
};

// Parses text; on a syntax error returns false and says where in *error.
bool parse_json(const std::string &text, Json *out, std::string *error);

}  // namespace nexar_fr
