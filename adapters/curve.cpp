#include "adapters/curve.hpp"

#include <iterator>
#include <zmq_addon.hpp>
#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>
#include <system_error>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <toml++/toml.h>

#include "messages/errc.hpp"

namespace infrarsi::adapters {

namespace fs = std::filesystem;

namespace {

// ZMQ_ZAP_ENFORCE_DOMAIN is a draft option in libzmq 4.3's header (zmq.h hides it without
// ZMQ_BUILD_DRAFT_API), but the library accepts it; its number is stable.
#ifdef ZMQ_ZAP_ENFORCE_DOMAIN
constexpr int zap_enforce_domain_option = ZMQ_ZAP_ENFORCE_DOMAIN;
#else
constexpr int zap_enforce_domain_option = 93;
#endif

constexpr std::string_view z85_alphabet =
  "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

/// Largest key file read (bytes); a real one is about 250.
constexpr std::uintmax_t max_key_file_bytes = 4096;
/// Largest allow-list text file read (bytes): about 20000 entries.
constexpr std::uintmax_t max_allow_list_bytes = std::uintmax_t{1} << 20;
/// Longest name of a key pair or an allow-list entry (characters).
constexpr std::size_t max_name_chars = 64;

bool curve_supported() {
  return zmq_has("curve") != 0;
}

caf::error no_curve() {
  return make_error(errc::unsupported_format,
                    "this libzmq was built without CURVE support (zmq_has(\"curve\") is false; "
                    "Debian's libzmq5 has it)");
}

/// Empty when `name` is a safe key or peer name, else why not.
std::string name_problem(const std::string& name) {
  if (name.empty())
    return "expected a name, got nothing";
  if (name.size() > max_name_chars)
    return "expected at most " + std::to_string(max_name_chars) + " characters, got "
           + std::to_string(name.size());
  if (name.front() == '.')
    return "must not start with '.'";
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '_' || c == '-'))
      return "expected letters, digits, '.', '_' or '-' only";
  return {};
}

std::string mode_text(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}


/// Which kind of key file is read.
enum class key_file_kind { secret, public_only };

} // namespace

caf::expected<std::string> read_small_file(const std::string& path, const char* what,
                                           std::size_t limit, bool secret) {
  // Opened once; the checks and the read are of that one open file (no swap in between).
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR)
      return make_error(errc::not_found, std::string{what} + " '" + path + "': no such file");
    return make_error(errc::io_error,
                      std::string{what} + " '" + path + "': " + std::strerror(errno));
  }
  struct closer {
    int fd;
    ~closer() { ::close(fd); }
  } close_fd{fd};
  struct ::stat st{};
  if (::fstat(fd, &st) != 0)
    return make_error(errc::io_error,
                      std::string{what} + " '" + path + "': " + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    return make_error(errc::invalid_argument,
                      std::string{what} + " '" + path + "': not a regular file");
  if (secret && (st.st_mode & 077) != 0)
    return make_error(errc::not_permitted,
                      path + ": mode " + mode_text(st.st_mode)
                        + ": a secret key file must not be accessible to group or others "
                          "(expected mode 0600: chmod 600 '"
                        + path + "')");
  if (static_cast<std::uintmax_t>(st.st_size) > limit)
    return make_error(errc::invalid_argument,
                      path + ": " + std::to_string(st.st_size) + " bytes, more than the limit of "
                        + std::to_string(limit) + " bytes for a " + what);
  std::string text;
  std::array<char, 1024> buf{};
  for (;;) {
    auto n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return make_error(errc::io_error,
                        std::string{what} + " '" + path + "': " + std::strerror(errno));
    if (n == 0)
      break;
    text.append(buf.data(), static_cast<std::size_t>(n));
    if (text.size() > limit) {
      ::explicit_bzero(text.data(), text.size());
      ::explicit_bzero(buf.data(), buf.size());
      return make_error(errc::invalid_argument, path + ": more than the limit of "
                                                  + std::to_string(limit) + " bytes for a "
                                                  + what);
    }
  }
  ::explicit_bzero(buf.data(), buf.size());
  return text;
}

