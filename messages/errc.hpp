#pragma once
/// @file errc.hpp
/// The project's one error model: `infrarsi::errc` codes carried in `caf::error` (category atom
/// "infrarsi") with a human-readable context string. Adapters convert foreign errors
/// (rocksdb::Status, zmq::error_t, CURLcode) into these at the border.

#include <cstdint>
#include <string>

#include <caf/atom.hpp>
#include <caf/error.hpp>
#include <caf/expected.hpp>

namespace infrarsi {

/// Error codes. Values are explicit and stable (they cross process boundaries inside
/// caf::error); new codes are appended, never renumbered.
enum class errc : std::uint8_t {
  /// Not an error. Never carried by a caf::error.
  none = 0,
  /// An argument broke a documented precondition (bad run id, empty batch, ...).
  invalid_argument = 1,
  /// Optimistic-concurrency check failed: the stream's version differs from the expected one.
  version_conflict = 2,
  /// A run, file or record does not exist.
  not_found = 3,
  /// Bytes failed verification: FlatBuffers verifier, checksum, truncation or bit flip.
  corrupt_data = 4,
  /// The operating system or storage engine reported an I/O failure.
  io_error = 5,
  /// On-disk or on-wire format from an incompatible version.
  unsupported_format = 6,
  /// The store is locked by another process.
  store_locked = 7,
  /// The operation is not allowed on this object (e.g. append to a read-only log).
  not_permitted = 8,
  /// The message or event kind is not known to this build.
  unknown_kind = 9,
  /// The operation was cancelled (the run was interrupted by a signal).
  interrupted = 10,
};

/// Category atom of every infrarsi error (at most 10 characters, as CAF atoms must be).
constexpr caf::atom_value error_category = caf::atom("infrarsi");

/// Stable snake_case name of a code, e.g. "version_conflict".
const char* to_string(errc code) noexcept;

/// Creates a caf::error with category `error_category` and no context.
caf::error make_error(errc code);

/// Creates a caf::error with category `error_category` and a context message `what`
/// (which should name the file, key, value or position involved).
caf::error make_error(errc code, std::string what);

/// The infrarsi code of `err`, or errc::none if `err` is empty or of another category.
errc code_of(const caf::error& err) noexcept;

/// Renders any caf::error for humans: "version_conflict: run 'r1': expected version 3, ...".
/// Errors of other categories render as "<category> error <code>: <context>".
std::string describe(const caf::error& err);

} // namespace infrarsi
