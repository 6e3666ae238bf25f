#include "tuning/failure_model.hpp"

#include <algorithm>
#include <cmath>

namespace infrarsi::tuning {

bool is_failure(const trial_record& t) {
  if (!t.finished)
    return false;
  switch (t.outcome) {
  case trial_outcome::crash:
  case trial_outcome::timeout:
  case trial_outcome::launch_error:
  case trial_outcome::contract_violation:
    return true;
  case trial_outcome::ok:
    return t.verified && !t.violations.empty();
  default:
    return false;
  }
}

std::vector<int> failure_model::columns(const std::vector<int>& active) const {
  // 0: intercept; 1 + i: one-hot feature i; 1 + F + k: knob k changed. Ascending.
  std::vector<int> out{0};
  std::vector<int> knobs;
  for (int i : active) {
    out.push_back(1 + i);
    int k = knob_of_[static_cast<std::size_t>(i)];
    if (k >= 0)
      knobs.push_back(k);
  }
  std::sort(knobs.begin(), knobs.end());
  knobs.erase(std::unique(knobs.begin(), knobs.end()), knobs.end());
  for (int k : knobs)
    out.push_back(1 + static_cast<int>(one_hot_) + k);
  return out;
}

failure_model::failure_model(const task_spec& task, const feature_space& fs,
                             const std::vector<trial_record>& history,
                             failure_model_options options)
    : failure_model(task, fs, history, std::vector<bool>(fs.names.size(), true), options) {}

failure_model::failure_model(const task_spec& task, const feature_space& fs,
                             const std::vector<trial_record>& history,
                             const std::vector<bool>& risky, failure_model_options options)
  : failure_model(task, fs, history, history_encoding{task, fs, history}.active, risky, options) {}

failure_model::failure_model(const task_spec& task, const feature_space& fs,
                             const std::vector<trial_record>& history,
                             const std::vector<std::vector<int>>& trial_active,
                             const std::vector<bool>& risky, failure_model_options options)
  : one_hot_(fs.names.size()), knob_of_(fs.knob_of) {
  const auto K = task.knobs.size();
  const auto D = 1 + one_hot_ + K;
  const double prior_mean = options.prior_a / (options.prior_a + options.prior_b);
  q_.assign(D, prior_mean);
  q_[0] = options.leak;
  convicted_name_.assign(D, std::string{});

  struct row {
    std::vector<int> cols; // without the leak column 0
    bool failed;
    std::uint64_t trial;
  };
  std::vector<row> rows;
  std::vector<double> trials_with(D, 0.0);
  for (std::size_t ti = 0; ti < history.size(); ++ti) {
    const auto& t = history[ti];
    bool failed = is_failure(t);
    if (!failed && !t.usable())
      continue;
    bool violation = t.outcome == trial_outcome::contract_violation
                     || (t.outcome == trial_outcome::ok && failed);
    auto active = trial_active[ti];
    if (violation)
      active.erase(std::remove_if(active.begin(), active.end(),
                                  [&](int i) { return !risky[static_cast<std::size_t>(i)]; }),
                   active.end());
    auto cols = columns(active);
    cols.erase(cols.begin());
    for (int c : cols)
      trials_with[static_cast<std::size_t>(c)] += 1.0;
    failures_ += failed ? 1 : 0;
    rows.push_back({std::move(cols), failed, t.trial_id});
  }
  // EM on the latent causes; a usable trial contributes a trial without a cause to every
  // setting it has. Iterated to a fixed point (it converges monotonically; 200 iterations bound
  // it).
  std::vector<double> causes(D, 0.0);
  for (int it = 0; it < 200 && failures_ > 0; ++it) {
    std::fill(causes.begin(), causes.end(), 0.0);
    for (const auto& r : rows) {
      if (!r.failed)
        continue;
      double none = 1.0 - q_[0];
      for (int c : r.cols)
        none *= 1.0 - q_[static_cast<std::size_t>(c)];
      double p = std::max(1.0 - none, 1e-300);
      for (int c : r.cols)
        causes[static_cast<std::size_t>(c)] += std::min(1.0, q_[static_cast<std::size_t>(c)] / p);
    }
    double change = 0.0;
    for (std::size_t c = 1; c < D; ++c) {
      double q = (options.prior_a + causes[c]) / (options.prior_a + options.prior_b + trials_with[c]);
      change = std::max(change, std::abs(q - q_[c]));
      q_[c] = q;
    }
    if (change < 1e-10)
      break;
  }

  // Convictions: >= min_convictions failures with the column, no usable trial with it, and
  // q_f >= exclude_above.
  failed_with_.assign(D, {});
  usable_with_.assign(D, 0);
  alone_.assign(D, 0.0);
  names_.assign(D, std::string{});
  for (const auto& r : rows)
    for (int c : r.cols) {
      if (r.failed)
        failed_with_[static_cast<std::size_t>(c)].push_back(r.trial);
      else
        usable_with_[static_cast<std::size_t>(c)] += 1;
    }
  for (std::size_t c = 1; c < D; ++c) {
    names_[c] = c <= one_hot_ ? fs.names[c - 1] : task.knobs[c - 1 - one_hot_].name + "!=default";
    // A knob value's P(fail) alone includes the knob's change: 1 - (1 - q_value)(1 - q_changed).
    double q = q_[c];
    if (c <= one_hot_ && knob_of_[c - 1] >= 0)
      q = 1.0 - (1.0 - q) * (1.0 - q_[1 + one_hot_ + static_cast<std::size_t>(knob_of_[c - 1])]);
    alone_[c] = q;
    if (usable_with_[c] > 0
        || failed_with_[c].size() < static_cast<std::size_t>(options.min_convictions)
        || q < options.exclude_above)
      continue;
    convicted_name_[c] = names_[c];
    convicted_.push_back({names_[c], failed_with_[c], q});
  }
}

template <class F>
void failure_model::for_each_column(const std::vector<int>& active, F&& f) const {
  // Feature indices ascending give their knobs in non-decreasing order (feature_space numbers a
  // knob's values together, knob by knob): the unique knobs are the changes of value.
  for (std::size_t n = 1; n < active.size(); ++n)
    if (active[n] <= active[n - 1]) {
      for (int c : columns(active))
        f(c);
      return;
    }
  f(0);
  for (int i : active)
    f(1 + i);
  int last = -1;
  for (int i : active) {
    int k = knob_of_[static_cast<std::size_t>(i)];
    if (k >= 0 && k != last) {
      f(1 + static_cast<int>(one_hot_) + k);
      last = k;
    }
  }
}

double failure_model::p_fail(const std::vector<int>& active) const {
  double none = 1.0;
  for_each_column(active, [&](int c) { none *= 1.0 - q_[static_cast<std::size_t>(c)]; });
  return 1.0 - none;
}

std::vector<blamed_setting> failure_model::suspects(double above) const {
  std::vector<blamed_setting> out;
  for (std::size_t c = 1; c < alone_.size(); ++c)
    if (convicted_name_[c].empty() && usable_with_[c] == 0 && !failed_with_[c].empty()
        && alone_[c] >= above)
      out.push_back({names_[c], failed_with_[c], alone_[c]});
  return out;
}

bool failure_model::excluded(const std::vector<int>& active) const {
  return !excluded_by(active).empty();
}

std::string failure_model::excluded_by(const std::vector<int>& active) const {
  if (convicted_.empty())
    return "";
  const std::string* found = nullptr;
  for_each_column(active, [&](int c) {
    if (found == nullptr && c > 0 && !convicted_name_[static_cast<std::size_t>(c)].empty())
      found = &convicted_name_[static_cast<std::size_t>(c)];
  });
  return found != nullptr ? *found : std::string{};
}

} // namespace infrarsi::tuning