namespace {

/// Reads and checks a key file; `keys.secret_key` stays empty for a public-only file.
caf::expected<curve_keypair> read_key_file(const std::string& path, key_file_kind kind) {
  const char* what = kind == key_file_kind::secret ? "secret key file" : "public key file";
  auto read = read_small_file(path, what, max_key_file_bytes, kind == key_file_kind::secret);
  if (!read)
    return std::move(read.error());
  std::string text = std::move(*read);
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << path << ':' << e.source().begin.line << ':' << e.source().begin.column
       << ": not a " << what << " (expected TOML lines public = \"...\""
       << (kind == key_file_kind::secret ? " and secret = \"...\"" : "") << ")";
    // toml++'s description can quote the text it stopped at; in a secret key file that may be
    // the secret, so it is only shown for public key files.
    if (kind == key_file_kind::public_only)
      os << ": " << e.description();
    return make_error(errc::invalid_argument, os.str());
  }
  auto at = [&](const toml::node& n) {
    return path + ":" + std::to_string(n.source().begin.line) + ":"
           + std::to_string(n.source().begin.column);
  };
  for (const auto& [key, node] : root) {
    bool known = key.str() == "public" || key.str() == "secret";
    if (!known)
      return make_error(errc::invalid_argument,
                        at(node) + ": unexpected key '" + std::string{key.str()}
                          + "' (a key file holds public and, in NAME.key, secret)");
    if (key.str() == "secret" && kind == key_file_kind::public_only)
      return make_error(errc::not_permitted,
                        at(node) + ": a public key file holds a secret key; the secret belongs "
                                   "in the NAME.key file only (mode 0600)");
  }
  curve_keypair keys;
  auto get = [&](const char* key, std::string& into) -> caf::error {
    const auto* node = root.get(key);
    if (node == nullptr)
      return make_error(errc::invalid_argument,
                        path + ": missing " + key + " = \"<40 Z85 characters>\"");
    const auto* value = node->as_string();
    if (value == nullptr)
      return make_error(errc::invalid_argument,
                        at(*node) + ": " + key + ": expected a string of 40 Z85 characters");
    if (auto problem = curve_key_problem(value->get()); !problem.empty())
      return make_error(errc::invalid_argument, at(*node) + ": " + key + " key: " + problem);
    into = value->get();
    return caf::none;
  };
  if (auto err = get("public", keys.public_key))
    return err;
  if (kind == key_file_kind::public_only)
    return keys;
  if (auto err = get("secret", keys.secret_key))
    return err;
  auto derived = curve_public_of(keys.secret_key);
  if (!derived)
    return make_error(errc::invalid_argument, path + ": " + describe(derived.error()));
  if (*derived != keys.public_key)
    return make_error(errc::invalid_argument,
                      path + ": the public key does not belong to the secret key (expected "
                        + *derived + ")");
  return keys;
}

/// One line of an allow-list text file split into whitespace-separated fields.
std::vector<std::string> fields_of(const std::string& line) {
  std::vector<std::string> fields;
  std::istringstream in{line};
  for (std::string f; in >> f;)
    fields.push_back(f);
  return fields;
}

caf::expected<curve_allow_list> allow_list_from_directory(const std::string& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (fs::directory_iterator it{dir, ec}, end; !ec && it != end; it.increment(ec))
    if (it->path().extension() == ".pub" && it->is_regular_file())
      files.push_back(it->path());
  if (ec)
    return make_error(errc::io_error, "allow-list directory '" + dir + "': " + ec.message());
  std::sort(files.begin(), files.end());
  curve_allow_list keys;
  std::map<std::string, std::string> source; // key -> file it came from
  for (const auto& file : files) {
    auto name = file.stem().string();
    if (auto problem = name_problem(name); !problem.empty())
      return make_error(errc::invalid_argument,
                        file.string() + ": the file name (without .pub) is the peer's name: "
                          + problem);
    auto key = load_public_key_file(file.string());
    if (!key)
      return std::move(key.error());
    if (auto seen = source.find(*key); seen != source.end())
      return make_error(errc::invalid_argument, file.string() + ": the same public key as "
                                                  + seen->second + " (one file per key)");
    source[*key] = file.string();
    keys[*key] = name;
  }
  return keys;
}

