#include "adapters/environment.hpp"

#include <fnmatch.h>
#include <poll.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <thread>

#include <openssl/evp.h>

#include "adapters/process.hpp"
#include "messages/errc.hpp"

namespace infrarsi::adapters {

namespace fs = std::filesystem;

std::string sha256_hex(std::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &len, EVP_sha256(), nullptr);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += hex[digest[i] >> 4];
    out += hex[digest[i] & 0xF];
  }
  return out;
}

caf::expected<std::string> sha256_file(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  if (!in)
    return make_error(errc::not_found, "cannot read '" + path + "'");
  std::string content{std::istreambuf_iterator<char>{in}, {}};
  return sha256_hex(content);
}

bool path_in_scope(const std::string& path, const std::vector<std::string>& globs) {
  auto name = fs::path{path}.filename().string();
  for (const auto& g : globs) {
    if (::fnmatch(g.c_str(), path.c_str(), FNM_PATHNAME) == 0)
      return true;
    if (g.find('/') == std::string::npos && ::fnmatch(g.c_str(), name.c_str(), 0) == 0)
      return true;
  }
  return false;
}

std::vector<std::string> match_scope(const std::string& root, const std::vector<std::string>& globs) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator{root, ec};
       !ec && it != fs::recursive_directory_iterator{}; it.increment(ec)) {
    if (it->is_directory() && it->path().filename() == ".git") {
      it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file())
      continue;
    auto rel = fs::relative(it->path(), root).string();
    if (path_in_scope(rel, globs))
      out.push_back(rel);
  }
  std::sort(out.begin(), out.end());
  return out;
}

nlohmann::json hardware_description() {
  std::string cpu = "unknown";
  std::ifstream cpuinfo{"/proc/cpuinfo"};
  for (std::string line; std::getline(cpuinfo, line);)
    if (line.rfind("model name", 0) == 0) {
      cpu = line.substr(line.find(':') + 2);
      break;
    }
  std::uint64_t mem_kb = 0;
  std::ifstream meminfo{"/proc/meminfo"};
  for (std::string line; std::getline(meminfo, line);)
    if (line.rfind("MemTotal:", 0) == 0) {
      std::istringstream{line.substr(9)} >> mem_kb;
      break;
    }
  nlohmann::json gpus = nlohmann::json::array();
  std::error_code ec;
  for (const auto& e : fs::directory_iterator{"/proc/driver/nvidia/gpus", ec}) {
    std::ifstream info{e.path() / "information"};
    for (std::string line; std::getline(info, line);)
      if (line.rfind("Model:", 0) == 0)
        gpus.push_back(line.substr(line.find(':') + 1));
  }
  utsname u{};
  ::uname(&u);
  return {{"cpu", cpu},
          {"cores", std::thread::hardware_concurrency()},
          {"memory_bytes", mem_kb * 1024},
          {"gpus", gpus},
          {"os", std::string{u.sysname} + " " + u.release}};
}

std::string hardware_fingerprint(const nlohmann::json& d) {
  nlohmann::json key = {{"cpu", d.value("cpu", "")},
                        {"cores", d.value("cores", 0)},
                        {"memory_gib", d.value("memory_bytes", std::uint64_t{0}) >> 30},
                        {"gpus", d.value("gpus", nlohmann::json::array())}};
  return sha256_hex(key.dump()).substr(0, 16);
}

caf::expected<command_result> run_command(const std::vector<std::string>& argv,
                                          const std::string& cwd) {
  spawn_request req{argv, current_environment(), cwd};
  auto child = spawn(req);
  if (!child)
    return std::move(child.error());
  command_result r;
  int fds[2] = {child->stdout_fd, child->stderr_fd};
  std::string* sinks[2] = {&r.out, &r.err};
  bool open[2] = {true, true};
  char buf[4096];
  while (open[0] || open[1]) {
    pollfd p[2];
    int n = 0;
    int map[2];
    for (int i = 0; i < 2; ++i)
      if (open[i]) {
        p[n] = {fds[i], POLLIN, 0};
        map[n++] = i;
      }
    ::poll(p, static_cast<nfds_t>(n), 1000);
    for (int k = 0; k < n; ++k) {
      if (p[k].revents == 0)
        continue;
      int i = map[k];
      auto got = ::read(fds[i], buf, sizeof buf);
      if (got > 0)
        sinks[i]->append(buf, static_cast<std::size_t>(got));
      else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
        open[i] = false;
        ::close(fds[i]);
      }
    }
  }
  int status = 0;
  reap_child(child->pid, status, 0);
  r.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::vector<std::string> patch_paths(const std::string& diff_text) {
  std::set<std::string> paths;
  std::istringstream in{diff_text};
  for (std::string line; std::getline(in, line);) {
    for (const char* prefix : {"+++ ", "--- "}) {
      if (line.rfind(prefix, 0) != 0)
        continue;
      auto p = line.substr(4);
      auto tab = p.find('\t');
      if (tab != std::string::npos)
        p = p.substr(0, tab);
      if (p == "/dev/null")
        continue;
      if (p.rfind("a/", 0) == 0 || p.rfind("b/", 0) == 0)
        p = p.substr(2);
      paths.insert(p);
    }
  }
  return {paths.begin(), paths.end()};
}

std::string patch_scope_violation(const tuning::task_spec& task, const std::string& patch_name) {
  const auto* spec = task.find_patch(patch_name);
  if (spec == nullptr)
    return "unknown patch '" + patch_name + "'";
  std::ifstream in{spec->file};
  std::string text{std::istreambuf_iterator<char>{in}, {}};
  for (const auto& path : patch_paths(text)) {
    if (path_in_scope(path, task.scope.frozen))
      return "scope: patch '" + patch_name + "' edits frozen path '" + path + "'";
    if (!path_in_scope(path, task.scope.editable))
      return "scope: patch '" + patch_name + "' edits '" + path + "', outside the editable scope";
  }
  return {};
}

} // namespace infrarsi::adapters
