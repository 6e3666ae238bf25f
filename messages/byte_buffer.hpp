#pragma once
/// @file byte_buffer.hpp
/// Immutable, reference-counted, 8-byte-aligned bytes: how every FlatBuffers payload travels
/// (as a CAF message inside one process, as a ZeroMQ frame between machines).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

namespace infrarsi::messages {

/// Immutable bytes shared by reference count. Copying is O(1) and thread-safe; the bytes never
/// change after construction. The storage is aligned to 8 bytes, the largest alignment a
/// FlatBuffer needs, so a verified buffer can be read in place.
class byte_buffer {
public:
  /// An empty buffer (size 0, data() == nullptr).
  byte_buffer() noexcept = default;

  /// Copies `size` bytes from `data` into fresh aligned storage. `data` may be unaligned.
  static byte_buffer copy_of(const void* data, std::size_t size);

  /// Copies the bytes of `bytes`.
  static byte_buffer copy_of(std::string_view bytes) {
    return copy_of(bytes.data(), bytes.size());
  }

  /// Pointer to the first byte, or nullptr when empty. Aligned to 8 bytes.
  [[nodiscard]] const std::uint8_t* data() const noexcept {
    return storage_ ? reinterpret_cast<const std::uint8_t*>(storage_->words.get()) : nullptr;
  }

  /// Number of bytes.
  [[nodiscard]] std::size_t size() const noexcept { return storage_ ? storage_->size : 0; }

  [[nodiscard]] bool empty() const noexcept { return size() == 0; }

  [[nodiscard]] const std::uint8_t* begin() const noexcept { return data(); }
  [[nodiscard]] const std::uint8_t* end() const noexcept { return data() + size(); }

  /// The bytes as a string_view (no copy).
  [[nodiscard]] std::string_view view() const noexcept {
    return {reinterpret_cast<const char*>(data()), size()};
  }

  /// A fresh std::vector copy of the bytes.
  [[nodiscard]] std::vector<std::uint8_t> to_vector() const { return {begin(), end()}; }

  /// Byte-wise equality.
  friend bool operator==(const byte_buffer& a, const byte_buffer& b) noexcept {
    return a.view() == b.view();
  }
  friend bool operator!=(const byte_buffer& a, const byte_buffer& b) noexcept {
    return !(a == b);
  }

private:
  struct storage {
    std::unique_ptr<std::uint64_t[]> words;
    std::size_t size = 0;
  };
  std::shared_ptr<const storage> storage_;
};

} // namespace infrarsi::messages
