#include "tuning/memory_model.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tuning/time_model.hpp"

namespace infrarsi::tuning {

namespace {

constexpr double log_sqrt_2pi = 0.91893853320467274178;

double log_normal_pdf(double z) { return -0.5 * z * z - log_sqrt_2pi; }

/// The problem in scaled units (bytes / scale), parameters theta = (b, log s).
struct problem {
  const std::vector<memory_observation>* data = nullptr;
  double scale = 1.0;
  Eigen::VectorXd prior_mean;
  Eigen::VectorXd prior_prec; // 1 / sd^2
  double s0 = 0.0;            // weak prior centre of log s
  double s0_sd = 5.0;
  double floor = 0.0; // sigma floor, scaled units: sigma = sqrt(floor^2 + exp(2 s))
  bool analytic = false; // analytic Hessian (else central differences of the gradient)

  [[nodiscard]] double sigma_of(double s) const { return std::sqrt(floor * floor + std::exp(2.0 * s)); }

  [[nodiscard]] Eigen::Index dim() const { return prior_mean.size() + 1; }

  /// Per observation at the parameters `at`: mu = x'b and, for an OOM, log Q((y - mu) / sigma).
  /// Newton evaluates the log posterior, the gradient and the Hessian at the same parameters
  /// (the accepted line-search point is the next iteration's), so these are computed once per
  /// point, by the same expressions as before (the same numbers, bit for bit).
  mutable Eigen::VectorXd at;
  mutable std::vector<double> mu_at;
  mutable std::vector<double> log_q_at;
  /// Per observation: its nonzero features (index, value), for the Hessian (built once).
  mutable std::vector<std::vector<std::pair<Eigen::Index, double>>> nonzero;
  void evaluate_at(const Eigen::VectorXd& th) const {
    if (at.size() == th.size() && at == th)
      return;
    auto p = prior_mean.size();
    Eigen::VectorXd b = th.head(p);
    double sigma = sigma_of(th[p]);
    mu_at.resize(data->size());
    log_q_at.resize(data->size());
    for (std::size_t i = 0; i < data->size(); ++i) {
      const auto& o = (*data)[i];
      mu_at[i] = o.x.dot(b);
      log_q_at[i] = o.oom ? log_normal_survival((o.bytes / scale - mu_at[i]) / sigma) : 0.0;
    }
    at = th;
  }

  double log_posterior(const Eigen::VectorXd& th) const {
    auto p = prior_mean.size();
    Eigen::VectorXd b = th.head(p);
    double s = th[p];
    double sigma = sigma_of(s);
    double lp = 0.0;
    evaluate_at(th);
    for (std::size_t i = 0; i < data->size(); ++i) {
      const auto& o = (*data)[i];
      double mu = mu_at[i];
      double y = o.bytes / scale;
      if (o.oom)
        lp += log_q_at[i];
      else
        lp += log_normal_pdf((y - mu) / sigma) - std::log(sigma);
    }
    lp -= 0.5 * ((b - prior_mean).array().square() * prior_prec.array()).sum();
    lp -= 0.5 * ((s - s0) / s0_sd) * ((s - s0) / s0_sd);
    return lp;
  }

  Eigen::VectorXd gradient(const Eigen::VectorXd& th) const {
    auto p = prior_mean.size();
    Eigen::VectorXd b = th.head(p);
    double s = th[p];
    double sigma = sigma_of(s);
    double r = std::exp(2.0 * s) / (sigma * sigma); // d log sigma / d s
    Eigen::VectorXd g = Eigen::VectorXd::Zero(dim());
    evaluate_at(th);
    for (std::size_t i = 0; i < data->size(); ++i) {
      const auto& o = (*data)[i];
      double mu = mu_at[i];
      double y = o.bytes / scale;
      double z = (y - mu) / sigma;
      if (o.oom) {
        // d/dmu log Q(z) = lambda / sigma, d/ds log Q(z) = lambda z (inverse Mills ratio).
        double lambda = std::exp(log_normal_pdf(z) - log_q_at[i]);
        g.head(p) += (lambda / sigma) * o.x;
        g[p] += lambda * z * r;
      } else {
        g.head(p) += (z / sigma) * o.x;
        g[p] += (z * z - 1.0) * r;
      }
    }
    g.head(p) -= ((b - prior_mean).array() * prior_prec.array()).matrix();
    g[p] -= (s - s0) / (s0_sd * s0_sd);
    return g;
  }

