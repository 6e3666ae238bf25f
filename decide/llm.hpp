#pragma once
/// @file llm.hpp
/// The llm-proposer's decisions as pure functions of the task and the run's events (issue 15):
/// the chat-completions requests (prompts built from the locked contract, the knob space, the
/// doctor's profile, the measured trials and the editable files), the strict parsing of the
/// answers into priors and patches, the textual checks every proposed diff passes before it may
/// become a candidate, and what to do next. No I/O: the supervisor sends (adapters/llm_client),
/// reads files and runs `git apply --check`; replay calls the same functions on the logged
/// answers and sends nothing. Reference: docs/llm.md.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "store/run_projection.hpp"
#include "tuning/task.hpp"

namespace infrarsi::decide {

/// The two questions, asked in this order: "patches" (when llm.patches), then "priors" (for every
/// setting and every patch, the task's and the accepted proposed ones).
inline constexpr const char* llm_patches = "patches";
inline constexpr const char* llm_priors = "priors";

/// The request body of question `purpose`: {"model", "temperature", "max_tokens", "messages":
/// [system, user], "response_format": {"type": "json_schema", "json_schema": {"name", "strict":
/// true, "schema"}}}. The user message holds the locked contract, the knobs with their domains,
/// the task's patches, the doctor's noise and phase profile (when measured), the usable trials
/// so far with their speedups over the baseline and the failed ones with their reason, and for
/// "patches" the scope and `files` (path -> text, already cut to llm.max_prompt_file_bytes in
/// all by the caller: adapters::read_prompt_files). Never holds the API key.
nlohmann::json llm_request(const tuning::task_spec& task, const store::run_state& run,
                           const std::string& purpose,
                           const std::map<std::string, std::string>& files);

/// The JSON schema of the answer to `purpose` (the response_format's "schema").
nlohmann::json llm_answer_schema(const std::string& purpose);

/// What an OpenAI-compatible answer says: choices[0].message.content and the token usage.
struct llm_answer {
  /// The exchange succeeded and the answer has a text content.
  bool ok = false;
  /// Why not ("HTTP 429 (after 4 attempts)", "no choices[0].message.content", ...).
  std::string error;
  std::string content;
  /// usage.prompt_tokens and usage.completion_tokens (0 when absent).
  std::uint64_t prompt_tokens = 0;
  std::uint64_t completion_tokens = 0;
};

/// Reads an LlmResponded document ({"ok", "body", "error", ...}: adapters::to_json(exchange)).
llm_answer read_llm_answer(const nlohmann::json& response_doc);

/// The diff checks that need no file (LLM text is untrusted): "" when `diff` may go on to
/// `git apply --check`, else why not. Refused: more than `max_bytes`; a NUL byte or a binary
/// hunk ("GIT binary patch", "Binary files"); a mode change, a new, deleted, renamed, copied or
/// symlinked file (only edits of existing regular files); a path that is absolute, has a ".."
/// or "." component, a backslash or a control character, is outside scope.editable or inside
/// scope.frozen; "---"/"+++" paths that disagree; no file or no hunk. `paths` receives the
/// touched paths (relative, without the a/ b/ prefix), sorted.
std::string check_llm_diff(const tuning::task_spec& task, const std::string& diff,
                           std::uint64_t max_bytes, std::vector<std::string>& paths);

/// The LlmAnswerParsed document of the answer `response_doc` to `purpose`:
/// {"purpose", "attempt", "valid", "error", "tokens": {"prompt", "completion"}, and
///  priors: "priors" (store::to_json(prior_set), source "llm:MODEL"), "rejected": [{"entry",
///  "why"}]; patches: "patches": [{"name", "rationale", "diff", "paths"}], "rejected": [{"name",
///  "why"}]}.
/// "valid" false (with "error") when the exchange failed or the content is not JSON of the
/// schema (llm_answer_schema: every key required, no other key, each of its type): the question
/// may be asked again. Entries of a valid answer that name an unknown knob or patch, a value
/// outside the knob's domain, a speedup outside (0, 100], |memory_bytes| > 1e15, a confidence
/// outside [0, 1], an unsafe or duplicate patch name or a diff that fails check_llm_diff are
/// "rejected" with the reason; the rest is kept. A setting's prior speedup is the answer's shrunk
/// by its confidence: exp(confidence x ln(speedup)) (confidence 0 is neutral, 1 as given).
/// Patches still need `git apply --check` on the locked tree: the caller adds
/// "apply_error" to each accepted patch (adapters::check_llm_patch_applies) before logging.
nlohmann::json llm_parsed_doc(const tuning::task_spec& task, const store::run_state& run,
                              const std::string& purpose, std::uint32_t attempt,
                              const nlohmann::json& response_doc);

/// Calls (HTTP attempts) and tokens the run's LLM exchanges used so far.
struct llm_usage {
  std::uint64_t requests = 0;
  std::uint64_t calls = 0;
  std::uint64_t prompt_tokens = 0;
  std::uint64_t completion_tokens = 0;
  std::uint64_t invalid_answers = 0;
};
llm_usage llm_usage_of(const store::run_state& run);

/// What the llm-proposer does next at init.
struct llm_step {
  enum class kind {
    /// Append LlmRequested with `body`, then send it.
    request,
    /// The logged request `body` has no answer (a crash mid-request): send it again as logged
    /// (the same bytes; the answer is appended as its LlmResponded). Resume re-sends.
    resend,
    /// The latest answer (`response`) has no LlmAnswerParsed yet: parse it.
    parse,
    /// Every question is settled: load the priors (`priors`, or the offline knowledge base when
    /// none is valid).
    finish,
  };
  kind k = kind::finish;
  std::string purpose;
  /// Answer attempt of the question: 0, 1, ... (llm.answer_retries re-asks at most).
  std::uint32_t attempt = 0;
  nlohmann::json body;
  nlohmann::json response;
  /// finish: the last valid priors answer's priors (store::to_json(prior_set)), if any.
  std::optional<nlohmann::json> priors;
  /// Why a question was given up (calls or tokens spent, answers invalid), "; "-separated.
  std::string detail;
};

/// The next LLM step of the run (run.llm in log order). A question whose answer is invalid is
/// asked again while it has been asked at most llm.answer_retries times; no request starts once
/// llm.max_calls calls or llm.max_tokens_per_run tokens are spent. `files` as llm_request.
llm_step llm_next(const tuning::task_spec& task, const store::run_state& run,
                  const std::map<std::string, std::string>& files);

/// The patches of the run's valid patch answers that passed every check (including "apply_error"
/// empty), in order: [{"name", "rationale", "diff", "paths"}].
nlohmann::json llm_accepted_patches(const store::run_state& run);

} // namespace infrarsi::decide
