#include "adapters/cluster_identity.hpp"

#include <array>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>
#include <toml++/toml.h>

#include "adapters/curve.hpp"
#include "messages/errc.hpp"

namespace infrarsi::adapters {

namespace fs = std::filesystem;

namespace {

/// Largest key file read (bytes); a real one is about 300.
constexpr std::size_t max_key_file_bytes = 4096;
/// Largest trust list read (bytes).
constexpr std::size_t max_trust_file_bytes = std::size_t{1} << 20;
/// Longest name of a trusted cluster (characters).
constexpr std::size_t max_name_chars = 64;

caf::error sodium_ready() {
  static const int rc = ::sodium_init(); // 0: initialised now, 1: before; -1: failed
  if (rc < 0)
    return make_error(errc::io_error, "libsodium could not be initialised (sodium_init)");
  return caf::none;
}

/// Decodes `digits` hex digits into bytes; empty on any other input.
std::string from_hex(std::string_view text, std::size_t digits) {
  if (text.size() != digits || digits % 2 != 0)
    return {};
  std::string out(digits / 2, '\0');
  for (std::size_t i = 0; i < digits; ++i) {
    int c = static_cast<unsigned char>(text[i]);
    int v = std::isdigit(c) != 0 ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
    if (v < 0)
      return {};
    out[i / 2] = static_cast<char>((static_cast<unsigned char>(out[i / 2]) << 4) | v);
  }
  return out;
}

/// Why `text` is not `digits` lower-case hex digits ("" when it is), never quoting it.
std::string hex_problem(std::string_view text, std::size_t digits) {
  if (text.size() != digits)
    return "expected " + std::to_string(digits) + " lower-case hex digits, got " +
           std::to_string(text.size()) + " characters";
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
      return "character " + std::to_string(i + 1) + " is not a lower-case hex digit";
  }
  return {};
}

std::string name_problem(const std::string& name) {
  if (name.empty())
    return "expected a name, got nothing";
  if (name.size() > max_name_chars)
    return "expected at most " + std::to_string(max_name_chars) + " characters, got " +
           std::to_string(name.size());
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '_' || c == '-'))
      return "expected letters, digits, '.', '_' or '-' only";
  return {};
}


std::string at(const std::string& path, const toml::node& n) {
  return path + ":" + std::to_string(n.source().begin.line) + ":" +
         std::to_string(n.source().begin.column);
}

} // namespace

cluster_identity::~cluster_identity() {
  if (!secret_.empty())
    ::sodium_memzero(secret_.data(), secret_.size());
}

std::string cluster_identity::sign(std::string_view bytes) const {
  std::string sig(crypto_sign_BYTES, '\0');
  ::crypto_sign_detached(reinterpret_cast<unsigned char*>(sig.data()), nullptr,
                         reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(),
                         reinterpret_cast<const unsigned char*>(secret_.data()));
  return sig;
}

