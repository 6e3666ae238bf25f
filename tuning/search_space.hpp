#pragma once
/// @file search_space.hpp
/// What every search policy shares: the values of each knob the search considers, the one-hot
/// encoding of configurations (`feature_space`), and what the history says about which
/// configurations may still be proposed (`history_facts`). Pure and deterministic.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include <Eigen/Dense>

#include "tuning/priors.hpp"
#include "tuning/trial.hpp"

namespace infrarsi::tuning {

struct planner_input;

/// The values of one knob's domain that the search considers: the explicit value list; both
/// booleans; an integer range of at most 64 values in full, a longer one at 8 evenly spaced
/// points; a real range at 5 evenly spaced points; the default is always included.
std::vector<knob_value> search_values(const knob_spec& k);

/// Number of knobs with different values plus patches in exactly one of the two.
std::size_t hamming(const configuration& a, const configuration& b);

/// True if the knob carries the tag (e.g. "memory-hungry", "memory-saver"). A knob's layout role
/// (knob_spec::role) implies its memory tag: "micro_batch" is memory-hungry; "tp", "pp", "cp",
/// "ep", "recompute", "sequence_parallel", "zero_stage" and "distributed_optimizer" are memory
/// savers (each divides or drops part of the memory of one GPU: tuning/layout_prior.hpp).
bool has_tag(const knob_spec& k, const char* tag);

/// A knob value as a number (bool: 0/1; text: 0).
double numeric(const knob_value& v);

/// True if `c` needs at least as much memory as `oom` by the task's tags: the same patches,
/// >= on memory-hungry knobs, <= on memory savers (choice knobs with a memory tag: equal).
/// Knobs without a memory tag are taken as memory-neutral (docs/task-contract.md).
bool at_least_as_hungry(const task_spec& task, const configuration& c, const configuration& oom);

/// A configuration as a sparse feature vector: (feature index, value), indices ascending.
using sparse_features = std::vector<std::pair<int, double>>;

/// A configuration as one number, for the configurations with exactly the task's knobs, each at
/// one of its searched values (search_values), and patches of the task in name order: the
/// mixed-radix number of the knobs' digits (0 for the default, 1 + the value's position among the
/// other searched values) and the patches' bits. Two such configurations have the same code iff
/// they have the same key(). The history's configurations are compared by code instead of by key
/// text (history_facts::was_tried): a key costs a walk of the knob map and a string, and 10,000
/// of them cost a planner bench step at 10,000 trials 13 ms.
struct config_coder {
  /// Codes exist: the space fits 63 bits (patches included), and no two searched values of a
  /// knob print the same (so equal keys and equal codes agree).
  bool usable = false;
  /// The knob names in name order (the order of knob_assignment) and each one's task index.
  std::vector<std::string> names;
  std::vector<int> knob;
  /// Per knob (task order): the default, then the other searched values; the digit's weight.
  std::vector<std::vector<knob_value>> values;
  std::vector<std::uint64_t> weight;
  /// Per patch name: its bit; the weight of the patch bits.
  std::map<std::string, int> patch_bit;
  std::uint64_t patch_weight = 0;

  config_coder() = default;
  explicit config_coder(const task_spec& task);
  /// The code of `c`; nullopt when it has none (another knob set, a value outside the searched
  /// ones, an unknown patch, patches not in name order) or codes are not usable. O(knobs +
  /// patches), no allocation.
  [[nodiscard]] std::optional<std::uint64_t> code(const configuration& c) const;
  /// As above; `digits` (resized to the task's knob count) gets each knob's digit, task order.
  [[nodiscard]] std::optional<std::uint64_t> code(const configuration& c,
                                                  std::vector<std::uint64_t>& digits) const;
  /// The patches' part of a code (their bits times patch_weight); nullopt as for code().
  [[nodiscard]] std::optional<std::uint64_t> patch_code(const std::vector<std::string>& patches) const;
};

/// One-hot main-effect features of a configuration: "knob=value" for every searched value that
/// is not the knob's default, and "+patch" for every patch (task order). The baseline encodes
/// to all zeros. For the models there are also ordinal features, one per integer or real knob
/// whose searched values and default are all > 0 (three or more values): "log2(knob)" =
/// log2(value / default) / R, R = the largest |log2(value / default)| over the searched values
/// (so the feature lies in [-1, 1] and products of two stay small), so a trend (memory doubling
/// with the micro-batch, time falling with TP) carries over to values not yet tried. Indices
/// 0..F-1 are the one-hot features, F..F+O-1 the ordinal ones.
struct feature_space {
  std::vector<std::string> names;
  std::map<std::string, std::size_t> index;
  /// Per feature: the knob's index in task.knobs, or -1 for a patch.
  std::vector<int> knob_of;
  /// Per feature: the prior's expected effect on log step time, -log(prior speedup) (0 when
  /// the priors say nothing), and on log peak memory is not modelled here.
  Eigen::VectorXd prior_mean;
  /// Per feature: true when a prior exists for it.
  std::vector<bool> has_prior;
  /// Ordinal features: names "log2(knob)" and the knob's index in task.knobs.
  std::vector<std::string> ordinal_names;
  std::vector<int> ordinal_knob;
  /// R of each ordinal feature: doublings from the default to the farthest searched value.
  std::vector<double> ordinal_range;
  /// Per knob (task order): its ordinal feature's position in ordinal_knob, -1 for none.
  std::vector<int> ordinal_of;

