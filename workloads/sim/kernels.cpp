#include "workloads/sim/kernels.hpp"

#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

namespace infrarsi::sim {

namespace {

std::string trim(const std::string& s) {
  auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos)
    return {};
  auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

template <class Enum, std::size_t N>
bool parse_enum(const std::string& value, const char* const (&names)[N], Enum& out) {
  for (std::size_t i = 0; i < N; ++i)
    if (value == names[i]) {
      out = static_cast<Enum>(i);
      return true;
    }
  return false;
}

template <std::size_t N>
std::string choices(const char* const (&names)[N]) {
  std::string out;
  for (std::size_t i = 0; i < N; ++i)
    out += (i == 0 ? "" : ", ") + std::string{names[i]};
  return out;
}

constexpr const char* norm_names[] = {"eager", "fused"};
constexpr const char* activation_names[] = {"eager", "fused"};
constexpr const char* rope_names[] = {"eager", "fused"};
constexpr const char* attention_names[] = {"eager", "fused_softmax", "flash2", "flash3"};
constexpr const char* moe_gemm_names[] = {"loop", "grouped"};
constexpr const char* optimizer_names[] = {"fp32", "bf16"};
constexpr const char* loader_names[] = {"reference", "fast"};

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::string line;
  std::istringstream in{text};
  while (std::getline(in, line))
    lines.push_back(line);
  return lines;
}

} // namespace

const char* to_string(norm_impl v) {
  return norm_names[static_cast<int>(v)];
}
const char* to_string(activation_impl v) {
  return activation_names[static_cast<int>(v)];
}
const char* to_string(rope_impl v) {
  return rope_names[static_cast<int>(v)];
}
const char* to_string(attention_impl v) {
  return attention_names[static_cast<int>(v)];
}
const char* to_string(moe_gemm_impl v) {
  return moe_gemm_names[static_cast<int>(v)];
}
const char* to_string(optimizer_state_impl v) {
  return optimizer_names[static_cast<int>(v)];
}
const char* to_string(data_loader_impl v) {
  return loader_names[static_cast<int>(v)];
}

kernel_settings optimized_kernels() {
  kernel_settings k;
  k.norm = norm_impl::fused;
  k.mlp_activation = activation_impl::fused;
  k.rope = rope_impl::fused;
  k.attention = attention_impl::flash3;
  k.moe_gemm = moe_gemm_impl::grouped;
  return k;
}

std::optional<kernel_settings> parse_kernels(const std::string& text, const std::string& origin,
                                             std::string& why) {
  kernel_settings k;
  std::set<std::string> seen;
  auto lines = split_lines(text);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    auto line = lines[i];
    if (auto hash = line.find('#'); hash != std::string::npos)
      line.resize(hash);
    line = trim(line);
    if (line.empty())
      continue;
    auto where = origin + ":" + std::to_string(i + 1) + ": ";
    auto eq = line.find('=');
    if (eq == std::string::npos) {
      why = where + "expected 'key = value', got '" + line + "'";
      return std::nullopt;
    }
    auto key = trim(line.substr(0, eq));
    auto value = trim(line.substr(eq + 1));
    if (!seen.insert(key).second) {
      why = where + "key '" + key + "' given twice";
      return std::nullopt;
    }
    bool ok = false;
    std::string expected;
    if (key == "norm") {
      ok = parse_enum(value, norm_names, k.norm);
      expected = choices(norm_names);
    } else if (key == "mlp_activation") {
      ok = parse_enum(value, activation_names, k.mlp_activation);
      expected = choices(activation_names);
    } else if (key == "rope") {
      ok = parse_enum(value, rope_names, k.rope);
      expected = choices(rope_names);
    } else if (key == "attention") {
      ok = parse_enum(value, attention_names, k.attention);
      expected = choices(attention_names);
    } else if (key == "moe_gemm") {
      ok = parse_enum(value, moe_gemm_names, k.moe_gemm);
      expected = choices(moe_gemm_names);
    } else if (key == "optimizer_states") {
      ok = parse_enum(value, optimizer_names, k.optimizer_states);
      expected = choices(optimizer_names);
    } else if (key == "data_loader") {
      ok = parse_enum(value, loader_names, k.data_loader);
      expected = choices(loader_names);
    } else {
      why = where + "unknown key '" + key +
            "' (keys: norm, mlp_activation, rope, attention, moe_gemm, optimizer_states, "
            "data_loader)";
      return std::nullopt;
    }
    if (!ok) {
      why = where + key + ": expected one of " + expected + ", got '" + value + "'";
      return std::nullopt;
    }
  }
  return k;
}

