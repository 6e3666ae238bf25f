#include "adapters/preflight.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include <toml++/toml.h>

#include "adapters/trial_launcher.hpp"

namespace infrarsi::adapters {

namespace fs = std::filesystem;

std::string to_string(const preflight_problem& p) {
  return p.where + ": " + p.key + ": " + p.message;
}

std::vector<std::string> template_placeholders(const std::string& tmpl, std::string& why) {
  std::vector<std::string> names;
  for (std::size_t i = 0; i < tmpl.size(); ++i) {
    char c = tmpl[i];
    if ((c == '{' || c == '}') && i + 1 < tmpl.size() && tmpl[i + 1] == c) {
      ++i; // a literal brace
    } else if (c == '{') {
      auto close = tmpl.find('}', i + 1);
      if (close == std::string::npos) {
        why = "unclosed '{' at offset " + std::to_string(i) + " in \"" + tmpl + "\"";
        return names;
      }
      names.push_back(tmpl.substr(i + 1, close - i - 1));
      i = close;
    } else if (c == '}') {
      why = "unmatched '}' at offset " + std::to_string(i) + " in \"" + tmpl + "\"";
      return names;
    }
  }
  return names;
}

namespace {

/// Levenshtein distance (two rows), for "did you mean".
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> prev(b.size() + 1);
  std::vector<std::size_t> cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j)
    prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

/// Positions of the task file's values, by key ("workload.argv[3]"), from a second parse.
class positions {
public:
  explicit positions(const std::string& file) : file_(file) {
    try {
      root_ = toml::parse_file(file);
      parsed_ = true;
    } catch (const toml::parse_error&) {
      parsed_ = false; // the loader parsed it; a file changed since is shown without positions
    }
  }

  /// FILE:LINE:COLUMN of root[table][key] (and its element `index` when >= 0), else FILE.
  [[nodiscard]] std::string at(const std::string& table, const std::string& key,
                               long index = -1) const {
    if (!parsed_)
      return file_;
    const toml::node* n = root_.get(table);
    if (n != nullptr && !key.empty())
      n = n->is_table() ? n->as_table()->get(key) : nullptr;
    if (n != nullptr && index >= 0)
      n = n->is_array() ? n->as_array()->get(static_cast<std::size_t>(index)) : nullptr;
    return where(n);
  }

  /// FILE:LINE:COLUMN of root.workload.env[key], else FILE.
  [[nodiscard]] std::string at_env(const std::string& key) const {
    if (!parsed_)
      return file_;
    const toml::node* n = root_.get("workload");
    n = n != nullptr && n->is_table() ? n->as_table()->get("env") : nullptr;
    n = n != nullptr && n->is_table() ? n->as_table()->get(key) : nullptr;
    return where(n);
  }

  /// FILE:LINE:COLUMN of root[array][index][key] (an array of tables), else FILE.
  [[nodiscard]] std::string at_table(const std::string& array, std::size_t index,
                                     const std::string& key) const {
    if (!parsed_)
      return file_;
    const toml::node* n = root_.get(array);
    if (n != nullptr && n->is_array())
      n = n->as_array()->get(index);
    else
      n = nullptr;
    if (n != nullptr && n->is_table())
      n = n->as_table()->get(key);
    else
      n = nullptr;
    return where(n);
  }

private:
  [[nodiscard]] std::string where(const toml::node* n) const {
    if (n == nullptr || n->source().begin.line == 0)
      return file_;
    return file_ + ":" + std::to_string(n->source().begin.line) + ":"
           + std::to_string(n->source().begin.column);
  }

  std::string file_;
  toml::table root_;
  bool parsed_ = false;
};

std::string in_quotes(const std::string& s) {
  return "\"" + s + "\"";
}

std::string mode_text(const fs::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0)
    return "?";
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(st.st_mode & 07777));
  return buf;
}

} // namespace

