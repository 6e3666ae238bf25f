#include "adapters/node_bridge.hpp"

#include <iterator>
#include <zmq_addon.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "adapters/disk_space.hpp"
#include "adapters/task_file.hpp"
#include "adapters/trial_copy.hpp"
#include "adapters/trial_launcher.hpp"
#include "messages/errc.hpp"
#include "store/run_projection.hpp"

namespace infrarsi::adapters {

tuning::task_spec slot_task(const tuning::task_spec& task,
                            const std::map<std::string, std::string>& slot_env,
                            const std::string& cpu_list) {
  tuning::task_spec t = task;
  for (const auto& [k, v] : slot_env)
    t.workload.env[k] = v;
  if (!cpu_list.empty()) {
    std::vector<std::string> argv{"taskset", "-c", cpu_list};
    argv.insert(argv.end(), t.workload.argv.begin(), t.workload.argv.end());
    t.workload.argv = std::move(argv);
  }
  return t;
}

messages::trial_result_msg run_node_trial(const tuning::task_spec& task,
                                          const messages::trial_spec_msg& spec,
                                          const std::string& trials_root, const std::string& node,
                                          std::uint64_t disk_reserve_bytes,
                                          const std::atomic<bool>* stop) {
  adapters::trial_request req;
  req.task = &task;
  auto config = store::configuration_of(*spec);
  req.knobs = config.knobs;
  req.patches = config.patches;
  if (spec->patches() != nullptr) { // keep the requested order of application
    req.patches.clear();
    for (const auto* p : *spec->patches())
      req.patches.push_back(p->str());
  }
  if (spec->scope_lock() != nullptr)
    for (const auto* h : *spec->scope_lock())
      req.scope_lock[h->path()->str()] = h->sha256()->str();
  req.trial_id = spec->trial_id();
  req.attempt = spec->attempt();
  req.timeout_s = spec->timeout_s();
  req.memory_cap_bytes = spec->memory_cap_bytes();
  req.loss_reference = adapters::loss_reference_of(*spec);
  if (spec->smoke_patches() != nullptr)
    for (const auto* p : *spec->smoke_patches())
      req.smoke_patches.push_back(p->str());
  req.trial_dir = trials_root + "/" + trial_dir_name(req.trial_id, req.attempt);
  req.stop = stop;
  wire::TrialResultT r;
  r.trial_id = req.trial_id;
  r.attempt = req.attempt;
  r.node = node;
  // Not prepared for lack of space (or an I/O failure of the harness): the attempt never ran,
  // so it is lost (re-queued, not counted), never a launch error of its configuration.
  auto not_prepared = [&](const caf::error& why) {
    r.outcome = wire::Outcome::Lost;
    r.detail = "node-runner " + node + ": not prepared: " + describe(why) + " ("
               + free_space_note(trials_root, disk_reserve_bytes) + ")";
    return messages::trial_result_msg::pack(r);
  };
  if (auto full = check_free_space({trials_root}, disk_reserve_bytes))
    return not_prepared(full);
  // Patches that travel as text (accepted LLM-proposed ones): written into the trial directory
  // and applied like the task's own, under the same scope checks (copy_and_patch).
  tuning::task_spec with_texts;
  if (spec->patch_texts() != nullptr && spec->patch_texts()->size() > 0) {
    with_texts = task;
    auto dir = req.trial_dir + "/patches";
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec)
      return not_prepared(make_error(errc::io_error, "cannot create " + dir + ": " + ec.message()));
    for (const auto* t : *spec->patch_texts()) {
      auto name = t->name()->str();
      std::string why;
      if (!is_safe_name(name))
        why = "patch text '" + name.substr(0, 100) + "': not a safe name";
      else if (task.find_patch(name) != nullptr)
        why = "patch text '" + name + "': the task has a patch of this name";
      if (!why.empty()) {
        r.outcome = wire::Outcome::LaunchError;
        r.detail = "node-runner " + node + ": " + why;
        return messages::trial_result_msg::pack(r);
      }
      auto file = dir + "/" + name + ".patch";
      std::ofstream out{file, std::ios::binary | std::ios::trunc};
      out << t->diff()->str();
      out.close();
      if (!out)
        return not_prepared(make_error(errc::io_error, "cannot write " + file));
      with_texts.patches.push_back({name, file, "patch sent with the trial"});
    }
    req.task = &with_texts;
  }
  auto report = adapters::run_trial(req);
  if (report) {
    if (report->result.empty())
      return report->result;
    auto native = report->result.unpack();
    native->node = node;
    return messages::trial_result_msg::pack(*native);
  }
  if (code_of(report.error()) == errc::io_error)
    return not_prepared(report.error());
  // The tool could not run it (bad knob value, template error): a launch error of this trial.
  r.outcome = wire::Outcome::LaunchError;
  r.detail = "node-runner " + node + ": " + describe(report.error());
  return messages::trial_result_msg::pack(r);
}

node_server::node_server(zmq::context_t& ctx, std::string endpoint, const tuning::task_spec& task,
                         std::string trials_root, std::string node_name,
                         std::map<std::string, std::string> slot_env, std::string cpu_list,
                         std::uint64_t disk_reserve_bytes)
  : ctx_(ctx),
    endpoint_(std::move(endpoint)),
    task_(task),
    trials_root_(std::move(trials_root)),
    node_name_(std::move(node_name)),
    slot_env_(std::move(slot_env)),
    cpu_list_(std::move(cpu_list)),
    disk_reserve_bytes_(disk_reserve_bytes),
    slot_task_(slot_task(task, slot_env_, cpu_list_)) {}

