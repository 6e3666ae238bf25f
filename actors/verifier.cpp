#include "actors/actors.hpp"
#include "store/run_projection.hpp"
#include "tuning/contract_check.hpp"
#include "tuning/stats.hpp"

namespace infrarsi::actors {

namespace {

std::string calibrate_doc(const tuning::task_spec& task, const store::run_state& run) {
  std::vector<tuning::trial_record> baselines;
  std::vector<double> times;
  nlohmann::json ids = nlohmann::json::array();
  std::map<std::string, double> phases;
  for (const auto& t : run.trials) {
    if (t.purpose != "baseline" || !t.finished || t.outcome != tuning::trial_outcome::ok)
      continue;
    auto timed = tuning::timed_step_time(task.contract, t.steps);
    if (timed <= 0)
      continue;
    baselines.push_back(t);
    times.push_back(timed);
    ids.push_back(t.trial_id);
    for (const auto& [name, s] : t.phase_s)
      phases[name] += s;
  }
  if (baselines.empty())
    return nlohmann::json{{"error", "no baseline run completed with its timed window"}}.dump();
  for (auto& [name, s] : phases)
    s /= static_cast<double>(baselines.size());
  auto noise = tuning::estimate_noise(times);
  auto ref = tuning::make_loss_reference(baselines);
  nlohmann::json reference = nlohmann::json::array();
  for (const auto& [step, loss] : ref.loss)
    reference.push_back({{"step", step}, {"loss", loss}, {"spread", ref.spread.at(step)}});
  return nlohmann::json{{"noise",
                         {{"runs", noise.runs},
                          {"mean_step_time_s", noise.mean_step_time_s},
                          {"log_sd", noise.log_sd},
                          {"cv", noise.cv},
                          {"min_detectable_speedup", noise.min_detectable_speedup}}},
                        {"baseline_trials", ids},
                        {"baseline_step_times_s", times},
                        {"phases_s", phases},
                        {"reference", reference}}
    .dump();
}

} // namespace

verifier_actor::behavior_type verifier(verifier_actor::pointer, const store::event_log* log,
                                       const tuning::task_spec* task) {
  return {
    [log, task](calibrate_atom, const std::string& run_id) -> caf::result<std::string> {
      auto run = store::load_run(*log, run_id);
      if (!run)
        return std::move(run.error());
      return calibrate_doc(*task, *run);
    },
    [log, task](check_atom, const std::string& run_id, std::uint64_t trial_id,
                std::uint32_t attempt) -> caf::result<std::string> {
      auto run = store::load_run(*log, run_id);
      if (!run)
        return std::move(run.error());
      const auto* t = run->find(trial_id, attempt);
      if (t == nullptr || !t->finished)
        return make_error(errc::not_found, "verifier: trial " + std::to_string(trial_id) + "/"
                                             + std::to_string(attempt) + " has not ended");
      std::vector<std::string> violations;
      double timed = 0;
      if (t->outcome == tuning::trial_outcome::ok) {
        violations = tuning::check_contract(task->contract, run->reference, *t);
        timed = tuning::timed_step_time(task->contract, t->steps);
      } else if (t->outcome == tuning::trial_outcome::contract_violation && !t->detail.empty()) {
        violations.push_back(t->detail); // refused before launch (scope), with its evidence
      }
      return nlohmann::json{{"trial_id", trial_id},
                            {"attempt", attempt},
                            {"outcome", tuning::to_string(t->outcome)},
                            {"violations", violations},
                            {"timed_step_time_s", timed}}
        .dump();
    },
    [log](reverify_atom, const std::string& run_id,
          std::uint64_t candidate) -> caf::result<std::string> {
      auto run = store::load_run(*log, run_id);
      if (!run)
        return std::move(run.error());
      const tuning::trial_record* cand = nullptr;
      for (const auto& t : run->trials)
        if (t.trial_id == candidate)
          cand = &t;
      if (cand == nullptr)
        return make_error(errc::not_found, "verifier: no candidate trial " + std::to_string(candidate));
      std::vector<double> a;
      std::vector<double> b;
      std::size_t failed = 0;
      // Only the latest measurement round counts: "/<id>" is round 1, "/<id>#2" round 2.
      std::uint32_t round = 1;
      for (const auto& t : run->trials)
        if (t.purpose == "verify-baseline/" + std::to_string(candidate) + "#2")
          round = 2;
      auto tag = verify_tag(candidate, round);
      for (const auto& t : run->trials) {
        bool base = t.purpose == "verify-baseline" + tag;
        bool cand_run = t.purpose == "verify-candidate" + tag;
        if (!base && !cand_run)
          continue;
        if (!t.usable()) {
          ++failed;
          continue;
        }
        (base ? a : b).push_back(t.timed_step_time_s);
      }
      auto est = tuning::estimate_speedup(a, b);
      double mds = run->noise ? run->noise->min_detectable_speedup : 0.0;
      double base_sd = run->noise ? run->noise->log_sd : 0.0;
      bool promotable = true;
      bool remeasure = false;
      std::string reason;
      if (failed > 0) {
        promotable = false;
        reason = std::to_string(failed) + " interleaved run(s) failed or broke the contract";
      } else if (a.size() < 2 || b.size() < 2) {
        promotable = false;
        reason = "fewer than two interleaved runs of each";
      } else if (base_sd > 0 && std::max(est.log_sd_a, est.log_sd_b) > 3.0 * base_sd) {
        // Visibly noisier than the doctor's baselines (more than 3x their log-sd): the machine
        // was disturbed while this pair was measured. Re-measured once, then rejected.
        promotable = false;
        remeasure = round == 1;
        reason = "measured under visibly higher variance than the doctor's baselines (log-sd "
                 + std::to_string(std::max(est.log_sd_a, est.log_sd_b)) + " vs "
                 + std::to_string(base_sd) + ")"
                 + (remeasure ? ": re-measured" : " again in the second round");
      } else if (!(est.ci_low > 1.0 + mds)) {
        promotable = false;
        reason = "the 95% interval's lower bound " + std::to_string(est.ci_low)
                 + " does not clear 1 + the minimum detectable speedup ("
                 + std::to_string(1.0 + mds) + ")";
      } else {
        reason = "lower bound " + std::to_string(est.ci_low) + " clears 1 + mds ("
                 + std::to_string(1.0 + mds) + ")";
      }
      return nlohmann::json{{"candidate_trial", candidate},
                            {"config", store::to_json(cand->config)},
                            {"baseline_times_s", a},
                            {"candidate_times_s", b},
                            {"speedup", est.speedup},
                            {"ci_low", est.ci_low},
                            {"ci_high", est.ci_high},
                            {"dof", est.dof},
                            {"min_detectable_speedup", mds},
                            {"promotable", promotable},
                            {"round", round},
                            {"remeasure", remeasure},
                            {"reason", reason}}
        .dump();
    }};
}

} // namespace infrarsi::actors
