#include "runtime/keys.hpp"

#include <cctype>
#include <filesystem>

#include <unistd.h>

#include "adapters/curve.hpp"
#include "messages/errc.hpp"
#include "runtime/cli.hpp"

namespace infrarsi::runtime {

std::string default_key_name() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0')
    return "node";
  std::string name{host};
  for (auto& c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '_' || c == '-'))
      c = '-';
  if (name.front() == '.')
    name.front() = '-';
  if (name.size() > 64)
    name.resize(64);
  return name;
}

int run_keys_generate(const keys_generate_options& o, std::ostream& out, std::ostream& err) {
  auto name = o.name.empty() ? default_key_name() : o.name;
  auto keys = adapters::generate_curve_keypair();
  if (!keys) {
    err << "infrarsi keys generate: " << describe(keys.error()) << '\n';
    return exit_failure;
  }
  if (auto bad = adapters::write_key_files(o.out_dir, name, *keys, o.force)) {
    err << "infrarsi keys generate: " << describe(bad) << '\n';
    if (code_of(bad) == errc::not_permitted && !o.force)
      err << "  (pass --force to replace the key pair; peers holding its public key will be "
             "refused until they get the new one)\n";
    return code_of(bad) == errc::invalid_argument ? exit_usage : exit_failure;
  }
  namespace fs = std::filesystem;
  auto base = fs::absolute(fs::path{o.out_dir} / name).lexically_normal().string();
  out << "public key: " << keys->public_key << '\n'
      << "secret key file: " << base << ".key (mode 0600: keep it on this machine)\n"
      << "public key file: " << base
      << ".pub (copy it into the allow-list directory of the daemon that should admit this "
         "peer)\n";
  return exit_ok;
}

int run_keys_show_public(const std::string& path, std::ostream& out, std::ostream& err) {
  namespace fs = std::filesystem;
  if (fs::path{path}.extension() == ".key") {
    auto keys = adapters::load_secret_key_file(path);
    if (!keys) {
      err << "infrarsi keys show-public: " << describe(keys.error()) << '\n';
      return exit_failure;
    }
    out << keys->public_key << '\n';
    return exit_ok;
  }
  auto key = adapters::load_public_key_file(path);
  if (!key) {
    err << "infrarsi keys show-public: " << describe(key.error()) << '\n';
    return exit_failure;
  }
  out << *key << '\n';
  return exit_ok;
}

} // namespace infrarsi::runtime
