#include "tessel/executor/comm/mpi_communicator.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/profiles/collectives.hpp"

// One macro for every MPI return code.
#define TESSEL_MPI_CHECK(call)                                                                    \
  do {                                                                                            \
    const int tessel_mpi_rc = (call);                                                             \
    if (tessel_mpi_rc != MPI_SUCCESS) {                                                           \
      char tessel_mpi_text[MPI_MAX_ERROR_STRING];                                                 \
      int tessel_mpi_length = 0;                                                                  \
      MPI_Error_string(tessel_mpi_rc, tessel_mpi_text, &tessel_mpi_length);                       \
      throw ::tessel::Error(fmt::format("MPI call {} failed: {}", #call, tessel_mpi_text));       \
    }                                                                                             \
  } while (false)

namespace tessel::executor {

namespace {

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::sum ? MPI_SUM : MPI_MAX; }

class MpiRequest final : public CommRequest {
 public:
  MPI_Request request = MPI_REQUEST_NULL;
  void wait() override { TESSEL_MPI_CHECK(MPI_Wait(&request, MPI_STATUS_IGNORE)); }
  ~MpiRequest() override {
    if (request != MPI_REQUEST_NULL) MPI_Wait(&request, MPI_STATUS_IGNORE);
  }
};

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
    TESSEL_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    TESSEL_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  }
  ~MpiCommunicator() override {
    if (owned_) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  // Counted with the planner's and the simulator's formulas (profiles/collectives.hpp):
  // bytes sent = the call's nccl-tests size x bus factor, messages = the algorithm's
  // latency steps (rings for the collectives, trees for broadcast and reduce).
  void count(Collective op, double size_bytes, CollectiveAlgorithm algorithm = CollectiveAlgorithm::ring) {
    counters_.bytes_sent += size_bytes * profiles::bus_bandwidth_factor(op, size_);
    counters_.messages += profiles::collective_steps(op, size_, algorithm);
  }

  void all_reduce(float* data, std::size_t count_, ReduceOp op) override {
    if (size_ == 1) return;
    TESSEL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, int(count_), MPI_FLOAT, mpi_op(op), comm_));
    count(Collective::all_reduce, 4.0 * count_);
  }
  std::unique_ptr<CommRequest> all_reduce_async(float* data, std::size_t count_, ReduceOp op) override {
    auto request = std::make_unique<MpiRequest>();
    if (size_ == 1) return request;
    TESSEL_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data, int(count_), MPI_FLOAT, mpi_op(op), comm_, &request->request));
    count(Collective::all_reduce, 4.0 * count_);
    return request;
  }
  void all_gather(const float* send_, float* recv_, std::size_t count_per_rank) override {
    TESSEL_MPI_CHECK(MPI_Allgather(send_, int(count_per_rank), MPI_FLOAT, recv_, int(count_per_rank), MPI_FLOAT, comm_));
    count(Collective::all_gather, 4.0 * count_per_rank * size_);
  }
  void reduce_scatter(const float* send_, float* recv_, std::size_t count_per_rank) override {
    TESSEL_MPI_CHECK(MPI_Reduce_scatter_block(send_, recv_, int(count_per_rank), MPI_FLOAT, MPI_SUM, comm_));
    count(Collective::reduce_scatter, 4.0 * count_per_rank * size_);
  }
  std::unique_ptr<CommRequest> reduce_scatter_async(const float* send_, float* recv_,
                                                    std::size_t count_per_rank) override {
    auto request = std::make_unique<MpiRequest>();
    TESSEL_MPI_CHECK(MPI_Ireduce_scatter_block(send_, recv_, int(count_per_rank), MPI_FLOAT, MPI_SUM, comm_,
                                               &request->request));
    count(Collective::reduce_scatter, 4.0 * count_per_rank * size_);
    return request;
  }
  void broadcast(float* data, std::size_t count_, int root) override {
    if (size_ == 1) return;
    TESSEL_MPI_CHECK(MPI_Bcast(data, int(count_), MPI_FLOAT, root, comm_));
    count(Collective::broadcast, 4.0 * count_, CollectiveAlgorithm::tree);
  }
  void reduce(const float* send_, float* recv_, std::size_t count_, int root) override {
    if (size_ == 1) {
      if (send_ != recv_) std::copy(send_, send_ + count_, recv_);
      return;
    }
    TESSEL_MPI_CHECK(MPI_Reduce(send_, rank_ == root ? recv_ : nullptr, int(count_), MPI_FLOAT, MPI_SUM, root, comm_));
    count(Collective::reduce, 4.0 * count_, CollectiveAlgorithm::tree);
  }
  void send(const float* data, std::size_t count_, int peer, int tag) override {
    TESSEL_MPI_CHECK(MPI_Send(data, int(count_), MPI_FLOAT, peer, tag, comm_));
    count(Collective::send_recv, 4.0 * count_);
  }
  std::unique_ptr<CommRequest> send_async(const float* data, std::size_t count_, int peer, int tag) override {
    auto request = std::make_unique<MpiRequest>();
    TESSEL_MPI_CHECK(MPI_Isend(data, int(count_), MPI_FLOAT, peer, tag, comm_, &request->request));
    count(Collective::send_recv, 4.0 * count_);
    return request;
  }
  void recv(float* data, std::size_t count_, int peer, int tag) override {
    TESSEL_MPI_CHECK(MPI_Recv(data, int(count_), MPI_FLOAT, peer, tag, comm_, MPI_STATUS_IGNORE));
  }
  void barrier() override { TESSEL_MPI_CHECK(MPI_Barrier(comm_)); }
  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm sub = MPI_COMM_NULL;
    TESSEL_MPI_CHECK(MPI_Comm_split(comm_, color, key, &sub));
    return std::make_unique<MpiCommunicator>(sub, true);
  }

 private:
  MPI_Comm comm_;
  bool owned_;
  int rank_ = 0, size_ = 1;
};

void finalize_mpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}
}  // namespace

bool launched_by_mpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr; }

Communicator& mpi_world() {
  static MpiCommunicator* world = [] {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      TESSEL_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided));
      std::atexit(finalize_mpi);
    }
    return new MpiCommunicator(MPI_COMM_WORLD, false);
  }();
  return *world;
}

void abort_all_ranks(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

Communicator& mpi_self() {
  mpi_world();  // initialises MPI
  static MpiCommunicator self(MPI_COMM_SELF, false);
  return self;
}

}  // namespace tessel::executor
