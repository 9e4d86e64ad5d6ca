#include "tessel/executor/comm/host_staged_communicator.hpp"

#include <cstring>

namespace tessel::executor {

// Host memory the device copies to and from directly; one per call in flight.
class HostStagedCommunicator::Staging {
 public:
  Staging(kernels::Backend& device, std::size_t bytes)
      : device_(device), data_(device.allocate_host(std::max<std::size_t>(bytes, 1))) {}
  ~Staging() { device_.deallocate_host(data_); }
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  void* data() const { return data_; }

 private:
  kernels::Backend& device_;
  void* data_;
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

HostStagedCommunicator::~HostStagedCommunicator() = default;

std::unique_ptr<Communicator> HostStagedCommunicator::split(int color, int key) {
  auto sub = std::make_unique<HostStagedCommunicator>(host_->split(color, key), device_);
  sub->set_stream(stream());
  return sub;
}

std::unique_ptr<HostStagedCommunicator::Staging> HostStagedCommunicator::stage_in(const void* device,
                                                                                 std::size_t bytes) {
  auto staging = std::make_unique<Staging>(device_, bytes);
  if (device && bytes > 0) device_.download(Stream::compute, staging->data(), device, bytes);
  device_.synchronize(Stream::compute);
  return staging;
}

void HostStagedCommunicator::stage_out(const Staging& staging, void* device, std::size_t bytes) {
  device_.upload(Stream::compute, device, staging.data(), bytes);
  device_.synchronize(Stream::compute);  // the staging memory is released next
}

void HostStagedCommunicator::sync_counters() { counters_ = host_->counters(); }

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
  Staging out(device_, whole);
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
  auto out = std::make_unique<Staging>(device_, part);
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
  Staging out(device_, bytes);
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
  Staging staging(device_, bytes);
  host_->recv(staging.data(), count, type, peer, tag);
  stage_out(staging, data, bytes);
}

}  // namespace tessel::executor
