#include <filesystem>

#include <toml++/toml.h>

#include "actors/actors.hpp"
#include "adapters/llm_client.hpp"
#include "messages/errc.hpp"
#include "store/run_projection.hpp"

namespace infrarsi::actors {

caf::expected<tuning::prior_set> load_knowledge(const tuning::task_spec& task,
                                                const std::string& dir) {
  tuning::prior_set priors;
  namespace fs = std::filesystem;
  fs::path file = fs::path{dir} / (task.knowledge + ".toml");
  if (!fs::exists(file))
    file = fs::path{dir} / "default.toml";
  if (!fs::exists(file))
    return priors;
  toml::table root;
  try {
    root = toml::parse_file(file.string());
  } catch (const toml::parse_error& e) {
    // A broken knowledge file is an error, never silent neutral priors.
    return make_error(errc::invalid_argument,
                      file.string() + ":" + std::to_string(e.source().begin.line) + ":"
                        + std::to_string(e.source().begin.column)
                        + ": knowledge base: TOML syntax error: " + std::string{e.description()});
  }
  auto source = "knowledge:" + file.string();
  if (const auto* settings = root["setting"].as_array())
    for (const auto& node : *settings) {
      const auto* t = node.as_table();
      if (t == nullptr)
        continue;
      auto knob_name = (*t)["knob"].value<std::string>();
      if (!knob_name)
        continue;
      const auto* knob = task.find_knob(*knob_name);
      if (knob == nullptr)
        continue;
      std::optional<tuning::knob_value> value;
      const auto* v = t->get("value");
      if (v == nullptr)
        continue;
      switch (knob->type) {
        case tuning::knob_type::integer:
          if (auto x = v->value<std::int64_t>())
            value = *x;
          break;
        case tuning::knob_type::real:
          if (auto x = v->value<double>())
            value = *x;
          break;
        case tuning::knob_type::boolean:
          if (auto x = v->value<bool>())
            value = *x;
          break;
        case tuning::knob_type::choice:
          if (auto x = v->value<std::string>())
            value = *x;
          break;
      }
      if (!value)
        continue;
      priors.settings.push_back({*knob_name, *value, (*t)["speedup"].value_or(1.0),
                                 (*t)["memory_bytes"].value_or(0.0), source});
    }
  if (const auto* patches = root["patch"].as_array())
    for (const auto& node : *patches) {
      const auto* t = node.as_table();
      if (t == nullptr)
        continue;
      auto name = (*t)["name"].value<std::string>();
      if (!name || task.find_patch(*name) == nullptr)
        continue;
      priors.patches.push_back({*name, (*t)["speedup"].value_or(1.0),
                                (*t)["memory_bytes"].value_or(0.0), source});
    }
  return priors;
}

namespace {

} // namespace

llm_proposer_actor::behavior_type llm_proposer(llm_proposer_actor::pointer,
                                               const tuning::task_spec* task,
                                               std::string knowledge_dir) {
  return {[task, knowledge_dir](priors_atom, const std::string&) -> caf::result<std::string> {
            auto priors = load_knowledge(*task, knowledge_dir);
            if (!priors)
              return std::move(priors.error());
            return store::to_json(*priors).dump();
          },
          [task](chat_atom, const std::string& body, std::uint64_t calls_left,
                 std::uint64_t seed) -> std::string {
            std::string key;
            std::string why;
            if (!adapters::read_api_key(task->llm, key, why)) {
              adapters::llm_exchange x;
              x.error = why; // names the variable, never a value
              return adapters::to_json(x).dump();
            }
            return adapters::to_json(adapters::post_chat(task->llm, key, body, calls_left, seed))
              .dump();
          }};
}

} // namespace infrarsi::actors