caf::expected<curve_allow_list> allow_list_from_file(const std::string& path) {
  std::error_code ec;
  auto bytes = fs::file_size(path, ec);
  if (!ec && bytes > max_allow_list_bytes)
    return make_error(errc::invalid_argument,
                      path + ": " + std::to_string(bytes) + " bytes, more than the limit of "
                        + std::to_string(max_allow_list_bytes) + " bytes for an allow-list");
  std::ifstream in{path};
  if (!in)
    return make_error(errc::io_error, "allow-list '" + path + "': cannot be read");
  curve_allow_list keys;
  std::map<std::string, std::size_t> line_of;
  std::size_t number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    auto fields = fields_of(line);
    // A field beginning with '#' starts a comment. '#' is a Z85 character, but never the first
    // of a key: it encodes 84 * 85^4, more than a group of 4 bytes can hold.
    std::size_t used = 0;
    while (used < fields.size() && fields[used].front() != '#')
      ++used;
    if (used == 0)
      continue;
    auto where = path + ":" + std::to_string(number);
    if (used > 2)
      return make_error(errc::invalid_argument,
                        where + ": expected KEY or KEY NAME (and an optional # comment), got "
                          + std::to_string(used) + " fields");
    if (auto problem = curve_key_problem(fields[0]); !problem.empty())
      return make_error(errc::invalid_argument,
                        where + ": expected a Z85 CURVE public key: " + problem);
    std::string name = used == 2 ? fields[1] : std::string{};
    if (used == 2)
      if (auto problem = name_problem(name); !problem.empty())
        return make_error(errc::invalid_argument, where + ": name '" + name + "': " + problem);
    if (auto seen = line_of.find(fields[0]); seen != line_of.end())
      return make_error(errc::invalid_argument, where + ": the same key as line "
                                                  + std::to_string(seen->second));
    line_of[fields[0]] = number;
    keys[fields[0]] = name;
  }
  if (in.bad())
    return make_error(errc::io_error, "allow-list '" + path + "': read error");
  return keys;
}

/// ZMTP metadata (RFC 23): one property, name length (1 byte), name, value length (4 bytes,
/// big-endian), value.
std::string metadata_property(const std::string& name, const std::string& value) {
  std::string out;
  out.push_back(static_cast<char>(name.size()));
  out += name;
  auto n = static_cast<std::uint32_t>(value.size());
  for (int shift = 24; shift >= 0; shift -= 8)
    out.push_back(static_cast<char>((n >> shift) & 0xff));
  out += value;
  return out;
}

} // namespace

// Declared in curve.hpp.
/// Writes `text` to `path` with exactly `mode`, through a temporary file in the same directory:
/// renamed over `path` when `overwrite`, else linked to it (fails with errc::not_permitted if
/// `path` appeared meanwhile). The temporary is created with `mode` before anything is written.
caf::error write_file_atomically(const std::string& path, const std::string& text, mode_t mode,
                                 bool overwrite) {
  auto tmp = path + ".tmp-" + std::to_string(::getpid());
  ::unlink(tmp.c_str());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0)
    return make_error(errc::io_error, "cannot create '" + tmp + "': " + std::strerror(errno));
  auto fail = [&](const std::string& what) {
    auto why = std::string{std::strerror(errno)};
    ::close(fd);
    ::unlink(tmp.c_str());
    return make_error(errc::io_error, "cannot write '" + path + "': " + what + ": " + why);
  };
  if (::fchmod(fd, mode) != 0) // the umask may have removed bits of a public file's mode
    return fail("fchmod");
  std::size_t done = 0;
  while (done < text.size()) {
    auto n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return fail("write");
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0)
    return fail("fsync");
  if (::close(fd) != 0) {
    auto why = std::string{std::strerror(errno)};
    ::unlink(tmp.c_str());
    return make_error(errc::io_error, "cannot write '" + path + "': close: " + why);
  }
  if (overwrite) {
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      auto why = std::string{std::strerror(errno)};
      ::unlink(tmp.c_str());
      return make_error(errc::io_error, "cannot rename '" + tmp + "' to '" + path + "': " + why);
    }
    return caf::none;
  }
  int rc = ::link(tmp.c_str(), path.c_str());
  int link_errno = errno;
  ::unlink(tmp.c_str());
  if (rc != 0 && link_errno == EEXIST)
    return make_error(errc::not_permitted, "'" + path + "' already exists (not overwritten)");
  if (rc != 0)
    return make_error(errc::io_error,
                      "cannot create '" + path + "': " + std::strerror(link_errno));
  return caf::none;
}