  /// The analytic Hessian of log_posterior (with sigma = sqrt(floor^2 + e^2s), r = d log
  /// sigma / ds = e^2s / sigma^2, dr/ds = 2 r (1 - r); for an OOM, lambda = phi(z) / Q(z) and
  /// d lambda / dz = lambda (lambda - z)). O(N p^2), one pass.
  Eigen::MatrixXd hessian_analytic(const Eigen::VectorXd& th) const {
    auto p = prior_mean.size();
    double s = th[p];
    double sigma = sigma_of(s);
    double r = std::exp(2.0 * s) / (sigma * sigma);
    double dr = 2.0 * r * (1.0 - r);
    Eigen::MatrixXd h = Eigen::MatrixXd::Zero(dim(), dim());
    Eigen::MatrixXd xx = Eigen::MatrixXd::Zero(p, p);
    evaluate_at(th);
    if (nonzero.size() != data->size()) {
      nonzero.assign(data->size(), {});
      for (std::size_t i = 0; i < data->size(); ++i)
        for (Eigen::Index j = 0; j < p; ++j)
          if ((*data)[i].x[j] != 0.0)
            nonzero[i].emplace_back(j, (*data)[i].x[j]);
    }
    for (std::size_t i = 0; i < data->size(); ++i) {
      const auto& o = (*data)[i];
      double mu = mu_at[i];
      double y = o.bytes / scale;
      double z = (y - mu) / sigma;
      double wbb, wbs, wss;
      if (o.oom) {
        double lambda = std::exp(log_normal_pdf(z) - log_q_at[i]);
        double dl = lambda * (lambda - z);
        wbb = -dl / (sigma * sigma);
        wbs = -lambda * r * (z * (lambda - z) + 1.0) / sigma;
        wss = -lambda * z * r * r * (z * (lambda - z) + 1.0) + lambda * z * dr;
      } else {
        wbb = -1.0 / (sigma * sigma);
        wbs = -2.0 * z * r / sigma;
        wss = -2.0 * z * z * r * r + (z * z - 1.0) * dr;
      }
      // The lower triangle of wbb x x' over x's nonzero entries (one-hot features: most are 0).
      for (const auto& [j, xj] : nonzero[i]) {
        const double w = wbb * xj;
        for (const auto& [k, xk] : nonzero[i])
          if (k >= j)
            xx(k, j) += w * xk;
      }
      h.col(p).head(p) += wbs * o.x;
      h(p, p) += wss;
    }
    h.topLeftCorner(p, p) = xx.selfadjointView<Eigen::Lower>();
    h.row(p).head(p) = h.col(p).head(p).transpose();
    h.topLeftCorner(p, p).diagonal() -= prior_prec;
    h(p, p) -= 1.0 / (s0_sd * s0_sd);
    return h;
  }

