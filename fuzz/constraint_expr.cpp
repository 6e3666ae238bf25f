// libFuzzer target: constraint expressions (tuning/expr.hpp). The input is split at the first
// NUL: the text before it is the expression, the bytes after it choose the values of the names
// (integers, reals, booleans and strings, extremes included). Parsing any text and evaluating
// what parses must never crash, recurse without bound or overflow an integer silently.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <string>

#include "tuning/expr.hpp"

using namespace infrarsi::tuning;

namespace {

knob_value value_of(std::uint8_t selector, std::int64_t raw) {
  switch (selector % 8) {
  case 0:
    return raw;
  case 1:
    return std::numeric_limits<std::int64_t>::max() - (raw & 3);
  case 2:
    return std::numeric_limits<std::int64_t>::min() + (raw & 3);
  case 3:
    return static_cast<double>(raw) / 7.0;
  case 4:
    return (raw & 1) != 0;
  case 5:
    return std::string(static_cast<std::size_t>(raw & 7), 'x');
  case 6:
    return std::numeric_limits<double>::infinity();
  default:
    return std::int64_t{-1};
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto* nul = static_cast<const std::uint8_t*>(std::memchr(data, 0, size));
  std::size_t text_size = nul != nullptr ? static_cast<std::size_t>(nul - data) : size;
  std::string text(reinterpret_cast<const char*>(data), text_size);
  std::string why;
  auto e = constraint_expr::parse(text, why);
  if (!e)
    return 0;
  std::map<std::string, knob_value> vars;
  std::size_t pos = text_size + 1;
  for (const auto& name : e->names()) {
    std::uint8_t selector = pos < size ? data[pos] : 0;
    std::uint64_t bits = 0;
    for (std::size_t i = 0; i < 8; ++i)
      bits = (bits << 8) | (pos + 1 + i < size ? data[pos + 1 + i] : 0u);
    auto raw = static_cast<std::int64_t>(bits);
    pos += 9;
    if (selector != 0xff) // 0xff: leave the name unknown
      vars[name] = value_of(selector, raw);
  }
  (void)e->holds(vars, why);
  (void)first_violation({*e}, vars);
  return 0;
}
