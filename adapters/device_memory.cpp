#include "adapters/device_memory.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <map>

#include "messages/errc.hpp"

namespace infrarsi::adapters {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())) != 0)
    s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())) != 0)
    s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> cells(std::string_view line) {
  std::vector<std::string_view> out;
  for (;;) {
    auto comma = line.find(',');
    out.push_back(trim(line.substr(0, comma)));
    if (comma == std::string_view::npos)
      return out;
    line.remove_prefix(comma + 1);
  }
}

std::string lower(std::string_view s) {
  std::string out{s};
  for (auto& c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

/// A header cell's name without its unit: "used_gpu_memory [MiB]" -> "used_gpu_memory".
std::string column_name(std::string_view cell) {
  auto bracket = cell.find('[');
  return lower(trim(cell.substr(0, bracket)));
}

bool is_pid_text(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) != 0;
  });
}

caf::error line_error(std::size_t number, std::string_view line, const std::string& why) {
  return make_error(errc::invalid_argument, "nvidia-smi compute-apps output, line "
                                              + std::to_string(number) + " '"
                                              + std::string{line} + "': " + why);
}

/// A used-memory cell: MiB with or without the unit; nullopt for what the driver cannot say
/// ("[N/A]", "[Not Supported]", "N/A", empty). Sets `why` for a cell that is neither.
std::optional<std::uint64_t> memory_cell(std::string_view cell, std::string& why) {
  if (cell.empty() || cell.front() == '[' || lower(cell) == "n/a")
    return std::nullopt;
  double mib = 0;
  auto [end, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), mib);
  if (ec != std::errc{} || !(mib >= 0) || !std::isfinite(mib)) {
    why = "used memory '" + std::string{cell} + "' is not a number of MiB";
    return std::nullopt;
  }
  auto rest = static_cast<std::size_t>(cell.data() + cell.size() - end);
  auto unit = trim(std::string_view{end, rest});
  if (!unit.empty() && unit != "MiB") {
    why = "used memory '" + std::string{cell} + "' is not in MiB";
    return std::nullopt;
  }
  return static_cast<std::uint64_t>(std::llround(mib * 1048576.0));
}

} // namespace

caf::expected<std::vector<compute_app>> parse_compute_apps(std::string_view csv) {
  std::vector<compute_app> rows;
  std::size_t pid_col = 0;
  std::size_t used_col = 1;
  bool header_seen = false;
  std::size_t number = 0;
  while (!csv.empty()) {
    auto nl = csv.find('\n');
    auto raw = csv.substr(0, nl);
    csv.remove_prefix(nl == std::string_view::npos ? csv.size() : nl + 1);
    ++number;
    auto line = trim(raw);
    if (line.empty() || lower(line).rfind("no running processes found", 0) == 0)
      continue;
    auto c = cells(line);
    // The first line that names a pid or used-memory column is the header: it places the
    // columns (any order, other columns beside them). Rows after it are data, also rows whose
    // first column is text (a GPU's UUID).
    std::optional<std::size_t> pid_at;
    std::optional<std::size_t> used_at;
    for (std::size_t i = 0; i < c.size() && !header_seen; ++i) {
      auto name = column_name(c[i]);
      if (name == "pid")
        pid_at = i;
      else if (name == "used_memory" || name == "used_gpu_memory")
        used_at = i;
    }
    if (pid_at || used_at) {
      if (!pid_at || !used_at)
        return line_error(number, line, "a header without a pid and a used_memory column");
      pid_col = *pid_at;
      used_col = *used_at;
      header_seen = true;
      continue;
    }
    if (c.size() <= std::max(pid_col, used_col))
      return line_error(number, line, "fewer columns than pid and used_memory need");
    if (!is_pid_text(c[pid_col]))
      return line_error(number, line, "pid '" + std::string{c[pid_col]} + "' is not a number");
    compute_app app;
    std::from_chars(c[pid_col].data(), c[pid_col].data() + c[pid_col].size(), app.pid);
    std::string why;
    app.used_bytes = memory_cell(c[used_col], why);
    if (!why.empty())
      return line_error(number, line, why);
    rows.push_back(app);
  }
  return rows;
}

std::uint64_t most_loaded_rank_device_bytes(const std::vector<compute_app>& apps,
                                            const std::vector<process_entry>& table,
                                            const std::vector<pid_t>& roots,
                                            bool ranks_are_children) {
  if (apps.empty() || roots.empty())
    return 0;
  std::map<pid_t, const process_entry*> by_pid;
  for (const auto& e : table)
    by_pid[e.pid] = &e;
  auto is_root = [&](pid_t p) { return std::find(roots.begin(), roots.end(), p) != roots.end(); };
  // The rank of `pid` (a root, or with ranks_are_children a child of one), or 0 for none.
  auto rank_of = [&](pid_t pid) -> pid_t {
    auto it = by_pid.find(pid);
    if (it == by_pid.end())
      return 0;
    pid_t below = 0; // the previous process on the path up: the root's child at the root
    pid_t p = pid;
    for (int depth = 0; depth < 4096 && p > 1; ++depth) {
      if (is_root(p))
        return ranks_are_children && below != 0 ? below : p;
      auto e = by_pid.find(p);
      if (e == by_pid.end())
        break;
      below = p;
      p = e->second->ppid;
    }
    // Not below a root by parentage (adopted by the harness after its parent exited): its
    // process group still names its rank.
    if (is_root(it->second->pgrp))
      return it->second->pgrp;
    return 0;
  };
  std::map<pid_t, std::uint64_t> per_rank;
  for (const auto& app : apps)
    if (app.used_bytes)
      if (auto rank = rank_of(app.pid); rank != 0)
        per_rank[rank] += *app.used_bytes;
  std::uint64_t most = 0;
  for (const auto& [rank, bytes] : per_rank)
    most = std::max(most, bytes);
  return most;
}

std::vector<std::string> compute_apps_query(const std::string& program) {
  return {program, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"};
}

std::optional<std::string> find_on_path(const std::string& name, std::string_view path_env) {
  if (name.empty() || name.find('/') != std::string::npos)
    return std::nullopt;
  for (;;) {
    auto colon = path_env.find(':');
    auto dir = path_env.substr(0, colon);
    std::string candidate = (dir.empty() ? std::string{"."} : std::string{dir}) + "/" + name;
    struct stat st{};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode)
        && ::access(candidate.c_str(), X_OK) == 0)
      return candidate;
    if (colon == std::string_view::npos)
      return std::nullopt;
    path_env.remove_prefix(colon + 1);
  }
}

} // namespace infrarsi::adapters
