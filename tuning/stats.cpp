#include "tuning/stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

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
                                  const std::vector<double>& b_times_s) {
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
  double t = student_t_quantile(0.05, e.dof);
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
