#include "messages/byte_buffer.hpp"

#include <cstring>

namespace infrarsi::messages {

byte_buffer byte_buffer::copy_of(const void* data, std::size_t size) {
  byte_buffer result;
  if (size == 0)
    return result;
  auto st = std::make_shared<storage>();
  auto words = (size + sizeof(std::uint64_t) - 1) / sizeof(std::uint64_t);
  st->words = std::make_unique<std::uint64_t[]>(words); // zero-filled, so padding is defined
  std::memcpy(st->words.get(), data, size);
  st->size = size;
  result.storage_ = std::move(st);
  return result;
}

} // namespace infrarsi::messages