bool read_text_file(const std::string& path, std::string& out) {
  std::ifstream in{path, std::ios::binary};
  if (!in)
    return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return true;
}

std::optional<kernel_settings> load_kernels(const std::string& path, std::string& why) {
  std::string text;
  if (!read_text_file(path, text)) {
    why = "cannot read kernels file '" + path + "'";
    return std::nullopt;
  }
  return parse_kernels(text, path, why);
}

std::string to_text(const kernel_settings& k) {
  std::string out;
  out += std::string{"norm = "} + to_string(k.norm) + "\n";
  out += std::string{"mlp_activation = "} + to_string(k.mlp_activation) + "\n";
  out += std::string{"rope = "} + to_string(k.rope) + "\n";
  out += std::string{"attention = "} + to_string(k.attention) + "\n";
  out += std::string{"moe_gemm = "} + to_string(k.moe_gemm) + "\n";
  out += std::string{"optimizer_states = "} + to_string(k.optimizer_states) + "\n";
  out += std::string{"data_loader = "} + to_string(k.data_loader) + "\n";
  return out;
}

std::optional<std::string> apply_unified_diff(const std::string& text, const std::string& diff,
                                              std::string& why) {
  auto lines = split_lines(text);
  bool trailing_newline = !text.empty() && text.back() == '\n';
  auto dl = split_lines(diff);
  std::size_t i = 0;
  int files = 0;
  std::size_t search_from = 0; // hunks apply in order: never before the previous one's end
  long offset = 0;             // shift between the diff's line numbers and the current text
  while (i < dl.size()) {
    const auto& l = dl[i];
    if (l.rfind("--- ", 0) == 0) {
      if (++files > 1) {
        why = "the diff edits more than one file";
        return std::nullopt;
      }
      ++i;
      continue;
    }
    if (l.rfind("@@", 0) != 0) {
      ++i; // headers: diff --git, index, +++
      continue;
    }
    long old_start = 0;
    if (std::sscanf(l.c_str(), "@@ -%ld", &old_start) != 1) {
      why = "malformed hunk header '" + l + "'";
      return std::nullopt;
    }
    std::vector<std::string> old_side, new_side;
    ++i;
    while (i < dl.size() && dl[i].rfind("@@", 0) != 0 && dl[i].rfind("--- ", 0) != 0 &&
           dl[i].rfind("diff ", 0) != 0) {
      const auto& h = dl[i];
      if (h.rfind("\\", 0) == 0) { // "\ No newline at end of file"
        ++i;
        continue;
      }
      char tag = h.empty() ? ' ' : h[0];
      auto body = h.empty() ? std::string{} : h.substr(1);
      if (tag == ' ') {
        old_side.push_back(body);
        new_side.push_back(body);
      } else if (tag == '-') {
        old_side.push_back(body);
      } else if (tag == '+') {
        new_side.push_back(body);
      } else {
        why = "malformed hunk line '" + h + "'";
        return std::nullopt;
      }
      ++i;
    }
    auto matches_at = [&](std::size_t pos) {
      if (pos + old_side.size() > lines.size())
        return false;
      for (std::size_t j = 0; j < old_side.size(); ++j)
        if (lines[pos + j] != old_side[j])
          return false;
      return true;
    };
    long want = (old_start > 0 ? old_start - 1 : 0) + offset;
    std::optional<std::size_t> at;
    if (want >= static_cast<long>(search_from) && matches_at(static_cast<std::size_t>(want)))
      at = static_cast<std::size_t>(want);
    for (std::size_t pos = search_from; !at && pos + old_side.size() <= lines.size(); ++pos)
      if (matches_at(pos))
        at = pos;
    if (!at) {
      why = "hunk at line " + std::to_string(old_start) + " does not apply";
      return std::nullopt;
    }
    lines.erase(lines.begin() + static_cast<long>(*at),
                lines.begin() + static_cast<long>(*at + old_side.size()));
    lines.insert(lines.begin() + static_cast<long>(*at), new_side.begin(), new_side.end());
    search_from = *at + new_side.size();
    offset = static_cast<long>(*at + new_side.size()) -
             ((old_start > 0 ? old_start - 1 : 0) + static_cast<long>(old_side.size()));
  }
  if (files == 0) {
    why = "not a unified diff (no '--- ' header)";
    return std::nullopt;
  }
  std::string out;
  for (std::size_t j = 0; j < lines.size(); ++j) {
    out += lines[j];
    if (j + 1 < lines.size() || trailing_newline)
      out += '\n';
  }
  return out;
}

} // namespace infrarsi::sim
