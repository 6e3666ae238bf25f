#include "tuning/stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>
#include <tuple>

#include <boost/math/distributions/chi_squared.hpp>
#include <boost/math/distributions/students_t.hpp>

namespace infrarsi::tuning {

namespace {

double mean(const std::vector<double>& x) {
  return x.empty() ? 0.0 : std::accumulate(x.begin(), x.end(), 0.0) / static_cast<double>(x.size());
}

/// Sample variance (n - 1 denominator), summed in index order (deterministic).
double variance(const std::vector<double>& x) {
  if (x.size() < 2)
    return 0.0;
  auto m = mean(x);
  double s = 0.0;
  for (double v : x)
    s += (v - m) * (v - m);
  return s / static_cast<double>(x.size() - 1);
}

std::vector<double> logs(const std::vector<double>& x) {
  std::vector<double> out;
  out.reserve(x.size());
  for (double v : x)
    out.push_back(std::log(v));
  return out;
}

} // namespace

double median(std::vector<double> values) {
  if (values.empty())
    return 0.0;
  std::sort(values.begin(), values.end());
  auto n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

noise_estimate estimate_noise(const std::vector<double>& run_step_times_s, double floor_log_sd) {
  noise_estimate e;
  e.runs = run_step_times_s.size();
  e.mean_step_time_s = mean(run_step_times_s);
  if (e.runs < 2)
    return e;
  e.cv = std::sqrt(variance(run_step_times_s)) / e.mean_step_time_s;
  e.log_sd = std::max(std::sqrt(variance(logs(run_step_times_s))), floor_log_sd);
  constexpr double z_alpha = 1.959963984540054; // z_{0.975}
  constexpr double z_power = 0.841621233572914; // z_{0.80}
  e.min_detectable_speedup =
    std::exp((z_alpha + z_power) * e.log_sd * std::sqrt(2.0 / static_cast<double>(e.runs))) - 1.0;
  return e;
}

double student_t_quantile(double alpha, double dof) {
  if (!(dof > 0))
    return std::numeric_limits<double>::infinity();
  boost::math::students_t dist{dof};
  return boost::math::quantile(boost::math::complement(dist, alpha / 2.0));
}

speedup_estimate estimate_speedup(const std::vector<double>& a_times_s,
                                  const std::vector<double>& b_times_s, double alpha) {
  speedup_estimate e;
  auto la = logs(a_times_s);
  auto lb = logs(b_times_s);
  double diff = mean(la) - mean(lb);
  e.speedup = std::exp(diff);
  if (la.size() < 2 || lb.size() < 2) {
    e.ci_low = 0.0;
    e.ci_high = std::numeric_limits<double>::infinity();
    return e;
  }
  double va = variance(la) / static_cast<double>(la.size());
  double vb = variance(lb) / static_cast<double>(lb.size());
  e.log_sd_a = std::sqrt(variance(la));
  e.log_sd_b = std::sqrt(variance(lb));
  double se = std::sqrt(va + vb);
  if (se == 0.0) {
    e.ci_low = e.ci_high = e.speedup;
    e.dof = static_cast<double>(la.size() + lb.size() - 2);
    return e;
  }
  // Welch–Satterthwaite
  e.dof = (va + vb) * (va + vb)
          / (va * va / static_cast<double>(la.size() - 1)
             + vb * vb / static_cast<double>(lb.size() - 1));
  double t = student_t_quantile(alpha, e.dof);
  e.ci_low = std::exp(diff - t * se);
  e.ci_high = std::exp(diff + t * se);
  return e;
}

} // namespace infrarsi::tuning

namespace infrarsi::tuning {

namespace {

std::vector<double> average_ranks(const std::vector<double>& v) {
  std::vector<std::size_t> order(v.size());
  for (std::size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return v[a] < v[b]; });
  std::vector<double> rank(v.size());
  for (std::size_t i = 0; i < order.size();) {
    std::size_t j = i;
    while (j + 1 < order.size() && v[order[j + 1]] == v[order[i]])
      ++j;
    double r = 0.5 * static_cast<double>(i + j) + 1.0;
    for (std::size_t k = i; k <= j; ++k)
      rank[order[k]] = r;
    i = j + 1;
  }
  return rank;
}

} // namespace

double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (a.size() != b.size() || a.size() < 3)
    return nan;
  auto ra = average_ranks(a);
  auto rb = average_ranks(b);
  double n = static_cast<double>(a.size());
  double ma = 0, mb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    ma += ra[i];
    mb += rb[i];
  }
  ma /= n;
  mb /= n;
  double sab = 0, saa = 0, sbb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    sab += (ra[i] - ma) * (rb[i] - mb);
    saa += (ra[i] - ma) * (ra[i] - ma);
    sbb += (rb[i] - mb) * (rb[i] - mb);
  }
  if (saa <= 0 || sbb <= 0)
    return nan;
  return sab / std::sqrt(saa * sbb);
}

} // namespace infrarsi::tuning

