// main() for trainer tests that run under mpirun: MPI up before the tests, gtest's output from
// rank 0 only (every rank's failures still fail the run), the world communicator for tests.
#pragma once

#include <cstdio>
#include <memory>

#include "flywheel/comm/mpi_communicator.h"
#include "gtest/gtest.h"

namespace flywheel::testing {

inline comm::MpiRuntime*& mpi_runtime() {
  static comm::MpiRuntime* runtime = nullptr;
  return runtime;
}

inline std::unique_ptr<comm::MpiCommunicator> world_communicator(double timeout_s = 120) {
  comm::CommunicatorOptions options;
  options.name = "test";
  options.timeout_s = timeout_s;
  auto world = comm::MpiCommunicator::world(*mpi_runtime(), options);
  EXPECT_TRUE(world.ok()) << world.status();
  return std::move(*world);
}

inline int run_mpi_tests(int argc, char** argv) {
  auto runtime = comm::MpiRuntime::init(&argc, &argv);
  if (!runtime.ok()) {
    std::fprintf(stderr, "MPI: %s\n", std::string(runtime.status().message()).c_str());
    return 1;
  }
  mpi_runtime() = runtime->get();
  ::testing::InitGoogleTest(&argc, argv);
  if ((*runtime)->world_rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  return RUN_ALL_TESTS();
}

}  // namespace flywheel::testing