std::string curve_key_problem(const std::string& key) {
  if (key.size() != curve_key_chars)
    return "expected " + std::to_string(curve_key_chars) + " Z85 characters, got "
           + std::to_string(key.size());
  for (std::size_t i = 0; i < key.size(); ++i)
    if (z85_alphabet.find(key[i]) == std::string_view::npos)
      return "character " + std::to_string(i + 1) + " is not a Z85 character";
  std::array<std::uint8_t, 32> bytes{};
  if (zmq_z85_decode(bytes.data(), key.c_str()) == nullptr)
    return "not a valid Z85 encoding of 32 bytes";
  return {};
}

caf::expected<curve_keypair> generate_curve_keypair() {
  if (!curve_supported())
    return no_curve();
  std::array<char, curve_key_chars + 1> pub{};
  std::array<char, curve_key_chars + 1> sec{};
  if (zmq_curve_keypair(pub.data(), sec.data()) != 0)
    return make_error(errc::unsupported_format,
                      std::string{"zmq_curve_keypair failed: "} + zmq_strerror(zmq_errno()));
  curve_keypair keys{pub.data(), sec.data()};
  ::explicit_bzero(sec.data(), sec.size());
  return keys;
}

caf::expected<std::string> curve_public_of(const std::string& secret_key) {
  if (!curve_supported())
    return no_curve();
  if (auto problem = curve_key_problem(secret_key); !problem.empty())
    return make_error(errc::invalid_argument, "secret key: " + problem);
  std::array<char, curve_key_chars + 1> pub{};
  if (zmq_curve_public(pub.data(), secret_key.c_str()) != 0)
    return make_error(errc::invalid_argument, "secret key: not a valid CURVE secret key");
  return std::string{pub.data()};
}

caf::error write_key_files(const std::string& dir, const std::string& name,
                           const curve_keypair& keys, bool overwrite) {
  if (auto problem = name_problem(name); !problem.empty())
    return make_error(errc::invalid_argument, "key name '" + name + "': " + problem);
  if (auto problem = curve_key_problem(keys.public_key); !problem.empty())
    return make_error(errc::invalid_argument, "public key: " + problem);
  auto derived = curve_public_of(keys.secret_key);
  if (!derived)
    return std::move(derived.error());
  if (*derived != keys.public_key)
    return make_error(errc::invalid_argument,
                      "key pair '" + name + "': the public key does not belong to the secret key");
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    fs::create_directories(dir, ec);
    if (ec)
      return make_error(errc::io_error, "cannot create directory '" + dir + "': " + ec.message());
    fs::permissions(dir, fs::perms::owner_all, ec);
  } else if (!fs::is_directory(dir, ec)) {
    return make_error(errc::invalid_argument, "'" + dir + "' is not a directory");
  }
  auto key_path = (fs::path{dir} / (name + ".key")).string();
  auto pub_path = (fs::path{dir} / (name + ".pub")).string();
  if (!overwrite)
    for (const auto& p : {key_path, pub_path})
      if (fs::exists(fs::symlink_status(p, ec)))
        return make_error(errc::not_permitted, "'" + p + "' already exists (not overwritten)");
  std::string key_text = "# InfraRSI CURVE key pair '" + name
                         + "' (ZeroMQ CURVE, Z85). Keep this file private: mode 0600.\n"
                           "# Its public key alone is in "
                         + name + ".pub (docs/security.md).\npublic = \"" + keys.public_key
                         + "\"\nsecret = \"" + keys.secret_key + "\"\n";
  std::string pub_text = "# InfraRSI CURVE public key '" + name
                         + "' (ZeroMQ CURVE, Z85): put a copy in the daemon's allow-list\n"
                           "# directory to admit this peer (docs/security.md).\npublic = \""
                         + keys.public_key + "\"\n";
  auto written = write_file_atomically(key_path, key_text, 0600, overwrite);
  std::fill(key_text.begin(), key_text.end(), '\0');
  if (written)
    return written;
  if (auto err = write_file_atomically(pub_path, pub_text, 0644, overwrite)) {
    if (!overwrite)
      ::unlink(key_path.c_str()); // no half-written pair left behind
    return err;
  }
  return caf::none;
}

caf::expected<curve_keypair> load_secret_key_file(const std::string& path) {
  return read_key_file(path, key_file_kind::secret);
}