node_server::~node_server() {
  stop();
}

caf::error node_server::start() {
  try {
    socket_ = std::make_unique<zmq::socket_t>(ctx_, zmq::socket_type::router);
    socket_->set(zmq::sockopt::linger, 0);
    socket_->set(zmq::sockopt::router_mandatory, 1);
    socket_->bind(endpoint_);
    endpoint_ = socket_->get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return make_error(errc::io_error, "node-runner: cannot bind '" + endpoint_ + "': " + e.what());
  }
  thread_ = std::thread{[this] { serve(); }};
  return caf::none;
}

void node_server::stop() {
  stop_ = true;
  if (thread_.joinable())
    thread_.join();
  socket_.reset();
}

messages::trial_result_msg node_server::run_one(const messages::trial_spec_msg& spec) {
  return run_node_trial(slot_task_, spec, trials_root_, node_name_, disk_reserve_bytes_, &stop_);
}

void node_server::serve() {
  while (!stop_) {
    zmq::pollitem_t item{socket_->handle(), 0, ZMQ_POLLIN, 0};
    try {
      zmq::poll(&item, 1, std::chrono::milliseconds(100));
    } catch (const zmq::error_t&) {
      continue; // EINTR; re-check stop_
    }
    if ((item.revents & ZMQ_POLLIN) == 0)
      continue;
    std::vector<zmq::message_t> frames;
    (void) zmq::recv_multipart(*socket_, std::back_inserter(frames), zmq::recv_flags::none);
    if (frames.size() < 2)
      continue;
    auto& identity = frames.front();
    auto& body = frames.back();
    auto env = messages::envelope_msg::decode(body.data(), body.size());
    if (!env)
      continue; // a malformed request gets no reply; the client times out and reports it
    auto spec = messages::open<wire::TrialSpec>(*env);
    if (!spec)
      continue;
    auto result = run_one(*spec);
    auto reply = messages::seal(result, (*env)->run_id() != nullptr ? (*env)->run_id()->str() : "",
                                node_name_, sequence_++);
    if (!reply)
      continue; // cannot happen for a packed result; the client then times out and reports it
    try {
      socket_->send(zmq::buffer(identity.data(), identity.size()), zmq::send_flags::sndmore);
      socket_->send(zmq::message_t{}, zmq::send_flags::sndmore);
      socket_->send(zmq::buffer(reply->bytes().data(), reply->bytes().size()),
                    zmq::send_flags::none);
    } catch (const zmq::error_t&) {
      // The client is gone (EHOSTUNREACH with ROUTER_MANDATORY): its trial is lost and will be
      // re-queued by the supervisor. Swallowed on purpose.
    }
  }
}

node_client::node_client(zmq::context_t& ctx, std::string endpoint, std::string run_id,
                         std::string sender)
  : socket_(ctx, zmq::socket_type::dealer),
    endpoint_(std::move(endpoint)),
    run_id_(std::move(run_id)),
    sender_(std::move(sender)) {
  socket_.set(zmq::sockopt::linger, 0);
  socket_.connect(endpoint_);
}

caf::expected<messages::trial_result_msg>
node_client::run(const messages::trial_spec_msg& spec, double timeout_s,
                 const std::function<void(const messages::trial_result_msg&)>& on_stale,
                 const std::atomic<bool>* cancel) {
  auto env = messages::seal(spec, run_id_, sender_, sequence_++);
  if (!env)
    return std::move(env.error());
  try {
    socket_.send(zmq::message_t{}, zmq::send_flags::sndmore);
    socket_.send(zmq::buffer(env->bytes().data(), env->bytes().size()), zmq::send_flags::none);
    auto deadline = std::chrono::steady_clock::now()
                    + std::chrono::milliseconds(static_cast<long>(timeout_s * 1000));
    while (std::chrono::steady_clock::now() < deadline) {
      if (cancel != nullptr && cancel->load())
        return make_error(errc::interrupted, "node-runner '" + endpoint_
                                               + "': the wait was cancelled (run interrupted)");
      zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(200));
      if ((item.revents & ZMQ_POLLIN) == 0)
        continue;
      std::vector<zmq::message_t> frames;
      (void) zmq::recv_multipart(socket_, std::back_inserter(frames), zmq::recv_flags::none);
      const auto& body = frames.back();
      auto reply = messages::envelope_msg::decode(body.data(), body.size());
      if (!reply)
        return make_error(errc::corrupt_data, "node-runner '" + endpoint_
                                                + "' sent a bad reply: " + describe(reply.error()));
      auto result = messages::open<wire::TrialResult>(*reply);
      if (!result)
        return std::move(result.error());
      if ((*result)->trial_id() != spec->trial_id() || (*result)->attempt() != spec->attempt()) {
        if (on_stale) // a stale reply for an earlier attempt: never counted for this one
          on_stale(*result);
        continue;
      }
      return std::move(*result);
    }
  } catch (const zmq::error_t& e) {
    return make_error(errc::io_error, "node-runner '" + endpoint_ + "': " + e.what());
  }
  return make_error(errc::not_found, "node-runner '" + endpoint_ + "' did not answer within "
                                       + std::to_string(timeout_s) + " s (trial lost)");
}

} // namespace infrarsi::adapters