  Eigen::MatrixXd hessian(const Eigen::VectorXd& th) const {
    if (analytic)
      return hessian_analytic(th);
    auto n = dim();
    Eigen::MatrixXd h(n, n);
    for (Eigen::Index k = 0; k < n; ++k) {
      double step = 1e-5 * std::max(1.0, std::abs(th[k]));
      Eigen::VectorXd a = th;
      Eigen::VectorXd c = th;
      a[k] += step;
      c[k] -= step;
      h.col(k) = (gradient(a) - gradient(c)) / (2.0 * step);
    }
    return 0.5 * (h + h.transpose());
  }
};

memory_fit fit(const std::vector<memory_observation>& data,
               const std::vector<coefficient_prior>& priors, double sigma_floor, std::string& why,
               const sigma_prior* s_prior = nullptr) {
  memory_fit out;
  why.clear();
  if (data.empty()) {
    why = "no observations";
    return out;
  }
  auto p = data.front().x.size();
  double scale = 0.0;
  std::size_t measured = 0;
  for (const auto& o : data) {
    if (o.x.size() != p) {
      why = "every observation needs " + std::to_string(p) + " features";
      return out;
    }
    scale = std::max(scale, std::abs(o.bytes));
    measured += o.oom ? 0 : 1;
  }
  if (measured == 0) {
    why = "no measured (uncensored) trial";
    return out;
  }
  if (!priors.empty() && static_cast<Eigen::Index>(priors.size()) != p) {
    why = "need one prior per feature (" + std::to_string(p) + "), got "
          + std::to_string(priors.size());
    return out;
  }
  if (scale <= 0)
    scale = 1.0;
  problem pr;
  pr.data = &data;
  pr.scale = scale;
  pr.floor = std::max(0.0, sigma_floor) / scale;
  pr.prior_mean = Eigen::VectorXd::Zero(p);
  pr.prior_prec = Eigen::VectorXd::Constant(p, 1e-12);
  for (Eigen::Index j = 0; j < static_cast<Eigen::Index>(priors.size()); ++j) {
    if (!(priors[static_cast<std::size_t>(j)].sd > 0)) {
      why = "prior " + std::to_string(j) + " has sd <= 0";
      return out;
    }
    pr.prior_mean[j] = priors[static_cast<std::size_t>(j)].mean / scale;
    double t = priors[static_cast<std::size_t>(j)].sd / scale;
    pr.prior_prec[j] = 1.0 / (t * t);
  }
  // Start: ridge least squares on the measured trials.
  Eigen::MatrixXd xtx = pr.prior_prec.asDiagonal();
  Eigen::VectorXd xty = (pr.prior_prec.array() * pr.prior_mean.array()).matrix();
  for (const auto& o : data)
    if (!o.oom) {
      xtx += o.x * o.x.transpose();
      xty += o.x * (o.bytes / scale);
    }
  Eigen::VectorXd b0 = xtx.ldlt().solve(xty);
  double ss = 0.0;
  for (const auto& o : data)
    if (!o.oom)
      ss += std::pow(o.bytes / scale - o.x.dot(b0), 2);
  double sd0 = std::sqrt(ss / static_cast<double>(measured)) + 1e-3;
  pr.s0 = std::log(sd0);
  if (s_prior != nullptr && s_prior->centre > 0 && s_prior->log_sd > 0) {
    pr.s0 = std::log(s_prior->centre / scale);
    pr.s0_sd = s_prior->log_sd;
    pr.analytic = true;
  }
  Eigen::VectorXd th(p + 1);
  th.head(p) = b0;
  th[p] = pr.s0;
  double lp = pr.log_posterior(th);
  int it = 0;
  for (; it < 200; ++it) {
    Eigen::VectorXd g = pr.gradient(th);
    if (g.lpNorm<Eigen::Infinity>() < 1e-9) {
      out.converged = true;
      break;
    }
    Eigen::MatrixXd h = pr.hessian(th);
    // Damped Newton: -H must be positive definite; shift it until it is.
    Eigen::MatrixXd neg = -h;
    double mu = 0.0;
    Eigen::LLT<Eigen::MatrixXd> llt;
    for (int k = 0; k < 30; ++k) {
      llt.compute(neg + mu * Eigen::MatrixXd::Identity(neg.rows(), neg.cols()));
      if (llt.info() == Eigen::Success)
        break;
      mu = mu == 0.0 ? 1e-6 * std::max(1.0, neg.diagonal().cwiseAbs().maxCoeff()) : mu * 10.0;
    }
    Eigen::VectorXd step = llt.solve(g);
    double t = 1.0;
    bool improved = false;
    for (int k = 0; k < 50; ++k) {
      Eigen::VectorXd cand = th + t * step;
      double lc = pr.log_posterior(cand);
      if (std::isfinite(lc) && lc >= lp) {
        improved = lc > lp || t * step.lpNorm<Eigen::Infinity>() < 1e-15;
        th = cand;
        lp = lc;
        break;
      }
      t *= 0.5;
    }
    if (!improved) {
      out.converged = pr.gradient(th).lpNorm<Eigen::Infinity>() < 1e-6;
      break;
    }
  }
  out.iterations = it;
  out.log_posterior = lp;
  Eigen::MatrixXd cov = (-pr.hessian(th)).inverse();
  out.coef = th.head(p) * scale;
  out.coef_cov = cov.topLeftCorner(p, p) * scale * scale;
  out.sigma = pr.sigma_of(th[p]) * scale;
  return out;
}

/// One EP site of an OOM trial (ep_posterior): the posterior's mean m and variance v of x'b
/// with the site (tau, nu) in it; the site is refitted by matching the moments of the cavity
/// N(f; mc, vc) times the censored likelihood P(f + e > c), e ~ N(0, s2). False when the cavity
/// or the moments are not usable (the site is then left as it is).
bool site_update(double m, double v, double tau, double nu, double s2, double c, double& tau_new,
                 double& nu_new) {
  if (!(v > 0))
    return false;
  // Cavity (the posterior without the site).
  double tc = 1.0 / v - tau;
  if (!(tc > 0))
    return false;
  double nc = m / v - nu;
  double mc = nc / tc;
  double vc = 1.0 / tc;
  // Moments of N(f; mc, vc) x P(f + e > c), e ~ N(0, s^2).
  double sd = std::sqrt(s2 + vc);
  double z = (mc - c) / sd;
  double r = std::exp(log_normal_pdf(z) - log_normal_survival(-z)); // phi(z) / Phi(z)
  double mh = mc + vc * r / sd;
  double vh = vc - vc * vc * r * (z + r) / (s2 + vc);
  if (!(vh > 0) || !std::isfinite(mh))
    return false;
  tau_new = std::max(0.0, 1.0 / vh - tc);
  nu_new = mh / vh - nc;
  return true;
}

} // namespace

double normal_survival(double z) { return 0.5 * std::erfc(z / std::sqrt(2.0)); }

double log_normal_survival(double z) {
  if (z < 30.0)
    return std::log(normal_survival(z));
  // Mills-ratio asymptotic series: Q(z) ~ phi(z)/z * (1 - 1/z^2 + 3/z^4).
  double z2 = z * z;
  return log_normal_pdf(z) - std::log(z) + std::log1p(-1.0 / z2 + 3.0 / (z2 * z2));
}

double memory_fit::mean(const Eigen::VectorXd& x) const { return x.dot(coef); }

double memory_fit::sd(const Eigen::VectorXd& x) const {
  return std::sqrt(sigma * sigma + x.dot(coef_cov * x));
}

double memory_fit::p_oom(const Eigen::VectorXd& x, double capacity_bytes) const {
  return normal_survival((capacity_bytes - mean(x)) / sd(x));
}

double memory_fit::p_oom(const std::vector<std::pair<int, double>>& x,
                         double capacity_bytes) const {
  double m = 0.0;
  double var = 0.0;
  for (const auto& [a, va] : x) {
    m += va * coef[a];
    for (const auto& [b, vb] : x)
      var += va * vb * coef_cov(a, b);
  }
  return normal_survival((capacity_bytes - m) / std::sqrt(sigma * sigma + var));
}

double memory_fit::price_sd(std::size_t j) const {
  auto k = static_cast<Eigen::Index>(j);
  return std::sqrt(std::max(0.0, coef_cov(k, k)));
}

memory_fit fit_censored_memory(const std::vector<memory_observation>& data,
                               const std::vector<coefficient_prior>& priors, std::string& why,
                               double sigma_floor) {
  return fit(data, priors, sigma_floor, why);
}

memory_fit fit_censored_memory(const std::vector<memory_observation>& data,
                               const std::vector<coefficient_prior>& priors, std::string& why,
                               double sigma_floor, const sigma_prior& s_prior) {
  return fit(data, priors, sigma_floor, why, &s_prior);
}

memory_fit ep_posterior(const std::vector<memory_observation>& data,
                        const std::vector<coefficient_prior>& priors, const memory_fit& map) {
  const auto p = map.coef.size();
  if (p == 0 || !(map.sigma > 0) || static_cast<Eigen::Index>(priors.size()) != p)
    return map;
  std::vector<const memory_observation*> censored;
  Eigen::MatrixXd prec = Eigen::MatrixXd::Zero(p, p);
  Eigen::VectorXd h = Eigen::VectorXd::Zero(p);
  for (Eigen::Index j = 0; j < p; ++j) {
    const auto& pr = priors[static_cast<std::size_t>(j)];
    prec(j, j) = 1.0 / (pr.sd * pr.sd);
    h[j] = pr.mean / (pr.sd * pr.sd);
  }
  const double s2 = map.sigma * map.sigma;
  for (const auto& o : data) {
    if (o.x.size() != p)
      return map;
    if (o.oom) {
      censored.push_back(&o);
    } else {
      prec += o.x * o.x.transpose() / s2;
      h += o.x * (o.bytes / s2);
    }
  }
  if (censored.empty())
    return map;
  Eigen::LLT<Eigen::MatrixXd> llt(prec);
  if (llt.info() != Eigen::Success)
    return map;
  Eigen::MatrixXd cov = llt.solve(Eigen::MatrixXd::Identity(p, p));
  Eigen::VectorXd mean = cov * h;
  // Sites: tau_i (x'b)^2 / 2 - nu_i x'b added to the negative log posterior.
  std::vector<double> tau(censored.size(), 0.0);
  std::vector<double> nu(censored.size(), 0.0);
  // Each site's nonzero features (one-hot features: most are zero), so that C x costs
  // O(nonzeros x p) instead of O(p^2).
  std::vector<std::vector<std::pair<Eigen::Index, double>>> nonzero(censored.size());
  for (std::size_t i = 0; i < censored.size(); ++i)
    for (Eigen::Index j = 0; j < p; ++j)
      if (censored[i]->x[j] != 0.0)
        nonzero[i].emplace_back(j, censored[i]->x[j]);
  Eigen::VectorXd sx(p); // (no allocation per site: the same products, written in place)
  for (int sweep = 0; sweep < 50; ++sweep) {
    double change = 0.0;
    for (std::size_t i = 0; i < censored.size(); ++i) {
      const auto& o = *censored[i];
      sx.setZero();
      double m = 0.0;
      for (const auto& [j, xj] : nonzero[i]) {
        sx += xj * cov.col(j);
        m += xj * mean[j];
      }
      double v = 0.0;
      for (const auto& [j, xj] : nonzero[i])
        v += xj * sx[j];
      double tau_new = 0.0;
      double nu_new = 0.0;
      if (!site_update(m, v, tau[i], nu[i], s2, o.bytes, tau_new, nu_new))
        continue;
      double dt = tau_new - tau[i];
      double dn = nu_new - nu[i];
      change = std::max({change, std::abs(dt) * v, std::abs(dn) * std::sqrt(v)});
      tau[i] = tau_new;
      nu[i] = nu_new;
      // Rank-one update of the posterior (Sherman-Morrison, k = dt / (1 + dt v)) and of its
      // mean in O(p): C' (h + dn x) = mean + C x (dn - k (x' mean + dn v)), as C' = C - k C x x' C
      // and x' C h = x' mean.
      const double k = dt / (1.0 + dt * v);
      for (const auto& [j, xj] : nonzero[i])
        h[j] += dn * xj;
      cov.noalias() -= k * (sx * sx.transpose());
      mean += (dn - k * (m + dn * v)) * sx;
      // Every 16 sites, and at the end of a sweep, the mean again from C h: the O(p) updates'
      // rounding must not accumulate (left alone, it held the sweeps' change above 1e-8 on
      // 1,600 sites: 28 sweeps instead of 17).
      if (i % 16 == 15)
        mean.noalias() = cov * h;
    }
    mean.noalias() = cov * h;
    if (change < 1e-8)
      break;
  }
  if (!mean.allFinite() || !cov.allFinite())
    return map;
  memory_fit out = map;
  out.coef = mean;
  out.coef_cov = 0.5 * (cov + cov.transpose());
  return out;
}

memory_fit ep_posterior_sparse(const std::vector<sparse_memory_observation>& data,
                               const std::vector<coefficient_prior>& priors, double sigma) {
  return ep_posterior_sparse(data, priors, sigma, ep_options{});
}

memory_fit ep_posterior_sparse(const std::vector<sparse_memory_observation>& data,
                               const std::vector<coefficient_prior>& priors, double sigma,
                               const ep_options& options) {
  memory_fit out;
  const auto p = static_cast<Eigen::Index>(priors.size());
  if (p == 0 || !(sigma > 0))
    return out;
  Eigen::MatrixXd prec = Eigen::MatrixXd::Zero(p, p);
  Eigen::VectorXd h = Eigen::VectorXd::Zero(p);
  for (Eigen::Index j = 0; j < p; ++j) {
    const auto& pr = priors[static_cast<std::size_t>(j)];
    if (!(pr.sd > 0))
      return out;
    prec(j, j) = 1.0 / (pr.sd * pr.sd);
    h[j] = pr.mean / (pr.sd * pr.sd);
  }
  const double s2 = sigma * sigma;
  std::vector<const sparse_memory_observation*> censored;
  for (const auto& o : data) {
    for (const auto& [a, va] : o.x)
      if (a < 0 || a >= p)
        return out;
    if (o.oom) {
      censored.push_back(&o);
      continue;
    }
    for (const auto& [a, va] : o.x) {
      h[a] += va * (o.bytes / s2);
      for (const auto& [b, vb] : o.x)
        if (b <= a)
          prec(a, b) += va * vb / s2;
    }
  }
  Eigen::LLT<Eigen::MatrixXd> llt(prec.selfadjointView<Eigen::Lower>());
  if (llt.info() != Eigen::Success)
    return out;
  Eigen::MatrixXd cov = inverse_from_cholesky(llt.matrixLLT());
  Eigen::VectorXd mean = cov * h;
  std::vector<double> tau(censored.size(), 0.0);
  std::vector<double> nu(censored.size(), 0.0);
  Eigen::VectorXd sx(p);
  // The rank-one updates of the covariance are applied `block` at a time (one matrix product
  // instead of `block` passes over p x p): C = C0 - sum_j k_j s_j s_j' with s_j = C_j x_j, the
  // covariance when site j was updated, so a site in the middle of a block gets its C x from C0
  // and the block's earlier updates (C x = C0 x - sum_j k_j s_j (s_j' x), O(p) each). The same
  // sequential EP, in another order of additions.
  constexpr Eigen::Index block = 32;
  Eigen::MatrixXd pending(p, block);
  Eigen::VectorXd pending_k(block);
  Eigen::MatrixXd scaled(options.triangle ? p : 0, options.triangle ? block : 0);
  Eigen::Index used = 0;
  auto apply_pending = [&] {
    if (used == 0)
      return;
    const auto s = pending.leftCols(used);
    cov.noalias() -= s * (pending_k.head(used).asDiagonal() * s.transpose());
    used = 0;
  };
  // Site i refitted from the posterior's m = x'mean and v = x'Cx: false when it cannot be (the
  // cavity or the moments are not usable) or would move by less than options.skip (it is then
  // left as it is); else its parameters are replaced and dt, dn are their changes. `change`
  // keeps the largest move of the sweep.
  auto refit = [&](std::size_t i, double m, double v, double& change, double& dt, double& dn) {
    double tau_new = 0.0;
    double nu_new = 0.0;
    if (!site_update(m, v, tau[i], nu[i], s2, censored[i]->bytes, tau_new, nu_new))
      return false;
    dt = tau_new - tau[i];
    dn = nu_new - nu[i];
    double moved = std::max(std::abs(dt) * v, std::abs(dn) * std::sqrt(v));
    change = std::max(change, moved);
    if (moved < options.skip)
      return false;
    tau[i] = tau_new;
    nu[i] = nu_new;
    return true;
  };
  // Sherman-Morrison: C' = C - k (Cx)(Cx)', k = dt / (1 + dt v); with h' = h + dn x the mean
  // C'h' = mean + Cx (dn - k m - k dn v), since x'Ch = m and x'Cx = v (C x in `sx`). Returns k.
  auto update_mean = [&](const sparse_memory_observation& o, double m, double v, double dt,
                         double dn) {
    double k = dt / (1.0 + dt * v);
    for (const auto& [a, va] : o.x)
      h[a] += dn * va;
    mean += sx * (dn - k * m - k * dn * v);
    return k;
  };
  int sweep = 0;
  if (options.triangle) {
    // The pending updates' columns also as rows (row a: the pending columns' entries a), so that
    // a site's products with them, w_j = s_j' x, gather few contiguous rows; the products with
    // the columns (C x, the block's update) read `pending`.
    Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> rows(p, block);
    Eigen::VectorXd w(block);
    auto apply_rows = [&] {
      if (used == 0)
        return;
      const auto s = pending.leftCols(used);
      scaled.leftCols(used) = s * pending_k.head(used).asDiagonal();
      cov.triangularView<Eigen::Lower>() -= s * scaled.leftCols(used).transpose();
      cov.triangularView<Eigen::StrictlyUpper>() = cov.transpose();
      used = 0;
    };
    for (; sweep < 50 && !censored.empty(); ++sweep) {
      double change = 0.0;
      for (std::size_t i = 0; i < censored.size(); ++i) {
        const auto& o = *censored[i];
        // v = x' C x, C = cov - sum_j k_j s_j s_j': the quadratic form over x's entries of the
        // applied covariance (lower triangle), less the pending updates' k_j w_j^2.
        auto wu = w.head(used);
        wu.setZero();
        double v = 0.0;
        double m = 0.0;
        for (std::size_t e = 0; e < o.x.size(); ++e) {
          const auto [a, va] = o.x[e];
          const double* col = cov.data() + a * p;
          double below = 0.0;
          for (std::size_t f = e + 1; f < o.x.size(); ++f)
            below += o.x[f].second * col[o.x[f].first];
          v += va * (va * col[a] + 2.0 * below);
          m += va * mean[a];
          if (used > 0)
            wu += va * rows.row(a).head(used).transpose();
        }
        if (used > 0)
          v -= (pending_k.head(used).array() * wu.array().square()).sum();
        double dt = 0.0;
        double dn = 0.0;
        if (!refit(i, m, v, change, dt, dn))
          continue;
        // C x, from the applied covariance's columns and the pending rows.
        sx.setZero();
        for (const auto& [a, va] : o.x)
          sx += va * cov.col(a);
        if (used > 0)
          sx.noalias() -= pending.leftCols(used) * (pending_k.head(used).array() * wu.array()).matrix();
        double k = update_mean(o, m, v, dt, dn);
        pending.col(used) = sx;
        rows.col(used) = sx;
        pending_k[used] = k;
        if (++used == block)
          apply_rows();
      }
      if (change < options.stop)
        break;
    }
    apply_rows();
  }
  for (; !options.triangle && sweep < 50 && !censored.empty(); ++sweep) {
    double change = 0.0;
    for (std::size_t i = 0; i < censored.size(); ++i) {
      const auto& o = *censored[i];
      sx.setZero();
      for (const auto& [a, va] : o.x)
        sx += va * cov.col(a);
      for (Eigen::Index j = 0; j < used; ++j) {
        double sj_x = 0.0;
        for (const auto& [a, va] : o.x)
          sj_x += va * pending(a, j);
        sx -= (pending_k[j] * sj_x) * pending.col(j);
      }
      double v = 0.0;
      double m = 0.0;
      for (const auto& [a, va] : o.x) {
        v += va * sx[a];
        m += va * mean[a];
      }
      double dt = 0.0;
      double dn = 0.0;
      if (!refit(i, m, v, change, dt, dn))
        continue;
      double k = update_mean(o, m, v, dt, dn);
      pending.col(used) = sx;
      pending_k[used] = k;
      if (++used == block)
        apply_pending();
    }
    if (change < options.stop)
      break;
  }
  apply_pending();
  mean.noalias() = cov * h;
  if (!mean.allFinite() || !cov.allFinite())
    return out;
  out.coef = mean;
  out.coef_cov = 0.5 * (cov + cov.transpose());
  out.sigma = sigma;
  out.iterations = sweep;
  out.converged = true;
  return out;
}

memory_fit fit_dropping_ooms(const std::vector<memory_observation>& data,
                             const std::vector<coefficient_prior>& priors, std::string& why) {
  std::vector<memory_observation> measured;
  for (const auto& o : data)
    if (!o.oom)
      measured.push_back(o);
  return fit(measured, priors, 0.0, why);
}

} // namespace infrarsi::tuning
