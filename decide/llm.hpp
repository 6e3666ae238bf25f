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
#include <utility>
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
/// Round `round` > 0 (asked again during the search) adds {"round", "priors_now": the priors
/// in use (store::to_json(prior_set))} and asks to revise the estimates and propose new patches
/// from the measurements.
nlohmann::json llm_request(const tuning::task_spec& task, const store::run_state& run,
                           const std::string& purpose,
                           const std::map<std::string, std::string>& files,
                           std::uint32_t round = 0);

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

/// The next LLM step of round `round` of the run (its events of run.llm, in log order; an event
/// without "round" is of round 0, the one at init). A question whose answer is invalid is asked
/// again while it has been asked at most llm.answer_retries times; no request starts once
/// llm.max_calls calls or llm.max_tokens_per_run tokens are spent (over every round). `files` as
/// llm_request.
llm_step llm_next(const tuning::task_spec& task, const store::run_state& run,
                  const std::map<std::string, std::string>& files, std::uint32_t round = 0);

/// The round of an LLM event document: its "round", 0 when absent.
std::uint32_t llm_round_of(const nlohmann::json& event);

/// The latest round the run's LLM events belong to (0 when there are none).
std::uint32_t llm_current_round(const store::run_state& run);

/// Search trials that ended (latest attempts, not lost), in log order of their first attempt.
std::uint32_t ended_search_trials(const store::run_state& run);

/// Whether to ask the LLM (again) now, during the search: `ask` with `round` = the current
/// round when it is > 0 and not settled (a resume mid-round), else the current round + 1 when
/// every question of the current round is settled, fewer than llm.max_rounds rounds followed
/// init, the calls and tokens are not spent, and since the current round began (`explored` of
/// its first request; 0 for init) either llm.rounds_every search trials ended, or the last
/// llm.rounds_on_stall ended search trials brought no usable speedup above the best before them.
/// `why` says which, in words.
struct llm_round_plan {
  bool ask = false;
  std::uint32_t round = 0;
  std::string why;
};
llm_round_plan llm_round_due(const tuning::task_spec& task, const store::run_state& run);

/// One round as the report shows it: the search trials measured while its priors were in use,
/// and how well those priors ranked them before and after the planner's revision.
struct llm_round_summary {
  std::uint32_t round = 0;
  /// Search trials ended when the round began; why it was asked.
  std::uint32_t explored = 0;
  std::string why;
  /// Its priors answer was valid (its priors were then used; else the earlier ones stayed).
  bool priors_valid = false;
  /// Usable search trials measured while its priors were in use (until the next round).
  std::size_t trials = 0;
  /// Spearman's rho of the priors in use vs measured speedups of those trials, and of the
  /// revised time model (fitted on the usable trials before each one: tuning::revise_priors'
  /// sequential posterior) vs measured; NaN with fewer than 3 trials or no spread.
  double spearman_prior = 0.0;
  double spearman_revised = 0.0;
};
/// Every round of the run, init's first (tuning::revise_priors on `task`, with the accepted LLM
/// patches: with_llm_patches).
std::vector<llm_round_summary> llm_rounds(const tuning::task_spec& task,
                                          const store::run_state& run);

/// The patches of the run's valid patch answers that passed every check (including "apply_error"
/// empty), in order: [{"name", "rationale", "diff", "paths"}].
nlohmann::json llm_accepted_patches(const store::run_state& run);

/// The task the search runs on: `task` with every accepted LLM-proposed patch
/// (llm_accepted_patches, in log order) appended to its patches as {name, file, description =
/// the rationale}; `file` is `patch_dir`/NAME.patch (where the supervisor writes the logged diff:
/// adapters::write_llm_patch_files), or "" when `patch_dir` is empty (the planner and replay read
/// no file). The planner (proposal_doc), the supervisor, the report and replay all call this, so
/// a resumed or replayed run sees the same candidates.
tuning::task_spec with_llm_patches(const tuning::task_spec& task, const store::run_state& run,
                                   const std::string& patch_dir);

/// Pairs of patches that do not apply together, from the "conflicts" each valid patches answer
/// logged (at least one patch of each pair an accepted LLM-proposed one; the task's own pairs
/// are the ContractLocked "patch_conflicts"), in log order.
std::vector<std::pair<std::string, std::string>> llm_patch_conflicts(const store::run_state& run);

/// name -> diff of the accepted LLM-proposed patches among `names` (the TrialSpec's
/// patch_texts: a node needs no file for them).
std::map<std::string, std::string> llm_patch_texts(const store::run_state& run,
                                                   const std::vector<std::string>& names);

} // namespace infrarsi::decide
