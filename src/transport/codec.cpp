#include "transport/codec.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <type_traits>
#include <utility>

namespace nexar::wire {

// ---- ByteWriter ----

void ByteWriter::put_le(uint64_t v, int n) {
  for (int i = 0; i < n; ++i)
    out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

void ByteWriter::length_prefix(std::size_t n) {
  // A silently wrapped length would desynchronise the whole stream.
  if (n > std::numeric_limits<uint32_t>::max()) throw std::length_error("wire field above 4 GiB");
  u32(static_cast<uint32_t>(n));
}

void ByteWriter::bytes(std::span<const uint8_t> b) {
  length_prefix(b.size());
  raw(b);
}

void ByteWriter::str(std::string_view s) {
  length_prefix(s.size());
  out_.insert(out_.end(), s.begin(), s.end());
}

// ---- ByteReader ----

bool ByteReader::fail(Error e) {
  if (error_ == Error::kNone) error_ = e;
  return false;
}

bool ByteReader::get_le(uint64_t &v, std::size_t n) {
  if (!ok()) return false;
  if (remaining() < n) return fail(Error::kTruncated);
  uint64_t x = 0;
  for (std::size_t i = 0; i < n; ++i)
    x |= uint64_t{in_[pos_ + i]} << (8 * i);
  pos_ += n;
  v = x;
  return true;
}

bool ByteReader::quic_varint(uint64_t &v) {
  if (!ok()) return false;
  if (remaining() < 1) return fail(Error::kTruncated);
  const std::size_t n = std::size_t{1} << (in_[pos_] >> 6);
  if (remaining() < n) return fail(Error::kTruncated);
  uint64_t x = in_[pos_] & 0x3f;
  for (std::size_t i = 1; i < n; ++i)
    x = (x << 8) | in_[pos_ + i];
  pos_ += n;
  v = x;
  return true;
}

bool ByteReader::u8(uint8_t &v) {
  uint64_t x;
  if (!get_le(x, 1)) return false;
  v = static_cast<uint8_t>(x);
  return true;
}

bool ByteReader::u16(uint16_t &v) {
  uint64_t x;
  if (!get_le(x, 2)) return false;
  v = static_cast<uint16_t>(x);
  return true;
}

bool ByteReader::u32(uint32_t &v) {
  uint64_t x;
  if (!get_le(x, 4)) return false;
  v = static_cast<uint32_t>(x);
  return true;
}

bool ByteReader::u64(uint64_t &v) {
  return get_le(v, 8);
}

bool ByteReader::i32(int32_t &v) {
  uint32_t x;
  if (!u32(x)) return false;
  v = static_cast<int32_t>(x);  // two's complement, well defined since C++20
  return true;
}

bool ByteReader::length_prefix(std::size_t max_len, std::size_t &len) {
  uint32_t n;
  if (!u32(n)) return false;
  if (n > max_len) return fail(Error::kTooLong);
  if (n > remaining()) return fail(Error::kTruncated);
  len = n;
  return true;
}

bool ByteReader::bytes(std::size_t max_len, std::vector<uint8_t> &out) {
  std::span<const uint8_t> view;
  std::size_t len;
  if (!length_prefix(max_len, len) || !raw(len, view)) return false;
  out.assign(view.begin(), view.end());
  return true;
}

bool ByteReader::str(std::size_t max_len, std::string &out) {
  std::span<const uint8_t> view;
  std::size_t len;
  if (!length_prefix(max_len, len) || !raw(len, view)) return false;
  out.assign(view.begin(), view.end());
  return true;
}

bool ByteReader::raw(std::size_t n, std::span<const uint8_t> &out) {
  if (!ok()) return false;
  if (remaining() < n) return fail(Error::kTruncated);
  out = in_.subspan(pos_, n);
  pos_ += n;
  return true;
}

// ---- Control messages ----

namespace {

template <class... Ts>
constexpr bool distinct_types(std::variant<Ts...> *) {
  const uint8_t types[] = {Ts::kType...};
  for (std::size_t i = 0; i < sizeof...(Ts); ++i)
    for (std::size_t j = i + 1; j < sizeof...(Ts); ++j)
      if (types[i] == types[j]) return false;
  return true;
}
static_assert(distinct_types(static_cast<ControlMessage *>(nullptr)),
              "two control messages share a type byte");

struct FieldEncoder {
  ByteWriter &w;

  template <class T>
  void operator()(std::string_view, const T &v) {
    if constexpr (std::is_same_v<T, std::string>) {
      w.str(std::string_view(v).substr(0, kMaxStringLen));
    } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
      const size_t n = std::min<size_t>(v.size(), kMaxListLen);
      w.u32(static_cast<uint32_t>(n));
      for (size_t i = 0; i < n; ++i)
        w.str(std::string_view(v[i]).substr(0, kMaxStringLen));
    } else if constexpr (std::is_same_v<T, uint8_t>) {
      w.u8(v);
    } else if constexpr (std::is_same_v<T, uint16_t>) {
      w.u16(v);
    } else if constexpr (std::is_same_v<T, uint32_t>) {
      w.u32(v);
    } else if constexpr (std::is_same_v<T, uint64_t>) {
      w.u64(v);
    } else {
      static_assert(std::is_same_v<T, int32_t>, "field type without a wire encoding");
      w.i32(v);
    }
  }
};

// Decodes fields in order; stops at the first failure and records which field.
struct FieldDecoder {
  ByteReader &r;
  std::string_view msg;
  std::string &error;

  template <class T>
  void operator()(std::string_view field, T &v) {
    if (!error.empty()) return;
    bool ok;
    bool too_many = false;
    if constexpr (std::is_same_v<T, std::string>) {
      ok = r.str(kMaxStringLen, v);
    } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
      uint32_t n = 0;
      ok = r.u32(n);
      // Each entry takes at least its 4-byte length: check before reserving.
      if (ok && (n > kMaxListLen || n > r.remaining() / 4)) {
        ok = false;
        too_many = true;
      }
      if (ok) {
        v.clear();
        v.reserve(n);
        for (uint32_t i = 0; i < n && ok; ++i) {
          std::string e;
          ok = r.str(kMaxStringLen, e);
          if (ok) v.push_back(std::move(e));
        }
      }
    } else if constexpr (std::is_same_v<T, uint8_t>) {
      ok = r.u8(v);
    } else if constexpr (std::is_same_v<T, uint16_t>) {
      ok = r.u16(v);
    } else if constexpr (std::is_same_v<T, uint32_t>) {
      ok = r.u32(v);
    } else if constexpr (std::is_same_v<T, uint64_t>) {
      ok = r.u64(v);
    } else {
      static_assert(std::is_same_v<T, int32_t>, "field type without a wire encoding");
      ok = r.i32(v);
    }
    if (ok) return;
    std::string where = std::string(msg) + "." + std::string(field);
    if (too_many) {
      error = where + ": too many entries";
    } else if (r.error() == ByteReader::Error::kTooLong) {
      error = where + " longer than " + std::to_string(kMaxStringLen) + " bytes";
    } else {
      error = "truncated " + where;
    }
  }
};

template <class T>
DecodeResult decode_body(ByteReader &r) {
  DecodeResult res;
  T m;
  T::fields(m, FieldDecoder{r, T::kName, res.error});
  if (!res.error.empty()) return res;
  if (!r.at_end()) {
    res.error =
        "trailing bytes after " + std::string(T::kName) + ": " + std::to_string(r.remaining());
    return res;
  }
  res.message = std::move(m);
  return res;
}

template <class... Ts>
DecodeResult decode_by_type(uint8_t type, ByteReader &r, std::variant<Ts...> *) {
  DecodeResult res;
  bool found = ((type == Ts::kType && (res = decode_body<Ts>(r), true)) || ...);
  if (!found) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "unknown control type 0x%02x", type);
    res.error = buf;
  }
  return res;
}

}  // namespace

