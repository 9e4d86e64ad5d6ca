#include "tessel/executor/comm/host_staged_communicator.hpp"

#include <algorithm>
#include <cstring>

namespace tessel::executor {

// Pinned host memory the device copies to and from directly, one per call in flight,
// taken from the communicator's pool and given back when done: a step repeats the same
// calls, and pinning (cudaMallocHost / cudaFreeHost) synchronises the whole device.
class HostStagedCommunicator::Staging {
 public:
  Staging(HostStagedCommunicator& owner, std::size_t bytes) : owner_(owner), block_(owner.take_block(bytes)) {}
  ~Staging() { owner_.free_blocks_.push_back(block_); }
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  void* data() const { return block_.data; }

 private:
  HostStagedCommunicator& owner_;
  PinnedBlock block_;
};

// A host request whose result goes back to the device when it is waited for.
class HostStagedCommunicator::StagedRequest final : public CommRequest {
 public:
  // `result` holds what goes back to `device` (`bytes` of it); `input`, when there is one,
  // must live until the host operation is done.
  StagedRequest(HostStagedCommunicator& owner, std::unique_ptr<CommRequest> host, std::unique_ptr<Staging> result,
                void* device, std::size_t bytes, std::unique_ptr<Staging> input = nullptr)
      : owner_(owner),
        host_(std::move(host)),
        staging_(std::move(result)),
        input_(std::move(input)),
        device_(device),
        bytes_(bytes) {}
  void wait() override {
    if (!host_) return;
    host_->wait();
    host_.reset();
    if (device_) owner_.stage_out(*staging_, device_, bytes_);
  }
  ~StagedRequest() override {
    if (host_) host_->wait();
  }

