#include "tuning/search_space.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>

#include "tuning/planner.hpp"

namespace infrarsi::tuning {

std::vector<knob_value> search_values(const knob_spec& k) {
  if (!k.values.empty())
    return k.values;
  std::vector<knob_value> out;
  if (k.type == knob_type::boolean)
    return {knob_value{false}, knob_value{true}};
  if (!k.min || !k.max)
    return {k.default_value};
  if (k.type == knob_type::integer) {
    auto lo = static_cast<std::int64_t>(std::ceil(*k.min));
    auto hi = static_cast<std::int64_t>(std::floor(*k.max));
    if (hi - lo + 1 <= 64) {
      for (auto v = lo; v <= hi; ++v)
        out.emplace_back(v);
    } else {
      for (int i = 0; i < 8; ++i) {
        auto v = lo + static_cast<std::int64_t>(std::llround((hi - lo) * i / 7.0));
        if (out.empty() || std::get<std::int64_t>(out.back()) != v)
          out.emplace_back(v);
      }
    }
  } else {
    for (int i = 0; i < 5; ++i)
      out.emplace_back(*k.min + (*k.max - *k.min) * i / 4.0);
  }
  if (std::find(out.begin(), out.end(), k.default_value) == out.end())
    out.push_back(k.default_value);
  return out;
}

std::size_t hamming(const configuration& a, const configuration& b) {
  std::size_t d = 0;
  for (const auto& [k, v] : a.knobs) {
    auto it = b.knobs.find(k);
    if (it == b.knobs.end() || it->second != v)
      ++d;
  }
  std::vector<std::string> sym;
  std::set_symmetric_difference(a.patches.begin(), a.patches.end(), b.patches.begin(),
                                b.patches.end(), std::back_inserter(sym));
  return d + sym.size();
}

bool has_tag(const knob_spec& k, const char* tag) {
  if (std::find(k.tags.begin(), k.tags.end(), tag) != k.tags.end())
    return true;
  if (k.role.empty())
    return false;
  const std::string t{tag};
  if (t == "memory-hungry")
    return k.role == "micro_batch";
  if (t == "memory-saver")
    return k.role == "tp" || k.role == "pp" || k.role == "cp" || k.role == "ep"
           || k.role == "recompute" || k.role == "sequence_parallel" || k.role == "zero_stage"
           || k.role == "distributed_optimizer";
  return false;
}

double numeric(const knob_value& v) {
  if (const auto* i = std::get_if<std::int64_t>(&v))
    return static_cast<double>(*i);
  if (const auto* d = std::get_if<double>(&v))
    return *d;
  if (const auto* b = std::get_if<bool>(&v))
    return *b ? 1.0 : 0.0;
  return 0.0;
}

bool at_least_as_hungry(const task_spec& task, const configuration& c, const configuration& oom) {
  if (c.patches != oom.patches)
    return false;
  for (const auto& k : task.knobs) {
    const auto& a = c.knobs.at(k.name);
    const auto& b = oom.knobs.at(k.name);
    bool hungry = has_tag(k, "memory-hungry");
    bool saver = has_tag(k, "memory-saver");
    if (hungry && k.type != knob_type::choice) {
      if (numeric(a) < numeric(b))
        return false;
    } else if (saver && k.type != knob_type::choice) {
      if (numeric(a) > numeric(b))
        return false;
    } else if ((hungry || saver) && a != b) {
      return false;
    }
  }
  return true;
}

config_coder::config_coder(const task_spec& task) {
  for (std::size_t ki = 0; ki < task.knobs.size(); ++ki)
    knob.push_back(static_cast<int>(ki));
  std::stable_sort(knob.begin(), knob.end(), [&](int a, int b) {
    return task.knobs[static_cast<std::size_t>(a)].name
           < task.knobs[static_cast<std::size_t>(b)].name;
  });
  for (int ki : knob)
    names.push_back(task.knobs[static_cast<std::size_t>(ki)].name);
  // The space's size must fit 63 bits: the product of the radices times 2^patches.
  constexpr std::uint64_t limit = std::uint64_t{1} << 63;
  std::uint64_t w = 1;
  bool fits = true;
  for (const auto& k : task.knobs) {
    std::vector<knob_value> v{k.default_value};
    for (const auto& s : search_values(k))
      if (s != k.default_value)
        v.push_back(s);
    // Values that print the same (an integer and a real, say) would share a key, not a code.
    std::vector<std::string> printed;
    for (const auto& x : v)
      printed.push_back(to_string(x));
    std::sort(printed.begin(), printed.end());
    fits = fits && std::adjacent_find(printed.begin(), printed.end()) == printed.end();
    weight.push_back(w);
    fits = fits && w <= limit / v.size();
    w = fits ? w * v.size() : w;
    values.push_back(std::move(v));
  }
  for (const auto& p : task.patches)
    if (patch_bit.emplace(p.name, static_cast<int>(patch_bit.size())).second)
      fits = fits && w <= limit / 2;
  patch_weight = w;
  // Two knobs of one name would share a key (the task file refuses them).
  fits = fits && std::adjacent_find(names.begin(), names.end()) == names.end();
  usable = fits;
}

namespace {

/// config_coder::code, calling on_digit(knob index, digit) for each knob.
template <class F>
std::optional<std::uint64_t> code_of(const config_coder& coder, const configuration& c,
                                     F&& on_digit) {
  if (!coder.usable || c.knobs.size() != coder.names.size())
    return std::nullopt;
  std::uint64_t out = 0;
  std::size_t i = 0;
  for (const auto& [name, v] : c.knobs) {
    if (name != coder.names[i])
      return std::nullopt;
    const auto ki = static_cast<std::size_t>(coder.knob[i++]);
    const auto& vs = coder.values[ki];
    std::size_t d = 0;
    while (d < vs.size() && !(vs[d] == v))
      ++d;
    if (d == vs.size())
      return std::nullopt;
    on_digit(ki, d);
    out += d * coder.weight[ki];
  }
  const auto bits = coder.patch_code(c.patches);
  if (!bits)
    return std::nullopt;
  return out + *bits;
}

} // namespace

std::optional<std::uint64_t> config_coder::code(const configuration& c) const {
  return code_of(*this, c, [](std::size_t, std::size_t) {});
}

std::optional<std::uint64_t> config_coder::code(const configuration& c,
                                                std::vector<std::uint64_t>& digits) const {
  digits.resize(names.size());
  return code_of(*this, c, [&](std::size_t ki, std::size_t d) { digits[ki] = d; });
}

std::optional<std::uint64_t> config_coder::patch_code(const std::vector<std::string>& patches) const {
  std::uint64_t bits = 0;
  const std::string* last = nullptr;
  for (const auto& p : patches) {
    auto it = patch_bit.find(p);
    if (it == patch_bit.end() || (last != nullptr && !(*last < p)))
      return std::nullopt;
    last = &p;
    bits |= std::uint64_t{1} << it->second;
  }
  return bits * patch_weight;
}

feature_space::feature_space(const task_spec& task, const prior_set* priors) : coder(task) {
  std::vector<double> means;
  for (std::size_t ki = 0; ki < task.knobs.size(); ++ki) {
    const auto& k = task.knobs[ki];
    for (const auto& v : search_values(k)) {
      if (v == k.default_value)
        continue;
      auto name = k.name + "=" + to_string(v);
      if (value_feature.size() <= ki)
        value_feature.resize(ki + 1);
      value_feature[ki].emplace_back(v, static_cast<int>(names.size()));
      index[name] = names.size();
      names.push_back(name);
      knob_of.push_back(static_cast<int>(ki));
      const auto* p = priors != nullptr ? priors->find(k.name, v) : nullptr;
      bool known = p != nullptr && p->speedup > 0;
      means.push_back(known ? -std::log(p->speedup) : 0.0);
      has_prior.push_back(known);
    }
  }
  for (const auto& p : task.patches) {
    auto name = "+" + p.name;
    patch_feature[p.name] = static_cast<int>(names.size());
    index[name] = names.size();
    names.push_back(name);
    knob_of.push_back(-1);
    const auto* pp = priors != nullptr ? priors->find_patch(p.name) : nullptr;
    bool known = pp != nullptr && pp->speedup > 0;
    means.push_back(known ? -std::log(pp->speedup) : 0.0);
    has_prior.push_back(known);
  }
  value_feature.resize(task.knobs.size());
  for (std::size_t ki = 0; ki < task.knobs.size(); ++ki)
    knob_by_name.push_back(static_cast<int>(ki));
  std::stable_sort(knob_by_name.begin(), knob_by_name.end(), [&](int a, int b) {
    return task.knobs[static_cast<std::size_t>(a)].name <
           task.knobs[static_cast<std::size_t>(b)].name;
  });
  prior_mean = Eigen::Map<Eigen::VectorXd>(means.data(), static_cast<Eigen::Index>(means.size()));
  for (std::size_t ki = 0; ki < task.knobs.size(); ++ki) {
    const auto& k = task.knobs[ki];
    if (k.type != knob_type::integer && k.type != knob_type::real)
      continue;
    auto values = search_values(k);
    bool positive = numeric(k.default_value) > 0 && values.size() > 2;
    for (const auto& v : values)
      positive = positive && numeric(v) > 0;
    if (!positive)
      continue; // two values: the one-hot feature says it all
    double range = 0.0;
    for (const auto& v : values)
      range = std::max(range, std::abs(std::log2(numeric(v) / numeric(k.default_value))));
    if (!(range > 0))
      continue;
    ordinal_names.push_back("log2(" + k.name + ")");
    ordinal_knob.push_back(static_cast<int>(ki));
    ordinal_range.push_back(range);
  }
  ordinal_of.assign(task.knobs.size(), -1);
  for (std::size_t o = 0; o < ordinal_knob.size(); ++o)
    ordinal_of[static_cast<std::size_t>(ordinal_knob[o])] = static_cast<int>(o);
}

namespace {

/// Calls f(knob index in task.knobs, value) for every task knob `c` assigns, walking the
/// configuration's name-ordered map in step with fs.knob_by_name (no lookup per knob). False,
/// having called nothing, when `c` does not assign exactly the task's knobs (the caller then
/// looks each knob up).
template <class F>
bool for_each_knob_in_step(const task_spec& task, const feature_space& fs, const configuration& c,
                           F&& f) {
  const auto n = fs.knob_by_name.size();
  if (c.knobs.size() != n)
    return false;
  // One walk of the map (its nodes are what costs, cold in cache at 10,000 trials): the names
  // are checked and the values kept, then f sees them.
  constexpr std::size_t few = 32;
  const knob_value* small[few];
  std::vector<const knob_value*> large;
  const knob_value** values = small;
  if (n > few) {
    large.resize(n);
    values = large.data();
  }
  auto it = c.knobs.begin();
  for (std::size_t j = 0; j < n; ++j, ++it) {
    if (it->first != task.knobs[static_cast<std::size_t>(fs.knob_by_name[j])].name)
      return false;
    values[j] = &it->second;
  }
  for (std::size_t j = 0; j < n; ++j)
    f(static_cast<std::size_t>(fs.knob_by_name[j]), *values[j]);
  return true;
}

} // namespace

sparse_features feature_space::point(const task_spec& task, const configuration& c) const {
  return point(task, c, active(task, c));
}

sparse_features feature_space::point(const task_spec& task, const configuration& c,
                                     const std::vector<int>& a) const {
  sparse_features out;
  out.reserve(a.size() + ordinal_knob.size());
  for (int i : a)
    out.emplace_back(i, 1.0);
  for (std::size_t o = 0; o < ordinal_knob.size(); ++o) {
    const auto& k = task.knobs[static_cast<std::size_t>(ordinal_knob[o])];
    auto it = c.knobs.find(k.name);
    if (it == c.knobs.end())
      continue;
    double v = std::log2(numeric(it->second) / numeric(k.default_value)) / ordinal_range[o];
    if (v != 0.0 && std::isfinite(v))
      out.emplace_back(static_cast<int>(names.size() + o), v);
  }
  return out;
}

history_encoding::history_encoding(const task_spec& task, const feature_space& fs,
                                   const std::vector<trial_record>& history) {
  keys.reserve(history.size());
  active.reserve(history.size());
  point.reserve(history.size());
  codes.reserve(history.size());
  for (const auto& t : history)
    append(task, fs, t);
}

void history_encoding::truncate(std::size_t n) {
  n = std::min(n, codes.size());
  codes.resize(n);
  keys.resize(n);
  active.resize(n);
  point.resize(n);
}

void history_encoding::append(const task_spec& task, const feature_space& fs,
                              const trial_record& t) {
  // The ordinal features' knob values, found in the same walk of the knob map.
  constexpr std::size_t few = 16;
  const knob_value* ordinal_small[few];
  std::vector<const knob_value*> ordinal_large;
  const knob_value** ordinal_value = ordinal_small;
  if (fs.ordinal_knob.size() > few) {
    ordinal_large.resize(fs.ordinal_knob.size());
    ordinal_value = ordinal_large.data();
  }
  std::fill(ordinal_value, ordinal_value + fs.ordinal_knob.size(), nullptr);
  // One walk: feature_space::active's one-hot features, the ordinal knobs' values and the
  // knobs' digits of the code (config_coder::code: 0 for the default, 1 + the position among
  // value_feature[k], the same list as the coder's, for another searched value).
  std::vector<int> on;
  on.reserve(task.knobs.size() + t.config.patches.size());
  std::uint64_t code = 0;
  bool coded = fs.coder.usable;
  bool walked =
      for_each_knob_in_step(task, fs, t.config, [&](std::size_t ki, const knob_value& v) {
        if (int o = fs.ordinal_of[ki]; o >= 0)
          ordinal_value[o] = &v;
        if (v == task.knobs[ki].default_value)
          return;
        std::uint64_t digit = 1;
        for (const auto& [fv, f] : fs.value_feature[ki]) {
          if (fv == v) {
            on.push_back(f);
            code += digit * fs.coder.weight[ki];
            return;
          }
          ++digit;
        }
        coded = false;
      });
  std::optional<std::uint64_t> bits;
  if (walked && coded)
    bits = fs.coder.patch_code(t.config.patches);
  codes.push_back(bits ? code + *bits : no_code);
  keys.push_back(bits ? std::string{} : t.config.key());
  if (walked) {
    for (const auto& p : t.config.patches) {
      auto it = fs.patch_feature.find(p);
      if (it != fs.patch_feature.end())
        on.push_back(it->second);
    }
    std::sort(on.begin(), on.end());
  } else {
    for (std::size_t o = 0; o < fs.ordinal_knob.size(); ++o) {
      auto it = t.config.knobs.find(task.knobs[static_cast<std::size_t>(fs.ordinal_knob[o])].name);
      if (it != t.config.knobs.end())
        ordinal_value[o] = &it->second;
    }
    on = fs.active(task, t.config);
  }
  active.push_back(std::move(on));
  sparse_features x;
  x.reserve(active.back().size() + fs.ordinal_knob.size());
  for (int i : active.back())
    x.emplace_back(i, 1.0);
  for (std::size_t o = 0; o < fs.ordinal_knob.size(); ++o) {
    if (ordinal_value[o] == nullptr)
      continue;
    const auto& k = task.knobs[static_cast<std::size_t>(fs.ordinal_knob[o])];
    double v = std::log2(numeric(*ordinal_value[o]) / numeric(k.default_value)) / fs.ordinal_range[o];
    if (v != 0.0 && std::isfinite(v))
      x.emplace_back(static_cast<int>(fs.names.size() + o), v);
  }
  point.push_back(std::move(x));
}

encoding_cache::basis::basis(const task_spec& task, const feature_space& fs)
  : knob_by_name(fs.knob_by_name), value_feature(fs.value_feature), one_hot(fs.names.size()),
    ordinal_knob(fs.ordinal_knob), ordinal_range(fs.ordinal_range),
    patch_feature(fs.patch_feature), coded(fs.coder.usable), weight(fs.coder.weight),
    patch_bit(fs.coder.patch_bit), patch_weight(fs.coder.patch_weight) {
  for (const auto& k : task.knobs) {
    knob_names.push_back(k.name);
    defaults.push_back(k.default_value);
  }
}

bool encoding_cache::basis::operator==(const basis& o) const {
  return knob_names == o.knob_names && defaults == o.defaults && knob_by_name == o.knob_by_name
         && value_feature == o.value_feature && one_hot == o.one_hot
         && ordinal_knob == o.ordinal_knob && ordinal_range == o.ordinal_range
         && patch_feature == o.patch_feature && coded == o.coded && weight == o.weight
         && patch_bit == o.patch_bit && patch_weight == o.patch_weight;
}

const history_encoding& encoding_cache::encode(const task_spec& task, const feature_space& fs,
                                               const std::vector<trial_record>& history) {
  basis now{task, fs};
  if (!basis_ || !(*basis_ == now)) {
    basis_ = std::move(now);
    ids_.clear();
    encoding_.truncate(0);
  }
  std::size_t same = 0;
  while (same < ids_.size() && same < history.size()
         && ids_[same].first == history[same].trial_id
         && ids_[same].second == history[same].attempt)
    ++same;
  ids_.resize(same);
  encoding_.truncate(same);
  for (std::size_t i = same; i < history.size(); ++i) {
    encoding_.append(task, fs, history[i]);
    ids_.emplace_back(history[i].trial_id, history[i].attempt);
  }
  last_encoded_ = history.size() - same;
  return encoding_;
}

std::vector<int> feature_space::active(const task_spec& task, const configuration& c) const {
  std::vector<int> out;
  out.reserve(task.knobs.size() + c.patches.size());
  auto add = [&](std::size_t ki, const knob_value& value) {
    const auto& k = task.knobs[ki];
    if (value == k.default_value)
      return;
    for (const auto& [v, f] : value_feature[ki])
      if (v == value) {
        out.push_back(f);
        break;
      }
  };
  if (!for_each_knob_in_step(task, *this, c, add))
    for (std::size_t ki = 0; ki < task.knobs.size(); ++ki) {
      auto kv = c.knobs.find(task.knobs[ki].name);
      if (kv != c.knobs.end())
        add(ki, kv->second);
    }
  for (const auto& p : c.patches) {
    auto it = patch_feature.find(p);
    if (it != patch_feature.end())
      out.push_back(it->second);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Eigen::VectorXd feature_space::encode(const task_spec& task, const configuration& c) const {
  Eigen::VectorXd x = Eigen::VectorXd::Zero(static_cast<Eigen::Index>(names.size()));
  for (int i : active(task, c))
    x[i] = 1.0;
  return x;
}

namespace {

/// at_least_as_hungry with the knobs' memory tags given per knob in name order (the maps of
/// both configurations are walked in step); falls back to it when a configuration does not have
/// exactly the task's knobs.
bool hungry_by_kind(const task_spec& task, const std::vector<int>& kind, const configuration& c,
                    const configuration& oom) {
  if (c.patches != oom.patches)
    return false;
  if (c.knobs.size() != kind.size() || oom.knobs.size() != kind.size())
    return at_least_as_hungry(task, c, oom);
  auto a = c.knobs.begin();
  auto b = oom.knobs.begin();
  for (std::size_t i = 0; i < kind.size(); ++i, ++a, ++b) {
    if (a->first != b->first)
      return at_least_as_hungry(task, c, oom);
    switch (kind[i]) {
    case 1:
      if (numeric(a->second) < numeric(b->second))
        return false;
      break;
    case -1:
      if (numeric(a->second) > numeric(b->second))
        return false;
      break;
    case 2:
      if (a->second != b->second)
        return false;
      break;
    default:
      break;
    }
  }
  return true;
}

} // namespace

history_facts::history_facts(const task_spec& task, const feature_space& fs,
                             const std::vector<trial_record>& history)
  : history_facts(task, fs, history, history_encoding{task, fs, history}) {}

history_facts::history_facts(const task_spec& task, const feature_space& fs,
                             const std::vector<trial_record>& history,
                             const history_encoding& encoded)
  : passed(fs.names.size(), 0), broke(fs.names.size(), 0), coder(fs.coder) {
  {
    std::vector<std::pair<std::string, int>> by_name;
    for (const auto& k : task.knobs) {
      bool h = has_tag(k, "memory-hungry");
      bool sv = has_tag(k, "memory-saver");
      int kd = h && k.type != knob_type::choice    ? 1
               : sv && k.type != knob_type::choice ? -1
               : h || sv                           ? 2
                                                   : 0;
      by_name.emplace_back(k.name, kd);
    }
    std::sort(by_name.begin(), by_name.end());
    for (const auto& [n, kd] : by_name)
      hunger_kind.push_back(kd);
  }
  tried_codes.reserve(history.size());
  // The minimal OOMs are kept with a compact copy of what hungry_by_kind compares (thousands of
  // OOM trials against hundreds of minimal ones): the patches as a bit mask and each knob's
  // value (number, or the value itself for a tagged choice) in name order. A configuration
  // whose knobs are not exactly the task's, or with a patch outside the task, is compared by
  // hungry_by_kind itself. Same answers either way.
  std::vector<const std::string*> sorted_names;
  for (const auto& k : task.knobs)
    sorted_names.push_back(&k.name);
  std::sort(sorted_names.begin(), sorted_names.end(),
            [](const std::string* a, const std::string* b) { return *a < *b; });
  struct row {
    bool compact = false;
    std::uint64_t patches = 0;
    std::vector<double> num;
    std::vector<const knob_value*> value;
  };
  auto make_row = [&](const configuration& c) {
    row r;
    if (c.knobs.size() != sorted_names.size() || fs.patch_feature.size() > 64)
      return r;
    int last = -1;
    for (const auto& p : c.patches) {
      auto it = fs.patch_feature.find(p);
      if (it == fs.patch_feature.end())
        return r;
      auto bit = static_cast<int>(std::distance(fs.patch_feature.begin(), it));
      if (bit <= last) // not sorted and unique: compare the vectors
        return r;
      last = bit;
      r.patches |= std::uint64_t{1} << bit;
    }
    auto name = sorted_names.begin();
    for (const auto& [k, v] : c.knobs) {
      if (k != **name++)
        return r;
      r.num.push_back(numeric(v));
      r.value.push_back(&v);
    }
    r.compact = true;
    return r;
  };
  auto hungry = [&](const configuration& c, const row& rc, const configuration& o, const row& ro) {
    if (!rc.compact || !ro.compact)
      return hungry_by_kind(task, hunger_kind, c, o);
    if (rc.patches != ro.patches)
      return false;
    for (std::size_t i = 0; i < hunger_kind.size(); ++i)
      switch (hunger_kind[i]) {
      case 1:
        if (rc.num[i] < ro.num[i])
          return false;
        break;
      case -1:
        if (rc.num[i] > ro.num[i])
          return false;
        break;
      case 2:
        if (*rc.value[i] != *ro.value[i])
          return false;
        break;
      default:
        break;
      }
    return true;
  };
  std::vector<row> oom_rows;
  std::vector<const configuration*> oom_configs;
  for (std::size_t ti = 0; ti < history.size(); ++ti) {
    const auto& t = history[ti];
    if (t.outcome == trial_outcome::lost && t.purpose == "explore")
      continue; // lost, not measured: may be proposed again (re-queued)
    if (encoded.codes[ti] != history_encoding::no_code)
      tried_codes.insert(encoded.codes[ti]);
    else
      tried.insert(encoded.keys[ti]);
    if (t.finished && t.outcome == trial_outcome::oom) {
      auto r = make_row(t.config);
      bool covered = false;
      for (std::size_t j = 0; j < oom_rows.size() && !covered; ++j)
        covered = hungry(t.config, r, *oom_configs[j], oom_rows[j]);
      if (covered)
        continue;
      std::size_t kept = 0;
      for (std::size_t j = 0; j < oom_rows.size(); ++j)
        if (!hungry(*oom_configs[j], oom_rows[j], t.config, r)) {
          if (kept != j) {
            oom_configs[kept] = oom_configs[j];
            oom_rows[kept] = std::move(oom_rows[j]);
          }
          ++kept;
        }
      oom_configs.resize(kept);
      oom_rows.resize(kept);
      oom_configs.push_back(&t.config);
      oom_rows.push_back(std::move(r));
    }
  }
  ooms.reserve(oom_configs.size());
  for (const auto* c : oom_configs)
    ooms.push_back(*c);
  for (std::size_t ti = 0; ti < history.size(); ++ti)
    if (history[ti].usable())
      for (int i : encoded.active[ti])
        passed[static_cast<std::size_t>(i)] += 1;
  for (std::size_t ti = 0; ti < history.size(); ++ti) {
    const auto& t = history[ti];
    bool violation = t.outcome == trial_outcome::contract_violation
                     || (t.verified && !t.violations.empty());
    if (!violation)
      continue;
    // Blame only an unambiguous culprit: the single setting of this trial never seen to pass.
    std::vector<int> unexplained;
    for (int i : encoded.active[ti])
      if (passed[static_cast<std::size_t>(i)] == 0)
        unexplained.push_back(i);
    if (unexplained.size() == 1)
      broke[static_cast<std::size_t>(unexplained.front())] += 1;
  }
}

bool history_facts::banned(const std::vector<int>& active) const {
  for (int i : active)
    if (broke[static_cast<std::size_t>(i)] > 0 && passed[static_cast<std::size_t>(i)] == 0)
      return true;
  return false;
}

std::size_t history_facts::untested(const std::vector<int>& active) const {
  std::size_t count = 0;
  for (int i : active)
    count += passed[static_cast<std::size_t>(i)] == 0 ? 1 : 0;
  return count;
}

bool history_facts::was_tried(const configuration& c, const std::string& key) const {
  if (!tried_codes.empty())
    if (const auto code = coder.code(c); code && tried_codes.count(*code) != 0)
      return true;
  return !tried.empty() && tried.count(key) != 0;
}

bool history_facts::dominated_by_oom(const task_spec& task, const configuration& c) const {
  for (const auto& o : ooms)
    if (hungry_by_kind(task, hunger_kind, c, o))
      return true;
  return false;
}

bool admissible(const planner_input& in, const history_facts& facts, const configuration& c) {
  return admissible(in, facts, c, c.key());
}

bool admissible(const planner_input& in, const history_facts& facts, const configuration& c,
                const std::string& key) {
  if (facts.was_tried(c, key))
    return false;
  for (const auto& p : c.patches)
    if (std::find(in.excluded_patches.begin(), in.excluded_patches.end(), p)
        != in.excluded_patches.end())
      return false;
  for (const auto& [a, b] : in.incompatible_patches)
    if (std::binary_search(c.patches.begin(), c.patches.end(), a)
        && std::binary_search(c.patches.begin(), c.patches.end(), b))
      return false;
  return true;
}

} // namespace infrarsi::tuning
