#include "scheduler/engine/lora_slot_loader.h"

#include <utility>

#include "glog/logging.h"

namespace pagoda::scheduler {

LoraSlotLoader::LoraSlotLoader(WorkerGroup* workers) : workers_(workers) {
  thread_ = std::thread([this] { Run(); });
}

LoraSlotLoader::~LoraSlotLoader() {
  {
    absl::MutexLock lock(&mu_);
    queue_.clear();
    stop_ = true;
  }
  thread_.join();
}

void LoraSlotLoader::Load(int slot, int64_t generation, std::string path) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(Task{slot, generation, std::move(path)});
}

void LoraSlotLoader::Unload(int slot) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(Task{slot, 0, ""});
}

std::vector<LoraSlotLoader::Done> LoraSlotLoader::TakeDone() {
  absl::MutexLock lock(&mu_);
  std::vector<Done> done;
  done.swap(done_);
  return done;
}

void LoraSlotLoader::Quiesce() {
  absl::MutexLock lock(&mu_);
  queue_.clear();
  auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !running_task_; };
  mu_.Await(absl::Condition(&idle));
  done_.clear();
}

bool LoraSlotLoader::Busy() const {
  absl::MutexLock lock(&mu_);
  return running_task_ || !queue_.empty();
}

void LoraSlotLoader::Run() {
  while (true) {
    Task task;
    {
      absl::MutexLock lock(&mu_);
      auto has_work = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); };
      mu_.Await(absl::Condition(&has_work));
      if (stop_) return;
      task = std::move(queue_.front());
      queue_.pop_front();
      running_task_ = true;
    }
    absl::Status status = Execute(task);
    absl::MutexLock lock(&mu_);
    running_task_ = false;
    if (!task.path.empty()) done_.push_back(Done{task.slot, task.generation, std::move(status)});
  }
}

absl::Status LoraSlotLoader::Execute(const Task& task) {
  if (task.path.empty()) {
    pagoda::worker::v1::UnloadLoraAdapterRequest request;
    request.set_slot(task.slot);
    absl::Status status = workers_->UnloadLoraAdapter(request);
    // An empty slot is only memory kept: log it and go on.
    if (!status.ok()) LOG(WARNING) << "LoRA slot " << task.slot << " not unloaded: " << status;
    return status;
  }
  pagoda::worker::v1::LoadLoraAdapterRequest request;
  request.set_slot(task.slot);
  request.set_path(task.path);
  absl::StatusOr<pagoda::worker::v1::LoadLoraAdapterResponse> response =
      workers_->LoadLoraAdapter(request);
  if (!response.ok()) return response.status();
  LOG(INFO) << "LoRA adapter " << task.path << " loaded into slot " << task.slot << " (rank "
            << response->rank() << ", " << response->load_seconds() << " s)";
  return absl::OkStatus();
}

}  // namespace pagoda::scheduler