namespace infrarsi::tuning {

namespace {

constexpr double z_975 = 1.959963984540054; // z_{0.975}
constexpr double z_80 = 0.841621233572914;  // z_{0.80}

double normal_pdf(double x) {
  return 0.3989422804014327 * std::exp(-0.5 * x * x);
}

double normal_cdf(double x) {
  return 0.5 * std::erfc(-x / std::sqrt(2.0));
}

/// P(|S_k| < b_k for every k = 1..K), S_k the sum of k iid N(0, 1): Armitage, McPherson and
/// Rowe (1969), the density of S_k on the continuation region propagated by Simpson's rule.
double continuation_probability(const std::vector<double>& b) {
  const double h_target = 0.05;
  std::vector<double> x;
  std::vector<double> w;
  std::vector<double> g;
  auto grid = [&](double bound) {
    auto n = static_cast<std::size_t>(std::ceil(2.0 * bound / h_target));
    n += n % 2; // Simpson needs an even number of intervals
    n = std::max<std::size_t>(n, 2);
    double h = 2.0 * bound / static_cast<double>(n);
    x.assign(n + 1, 0.0);
    w.assign(n + 1, 0.0);
    for (std::size_t i = 0; i <= n; ++i) {
      x[i] = -bound + h * static_cast<double>(i);
      w[i] = h / 3.0 * (i == 0 || i == n ? 1.0 : (i % 2 == 1 ? 4.0 : 2.0));
    }
  };
  grid(b[0]);
  g.resize(x.size());
  for (std::size_t i = 0; i < x.size(); ++i)
    g[i] = normal_pdf(x[i]);
  std::vector<double> kernel; // phi(h d) for d = -n..n, while the grid stays the same
  for (std::size_t k = 1; k < b.size(); ++k) {
    auto px = x;
    auto pw = w;
    grid(b[k]);
    std::vector<double> next(x.size(), 0.0);
    if (b[k] == b[k - 1]) { // the same grid (O'Brien-Fleming): phi depends on i - j only
      const auto n = x.size();
      if (kernel.size() != 2 * n - 1) {
        kernel.resize(2 * n - 1);
        for (std::size_t d = 0; d < 2 * n - 1; ++d)
          kernel[d] = normal_pdf(x[0] - x[0] + (x[1] - x[0]) * (static_cast<double>(d) -
                                                                static_cast<double>(n - 1)));
      }
      for (std::size_t i = 0; i < n; ++i) {
        double s = 0.0;
        for (std::size_t j = 0; j < n; ++j)
          s += pw[j] * g[j] * kernel[i + n - 1 - j];
        next[i] = s;
      }
    } else {
      for (std::size_t i = 0; i < x.size(); ++i) {
        double s = 0.0;
        for (std::size_t j = 0; j < px.size(); ++j)
          s += pw[j] * g[j] * normal_pdf(x[i] - px[j]);
        next[i] = s;
      }
    }
    g = std::move(next);
  }
  double p = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i)
    p += w[i] * g[i];
  return p;
}

/// The boundaries on the partial-sum scale, b_k = c_k sqrt(k), for constant `c`.
std::vector<double> sum_boundaries(sequential_boundary shape, std::uint32_t looks, double c) {
  std::vector<double> b;
  for (std::uint32_t k = 1; k <= looks; ++k)
    b.push_back(shape == sequential_boundary::obrien_fleming
                  ? c * std::sqrt(static_cast<double>(looks))
                  : c * std::sqrt(static_cast<double>(k)));
  return b;
}

} // namespace

std::size_t repeats_for_mds(double log_sd, double target_mds) {
  if (!(target_mds > 0) || !(log_sd > 0))
    return 2;
  double r = (z_975 + z_80) * log_sd / std::log1p(target_mds);
  double n = std::ceil(2.0 * r * r - 1e-9);
  if (!(n < 1e9))
    return static_cast<std::size_t>(1e9);
  return std::max<std::size_t>(2, static_cast<std::size_t>(n));
}

double log_sd_upper_limit(double log_sd, std::size_t runs, double confidence) {
  if (runs < 2 || !(log_sd > 0))
    return log_sd;
  const double dof = static_cast<double>(runs - 1);
  boost::math::chi_squared dist{dof};
  return log_sd * std::sqrt(dof / boost::math::quantile(dist, 1.0 - confidence));
}

