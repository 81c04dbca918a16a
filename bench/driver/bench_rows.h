// Rows as the driver reads them back from the benchmark programs (one JSON
// object per line, as common/bench_measure.h writes it), and their output:
// --json, --csv and the aligned terminal table.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "bench_measure.h"

namespace nexar_bench {

// A row (bench_measure.h) and where it belongs in the table.
struct Result : benchm::Row {
  size_t size_index = 0;  // position in --sizes (not written out)
};

// Parses one row; std::nullopt with *error naming what is missing or wrong.
std::optional<Result> parse_row(const std::string &line, std::string *error);

// A JSON array of every row (one object per line), and the same as CSV.
std::string rows_to_json(const std::vector<Result> &rows);
std::string rows_to_csv(const std::vector<Result> &rows);

// "8", "4K", "256K", "4M", "64M"; other values in bytes.
std::string size_label(uint64_t bytes);
std::string fmt_us(double us);
std::string fmt_bw(const std::string &op, double gbps);

// Columns padded to the widest cell (UTF-8 aware); the first left-aligned.
class Table {
 public:
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void print(FILE *to) const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace nexar_bench
