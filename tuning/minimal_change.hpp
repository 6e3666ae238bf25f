#pragma once
/// @file minimal_change.hpp
/// The minimal promoted change, its pure part: which changes of a re-verified bundle the time
/// model credits least (tried first by the ablations of decide/minimal_change.hpp), and a
/// configuration with one change undone. Pure and deterministic.
///
/// Credit of a change: the time model (tuning/time_model.hpp, fitted on the given trials)
/// predicts log step time of the bundle with the change undone minus that of the bundle:
///   credit = E[log t(bundle \ change)] - E[log t(bundle)]   (log units; > 0: the change helps).
/// With interactions and ordinal features this is the change's effect in the context of the
/// rest of the bundle, not its effect alone from the baseline.

#include <string>
#include <vector>

#include "tuning/priors.hpp"
#include "tuning/task.hpp"
#include "tuning/trial.hpp"

namespace infrarsi::tuning {

/// One change of a bundle from the baseline.
struct bundle_change {
  /// The knob changed ("" for a patch) or the patch added ("" for a knob).
  std::string knob;
  std::string patch;
  /// For people: "micro_batch 1->8" or "+fused_qkv".
  std::string name;
  /// The time model's credit (see the file comment), log units; exp(credit) is the speedup the
  /// model attributes to the change in the bundle.
  double credit_log = 0.0;
};

/// `c` with one change undone: knob `change.knob` set back to its value in `baseline` (removed
/// when the baseline does not set it), or patch `change.patch` removed.
configuration undo_change(const configuration& c, const configuration& baseline,
                          const bundle_change& change);

/// The changes of `bundle` from `baseline` (each knob whose value differs, each patch the
/// baseline does not have), least credited first (ties: by name). The time model is fitted on
/// the usable trials of `history` (log step time over the median of its usable trials of the
/// baseline configuration; `priors` as the run's; `noise_log_sd` the doctor's); without a
/// usable baseline trial every credit is the priors' prediction. Cost: one fit (time_model.hpp)
/// and two predictions per change.
std::vector<bundle_change> credit_changes(const task_spec& task, const prior_set& priors,
                                          const std::vector<trial_record>& history,
                                          double noise_log_sd, const configuration& baseline,
                                          const configuration& bundle);

} // namespace infrarsi::tuning
