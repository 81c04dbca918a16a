#include "bench_rows.h"

#include <algorithm>
#include <cstdlib>
#include <map>

namespace nexar_bench {

namespace {

// A flat JSON object of strings and numbers: enough for the rows, strict
// about everything else.
class FlatJson {
 public:
  explicit FlatJson(const std::string &s) : s_(s) {}

  bool parse(std::map<std::string, std::string> *strings, std::map<std::string, double> *numbers,
             std::string *error) {
    skip();
    if (!eat('{')) return fail(error, "not an object");
    skip();
    if (eat('}')) return true;
    for (;;) {
      std::string key;
      skip();
      if (!string(&key)) return fail(error, "bad key");
      skip();
      if (!eat(':')) return fail(error, "missing ':' after \"" + key + "\"");
      skip();
      if (pos_ < s_.size() && s_[pos_] == '"') {
        std::string v;
        if (!string(&v)) return fail(error, "bad string for \"" + key + "\"");
        (*strings)[key] = v;
      } else {
        const char *start = s_.c_str() + pos_;
        char *end = nullptr;
        const double v = strtod(start, &end);
        if (end == start) return fail(error, "value of \"" + key + "\" is not a string or number");
        pos_ += static_cast<size_t>(end - start);
        (*numbers)[key] = v;
      }
      skip();
      if (eat('}')) break;
      if (!eat(',')) return fail(error, "missing ','");
    }
    skip();
    if (pos_ != s_.size()) return fail(error, "text after the object");
    return true;
  }

 private:
  static bool fail(std::string *error, const std::string &why) {
    *error = why;
    return false;
  }
  void skip() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\r'))
      ++pos_;
  }
  bool eat(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool string(std::string *out) {
    if (!eat('"')) return false;
    while (pos_ < s_.size()) {
      char c = s_[pos_++];
      if (c == '"') return true;
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (pos_ >= s_.size()) return false;
      c = s_[pos_++];
      switch (c) {
        case 'n':
          out->push_back('\n');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'u': {
          if (pos_ + 4 > s_.size()) return false;
          const unsigned v =
              static_cast<unsigned>(strtoul(s_.substr(pos_, 4).c_str(), nullptr, 16));
          pos_ += 4;
          if (v < 0x80) {
            out->push_back(static_cast<char>(v));
          } else if (v < 0x800) {
            out->push_back(static_cast<char>(0xC0 | (v >> 6)));
            out->push_back(static_cast<char>(0x80 | (v & 0x3F)));
          } else {
            out->push_back(static_cast<char>(0xE0 | (v >> 12)));
            out->push_back(static_cast<char>(0x80 | ((v >> 6) & 0x3F)));
            out->push_back(static_cast<char>(0x80 | (v & 0x3F)));
          }
          break;
        }
        default:
          out->push_back(c);  // \" \\ \/
      }
    }
    return false;
  }

  const std::string &s_;
  size_t pos_ = 0;
};

std::string csv_field(const std::string &s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string o = "\"";
  for (char c : s)
    o += c == '"' ? std::string("\"\"") : std::string(1, c);
  return o + "\"";
}

size_t display_width(const std::string &s) {
  size_t w = 0;
  for (unsigned char c : s)
    w += (c & 0xC0) != 0x80;  // count code points, not bytes
  return w;
}

}  // namespace

std::optional<Result> parse_row(const std::string &line, std::string *error) {
  std::map<std::string, std::string> str;
  std::map<std::string, double> n;
  FlatJson j(line);
  if (!j.parse(&str, &n, error)) return std::nullopt;
  Result r;
  r.check.clear();
  for (auto [key, dst] : {std::pair<const char *, std::string *>{"lib", &r.lib},
                          {"op", &r.op},
                          {"check", &r.check}}) {
    auto it = str.find(key);
    if (it == str.end()) {
      *error = std::string("no string \"") + key + "\"";
      return std::nullopt;
    }
    *dst = it->second;
  }
  double ranks = 0, bytes = 0;
  for (auto [key, dst] : {std::pair<const char *, double *>{"ranks", &ranks},
                          {"bytes", &bytes},
                          {"median_us", &r.median_us},
                          {"min_us", &r.min_us},
                          {"max_us", &r.max_us},
                          {"loop_us", &r.loop_us},
                          {"algbw_gbps", &r.algbw_gbps},
                          {"busbw_gbps", &r.busbw_gbps},
                          {"cpu_us", &r.cpu_us}}) {
    auto it = n.find(key);
    if (it == n.end()) {
      *error = std::string("no number \"") + key + "\"";
      return std::nullopt;
    }
    *dst = it->second;
  }
  r.ranks = static_cast<int>(ranks);
  r.bytes = static_cast<uint64_t>(bytes);
  return r;
}

std::string rows_to_json(const std::vector<Result> &rows) {
  std::string o = "[\n";
  for (size_t i = 0; i < rows.size(); ++i)
    o += "  " + benchm::rowJson(rows[i]) + (i + 1 < rows.size() ? ",\n" : "\n");
  return o + "]\n";
}

std::string rows_to_csv(const std::vector<Result> &rows) {
  auto num = [](double v) { return benchm::jsonNumber(v); };
  std::string o =
      "lib,op,ranks,bytes,median_us,min_us,max_us,loop_us,algbw_gbps,busbw_gbps,cpu_us,check\n";
  for (const Result &r : rows)
    o += csv_field(r.lib) + "," + csv_field(r.op) + "," + std::to_string(r.ranks) + "," +
         std::to_string(r.bytes) + "," + num(r.median_us) + "," + num(r.min_us) + "," +
         num(r.max_us) + "," + num(r.loop_us) + "," + num(r.algbw_gbps) + "," + num(r.busbw_gbps) +
         "," + num(r.cpu_us) + "," + csv_field(r.check) + "\n";
  return o;
}

std::string size_label(uint64_t b) {
  const char *units[] = {"", "K", "M", "G"};
  int u = 0;
  while (u < 3 && b >= 1024 && b % 1024 == 0) {
    b /= 1024;
    ++u;
  }
  return std::to_string(b) + units[u];
}

std::string fmt_us(double us) {
  char b[32];
  if (us < 10)
    snprintf(b, sizeof b, "%.2f", us);
  else if (us < 1000)
    snprintf(b, sizeof b, "%.1f", us);
  else
    snprintf(b, sizeof b, "%.0f", us);
  return b;
}

std::string fmt_bw(const std::string &op, double gbps) {
  if (op == "barrier") return "-";
  char b[32];
  snprintf(b, sizeof b, "%.3g", gbps);
  return b;
}

void Table::print(FILE *to) const {
  std::vector<size_t> w;
  for (const auto &r : rows_)
    for (size_t i = 0; i < r.size(); ++i) {
      if (w.size() <= i) w.resize(i + 1, 0);
      w[i] = std::max(w[i], display_width(r[i]));
    }
  for (const auto &r : rows_) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      const std::string pad(w[i] - display_width(r[i]), ' ');
      line += i == 0 ? r[i] + pad : "  " + pad + r[i];
    }
    while (!line.empty() && line.back() == ' ')
      line.pop_back();
    fprintf(to, "%s\n", line.c_str());
  }
}

}  // namespace nexar_bench