  /// Per knob (task order): its searched non-default values and their one-hot feature index;
  /// per patch (task order): its feature index. (active() without building names.)
  std::vector<std::vector<std::pair<knob_value, int>>> value_feature;
  std::map<std::string, int> patch_feature;
  /// The knobs' indices in task.knobs in name order (the order of knob_assignment), so that
  /// active() and point() walk a configuration's knobs in step instead of looking each one up.
  std::vector<int> knob_by_name;
  /// Configuration codes (config_coder) of this task's searched values.
  config_coder coder;

  feature_space(const task_spec& task, const prior_set* priors);

  /// Dense 0/1 vector, length names.size().
  [[nodiscard]] Eigen::VectorXd encode(const task_spec& task, const configuration& c) const;
  /// Indices of the one-hot features that are 1, ascending.
  [[nodiscard]] std::vector<int> active(const task_spec& task, const configuration& c) const;
  /// One-hot and ordinal features together (indices as above; zero entries left out).
  [[nodiscard]] sparse_features point(const task_spec& task, const configuration& c) const;
  /// point() given active(task, c) (not computed again).
  [[nodiscard]] sparse_features point(const task_spec& task, const configuration& c,
                                      const std::vector<int>& active) const;
  /// F + O.
  [[nodiscard]] std::size_t model_size() const { return names.size() + ordinal_names.size(); }
  /// The knob of model feature i (-1: a patch).
  [[nodiscard]] int model_knob(std::size_t i) const {
    return i < names.size() ? knob_of[i] : ordinal_knob[i - names.size()];
  }
};

/// Every trial's configuration encoded once (a proposal step reads them several times: the
/// history's facts, the failure model, the time and memory models; walking 10,000 configurations'
/// knob maps is what costs, not the arithmetic). Per trial, in history order.
struct history_encoding {
  /// feature_space::code(), no_code where there is none.
  static constexpr std::uint64_t no_code = ~std::uint64_t{0};
  std::vector<std::uint64_t> codes;
  /// configuration::key() of the trials without a code ("" for the others: a key costs a walk
  /// of the knob map and a string, and 10,000 of them cost more than the rest of the encoding).
  std::vector<std::string> keys;
  /// feature_space::active().
  std::vector<std::vector<int>> active;
  /// feature_space::point().
  std::vector<sparse_features> point;

  history_encoding(const task_spec& task, const feature_space& fs,
                   const std::vector<trial_record>& history);
  history_encoding() = default;

  /// Encodes one more trial (the next in history order).
  void append(const task_spec& task, const feature_space& fs, const trial_record& t);
  /// Keeps the first n trials' encodings.
  void truncate(std::size_t n);
  [[nodiscard]] std::size_t size() const { return codes.size(); }
};

/// A run's trial encodings kept from one proposal step to the next. Within one run a trial
/// attempt's configuration never changes (its proposal event fixes it; a re-run of a lost
/// attempt is another attempt), and the planner's history (decide::planner_input_for) only
/// changes at its end: new trials are appended, a lost attempt is dropped and its re-run
/// appended. So a step encodes only the trials after the longest prefix of (trial id, attempt)
/// pairs it shares with the history the cache saw last; the features the entries were made
/// with are kept and compared, and a step with other features (other priors, LLM-proposed
/// patches) encodes everything again. Exact: encode() gives what history_encoding's constructor
/// gives (tests: EncodingCache.*). Saves the walk of every trial's knob map at every step
/// (about 20 ms of bayes_ei/7's late step at 10,000 trials, Release: bench/README.md
/// "bayes_ei/7"). One cache per run; not thread-safe (the run's one planner uses it).
class encoding_cache {
 public:
  /// The encoding of `history` under (task, fs), made from the cached one. The reference is
  /// valid until the next call.
  const history_encoding& encode(const task_spec& task, const feature_space& fs,
                                 const std::vector<trial_record>& history);
  /// Trials the last encode() call encoded (the others came from the cache).
  [[nodiscard]] std::size_t last_encoded() const { return last_encoded_; }

