// A step the server gives up on (its call cancelled: here by the client's
// deadline) aborts the runner's collectives at once, through the real
// WorkerService over gRPC; a step that finishes is never aborted.

#include "worker/step_cancellation.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "pagoda/worker/v1/worker.grpc.pb.h"
#include "wire/worker_owner.h"
#include "wire/worker_secret.h"
#include "worker/worker_service.h"

namespace pagoda::worker {
namespace {

namespace v1 = ::pagoda::worker::v1;

constexpr char kSecret[] = "0123456789abcdef0123456789abcdef";
constexpr char kOwner[] = "0123456789abcdef0123456789abcdef";  // Any well-formed id.

// Stands in for a rank whose step waits in a collective on a silent peer: a
// step with a sequence blocks until Abort, as a collective would; an empty
// step returns at once.
class CollectiveWaitingRunner final : public ModelRunner {
 public:
  explicit CollectiveWaitingRunner(std::atomic<int>* aborts) : aborts_(aborts) {}
  absl::StatusOr<v1::LoadModelResponse> LoadModel(const v1::LoadModelRequest&) override {
    return v1::LoadModelResponse();
  }
  absl::Status InitCache(const v1::InitCacheRequest&) override { return absl::OkStatus(); }
  absl::StatusOr<v1::StepResult> ExecuteStep(const v1::StepPlan& plan,
                                             const StepMaskWait&) override {
    if (plan.sequences_size() == 0) return v1::StepResult();
    aborted_.WaitForNotificationWithTimeout(absl::Seconds(30));
    return absl::AbortedError("communicator aborted");
  }
  void Abort() override {
    aborts_->fetch_add(1);
    if (!aborted_.HasBeenNotified()) aborted_.Notify();
  }

 private:
  std::atomic<int>* aborts_;
  absl::Notification aborted_;
};

class StepCancellationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    service_ = std::make_unique<WorkerService>(
        0, kSecret,
        [this](const std::string&) -> absl::StatusOr<std::unique_ptr<ModelRunner>> {
          return std::make_unique<CollectiveWaitingRunner>(&aborts_);
        },
        nullptr);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = v1::Worker::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
    grpc::ClientContext load;
    load.AddMetadata(kWorkerSecretMetadataKey, kSecret);
    load.AddMetadata(wire::kWorkerOwnerMetadataKey, kOwner);
    v1::LoadModelResponse loaded;
    ASSERT_TRUE(stub_->LoadModel(&load, v1::LoadModelRequest(), &loaded).ok());
    grpc::ClientContext init;
    init.AddMetadata(kWorkerSecretMetadataKey, kSecret);
    init.AddMetadata(wire::kWorkerOwnerMetadataKey, kOwner);
    v1::InitCacheResponse ready;
    ASSERT_TRUE(stub_->InitCache(&init, v1::InitCacheRequest(), &ready).ok());
  }
  void TearDown() override { server_->Shutdown(); }

  grpc::Status Step(bool with_sequence, std::chrono::milliseconds deadline) {
    grpc::ClientContext context;
    context.AddMetadata(kWorkerSecretMetadataKey, kSecret);
    context.AddMetadata(wire::kWorkerOwnerMetadataKey, kOwner);
    context.set_deadline(std::chrono::system_clock::now() + deadline);
    v1::StepPlan plan;
    if (with_sequence) plan.add_sequences()->set_seq_id(1);
    v1::StepResult result;
    return stub_->ExecuteStep(&context, plan, &result);
  }

  std::atomic<int> aborts_{0};
  std::unique_ptr<WorkerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Worker::Stub> stub_;
};

TEST_F(StepCancellationTest, CancelledStepAbortsTheCollectivesAtOnce) {
  const absl::Time start = absl::Now();
  EXPECT_EQ(Step(true, std::chrono::milliseconds(300)).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  // The handler itself must come back soon after, not after 30 s: the next
  // call waits for it (the service runs one call at a time).
  EXPECT_TRUE(Step(false, std::chrono::seconds(10)).ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(aborts_.load(), 1);
}

TEST_F(StepCancellationTest, FinishedStepsAreNeverAborted) {
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(Step(false, std::chrono::seconds(10)).ok());
  absl::SleepFor(absl::Milliseconds(50));  // Several watcher periods.
  EXPECT_EQ(aborts_.load(), 0);
}

}  // namespace
}  // namespace pagoda::worker
