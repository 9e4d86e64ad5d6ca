// The MPI communicator (OpenMPI). MPI_Init happens once per process in mpi_world();
// MPI_Finalize at exit. Non-blocking all-reduce is MPI_Iallreduce.
#pragma once

#include "tessel/executor/comm/communicator.hpp"

namespace tessel::executor {

// The world communicator of this process (initialises MPI on first use).
Communicator& mpi_world();
// A communicator of this process alone (MPI_COMM_SELF): single-process reference runs.
Communicator& mpi_self();
// Ends every rank of the world with `code` (a rank's error must not leave the others hanging).
[[noreturn]] void abort_all_ranks(int code);

}  // namespace tessel::executor