  /// What an encoding depends on, besides the trial's configuration: the knobs in name order and
  /// their defaults, the searched values' features, the ordinal features, the patches' features
  /// and the code's digits.
  struct basis {
    std::vector<std::string> knob_names;
    std::vector<knob_value> defaults;
    std::vector<int> knob_by_name;
    std::vector<std::vector<std::pair<knob_value, int>>> value_feature;
    std::size_t one_hot = 0;
    std::vector<int> ordinal_knob;
    std::vector<double> ordinal_range;
    std::map<std::string, int> patch_feature;
    bool coded = false;
    std::vector<std::uint64_t> weight;
    std::map<std::string, int> patch_bit;
    std::uint64_t patch_weight = 0;
    basis() = default;
    basis(const task_spec& task, const feature_space& fs);
    bool operator==(const basis& o) const;
  };

 private:
  std::optional<basis> basis_;
  std::vector<std::pair<std::uint64_t, std::uint32_t>> ids_;
  history_encoding encoding_;
  std::size_t last_encoded_ = 0;
};

/// What the history says about proposing a configuration again (shared by every policy).
struct history_facts {
  /// Configurations already tried (any outcome except a lost explore attempt): the codes
  /// (feature_space::code) of those that have one, the keys of the others. was_tried() reads
  /// both.
  std::unordered_set<std::uint64_t> tried_codes;
  std::unordered_set<std::string> tried;
  /// Configurations that ran out of memory: the minimal ones (none of them at least as hungry
  /// as another one; at_least_as_hungry is a preorder, so a configuration dominated by an OOM is
  /// dominated by a minimal one).
  std::vector<configuration> ooms;
  /// Per feature: trials that used it and were usable (finished ok, passed the contract).
  std::vector<int> passed;
  /// Per feature: contract violations in which it was the only feature never seen to pass.
  std::vector<int> broke;
  /// Per knob in name order (the order of knob_assignment): 1 memory-hungry numeric, -1
  /// memory-saver numeric, 2 a tagged choice, 0 untagged (for the OOM dominance test).
  std::vector<int> hunger_kind;

  history_facts(const task_spec& task, const feature_space& fs,
                const std::vector<trial_record>& history);
  /// As above with the history's encodings (`encoded` of the same task, features and history).
  history_facts(const task_spec& task, const feature_space& fs,
                const std::vector<trial_record>& history, const history_encoding& encoded);

  /// Uses a feature that broke the contract when it was the only untested one, and that has
  /// never passed.
  [[nodiscard]] bool banned(const std::vector<int>& active) const;
  /// Number of active features that have not yet passed the contract in any trial.
  [[nodiscard]] std::size_t untested(const std::vector<int>& active) const;
  /// The coder of the codes in tried_codes (the feature space's).
  config_coder coder;
  /// At least as memory-hungry (by the task's tags) as a configuration that ran out of memory.
  [[nodiscard]] bool dominated_by_oom(const task_spec& task, const configuration& c) const;
  /// `c` (whose key() is `key`) was tried: its code is among tried_codes or its key among
  /// `tried`. (A configuration without a code does not print like one with a code: its knob
  /// names, a value or its patches differ; so the keys of the trials without a code are all it
  /// is compared with.)
  [[nodiscard]] bool was_tried(const configuration& c, const std::string& key) const;
};

/// Every configuration one change away from `c`: each other searched value of each knob (task
/// order), then each patch toggled (task order). Constraints are not checked.
std::vector<configuration> single_changes(const task_spec& task, const configuration& c);

/// True if `c` may be proposed by any policy: not tried, no excluded patch, no incompatible
/// pair of patches (the task's constraints are checked by the candidate enumeration).
bool admissible(const planner_input& in, const history_facts& facts, const configuration& c);
/// As above with `key` = c.key() already made.
bool admissible(const planner_input& in, const history_facts& facts, const configuration& c,
                const std::string& key);

} // namespace infrarsi::tuning