 private:
  HostStagedCommunicator& owner_;
  std::unique_ptr<CommRequest> host_;
  std::unique_ptr<Staging> staging_, input_;
  void* device_;
  std::size_t bytes_;
};

HostStagedCommunicator::HostStagedCommunicator(std::unique_ptr<Communicator> host, kernels::Backend& device)
    : host_(std::move(host)), device_(device) {}

HostStagedCommunicator::~HostStagedCommunicator() {
  for (const PinnedBlock& block : free_blocks_) device_.deallocate_host(block.data);
}

// The smallest free block that holds `bytes`, else a new one.
HostStagedCommunicator::PinnedBlock HostStagedCommunicator::take_block(std::size_t bytes) {
  bytes = std::max<std::size_t>(bytes, 1);
  auto best = free_blocks_.end();
  for (auto it = free_blocks_.begin(); it != free_blocks_.end(); ++it) {
    if (it->bytes >= bytes && (best == free_blocks_.end() || it->bytes < best->bytes)) best = it;
  }
  if (best == free_blocks_.end()) return {device_.allocate_host(bytes), bytes};
  const PinnedBlock block = *best;
  free_blocks_.erase(best);
  return block;
}

std::unique_ptr<Communicator> HostStagedCommunicator::split(int color, int key) {
  auto sub = std::make_unique<HostStagedCommunicator>(host_->split(color, key), device_);
  sub->set_stream(stream());
  return sub;
}

std::unique_ptr<HostStagedCommunicator::Staging> HostStagedCommunicator::stage_in(const void* device,
                                                                                 std::size_t bytes) {
  auto staging = std::make_unique<Staging>(*this, bytes);
  if (device && bytes > 0) device_.download(Stream::compute, staging->data(), device, bytes);
  device_.synchronize(Stream::compute);
  return staging;
}

void HostStagedCommunicator::stage_out(const Staging& staging, void* device, std::size_t bytes) {
  device_.upload(Stream::compute, device, staging.data(), bytes);
  device_.synchronize(Stream::compute);  // the staging memory is released next
}

// Adds what the host communicator counted since the last call, so that reset_counters()
// on this communicator starts from zero like on every other one.
void HostStagedCommunicator::sync_counters() {
  const CommCounters& host = host_->counters();
  counters_.bytes_sent += host.bytes_sent - host_seen_.bytes_sent;
  counters_.messages += host.messages - host_seen_.messages;
  host_seen_ = host;
}

namespace {
std::size_t bytes_of(std::size_t count, DType type) { return count * kernels::element_bytes(type); }
}  // namespace

void HostStagedCommunicator::do_all_reduce(void* data, std::size_t count, DType type, ReduceOp op) {
  const std::size_t bytes = bytes_of(count, type);
  auto staging = stage_in(data, bytes);
  host_->all_reduce(staging->data(), count, type, op);
  stage_out(*staging, data, bytes);
  sync_counters();
}

std::unique_ptr<CommRequest> HostStagedCommunicator::do_all_reduce_async(void* data, std::size_t count, DType type,
                                                                         ReduceOp op) {
  const std::size_t bytes = bytes_of(count, type);
  auto staging = stage_in(data, bytes);
  auto request = host_->all_reduce_async(staging->data(), count, type, op);
  sync_counters();
  return std::make_unique<StagedRequest>(*this, std::move(request), std::move(staging), data, bytes);
}

void HostStagedCommunicator::do_all_gather(const void* send, void* recv, std::size_t count_per_rank, DType type) {
  const std::size_t part = bytes_of(count_per_rank, type), whole = part * std::size_t(size());
  auto in = stage_in(send, part);
  Staging out(*this, whole);
  host_->all_gather(in->data(), out.data(), count_per_rank, type);
  stage_out(out, recv, whole);
  sync_counters();
}

void HostStagedCommunicator::do_reduce_scatter(const void* send, void* recv, std::size_t count_per_rank, DType type) {
  do_reduce_scatter_async(send, recv, count_per_rank, type)->wait();
}

std::unique_ptr<CommRequest> HostStagedCommunicator::do_reduce_scatter_async(const void* send, void* recv,
                                                                             std::size_t count_per_rank, DType type) {
  const std::size_t part = bytes_of(count_per_rank, type);
  auto in = stage_in(send, part * std::size_t(size()));
  auto out = std::make_unique<Staging>(*this, part);
  auto request = host_->reduce_scatter_async(in->data(), out->data(), count_per_rank, type);
  sync_counters();
  return std::make_unique<StagedRequest>(*this, std::move(request), std::move(out), recv, part, std::move(in));
}

void HostStagedCommunicator::do_broadcast(void* data, std::size_t count, DType type, int root) {
  const std::size_t bytes = bytes_of(count, type);
  auto staging = stage_in(rank() == root ? data : nullptr, bytes);
  host_->broadcast(staging->data(), count, type, root);
  stage_out(*staging, data, bytes);
  sync_counters();
}

void HostStagedCommunicator::do_reduce(const void* send, void* recv, std::size_t count, DType type, int root) {
  const std::size_t bytes = bytes_of(count, type);
  auto in = stage_in(send, bytes);
  Staging out(*this, bytes);
  host_->reduce(in->data(), out.data(), count, type, root);
  if (rank() == root) stage_out(out, recv, bytes);
  sync_counters();
}

std::unique_ptr<CommRequest> HostStagedCommunicator::do_send_async(const void* data, std::size_t count, DType type,
                                                                   int peer, int tag) {
  const std::size_t bytes = bytes_of(count, type);
  auto staging = stage_in(data, bytes);
  auto request = host_->send_async(staging->data(), count, type, peer, tag);
  sync_counters();
  return std::make_unique<StagedRequest>(*this, std::move(request), std::move(staging), nullptr, 0);
}

void HostStagedCommunicator::do_recv(void* data, std::size_t count, DType type, int peer, int tag) {
  const std::size_t bytes = bytes_of(count, type);
  Staging staging(*this, bytes);
  host_->recv(staging.data(), count, type, peer, tag);
  stage_out(staging, data, bytes);
}

void HostStagedCommunicator::do_all_to_all_v(const void* send, std::span<const std::size_t> send_counts, void* recv,
                                             std::span<const std::size_t> recv_counts, DType type) {
  std::size_t send_count = 0, recv_count = 0;
  for (std::size_t c : send_counts) send_count += c;
  for (std::size_t c : recv_counts) recv_count += c;
  auto in = stage_in(send, bytes_of(send_count, type));
  Staging out(*this, bytes_of(recv_count, type));
  host_->all_to_all_v(in->data(), send_counts, out.data(), recv_counts, type);
  if (recv_count > 0) stage_out(out, recv, bytes_of(recv_count, type));
  sync_counters();
}

}  // namespace tessel::executor
