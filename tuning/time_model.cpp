#include "tuning/time_model.hpp"

#include <algorithm>
#include <cmath>

namespace infrarsi::tuning {

time_model::time_model(const feature_space& fs, time_model_options options)
    : features_(fs.model_size()), options_(options) {
  const auto f = features_;
  std::size_t d = 1 + f;
  auto same_knob = [&](std::size_t i, std::size_t j) {
    return fs.model_knob(i) >= 0 && fs.model_knob(i) == fs.model_knob(j);
  };
  // Count the pairs first: interactions only while the dimension stays within the cap.
  std::size_t pairs = 0;
  if (options_.interactions)
    for (std::size_t i = 0; i < f && d + pairs <= options_.max_dimension; ++i)
      for (std::size_t j = i + 1; j < f && d + pairs <= options_.max_dimension; ++j)
        pairs += same_knob(i, j) ? 0 : 1;
  if (options_.interactions && pairs > 0 && d + pairs <= options_.max_dimension) {
    pair_.assign(f * f, -1); // f <= max_dimension here
    for (std::size_t i = 0; i < f; ++i)
      for (std::size_t j = i + 1; j < f; ++j)
        if (!same_knob(i, j))
          pair_[i * f + j] = static_cast<int>(d++);
  }
  auto dim = static_cast<Eigen::Index>(d);
  prior_mean_ = Eigen::VectorXd::Zero(dim);
  prior_var_ = Eigen::VectorXd::Constant(dim, options_.interaction_sd * options_.interaction_sd);
  prior_var_[0] = options_.intercept_sd * options_.intercept_sd;
  const auto one_hot = fs.names.size();
  for (std::size_t i = 0; i < f; ++i) {
    auto k = static_cast<Eigen::Index>(1 + i);
    if (i < one_hot) {
      prior_mean_[k] = fs.prior_mean[static_cast<Eigen::Index>(i)];
      prior_var_[k] = options_.main_sd * options_.main_sd;
    } else {
      prior_var_[k] = options_.ordinal_sd * options_.ordinal_sd;
    }
  }
  mean_ = prior_mean_;
  cov_ = prior_var_.asDiagonal();
  noise_var_ = options_.model_error_sd * options_.model_error_sd;
}

void time_model::expand_into(const sparse_features& x, sparse_features& out) const {
  out.clear();
  out.reserve(1 + x.size() * (x.size() + 1) / 2);
  out.emplace_back(0, 1.0);
  for (const auto& [i, v] : x)
    out.emplace_back(1 + i, v);
  if (pair_.empty())
    return;
  for (std::size_t a = 0; a < x.size(); ++a)
    for (std::size_t b = a + 1; b < x.size(); ++b) {
      auto i = static_cast<std::size_t>(std::min(x[a].first, x[b].first));
      auto j = static_cast<std::size_t>(std::max(x[a].first, x[b].first));
      int p = pair_[i * features_ + j];
      if (p >= 0)
        out.emplace_back(p, x[a].second * x[b].second);
    }
}

namespace {

/// Scratch for the expanded features of one configuration (predict is called thousands of times
/// per proposal step; one buffer per thread, no allocation after the first call).
sparse_features& scratch() {
  thread_local sparse_features buf;
  return buf;
}

/// Scratch for predict_near's difference of expansions.
sparse_features& diff_scratch() {
  thread_local sparse_features buf;
  return buf;
}

/// The symmetric quadratic form v' C v over sparse v (C column-major, `rows` rows): the
/// diagonal plus twice the entries below it, read down each column.
double quadratic_form(const sparse_features& v, const double* c, std::size_t rows) {
  double diag = 0.0;
  double off = 0.0;
  for (std::size_t k = 0; k < v.size(); ++k) {
    const auto [a, va] = v[k];
    const double* col = c + static_cast<std::size_t>(a) * rows;
    diag += va * va * col[a];
    double s = 0.0;
    for (std::size_t l = k + 1; l < v.size(); ++l)
      s += v[l].second * col[v[l].first];
    off += va * s;
  }
  return diag + 2.0 * off;
}

} // namespace

Eigen::MatrixXd inverse_from_cholesky(const Eigen::MatrixXd& llt) {
  const Eigen::Index d = llt.rows();
  // Block columns of L^-1 (lower triangular): columns [j0, j0 + b) are zero above row j0, so
  // each block solves only the trailing system L[j0:, j0:] Y = I[j0:, j0:j0+b].
  constexpr Eigen::Index block = 48;
  thread_local Eigen::MatrixXd linv; // (a buffer per thread: see time_model::fit)
  linv.setZero(d, d);
  for (Eigen::Index j0 = 0; j0 < d; j0 += block) {
    const Eigen::Index b = std::min(block, d - j0);
    auto y = linv.block(j0, j0, d - j0, b);
    y.topRows(b).setIdentity();
    llt.bottomRightCorner(d - j0, d - j0).triangularView<Eigen::Lower>().solveInPlace(y);
  }
  // P^-1 = L^-T L^-1. Entry (i, j), i <= j, sums L^-1(k, i) L^-1(k, j) over rows k >= j (the
  // rows where column j is not zero), so block column [j0, j0 + b) of the upper triangle is
  // L^-1[j0:, :j0+b]' L^-1[j0:, j0:j0+b]; the lower triangle is mirrored.
  Eigen::MatrixXd inv(d, d);
  for (Eigen::Index j0 = 0; j0 < d; j0 += block) {
    const Eigen::Index b = std::min(block, d - j0);
    inv.block(0, j0, j0 + b, b).noalias() =
      linv.block(j0, 0, d - j0, j0 + b).transpose() * linv.block(j0, j0, d - j0, b);
  }
  inv.triangularView<Eigen::StrictlyLower>() = inv.transpose();
  return inv;
}

void time_model::fit(const std::vector<std::pair<sparse_features, double>>& data,
                     double noise_log_sd) {
  double noise = std::isfinite(noise_log_sd) ? std::max(noise_log_sd, 0.005) : 0.02;
  noise_var_ = noise * noise + options_.model_error_sd * options_.model_error_sd;
  auto d = prior_mean_.size();
  // One buffer per thread, factorized in place: a fresh D x D matrix per fit (1 MB at D = 363)
  // costs its page faults every proposal step.
  thread_local Eigen::MatrixXd precision;
  precision.setZero(d, d);
  precision.diagonal() = prior_var_.cwiseInverse();
  Eigen::VectorXd rhs = prior_mean_.cwiseQuotient(prior_var_);
  // Each coefficient index occurs once in a trial's expansion, so entries (a, b) and (b, a)
  // receive the same increments (va vb / s^2 = vb va / s^2 exactly) in the same order: only the
  // lower triangle is accumulated (the factorization reads no other), which halves the work.
  // Most values are 1 (one-hot features, the intercept, products of two): 1 x vb / s^2 is
  // vb / s^2 exactly, computed once per coefficient instead of once per pair.
  auto& idx = scratch();
  std::vector<double> over_noise;
  for (const auto& [x, y] : data) {
    expand_into(x, idx);
    over_noise.resize(idx.size());
    for (std::size_t k = 0; k < idx.size(); ++k)
      over_noise[k] = idx[k].second / noise_var_;
    for (std::size_t k = 0; k < idx.size(); ++k) {
      const auto [a, va] = idx[k];
      rhs[a] += va * y / noise_var_;
      for (std::size_t l = k; l < idx.size(); ++l) {
        const auto [b, vb] = idx[l];
        double inc = va == 1.0 ? over_noise[l] : vb == 1.0 ? over_noise[k] : va * vb / noise_var_;
        precision(std::max(a, b), std::min(a, b)) += inc;
      }
    }
  }
  // The precision is the prior's (diagonal, positive) plus a Gram matrix, so it is positive
  // definite; a failed factorization can only come from non-finite data, which is left out.
  Eigen::LLT<Eigen::Ref<Eigen::MatrixXd>, Eigen::Lower> llt(precision);
  if (llt.info() != Eigen::Success || !rhs.allFinite()) {
    precision = prior_var_.cwiseInverse().asDiagonal();
    rhs = prior_mean_.cwiseQuotient(prior_var_);
    llt.compute(precision);
    observations_ = 0;
  } else {
    observations_ = data.size();
  }
  mean_ = llt.solve(rhs);
  cov_ = inverse_from_cholesky(llt.matrixLLT());
}

time_prediction time_model::predict(const sparse_features& x) const {
  auto& idx = scratch();
  expand_into(x, idx);
  time_prediction p;
  for (const auto& [a, va] : idx)
    p.mean += va * mean_[a];
  // x' C x over the active coefficients, C symmetric: the diagonal plus twice the pairs below
  // it, each pair read from coefficient a's column (contiguous in the column-major C).
  double var = quadratic_form(idx, cov_.data(), static_cast<std::size_t>(cov_.rows()));
  p.sd = std::sqrt(std::max(0.0, var));
  return p;
}

void time_model::prepare_centre(const sparse_features& x, centre& out) const {
  expand_into(x, out.expanded);
  out.cz = Eigen::VectorXd::Zero(cov_.rows());
  for (const auto& [a, va] : out.expanded)
    out.cz += va * cov_.col(a);
  out.var = 0.0;
  for (const auto& [a, va] : out.expanded)
    out.var += va * out.cz[a];
}

time_prediction time_model::predict_near(const centre& c, const sparse_features& x) const {
  auto& idx = scratch();
  expand_into(x, idx);
  // d = z(x) - z over the union of the two index lists (ascending: see expand_into's order for
  // features in ascending order; any order works, only the cost assumes few differences).
  auto& d = diff_scratch();
  d.clear();
  std::size_t i = 0, j = 0;
  const auto& z = c.expanded;
  bool sorted = true;
  for (std::size_t k = 1; k < idx.size() && sorted; ++k)
    sorted = idx[k - 1].first < idx[k].first;
  for (std::size_t k = 1; k < z.size() && sorted; ++k)
    sorted = z[k - 1].first < z[k].first;
  if (!sorted)
    return predict(x);
  while (i < idx.size() || j < z.size()) {
    if (j == z.size() || (i < idx.size() && idx[i].first < z[j].first)) {
      d.push_back(idx[i++]);
    } else if (i == idx.size() || z[j].first < idx[i].first) {
      d.emplace_back(z[j].first, -z[j].second);
      ++j;
    } else {
      if (idx[i].second != z[j].second)
        d.emplace_back(idx[i].first, idx[i].second - z[j].second);
      ++i;
      ++j;
    }
  }
  if (2 * d.size() > idx.size())
    return predict(x);
  time_prediction p;
  for (const auto& [a, va] : idx)
    p.mean += va * mean_[a];
  double cross = 0.0;
  for (const auto& [a, va] : d)
    cross += va * c.cz[a];
  double var = c.var + 2.0 * cross
               + quadratic_form(d, cov_.data(), static_cast<std::size_t>(cov_.rows()));
  p.sd = std::sqrt(std::max(0.0, var));
  return p;
}

double time_model::predict_mean(const sparse_features& x) const {
  auto& idx = scratch();
  expand_into(x, idx);
  double mean = 0.0;
  for (const auto& [a, va] : idx)
    mean += va * mean_[a];
  return mean;
}

double time_model::prior_mean(const sparse_features& x) const {
  double m = 0.0;
  for (const auto& [i, v] : x)
    m += v * prior_mean_[1 + i];
  return m;
}

void time_model::condition(const sparse_features& x, double value) {
  auto& idx = scratch();
  expand_into(x, idx);
  Eigen::VectorXd cx = Eigen::VectorXd::Zero(cov_.rows());
  double pred = 0.0;
  for (const auto& [a, va] : idx) {
    cx += va * cov_.col(a);
    pred += va * mean_[a];
  }
  double var = 0.0;
  for (const auto& [a, va] : idx)
    var += va * cx[a];
  double denom = noise_var_ + var;
  mean_ += cx * ((value - pred) / denom);
  cov_ -= cx * cx.transpose() / denom;
}

double time_model::effect_mean(int i) const { return mean_[1 + i]; }
double time_model::effect_sd(int i) const { return std::sqrt(std::max(0.0, cov_(1 + i, 1 + i))); }

} // namespace infrarsi::tuning
