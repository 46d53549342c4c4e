// Catch2 main for every kgpt test executable: Kokkos is started once for the whole run.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "core/kokkos_compat.hpp"

int main(int argc, char** argv) {
  kgpt::compat::Runtime kokkos;
  return Catch::Session().run(argc, argv);
}