std::vector<uint8_t> encode_control(const ControlMessage &msg) {
  std::vector<uint8_t> out;
  ByteWriter w(out);
  std::visit(
      [&](const auto &m) {
        using T = std::decay_t<decltype(m)>;
        w.u8(kControlVersion);
        w.u8(T::kType);
        T::fields(m, FieldEncoder{w});
      },
      msg);
  return out;
}

DecodeResult decode_control(std::span<const uint8_t> in) {
  DecodeResult res;
  // Checked first: nothing below runs on input the framing layer should never pass.
  if (in.size() > kMaxControlMessage) {
    res.error = "control message too large: " + std::to_string(in.size()) + " > " +
                std::to_string(kMaxControlMessage) + " bytes";
    return res;
  }
  ByteReader r(in);
  uint8_t version, type;
  if (!r.u8(version)) {
    res.error = "truncated control version";
    return res;
  }
  if (version != kControlVersion) {
    res.error = "unsupported control version " + std::to_string(version) + " (expected " +
                std::to_string(kControlVersion) + ")";
    return res;
  }
  if (!r.u8(type)) {
    res.error = "truncated control type";
    return res;
  }
  return decode_by_type(type, r, static_cast<ControlMessage *>(nullptr));
}

std::string_view control_name(const ControlMessage &msg) {
  return std::visit([](const auto &m) { return std::decay_t<decltype(m)>::kName; }, msg);
}

}  // namespace nexar::wire
