// infrarsi-sim: a simulated distributed LLM training job (docs/simulator.md). Thin: everything
// is in cli.cpp (command line, modes) and the pure models (model.cpp, run.cpp).

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "workloads/sim/cli.hpp"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  const char* trial_id = std::getenv("INFRARSI_TRIAL_ID");
  const char* attempt = std::getenv("INFRARSI_ATTEMPT");
  std::ios::sync_with_stdio(false);
  return infrarsi::sim::run_program(args, std::cout, std::cerr, trial_id != nullptr ? trial_id : "",
                                    attempt != nullptr ? attempt : "");
}
