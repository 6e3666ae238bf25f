#pragma once
/// @file experience_cmd.hpp
/// `infrarsi experience list|rebuild|hash --store DIR`: the experience bank of a store, a
/// projection of its event log (store/experience_bank.hpp, docs/experience.md).

#include <ostream>
#include <string>

namespace infrarsi::runtime {

struct experience_options {
  /// "list", "rebuild" or "hash".
  std::string action;
  /// Store directory (the one `infrarsi tune` used: events/ and experience/). The event log is
  /// opened read-only; the bank's index (experience/) is written (caught up, or rebuilt).
  std::string store_dir;
  /// list: print one JSON object per record instead of the table. Default false.
  bool json = false;
};

/// Runs the action: `list` prints each record (hardware, workload, speedup and its 95 %
/// interval, provenance run and log position) and the bank's hash; `rebuild` deletes the index
/// and folds it again from the log, then prints the record count, the position read and the
/// hash; `hash` prints the hash alone: SHA-256 (hex) of experience_bank::content(), the records
/// in key order. Exit status: 0 done, 1 it could not be (no log, the index held by a running
/// tune or daemon, an I/O error; the message names which), 2 a bad action.
int run_experience(const experience_options& options, std::ostream& out, std::ostream& err);

} // namespace infrarsi::runtime