caf::expected<std::string> load_public_key_file(const std::string& path) {
  auto keys = read_key_file(path, key_file_kind::public_only);
  if (!keys)
    return std::move(keys.error());
  return std::move(keys->public_key);
}

caf::expected<curve_allow_list> load_allow_list(const std::string& path) {
  std::error_code ec;
  auto st = fs::status(path, ec);
  if (!fs::exists(st))
    return make_error(errc::not_found, "allow-list '" + path + "': no such file or directory");
  if (fs::is_directory(st))
    return allow_list_from_directory(path);
  if (!fs::is_regular_file(st))
    return make_error(errc::invalid_argument,
                      "allow-list '" + path + "': expected a directory of .pub files or a text "
                                              "file of public keys");
  return allow_list_from_file(path);
}

caf::error make_curve_server(zmq::socket_t& socket, const curve_keypair& server,
                             const zap_handler& zap, const std::string& domain) {
  if (!curve_supported())
    return no_curve();
  if (!zap.running())
    return make_error(errc::not_permitted,
                      "CURVE server (ZAP domain '" + domain
                        + "'): the ZAP handler is not running; start it first (without it "
                          "every client that knows the server's public key is admitted)");
  if (domain.empty() || !zap.serves(domain))
    return make_error(errc::invalid_argument,
                      "CURVE server: the ZAP handler has no allow-list for domain '" + domain
                        + "'");
  if (auto problem = curve_key_problem(server.public_key); !problem.empty())
    return make_error(errc::invalid_argument, "CURVE server: public key: " + problem);
  auto derived = curve_public_of(server.secret_key);
  if (!derived)
    return make_error(errc::invalid_argument, "CURVE server: " + describe(derived.error()));
  if (*derived != server.public_key)
    return make_error(errc::invalid_argument,
                      "CURVE server: the public key does not belong to the secret key");
  int on = 1;
  if (zmq_setsockopt(socket.handle(), zap_enforce_domain_option, &on, sizeof on) != 0)
    return make_error(errc::unsupported_format,
                      std::string{"CURVE server: this libzmq cannot enforce ZAP "
                                  "(ZMQ_ZAP_ENFORCE_DOMAIN: "}
                        + zmq_strerror(zmq_errno())
                        + "); without it a stopped ZAP handler would admit every client");
  try {
    socket.set(zmq::sockopt::zap_domain, domain);
    socket.set(zmq::sockopt::curve_server, 1);
    socket.set(zmq::sockopt::curve_secretkey, server.secret_key);
  } catch (const zmq::error_t& e) {
    return make_error(errc::invalid_argument, std::string{"CURVE server: "} + e.what());
  }
  return caf::none;
}

caf::error make_curve_client(zmq::socket_t& socket, const curve_keypair& client,
                             const std::string& server_public_key) {
  if (!curve_supported())
    return no_curve();
  if (auto problem = curve_key_problem(server_public_key); !problem.empty())
    return make_error(errc::invalid_argument, "CURVE client: server public key: " + problem);
  if (auto problem = curve_key_problem(client.public_key); !problem.empty())
    return make_error(errc::invalid_argument, "CURVE client: public key: " + problem);
  auto derived = curve_public_of(client.secret_key);
  if (!derived)
    return make_error(errc::invalid_argument, "CURVE client: " + describe(derived.error()));
  if (*derived != client.public_key)
    return make_error(errc::invalid_argument,
                      "CURVE client: the public key does not belong to the secret key");
  try {
    socket.set(zmq::sockopt::curve_serverkey, server_public_key);
    socket.set(zmq::sockopt::curve_publickey, client.public_key);
    socket.set(zmq::sockopt::curve_secretkey, client.secret_key);
  } catch (const zmq::error_t& e) {
    return make_error(errc::invalid_argument, std::string{"CURVE client: "} + e.what());
  }
  return caf::none;
}

// -- zap_handler --------------------------------------------------------------------------------

zap_handler::zap_handler(zmq::context_t& ctx, std::map<std::string, curve_allow_list> domains,
                         refusal_callback on_refused)
  : ctx_(ctx), domains_(std::move(domains)), on_refused_(std::move(on_refused)) {}

zap_handler::~zap_handler() {
  stop();
}

