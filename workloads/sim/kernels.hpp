#pragma once
/// @file kernels.hpp
/// The simulated training code: the kernel choices in workloads/sim/kernels.conf, the file the
/// code patches edit. Parsing is strict (an unknown key or value is an error naming the file and
/// line). Also a minimal unified-diff applier so that `--enumerate` can price every patch
/// subset of a task without a patched copy on disk (the launcher itself uses `git apply`).

#include <cstdint>
#include <optional>
#include <string>

namespace infrarsi::sim {

/// Normalisation kernel (RMSNorm or LayerNorm).
enum class norm_impl : std::uint8_t { eager, fused };
/// MLP activation kernel (SwiGLU or GeLU).
enum class activation_impl : std::uint8_t { eager, fused };
/// Rotary embedding kernel.
enum class rope_impl : std::uint8_t { eager, fused };
/// Attention core kernel.
enum class attention_impl : std::uint8_t { eager, fused_softmax, flash2, flash3 };
/// Expert MLP GEMMs of a mixture-of-experts layer.
enum class moe_gemm_impl : std::uint8_t { loop, grouped };
/// Adam state precision (bf16 drifts the loss).
enum class optimizer_state_impl : std::uint8_t { fp32, bf16 };
/// Data loader ("fast" feeds half of every sample: a planted cheat).
enum class data_loader_impl : std::uint8_t { reference, fast };

/// Every setting of kernels.conf. Defaults are the shipped file's values.
struct kernel_settings {
  norm_impl norm = norm_impl::eager;
  activation_impl mlp_activation = activation_impl::eager;
  rope_impl rope = rope_impl::eager;
  attention_impl attention = attention_impl::flash2;
  moe_gemm_impl moe_gemm = moe_gemm_impl::loop;
  optimizer_state_impl optimizer_states = optimizer_state_impl::fp32;
  data_loader_impl data_loader = data_loader_impl::reference;

  friend bool operator==(const kernel_settings& a, const kernel_settings& b) {
    return a.norm == b.norm && a.mlp_activation == b.mlp_activation && a.rope == b.rope &&
           a.attention == b.attention && a.moe_gemm == b.moe_gemm &&
           a.optimizer_states == b.optimizer_states && a.data_loader == b.data_loader;
  }
  friend bool operator!=(const kernel_settings& a, const kernel_settings& b) { return !(a == b); }
};

/// Settings with every speed-relevant kernel at its best work-preserving choice (fused, flash3,
/// grouped) and the numerics/work settings at their reference values. Used by validation runs.
kernel_settings optimized_kernels();

/// Parses the text of a kernels.conf. `origin` names the file in error messages.
/// Returns nullopt and sets `why` ("FILE:LINE: unknown key 'x'") on any error; a key given twice
/// is an error; keys not given keep their defaults.
std::optional<kernel_settings> parse_kernels(const std::string& text, const std::string& origin,
                                             std::string& why);

/// Reads and parses a kernels file. Errors as parse_kernels, plus "cannot read FILE".
std::optional<kernel_settings> load_kernels(const std::string& path, std::string& why);

/// The settings as `key = value` lines (a JSON-friendly summary, not the commented file).
std::string to_text(const kernel_settings& k);

/// Names of each value, as written in kernels.conf.
const char* to_string(norm_impl v);
const char* to_string(activation_impl v);
const char* to_string(rope_impl v);
const char* to_string(attention_impl v);
const char* to_string(moe_gemm_impl v);
const char* to_string(optimizer_state_impl v);
const char* to_string(data_loader_impl v);

/// Applies a unified diff that edits a single file to that file's `text`. Each hunk's old side
/// (context and removed lines) must occur verbatim; it is searched for first at the stated line,
/// then anywhere after the previous hunk (git apply's offset rule, no fuzz). Returns the new
/// text, or nullopt with `why` when a hunk does not apply or the diff is malformed or touches
/// more than one file.
std::optional<std::string> apply_unified_diff(const std::string& text, const std::string& diff,
                                              std::string& why);

/// Reads a whole file into `out`. False when it cannot be read.
bool read_text_file(const std::string& path, std::string& out);

} // namespace infrarsi::sim