std::string to_hex(std::string_view bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

std::string cluster_id_of(std::string_view public_key) {
  static_cast<void>(sodium_ready()); // swallowed: SHA-256 needs no initialisation to be correct
  std::array<unsigned char, crypto_hash_sha256_BYTES> digest{};
  ::crypto_hash_sha256(digest.data(), reinterpret_cast<const unsigned char*>(public_key.data()),
                       public_key.size());
  return to_hex({reinterpret_cast<const char*>(digest.data()), cluster_id_hex_digits / 2});
}

bool verify_signature(std::string_view public_key, std::string_view bytes,
                      std::string_view signature) {
  if (sodium_ready() || public_key.size() != crypto_sign_PUBLICKEYBYTES ||
      signature.size() != crypto_sign_BYTES)
    return false;
  return ::crypto_sign_verify_detached(
             reinterpret_cast<const unsigned char*>(signature.data()),
             reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(),
             reinterpret_cast<const unsigned char*>(public_key.data())) == 0;
}

std::string cluster_key_path(const std::string& store_dir) {
  return (fs::path{store_dir} / "cluster.key").string();
}

caf::expected<cluster_identity> load_cluster_identity(const std::string& path,
                                                      bool create_if_missing) {
  if (auto err = sodium_ready())
    return err;
  auto text = read_small_file(path, "cluster key file", max_key_file_bytes, true);
  if (!text && code_of(text.error()) == errc::not_found && create_if_missing) {
    std::array<unsigned char, crypto_sign_SEEDBYTES> seed{};
    std::array<unsigned char, crypto_sign_PUBLICKEYBYTES> pk{};
    std::array<unsigned char, crypto_sign_SECRETKEYBYTES> sk{};
    ::randombytes_buf(seed.data(), seed.size());
    ::crypto_sign_seed_keypair(pk.data(), sk.data(), seed.data());
    std::string public_key{reinterpret_cast<const char*>(pk.data()), pk.size()};
    auto id = cluster_id_of(public_key);
    std::string seed_hex = to_hex({reinterpret_cast<const char*>(seed.data()), seed.size()});
    ::sodium_memzero(seed.data(), seed.size());
    ::sodium_memzero(sk.data(), sk.size());
    std::string key_text = "# InfraRSI cluster identity (Ed25519, libsodium): signs this cluster's "
                           "experience packs.\n# Keep this file private (mode 0600); its public "
                           "part is in the .pub file beside it (docs/experience.md).\n"
                           "cluster_id = \"" +
                           id + "\"\npublic_key = \"" + to_hex(public_key) +
                           "\"\nsecret_seed = \"" + seed_hex + "\"\n";
    ::sodium_memzero(seed_hex.data(), seed_hex.size());
    std::error_code ec;
    auto dir = fs::path{path}.parent_path();
    if (!dir.empty() && !fs::exists(dir, ec))
      fs::create_directories(dir, ec);
    auto written = write_file_atomically(path, key_text, 0600, false);
    ::sodium_memzero(key_text.data(), key_text.size());
    if (written && code_of(written) != errc::not_permitted) // not_permitted: another won the race
      return written;
    if (!written) {
      auto pub_path = (fs::path{path}.replace_extension(".pub")).string();
      std::string pub_text = "# InfraRSI cluster public key: add it to the trust list "
                             "(STORE/trust.toml) of the stores that\n# should accept this "
                             "cluster's experience packs (docs/experience.md).\ncluster_id = \"" +
                             id + "\"\npublic_key = \"" + to_hex(public_key) + "\"\n";
      if (auto err = write_file_atomically(pub_path, pub_text, 0644, true))
        return err;
    }
    text = read_small_file(path, "cluster key file", max_key_file_bytes, true);
  }
  if (!text)
    return std::move(text.error());
  struct wipe {
    std::string& s;
    ~wipe() { ::sodium_memzero(s.data(), s.size()); }
  } wipe_text{*text};
  toml::table root;
  try {
    root = toml::parse(*text, path);
  } catch (const toml::parse_error& e) {
    // toml++'s description can quote the text it stopped at, maybe the secret: not shown.
    std::ostringstream os;
    os << path << ':' << e.source().begin.line << ':' << e.source().begin.column
       << ": not a cluster key file (expected TOML lines cluster_id = \"...\", public_key = "
          "\"...\" and secret_seed = \"...\")";
    return make_error(errc::invalid_argument, os.str());
  }
  for (const auto& [key, node] : root)
    if (key.str() != "cluster_id" && key.str() != "public_key" && key.str() != "secret_seed")
      return make_error(errc::invalid_argument,
                        at(path, node) + ": unexpected key '" + std::string{key.str()} +
                            "' (a cluster key file holds cluster_id, public_key and secret_seed)");
  auto get = [&](const char* key, std::size_t digits, std::string& into) -> caf::error {
    const auto* node = root.get(key);
    if (node == nullptr)
      return make_error(errc::invalid_argument, path + ": missing " + key + " = \"<" +
                                                    std::to_string(digits) + " hex digits>\"");
    const auto* value = node->as_string();
    if (value == nullptr)
      return make_error(errc::invalid_argument, at(path, *node) + ": " + key +
                                                    ": expected a "
                                                    "string of " +
                                                    std::to_string(digits) + " hex digits");
    if (auto problem = hex_problem(value->get(), digits); !problem.empty())
      return make_error(errc::invalid_argument, at(path, *node) + ": " + key + ": " + problem);
    into = value->get();
    return caf::none;
  };
  std::string id_text, public_hex, seed_hex;
  struct wipe_seed {
    std::string& s;
    ~wipe_seed() { ::sodium_memzero(s.data(), s.size()); }
  } wipe_seed_hex{seed_hex};
  if (auto err = get("cluster_id", cluster_id_hex_digits, id_text))
    return err;
  if (auto err = get("public_key", 2 * crypto_sign_PUBLICKEYBYTES, public_hex))
    return err;
  if (auto err = get("secret_seed", 2 * crypto_sign_SEEDBYTES, seed_hex))
    return err;
  auto seed = from_hex(seed_hex, 2 * crypto_sign_SEEDBYTES);
  cluster_identity id;
  id.secret_.assign(crypto_sign_SECRETKEYBYTES, '\0');
  std::array<unsigned char, crypto_sign_PUBLICKEYBYTES> pk{};
  ::crypto_sign_seed_keypair(pk.data(), reinterpret_cast<unsigned char*>(id.secret_.data()),
                             reinterpret_cast<const unsigned char*>(seed.data()));
  ::sodium_memzero(seed.data(), seed.size());
  id.public_key.assign(reinterpret_cast<const char*>(pk.data()), pk.size());
  id.cluster_id = cluster_id_of(id.public_key);
  id.key_file = path;
  if (to_hex(id.public_key) != public_hex)
    return make_error(errc::invalid_argument,
                      path + ": public_key does not belong to secret_seed (expected " +
                          to_hex(id.public_key) + ")");
  if (id.cluster_id != id_text)
    return make_error(errc::invalid_argument, path + ": cluster_id '" + id_text +
                                                  "' is not the id of public_key (expected '" +
                                                  id.cluster_id + "')");
  return id;
}

caf::expected<std::vector<trusted_cluster>> load_trust_list(const std::string& path) {
  auto text = read_small_file(path, "trust list", max_trust_file_bytes, false);
  if (!text)
    return std::move(text.error());
  toml::table root;
  try {
    root = toml::parse(*text, path);
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << path << ':' << e.source().begin.line << ':' << e.source().begin.column
       << ": not a trust list (TOML expected: [[trusted]] tables with name and public_key): "
       << e.description();
    return make_error(errc::invalid_argument, os.str());
  }
  for (const auto& [key, node] : root)
    if (key.str() != "trusted")
      return make_error(errc::invalid_argument,
                        at(path, node) + ": unexpected key '" + std::string{key.str()} +
                            "' (a trust list holds [[trusted]] tables only)");
  std::vector<trusted_cluster> out;
  const auto* list = root.get("trusted");
  if (list == nullptr)
    return out;
  const auto* array = list->as_array();
  if (array == nullptr)
    return make_error(errc::invalid_argument,
                      at(path, *list) + ": trusted: expected an array of tables ([[trusted]])");
  std::map<std::string, std::string> seen_key, seen_name;
  for (std::size_t i = 0; i < array->size(); ++i) {
    const auto& node = *array->get(i);
    const auto where = at(path, node);
    const auto label = "trusted[" + std::to_string(i + 1) + "]";
    const auto* table = node.as_table();
    if (table == nullptr)
      return make_error(errc::invalid_argument,
                        where + ": " + label + ": expected a table with name and public_key");
    for (const auto& [key, value] : *table)
      if (key.str() != "name" && key.str() != "public_key")
        return make_error(errc::invalid_argument,
                          at(path, value) + ": " + label + ": unexpected key '" +
                              std::string{key.str()} + "' (expected name and public_key)");
    trusted_cluster c;
    const auto* name = table->get("name");
    if (name == nullptr || name->as_string() == nullptr)
      return make_error(errc::invalid_argument,
                        where + ": " + label + ".name: expected a string (the cluster's name)");
    c.name = name->as_string()->get();
    if (auto problem = name_problem(c.name); !problem.empty())
      return make_error(errc::invalid_argument,
                        at(path, *name) + ": " + label + ".name '" + c.name + "': " + problem);
    const auto* key = table->get("public_key");
    if (key == nullptr || key->as_string() == nullptr)
      return make_error(errc::invalid_argument,
                        where + ": " + label +
                            ".public_key: expected a string of 64 hex digits "
                            "(the public_key of the cluster's cluster.pub)");
    const std::string hex = key->as_string()->get();
    if (auto problem = hex_problem(hex, 2 * crypto_sign_PUBLICKEYBYTES); !problem.empty())
      return make_error(errc::invalid_argument, at(path, *key) + ": " + label + ".public_key '" +
                                                    hex + "': " + problem +
                                                    " (an Ed25519 public key)");
    c.public_key = from_hex(hex, 2 * crypto_sign_PUBLICKEYBYTES);
    c.cluster_id = cluster_id_of(c.public_key);
    c.source = path + ":" + std::to_string(node.source().begin.line);
    if (auto s = seen_key.find(c.public_key); s != seen_key.end())
      return make_error(errc::invalid_argument, at(path, *key) + ": " + label +
                                                    ".public_key: the same key as " + s->second);
    if (auto s = seen_name.find(c.name); s != seen_name.end())
      return make_error(errc::invalid_argument, at(path, *name) + ": " + label + ".name '" +
                                                    c.name + "': the same name as " + s->second);
    seen_key[c.public_key] = label + " (" + where + ")";
    seen_name[c.name] = label + " (" + where + ")";
    out.push_back(std::move(c));
  }
  return out;
}

} // namespace infrarsi::adapters