double min_detectable_speedup(double log_sd, std::size_t runs) {
  if (runs == 0)
    return 0.0;
  return std::exp((z_975 + z_80) * log_sd * std::sqrt(2.0 / static_cast<double>(runs))) - 1.0;
}

double log_sd_for_mds(std::size_t runs, double target_mds) {
  if (runs == 0)
    return 0.0;
  return std::log1p(target_mds) / ((z_975 + z_80) * std::sqrt(2.0 / static_cast<double>(runs)));
}

double group_sequential_constant(sequential_boundary shape, std::uint32_t looks, double alpha) {
  looks = std::clamp<std::uint32_t>(looks, 1, 32);
  static std::mutex mutex;
  static std::map<std::tuple<int, std::uint32_t, double>, double> cache;
  const auto key = std::make_tuple(static_cast<int>(shape), looks, alpha);
  {
    std::lock_guard<std::mutex> lock{mutex};
    if (auto it = cache.find(key); it != cache.end())
      return it->second;
  }
  double lo = 1.9; // z_{0.975} at K = 1; every K > 1 needs more
  double hi = 3.5; // above Pocock's C for K = 32 (2.74)
  while (hi - lo > 1e-8) {
    double mid = 0.5 * (lo + hi);
    double crossing = 1.0 - continuation_probability(sum_boundaries(shape, looks, mid));
    (crossing > alpha ? lo : hi) = mid;
  }
  double c = 0.5 * (lo + hi);
  std::lock_guard<std::mutex> lock{mutex};
  cache.emplace(key, c);
  return c;
}

double group_sequential_critical(sequential_boundary shape, std::uint32_t look,
                                 std::uint32_t looks, double alpha) {
  looks = std::clamp<std::uint32_t>(looks, 1, 32);
  look = std::clamp<std::uint32_t>(look, 1, looks);
  double c = group_sequential_constant(shape, looks, alpha);
  return shape == sequential_boundary::obrien_fleming
           ? c * std::sqrt(static_cast<double>(looks) / static_cast<double>(look))
           : c;
}

double group_sequential_nominal_alpha(sequential_boundary shape, std::uint32_t look,
                                      std::uint32_t looks, double alpha) {
  return 2.0 * (1.0 - normal_cdf(group_sequential_critical(shape, look, looks, alpha)));
}

repeat_steps summarize_repeat(const std::vector<double>& step_times_s) {
  repeat_steps r;
  if (step_times_s.empty())
    return r;
  auto l = logs(step_times_s);
  double m = median(l);
  std::vector<double> dev;
  dev.reserve(l.size());
  for (double v : l)
    dev.push_back(std::fabs(v - m));
  r.log_median = std::log(median(step_times_s));
  r.log_sd_steps = 1.4826 * median(dev);
  r.steps = l.size();
  return r;
}

double median_standard_error(const repeat_steps& r, double floor_log_sd) {
  if (r.steps == 0)
    return std::numeric_limits<double>::infinity();
  return std::sqrt(1.5707963267948966) * std::max(r.log_sd_steps, floor_log_sd)
         / std::sqrt(static_cast<double>(r.steps));
}

std::vector<bool> disturbed_repeats(const std::vector<repeat_steps>& repeats,
                                    std::vector<double>* z_scores, double z,
                                    double run_allowance, double floor_log_sd) {
  const auto n = repeats.size();
  std::vector<bool> out(n, false);
  if (z_scores != nullptr)
    z_scores->assign(n, 0.0);
  if (n < 3)
    return out;
  double tau = run_allowance;
  if (n >= 5) {
    std::vector<double> x;
    for (const auto& r : repeats)
      x.push_back(r.log_median);
    double m = median(x);
    std::vector<double> dev;
    for (double v : x)
      dev.push_back(std::fabs(v - m));
    tau = std::max(tau, 1.4826 * median(dev));
  }
  for (std::size_t i = 0; i < n; ++i) {
    std::vector<double> others;
    std::vector<double> others_se;
    for (std::size_t j = 0; j < n; ++j)
      if (j != i) {
        others.push_back(repeats[j].log_median);
        others_se.push_back(median_standard_error(repeats[j], floor_log_sd));
      }
    double se_i = median_standard_error(repeats[i], floor_log_sd);
    double se_ref = median(others_se);
    double scale = std::sqrt(se_i * se_i + se_ref * se_ref + tau * tau);
    double score = std::fabs(repeats[i].log_median - median(others)) / scale;
    if (z_scores != nullptr)
      (*z_scores)[i] = std::isfinite(score) ? score : 0.0;
    out[i] = std::isfinite(score) && score > z;
  }
  return out;
}

} // namespace infrarsi::tuning