std::vector<preflight_problem> preflight(const tuning::task_spec& task,
                                         const preflight_options& options) {
  std::vector<preflight_problem> out;
  positions pos{task.source};
  const auto& w = task.workload;

  // Every name a template may use, with the values a default trial renders.
  std::map<std::string, std::string> builtins{{"trial_id", "0"},
                                              {"attempt", "0"},
                                              {"trial_dir", "/tmp/infrarsi-preflight"},
                                              {"memory_cap_bytes",
                                               std::to_string(task.limits.memory_cap_bytes)}};
  auto vars = tuning::template_vars(task, task.default_assignment(), builtins);
  std::string ws_why;
  auto ws = tuning::world_size_of(task, task.default_assignment(), builtins, ws_why);
  vars.emplace("world_size", std::to_string(ws.value_or(1)));
  if (w.launcher == tuning::launcher_kind::ranks)
    vars.emplace("rank", "0");
  std::string known_text;
  {
    std::vector<std::string> knobs;
    for (const auto& k : task.knobs)
      knobs.push_back(k.name);
    std::vector<std::string> constants;
    for (const auto& [name, value] : task.constants)
      constants.push_back(name);
    std::vector<std::string> built{"trial_id", "attempt", "trial_dir", "memory_cap_bytes",
                                   "world_size"};
    if (w.launcher == tuning::launcher_kind::ranks)
      built.emplace_back("rank");
    auto list = [](const std::vector<std::string>& names) {
      std::string s;
      for (const auto& n : names)
        s += (s.empty() ? "" : ", ") + n;
      return s.empty() ? std::string{"none"} : s;
    };
    known_text = "knobs: " + list(knobs) + "; constants: " + list(constants)
                 + "; built-ins: " + list(built);
  }

  auto check_template = [&](const std::string& tmpl, const std::string& key,
                            const std::string& where) {
    std::string why;
    auto names = template_placeholders(tmpl, why);
    for (const auto& name : names) {
      if (vars.count(name) > 0)
        continue;
      std::string best;
      std::size_t best_d = 3;
      for (const auto& [known, value] : vars) {
        auto d = edit_distance(name, known);
        if (d < best_d) {
          best_d = d;
          best = known;
        }
      }
      std::string msg = "placeholder {" + name + "} in " + in_quotes(tmpl)
                        + " names no knob, constant or built-in";
      if (!best.empty())
        msg += "; did you mean {" + best + "}?";
      msg += " (" + known_text + ")";
      out.push_back({where, key, msg});
    }
    if (!why.empty())
      out.push_back({where, key, why + " (write {{ and }} for literal braces)"});
  };
  auto check_list = [&](const std::vector<std::string>& list, const std::string& name) {
    for (std::size_t i = 0; i < list.size(); ++i)
      check_template(list[i], "workload." + name + "[" + std::to_string(i) + "]",
                     pos.at("workload", name, static_cast<long>(i)));
  };
  check_list(w.argv, "argv");
  for (const auto& [k, v] : w.env)
    check_template(v, "workload.env." + k, pos.at_env(k));
  check_template(w.world_size, "workload.world_size", pos.at("workload", "world_size"));
  if (task.smoke) {
    for (std::size_t i = 0; i < task.smoke->argv.size(); ++i)
      check_template(task.smoke->argv[i], "smoke.argv[" + std::to_string(i) + "]",
                     pos.at("smoke", "argv", static_cast<long>(i)));
    check_template(task.smoke->world_size, "smoke.world_size", pos.at("smoke", "world_size"));
  }
  // The world sizes the defaults render (a template that does not render was reported above).
  auto check_world_size = [&](const std::string& tmpl, const std::string& key,
                              const std::string& where) {
    std::string why;
    if (auto text = tuning::render_template(tmpl, vars, why))
      if (!tuning::world_size_value(*text, why))
        out.push_back({where, key, why});
  };
  check_world_size(w.world_size, "workload.world_size", pos.at("workload", "world_size"));
  if (task.smoke)
    check_world_size(task.smoke->world_size, "smoke.world_size", pos.at("smoke", "world_size"));
  check_list(w.srun_args, "srun_args");
  check_list(w.torchrun_args, "torchrun_args");
  if (w.launcher == tuning::launcher_kind::torchrun)
    check_list(w.torchrun_program, "torchrun_program");

  // The working directory.
  std::error_code ec;
  bool workdir_ok = fs::is_directory(w.workdir, ec);
  if (!workdir_ok)
    out.push_back({pos.at("workload", "workdir"), "workload.workdir",
                   fs::exists(w.workdir, ec) ? in_quotes(w.workdir) + " is not a directory"
                                             : "no such directory: " + in_quotes(w.workdir)});

  // The program (and the smoke launch's, which runs with the same launcher).
  const bool torchrun = w.launcher == tuning::launcher_kind::torchrun;
  auto check_program = [&](const std::vector<std::string>& prog_list, const std::string& prog_key,
                           const std::string& prog_where) {
    if (prog_list.empty())
      return;
    std::string why;
    auto program = tuning::render_template(prog_list[0], vars, why);
    if (program && program->empty())
      out.push_back({prog_where, prog_key,
                     "the program is empty: " + in_quotes(prog_list[0]) + " renders to \"\""});
    if (program && !program->empty()) {
      if (program->find('/') != std::string::npos) {
        fs::path p{*program};
        if (p.is_relative())
          p = (fs::path{w.workdir} / p).lexically_normal();
        if (!fs::exists(p, ec))
          out.push_back({prog_where, prog_key,
                         "program " + in_quotes(*program) + " does not exist: no file "
                           + in_quotes(p.string())
                           + (fs::path{*program}.is_relative()
                                ? " (a relative program path is relative to workload.workdir = "
                                    + in_quotes(w.workdir) + ")"
                                : std::string{})});
        else if (fs::is_directory(p, ec))
          out.push_back({prog_where, prog_key,
                         "program " + in_quotes(*program) + " is a directory: " + in_quotes(p.string())});
        else if (::access(p.c_str(), X_OK) != 0)
          out.push_back({prog_where, prog_key,
                         "program " + in_quotes(*program) + " is not executable: "
                           + in_quotes(p.string()) + " has mode " + mode_text(p)
                           + " (chmod +x it, or run it through its interpreter, e.g. "
                             "[\"python3\", \""
                           + *program + "\", ...])"});
      } else {
        std::string path;
        if (auto it = w.env.find("PATH"); it != w.env.end()) {
          std::string pwhy;
          path = tuning::render_template(it->second, vars, pwhy).value_or(it->second);
        } else if (const char* env_path = std::getenv("PATH")) {
          path = env_path;
        } else {
          path = "/usr/local/bin:/usr/bin:/bin";
        }
        bool found = false;
        bool found_not_exec = false;
        std::istringstream dirs{path};
        for (std::string dir; std::getline(dirs, dir, ':');) {
          auto candidate = fs::path{dir.empty() ? std::string{"."} : dir} / *program;
          if (fs::is_regular_file(candidate, ec)) {
            if (::access(candidate.c_str(), X_OK) == 0) {
              found = true;
              break;
            }
            found_not_exec = true;
          }
        }
        if (!found)
          out.push_back({prog_where, prog_key,
                         "program " + in_quotes(*program)
                           + (found_not_exec ? " is on PATH but not executable"
                                             : " is not found on PATH")
                           + " (PATH=" + path
                           + "); give its path (relative to workload.workdir or absolute), or "
                             "install it"});
      }
    }
  };
  if (torchrun)
    check_program(w.torchrun_program, "workload.torchrun_program[0]",
                  pos.at("workload", "torchrun_program", 0));
  else
    check_program(w.argv, "workload.argv[0]", pos.at("workload", "argv", 0));
  if (task.smoke && !torchrun)
    check_program(task.smoke->argv, "smoke.argv[0]", pos.at("smoke", "argv", 0));

  // Patches: each alone on the unpatched workload.
  if (options.check_patches && workdir_ok)
    for (std::size_t i = 0; i < task.patches.size(); ++i) {
      const auto& p = task.patches[i];
      auto where = pos.at_table("patches", i, "file");
      if (!fs::is_regular_file(p.file, ec)) {
        out.push_back({where, "patches[" + std::to_string(i) + "].file",
                       "no such file: " + in_quotes(p.file)});
        continue;
      }
      std::string why;
      if (!patch_applies(p.file, w.workdir, why)) {
        while (!why.empty() && (why.back() == '\n' || why.back() == ' '))
          why.pop_back();
        for (auto nl = why.find('\n'); nl != std::string::npos; nl = why.find('\n', nl))
          why.replace(nl, 1, "; ");
        if (why.size() > 400)
          why = why.substr(0, 400) + " ...";
        out.push_back({where, "patches[" + std::to_string(i) + "].file",
                       "patch '" + p.name + "' (" + in_quotes(p.file)
                         + ") does not apply to the unpatched workload in " + in_quotes(w.workdir)
                         + ": git apply --check: " + (why.empty() ? "failed" : why)});
      }
    }

  // The LLM's API key: the variable named must hold it (else every request would go out
  // without a key and the run would quietly use the knowledge base).
  if (options.check_api_key && task.llm.enabled && !task.llm.api_key_env.empty()) {
    const char* v = std::getenv(task.llm.api_key_env.c_str());
    if (v == nullptr || *v == '\0')
      out.push_back({pos.at("llm", "api_key_env"), "llm.api_key_env",
                     "the environment variable " + task.llm.api_key_env
                       + (v == nullptr ? " is not set" : " is empty")
                       + ": it must hold the API key of " + in_quotes(task.llm.base_url)
                       + " (export it, or set api_key_env = \"\" for a server without a key)"});
  }

  // The store.
  if (!options.store_dir.empty()) {
    fs::path s = fs::absolute(options.store_dir, ec);
    fs::path existing = s;
    while (!existing.empty() && !fs::exists(existing, ec) && existing != existing.root_path())
      existing = existing.parent_path();
    if (!fs::is_directory(existing, ec))
      out.push_back({"--store", "store", in_quotes(options.store_dir) + ": "
                                           + in_quotes(existing.string()) + " is not a directory"});
    else if (::access(existing.c_str(), W_OK | X_OK) != 0)
      out.push_back({"--store", "store",
                     in_quotes(options.store_dir) + " cannot be written: "
                       + (existing == s ? std::string{"the directory"}
                                        : "its nearest existing parent " + in_quotes(existing.string()))
                       + " is not writable by this user (mode " + mode_text(existing) + ")"});
  }
  return out;
}

} // namespace infrarsi::adapters