caf::error zap_handler::start() {
  if (running_)
    return make_error(errc::not_permitted, "ZAP handler: already running");
  try {
    socket_ = std::make_unique<zmq::socket_t>(ctx_, zmq::socket_type::rep);
    socket_->set(zmq::sockopt::linger, 0);
    socket_->bind(endpoint);
  } catch (const zmq::error_t& e) {
    socket_.reset();
    return make_error(errc::io_error, std::string{"ZAP handler: cannot bind "} + endpoint + ": "
                                        + e.what()
                                        + " (one ZAP handler per ZeroMQ context)");
  }
  stop_ = false;
  running_ = true;
  thread_ = std::thread{[this] { serve(); }};
  return caf::none;
}

void zap_handler::stop() {
  stop_ = true;
  if (thread_.joinable())
    thread_.join();
  socket_.reset();
  running_ = false;
}

bool zap_handler::serves(const std::string& domain) const {
  std::lock_guard<std::mutex> guard{mutex_};
  return domains_.count(domain) > 0;
}

void zap_handler::set_allow_list(const std::string& domain, curve_allow_list keys) {
  std::lock_guard<std::mutex> guard{mutex_};
  domains_[domain] = std::move(keys);
}

void zap_handler::serve() {
  while (!stop_) {
    zmq::pollitem_t item{socket_->handle(), 0, ZMQ_POLLIN, 0};
    std::vector<zmq::message_t> frames;
    try {
      zmq::poll(&item, 1, std::chrono::milliseconds(100));
      if ((item.revents & ZMQ_POLLIN) == 0)
        continue;
      (void) zmq::recv_multipart(*socket_, std::back_inserter(frames), zmq::recv_flags::none);
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) {
        socket_->close(); // the context is being terminated and waits for this socket
        running_ = false;
        return;
      }
      continue; // EINTR; re-check stop_
    }
    // Request (RFC 27): version, request id, domain, address, routing id, mechanism,
    // credentials (CURVE: the client's 32-byte public key; PLAIN: user name and password).
    auto text = [&](std::size_t i) { return i < frames.size() ? frames[i].to_string() : ""; };
    std::string status = "400";
    std::string status_text;
    std::string user_id;
    std::string metadata;
    zap_refusal refusal;
    refusal.domain = text(2);
    refusal.address = text(3);
    refusal.mechanism = text(5);
    if (frames.size() < 6 || text(0) != "1.0") {
      status = "500";
      status_text = "malformed ZAP request";
    } else if (refusal.mechanism != "CURVE") {
      status_text = "mechanism " + refusal.mechanism + " refused: CURVE is required";
    } else if (frames.size() != 7 || frames[6].size() != 32) {
      status = "500";
      status_text = "malformed CURVE credentials";
    } else {
      std::array<char, curve_key_chars + 1> key{};
      zmq_z85_encode(key.data(), frames[6].data<std::uint8_t>(), 32);
      refusal.public_key = key.data();
      std::lock_guard<std::mutex> guard{mutex_};
      auto domain = domains_.find(refusal.domain);
      if (domain == domains_.end()) {
        status_text = "ZAP domain '" + refusal.domain + "' is not served";
      } else if (auto entry = domain->second.find(refusal.public_key);
                 entry == domain->second.end()) {
        status_text = "public key not on the allow-list of domain '" + refusal.domain + "'";
      } else {
        status = "200";
        status_text = "OK";
        user_id = refusal.public_key;
        if (!entry->second.empty())
          metadata = metadata_property("X-Peer-Name", entry->second);
      }
    }
    try {
      socket_->send(zmq::str_buffer("1.0"), zmq::send_flags::sndmore);
      auto request_id = text(1);
      socket_->send(zmq::buffer(request_id), zmq::send_flags::sndmore);
      socket_->send(zmq::buffer(status), zmq::send_flags::sndmore);
      socket_->send(zmq::buffer(status_text), zmq::send_flags::sndmore);
      socket_->send(zmq::buffer(user_id), zmq::send_flags::sndmore);
      socket_->send(zmq::buffer(metadata), zmq::send_flags::none);
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) {
        socket_->close();
        running_ = false;
        return;
      }
    }
    if (status == "200") {
      ++admitted_;
      continue;
    }
    ++refused_;
    refusal.reason = status_text;
    if (on_refused_) {
      try {
        on_refused_(refusal);
      } catch (...) {
        // A throwing callback must not end the handler: every later handshake would wait.
      }
    }
  }
}

} // namespace infrarsi::adapters
