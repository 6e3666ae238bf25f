#include <iostream>

#include "runtime/cli.hpp"

int main(int argc, char** argv) {
  return infrarsi::runtime::run_cli(argc, argv, std::cout, std::cerr);
}
