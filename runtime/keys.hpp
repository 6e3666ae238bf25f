#pragma once
/// @file keys.hpp
/// `infrarsi keys generate` and `infrarsi keys show-public`: the CURVE key files of the daemon
/// and its node-runners and clients (adapters/curve.hpp, docs/security.md). Nothing here ever
/// writes a secret key to `out` or `err`.

#include <ostream>
#include <string>

namespace infrarsi::runtime {

/// Options of `infrarsi keys generate`.
struct keys_generate_options {
  /// Directory for NAME.key and NAME.pub (created with mode 0700 when missing).
  std::string out_dir;
  /// Base name of the files; empty: default_key_name().
  std::string name;
  /// Replace existing files.
  bool force = false;
};

/// The default key name: this host's name with every character other than a letter, digit,
/// '.', '_' or '-' replaced by '-' ("node" when the host has no name).
std::string default_key_name();

/// Generates a key pair and writes it; prints the public key and both paths on `out`.
/// Returns exit_ok, exit_failure (files exist without `force`, unwritable directory) or
/// exit_usage (a bad --name).
int run_keys_generate(const keys_generate_options& o, std::ostream& out, std::ostream& err);

/// Prints the public key of FILE: a NAME.key file (its permissions and key pair checked) or
/// a NAME.pub file. Returns exit_ok or exit_failure (the error names the file).
int run_keys_show_public(const std::string& path, std::ostream& out, std::ostream& err);

} // namespace infrarsi::runtime
