#include "messages/errc.hpp"

#include <caf/make_message.hpp>
#include <caf/message.hpp>

namespace infrarsi {

const char* to_string(errc code) noexcept {
  switch (code) {
    case errc::none: return "none";
    case errc::invalid_argument: return "invalid_argument";
    case errc::version_conflict: return "version_conflict";
    case errc::not_found: return "not_found";
    case errc::corrupt_data: return "corrupt_data";
    case errc::io_error: return "io_error";
    case errc::unsupported_format: return "unsupported_format";
    case errc::store_locked: return "store_locked";
    case errc::not_permitted: return "not_permitted";
    case errc::unknown_kind: return "unknown_kind";
    case errc::interrupted: return "interrupted";
  }
  return "unknown_error_code";
}

caf::error make_error(errc code) {
  return caf::error{static_cast<std::uint8_t>(code), error_category};
}

caf::error make_error(errc code, std::string what) {
  return caf::error{static_cast<std::uint8_t>(code), error_category,
                    caf::make_message(std::move(what))};
}

errc code_of(const caf::error& err) noexcept {
  if (!err || err.category() != error_category)
    return errc::none;
  return static_cast<errc>(err.code());
}

namespace {

std::string context_text(const caf::error& err) {
  const auto& ctx = err.context();
  if (ctx.empty())
    return {};
  if (ctx.size() == 1 && ctx.match_element<std::string>(0))
    return ctx.get_as<std::string>(0);
  return caf::to_string(ctx);
}

} // namespace

std::string describe(const caf::error& err) {
  if (!err)
    return "no error";
  std::string result;
  if (err.category() == error_category) {
    result = to_string(static_cast<errc>(err.code()));
  } else {
    result = caf::to_string(err.category());
    result += " error ";
    result += std::to_string(static_cast<int>(err.code()));
  }
  auto ctx = context_text(err);
  if (!ctx.empty()) {
    result += ": ";
    result += ctx;
  }
  return result;
}

} // namespace infrarsi
