#include "tuning/time_model.hpp"

#include <algorithm>
#include <cmath>

namespace infrarsi::tuning {

time_model::time_model(const feature_space& fs, time_model_options options)
    : features_(fs.names.size()), options_(options) {
  const auto f = features_;
  pair_.assign(f * f, -1);
  std::size_t d = 1 + f;
  if (options_.interactions)
    for (std::size_t i = 0; i < f; ++i)
      for (std::size_t j = i + 1; j < f; ++j) {
        bool same_knob = fs.knob_of[i] >= 0 && fs.knob_of[i] == fs.knob_of[j];
        if (!same_knob)
          pair_[i * f + j] = static_cast<int>(d++);
      }
  auto dim = static_cast<Eigen::Index>(d);
  prior_mean_ = Eigen::VectorXd::Zero(dim);
  prior_var_ = Eigen::VectorXd::Constant(dim, options_.interaction_sd * options_.interaction_sd);
  prior_var_[0] = options_.intercept_sd * options_.intercept_sd;
  for (std::size_t i = 0; i < f; ++i) {
    prior_mean_[static_cast<Eigen::Index>(1 + i)] = fs.prior_mean[static_cast<Eigen::Index>(i)];
    prior_var_[static_cast<Eigen::Index>(1 + i)] = options_.main_sd * options_.main_sd;
  }
  mean_ = prior_mean_;
  cov_ = prior_var_.asDiagonal();
  noise_var_ = options_.model_error_sd * options_.model_error_sd;
}

std::vector<int> time_model::expand(const std::vector<int>& active) const {
  std::vector<int> out;
  out.reserve(1 + active.size() * (active.size() + 1) / 2);
  out.push_back(0);
  for (int i : active)
    out.push_back(1 + i);
  for (std::size_t a = 0; a < active.size(); ++a)
    for (std::size_t b = a + 1; b < active.size(); ++b) {
      auto i = static_cast<std::size_t>(std::min(active[a], active[b]));
      auto j = static_cast<std::size_t>(std::max(active[a], active[b]));
      int p = pair_[i * features_ + j];
      if (p >= 0)
        out.push_back(p);
    }
  return out;
}

void time_model::fit(const std::vector<std::pair<std::vector<int>, double>>& data,
                     double noise_log_sd) {
  double noise = std::max(noise_log_sd, 0.005);
  noise_var_ = noise * noise + options_.model_error_sd * options_.model_error_sd;
  auto d = prior_mean_.size();
  Eigen::MatrixXd precision = Eigen::MatrixXd::Zero(d, d);
  precision.diagonal() = prior_var_.cwiseInverse();
  Eigen::VectorXd rhs = prior_mean_.cwiseQuotient(prior_var_);
  for (const auto& [active, y] : data) {
    auto idx = expand(active);
    for (int a : idx) {
      rhs[a] += y / noise_var_;
      for (int b : idx)
        precision(a, b) += 1.0 / noise_var_;
    }
  }
  Eigen::LLT<Eigen::MatrixXd> llt(precision);
  mean_ = llt.solve(rhs);
  cov_ = llt.solve(Eigen::MatrixXd::Identity(d, d));
  observations_ = data.size();
}

time_prediction time_model::predict(const std::vector<int>& active) const {
  auto idx = expand(active);
  time_prediction p;
  double var = 0.0;
  for (int a : idx) {
    p.mean += mean_[a];
    for (int b : idx)
      var += cov_(a, b);
  }
  p.sd = std::sqrt(std::max(0.0, var));
  return p;
}

double time_model::prior_mean(const std::vector<int>& active) const {
  double m = 0.0;
  for (int i : active)
    m += prior_mean_[1 + i];
  return m;
}

void time_model::condition(const std::vector<int>& active, double value) {
  auto idx = expand(active);
  Eigen::VectorXd cx = Eigen::VectorXd::Zero(cov_.rows());
  double pred = 0.0;
  for (int a : idx) {
    cx += cov_.col(a);
    pred += mean_[a];
  }
  double var = 0.0;
  for (int a : idx)
    var += cx[a];
  double denom = noise_var_ + var;
  mean_ += cx * ((value - pred) / denom);
  cov_ -= cx * cx.transpose() / denom;
}

double time_model::effect_mean(int i) const { return mean_[1 + i]; }
double time_model::effect_sd(int i) const { return std::sqrt(std::max(0.0, cov_(1 + i, 1 + i))); }

} // namespace infrarsi::tuning
