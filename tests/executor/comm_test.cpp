// The MPI communicator and process grid on 8 ranks, through mpirun (as root too,
// oversubscribed on small machines): tests/executor/mpi_check.cpp does the checking.
#include <gtest/gtest.h>

#include <string>

#include "tessel/core/subprocess.hpp"

TEST(MpiCommunicator, CollectivesCountersAndProcessGridOnEightRanks) {
  int status = -1;
  const std::string output = tessel::run_command(
      std::string("mpirun --allow-run-as-root --oversubscribe -np 8 '") + TESSEL_MPI_CHECK_BINARY + "' 2>&1", status);
  EXPECT_EQ(status, 0) << output;
  int ok = 0;
  for (std::size_t at = output.find("ok rank"); at != std::string::npos; at = output.find("ok rank", at + 1)) ++ok;
  EXPECT_EQ(ok, 8) << output;
}
